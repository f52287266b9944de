// pagedlab CPU executor: <cuda_bf16.h>. __nv_bfloat16 holds the top 16 bits of a float;
// conversions and arithmetic round to nearest even as the GPU's instructions (pl_round.h,
// pl_h16.h; canonical NaN 0x7fff). numpy has no bfloat16: arrays of it are passed as uint16
// arrays holding the raw bits.
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>
#include "cuda_fp16.h"

struct __attribute__((aligned(2))) __nv_bfloat16 {
    unsigned short __x;
    __nv_bfloat16() = default;
    __nv_bfloat16(float f) : __x(pl::rnd::bf16_rn(f)) {}
    __nv_bfloat16(double f) : __x(pl::rnd::to_bf16(f)) {}
    __nv_bfloat16(int i) : __x(pl::rnd::to_bf16((double)i)) {}
    __nv_bfloat16(unsigned i) : __x(pl::rnd::to_bf16((double)i)) {}
    __nv_bfloat16(long long i) : __x(pl::rnd::to_bf16((double)i)) {}
    __nv_bfloat16(short i) : __x(pl::rnd::to_bf16((double)i)) {}
    __nv_bfloat16(unsigned short i) : __x(pl::rnd::to_bf16((double)i)) {}
    operator float() const { return pl::rnd::bf16_to_float(__x); }
};
struct __attribute__((aligned(4))) __nv_bfloat162 { __nv_bfloat16 x, y; };
typedef __nv_bfloat16 nv_bfloat16;
typedef __nv_bfloat162 nv_bfloat162;
struct __nv_bfloat16_raw { unsigned short x; };
template <> struct pl::numpy_code<__nv_bfloat16> { static constexpr const char* v = "bf16"; };
template <> struct pl::vec_info<__nv_bfloat162> { using elem = __nv_bfloat16; static constexpr int lanes = 2; };

PL_H16_OPS(__nv_bfloat16, __nv_bfloat162, 1)

inline __nv_bfloat16 pl_bf16_bits(unsigned short b) { __nv_bfloat16 h; h.__x = b; return h; }
inline float __bfloat162float(__nv_bfloat16 h) { return (float)h; }
inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __float2bfloat16_rz(float f) { return pl_bf16_bits(pl::rnd::to_bf16(f, pl::rnd::RZ)); }
inline __nv_bfloat16 __float2bfloat16_rd(float f) { return pl_bf16_bits(pl::rnd::to_bf16(f, pl::rnd::RM)); }
inline __nv_bfloat16 __float2bfloat16_ru(float f) { return pl_bf16_bits(pl::rnd::to_bf16(f, pl::rnd::RP)); }
inline __nv_bfloat16 __double2bfloat16(double d) { return __nv_bfloat16(d); }
#define PL_BF16_INT(NAME_TO, NAME_FROM, T)                                                          \
    inline T NAME_TO##_rn(__nv_bfloat16 h) { return pl::ptx_like_f2i<T>((float)h, pl::rnd::RN); }  \
    inline T NAME_TO##_rz(__nv_bfloat16 h) { return pl::ptx_like_f2i<T>((float)h, pl::rnd::RZ); }  \
    inline T NAME_TO##_rd(__nv_bfloat16 h) { return pl::ptx_like_f2i<T>((float)h, pl::rnd::RM); }  \
    inline T NAME_TO##_ru(__nv_bfloat16 h) { return pl::ptx_like_f2i<T>((float)h, pl::rnd::RP); }  \
    inline __nv_bfloat16 NAME_FROM##_rn(T i) { return pl_bf16_bits(pl::rnd::to_bf16((double)i, pl::rnd::RN)); } \
    inline __nv_bfloat16 NAME_FROM##_rz(T i) { return pl_bf16_bits(pl::rnd::to_bf16((double)i, pl::rnd::RZ)); } \
    inline __nv_bfloat16 NAME_FROM##_rd(T i) { return pl_bf16_bits(pl::rnd::to_bf16((double)i, pl::rnd::RM)); } \
    inline __nv_bfloat16 NAME_FROM##_ru(T i) { return pl_bf16_bits(pl::rnd::to_bf16((double)i, pl::rnd::RP)); }
PL_BF16_INT(__bfloat162int, __int2bfloat16, int)
PL_BF16_INT(__bfloat162uint, __uint2bfloat16, unsigned)
PL_BF16_INT(__bfloat162short, __short2bfloat16, short)
PL_BF16_INT(__bfloat162ushort, __ushort2bfloat16, unsigned short)
PL_BF16_INT(__bfloat162ll, __ll2bfloat16, long long)
PL_BF16_INT(__bfloat162ull, __ull2bfloat16, unsigned long long)
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
inline short __bfloat16_as_short(__nv_bfloat16 h) { return (short)h.__x; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { return pl_bf16_bits(u); }
inline __nv_bfloat16 __short_as_bfloat16(short s) { return pl_bf16_bits((unsigned short)s); }
inline __nv_bfloat16 __float2bfloat16_rn_satfinite(float f) {
    __nv_bfloat16 b(f);
    if ((b.__x & 0x7fffu) == 0x7f80u) b.__x = (unsigned short)((b.__x & 0x8000u) | 0x7f7fu);
    return b;
}
// half <-> bfloat16 through float (exact for the widening, one rounding for the narrowing)
inline __nv_bfloat16 __half2bfloat16(__half h) { return __nv_bfloat16((float)h); }

inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return {__nv_bfloat16(a), __nv_bfloat16(b)}; }
inline float2 __bfloat1622float2(__nv_bfloat162 h) { return float2{(float)h.x, (float)h.y}; }
inline __nv_bfloat162 __float22bfloat162_rn(float2 f) { return {__nv_bfloat16(f.x), __nv_bfloat16(f.y)}; }
inline __nv_bfloat162 __float2bfloat162_rn(float f) { return {__nv_bfloat16(f), __nv_bfloat16(f)}; }
inline __nv_bfloat162 __bfloat162bfloat162(__nv_bfloat16 h) { return {h, h}; }
inline __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 x, __nv_bfloat16 y) { return {x, y}; }
inline __nv_bfloat162 make_bfloat162(__nv_bfloat16 x, __nv_bfloat16 y) { return {x, y}; }
inline __nv_bfloat16 __low2bfloat16(__nv_bfloat162 h) { return h.x; }
inline __nv_bfloat16 __high2bfloat16(__nv_bfloat162 h) { return h.y; }
inline __nv_bfloat162 __low2bfloat162(__nv_bfloat162 h) { return {h.x, h.x}; }
inline __nv_bfloat162 __high2bfloat162(__nv_bfloat162 h) { return {h.y, h.y}; }
inline __nv_bfloat162 __lows2bfloat162(__nv_bfloat162 a, __nv_bfloat162 b) { return {a.x, b.x}; }
inline __nv_bfloat162 __highs2bfloat162(__nv_bfloat162 a, __nv_bfloat162 b) { return {a.y, b.y}; }
inline float __low2float(__nv_bfloat162 h) { return (float)h.x; }
inline float __high2float(__nv_bfloat162 h) { return (float)h.y; }
inline __nv_bfloat162 __lowhigh2highlow(__nv_bfloat162 h) { return {h.y, h.x}; }
