// pagedlab CPU executor: <cuda_fp16.h>. __half holds the 16 IEEE bits; conversions and arithmetic
// round to nearest even as the GPU's instructions (pl_round.h, pl_h16.h: one rounding of the
// exact result, round-to-odd for fused multiply-adds, the canonical NaN 0x7fff). Arrays of
// __half are numpy float16 arrays.
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include "vector_types.h"
#include "pl_round.h"
#include "pl_h16.h"

struct __attribute__((aligned(2))) __half {
    unsigned short __x;
    __half() = default;
    __half(float f) : __x(pl::rnd::to_half(f)) {}
    __half(double f) : __x(pl::rnd::to_half(f)) {}
    __half(int i) : __half((double)i) {}
    __half(unsigned i) : __half((double)i) {}
    __half(long long i) : __half((double)i) {}
    __half(unsigned long long i) : __half((double)i) {}
    __half(short i) : __half((double)i) {}
    __half(unsigned short i) : __half((double)i) {}
    operator float() const { return pl::rnd::half_to_float(__x); }
};
struct __attribute__((aligned(4))) __half2 {
    __half x, y;
};
typedef __half half;
typedef __half2 half2;
struct __half_raw { unsigned short x; };
struct __half2_raw { unsigned short x, y; };
template <> struct pl::numpy_code<__half> { static constexpr const char* v = "f2"; };
template <> struct pl::vec_info<__half2> { using elem = __half; static constexpr int lanes = 2; };

PL_H16_OPS(__half, __half2, 0)

// ---- conversions ---------------------------------------------------------------------------------
inline __half pl_half_bits(unsigned short b) { __half h; h.__x = b; return h; }
inline float __half2float(__half h) { return (float)h; }
inline __half __float2half(float f) { return __half(f); }
inline __half __float2half_rn(float f) { return __half(f); }
inline __half __float2half_rz(float f) { return pl_half_bits(pl::rnd::to_half(f, pl::rnd::RZ)); }
inline __half __float2half_rd(float f) { return pl_half_bits(pl::rnd::to_half(f, pl::rnd::RM)); }
inline __half __float2half_ru(float f) { return pl_half_bits(pl::rnd::to_half(f, pl::rnd::RP)); }
inline __half __double2half(double d) { return __half(d); }
inline double __half2double(__half h) { return (double)(float)h; }
#define PL_HALF_INT(NAME_TO, NAME_FROM, T)                                                          \
    inline T NAME_TO##_rn(__half h) { return (T)pl::ptx_like_f2i<T>((float)h, pl::rnd::RN); }      \
    inline T NAME_TO##_rz(__half h) { return (T)pl::ptx_like_f2i<T>((float)h, pl::rnd::RZ); }      \
    inline T NAME_TO##_rd(__half h) { return (T)pl::ptx_like_f2i<T>((float)h, pl::rnd::RM); }      \
    inline T NAME_TO##_ru(__half h) { return (T)pl::ptx_like_f2i<T>((float)h, pl::rnd::RP); }      \
    inline __half NAME_FROM##_rn(T i) { return pl_half_bits(pl::rnd::to_half((double)i, pl::rnd::RN)); } \
    inline __half NAME_FROM##_rz(T i) { return pl_half_bits(pl::rnd::to_half((double)i, pl::rnd::RZ)); } \
    inline __half NAME_FROM##_rd(T i) { return pl_half_bits(pl::rnd::to_half((double)i, pl::rnd::RM)); } \
    inline __half NAME_FROM##_ru(T i) { return pl_half_bits(pl::rnd::to_half((double)i, pl::rnd::RP)); }
namespace pl {
// Float to integer as the GPU converts: rounded in the mode, saturated, NaN -> 0.
template <class I> inline I ptx_like_f2i(float x, int mode) {
    if (std::isnan(x)) return 0;
    double r = mode == rnd::RN ? std::nearbyint((double)x) : mode == rnd::RZ ? std::trunc((double)x)
             : mode == rnd::RM ? std::floor((double)x) : std::ceil((double)x);
    if (r <= (double)std::numeric_limits<I>::min()) return std::numeric_limits<I>::min();
    if (r >= (double)std::numeric_limits<I>::max()) return std::numeric_limits<I>::max();
    return (I)r;
}
}  // namespace pl
PL_HALF_INT(__half2int, __int2half, int)
PL_HALF_INT(__half2uint, __uint2half, unsigned)
PL_HALF_INT(__half2short, __short2half, short)
PL_HALF_INT(__half2ushort, __ushort2half, unsigned short)
PL_HALF_INT(__half2ll, __ll2half, long long)
PL_HALF_INT(__half2ull, __ull2half, unsigned long long)
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
inline short __half_as_short(__half h) { return (short)h.__x; }
inline __half __ushort_as_half(unsigned short u) { return pl_half_bits(u); }
inline __half __short_as_half(short s) { return pl_half_bits((unsigned short)s); }

inline __half2 make_half2(__half x, __half y) { return __half2{x, y}; }
inline __half2 __halves2half2(__half x, __half y) { return __half2{x, y}; }
inline __half2 __half2half2(__half x) { return __half2{x, x}; }
inline __half2 __float2half2_rn(float f) { return __half2{__half(f), __half(f)}; }
inline __half2 __floats2half2_rn(float a, float b) { return __half2{__half(a), __half(b)}; }
inline __half2 __float22half2_rn(float2 f) { return __half2{__half(f.x), __half(f.y)}; }
inline float2 __half22float2(__half2 h) { return float2{(float)h.x, (float)h.y}; }
inline float __low2float(__half2 h) { return (float)h.x; }
inline float __high2float(__half2 h) { return (float)h.y; }
inline __half __low2half(__half2 h) { return h.x; }
inline __half __high2half(__half2 h) { return h.y; }
inline __half2 __low2half2(__half2 h) { return __half2{h.x, h.x}; }
inline __half2 __high2half2(__half2 h) { return __half2{h.y, h.y}; }
inline __half2 __lows2half2(__half2 a, __half2 b) { return __half2{a.x, b.x}; }
inline __half2 __highs2half2(__half2 a, __half2 b) { return __half2{a.y, b.y}; }
inline __half2 __lowhigh2highlow(__half2 h) { return __half2{h.y, h.x}; }
