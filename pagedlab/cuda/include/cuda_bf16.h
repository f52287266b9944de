// pagedlab CPU executor: <cuda_bf16.h>. __nv_bfloat16 holds the top 16 bits of a float;
// conversions round to nearest even (NaN stays NaN), arithmetic is done in float and rounded
// back. numpy has no bfloat16: arrays of it are passed as uint16 arrays holding the raw bits.
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>
#include "cuda_fp16.h"

struct __attribute__((aligned(2))) __nv_bfloat16 {
    unsigned short __x;
    static unsigned short round(float f) {
        uint32_t u = std::bit_cast<uint32_t>(f);
        if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40);  // quiet NaN
        u += 0x7fffu + ((u >> 16) & 1u);
        return (unsigned short)(u >> 16);
    }
    __nv_bfloat16() = default;
    __nv_bfloat16(float f) : __x(round(f)) {}
    __nv_bfloat16(double f) : __x(round((float)f)) {}
    __nv_bfloat16(int i) : __x(round((float)i)) {}
    operator float() const { return std::bit_cast<float>((uint32_t)__x << 16); }
};
struct __attribute__((aligned(4))) __nv_bfloat162 { __nv_bfloat16 x, y; };
typedef __nv_bfloat16 nv_bfloat16;
typedef __nv_bfloat162 nv_bfloat162;
template <> struct pl::numpy_code<__nv_bfloat16> { static constexpr const char* v = "bf16"; };
template <> struct pl::vec_info<__nv_bfloat162> { using elem = __nv_bfloat16; static constexpr int lanes = 2; };

inline float __bfloat162float(__nv_bfloat16 h) { return (float)h; }
inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { __nv_bfloat16 h; h.__x = u; return h; }
inline __nv_bfloat16 __hadd(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat16((float)a + (float)b); }
inline __nv_bfloat16 __hsub(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat16((float)a - (float)b); }
inline __nv_bfloat16 __hmul(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat16((float)a * (float)b); }
inline __nv_bfloat16 __hdiv(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat16((float)a / (float)b); }
inline __nv_bfloat16 __hfma(__nv_bfloat16 a, __nv_bfloat16 b, __nv_bfloat16 c) {
    return __nv_bfloat16(std::fma((float)a, (float)b, (float)c));
}
inline __nv_bfloat16 __hmax(__nv_bfloat16 a, __nv_bfloat16 b) { return (float)a < (float)b ? b : a; }
inline __nv_bfloat16 __hmin(__nv_bfloat16 a, __nv_bfloat16 b) { return (float)b < (float)a ? b : a; }
inline __nv_bfloat16 operator+(__nv_bfloat16 a, __nv_bfloat16 b) { return __hadd(a, b); }
inline __nv_bfloat16 operator-(__nv_bfloat16 a, __nv_bfloat16 b) { return __hsub(a, b); }
inline __nv_bfloat16 operator*(__nv_bfloat16 a, __nv_bfloat16 b) { return __hmul(a, b); }
inline __nv_bfloat16 operator/(__nv_bfloat16 a, __nv_bfloat16 b) { return __hdiv(a, b); }
inline __nv_bfloat16& operator+=(__nv_bfloat16& a, __nv_bfloat16 b) { return a = a + b; }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return {__nv_bfloat16(a), __nv_bfloat16(b)}; }
inline float2 __bfloat1622float2(__nv_bfloat162 h) { return float2{(float)h.x, (float)h.y}; }
inline __nv_bfloat162 __float22bfloat162_rn(float2 f) { return {__nv_bfloat16(f.x), __nv_bfloat16(f.y)}; }
inline __nv_bfloat162 __float2bfloat162_rn(float f) { return {__nv_bfloat16(f), __nv_bfloat16(f)}; }
inline __nv_bfloat162 __bfloat162bfloat162(__nv_bfloat16 h) { return {h, h}; }
inline __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 x, __nv_bfloat16 y) { return {x, y}; }
inline __nv_bfloat162 make_bfloat162(__nv_bfloat16 x, __nv_bfloat16 y) { return {x, y}; }
inline __nv_bfloat16 __low2bfloat16(__nv_bfloat162 h) { return h.x; }
inline __nv_bfloat16 __high2bfloat16(__nv_bfloat162 h) { return h.y; }
inline float __low2float(__nv_bfloat162 h) { return (float)h.x; }
inline float __high2float(__nv_bfloat162 h) { return (float)h.y; }
inline __nv_bfloat162 __lowhigh2highlow(__nv_bfloat162 h) { return {h.y, h.x}; }
// Two lanes at once: each rounded once, as the sm_80 instructions do.
inline __nv_bfloat162 __hadd2(__nv_bfloat162 a, __nv_bfloat162 b) { return {__hadd(a.x, b.x), __hadd(a.y, b.y)}; }
inline __nv_bfloat162 __hsub2(__nv_bfloat162 a, __nv_bfloat162 b) { return {__hsub(a.x, b.x), __hsub(a.y, b.y)}; }
inline __nv_bfloat162 __hmul2(__nv_bfloat162 a, __nv_bfloat162 b) { return {__hmul(a.x, b.x), __hmul(a.y, b.y)}; }
inline __nv_bfloat162 __h2div(__nv_bfloat162 a, __nv_bfloat162 b) { return {__hdiv(a.x, b.x), __hdiv(a.y, b.y)}; }
inline __nv_bfloat162 __hfma2(__nv_bfloat162 a, __nv_bfloat162 b, __nv_bfloat162 c) {
    return {__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y)};
}
inline __nv_bfloat162 __hmax2(__nv_bfloat162 a, __nv_bfloat162 b) { return {__hmax(a.x, b.x), __hmax(a.y, b.y)}; }
inline __nv_bfloat162 __hmin2(__nv_bfloat162 a, __nv_bfloat162 b) { return {__hmin(a.x, b.x), __hmin(a.y, b.y)}; }
inline __nv_bfloat162 operator+(__nv_bfloat162 a, __nv_bfloat162 b) { return __hadd2(a, b); }
inline __nv_bfloat162 operator-(__nv_bfloat162 a, __nv_bfloat162 b) { return __hsub2(a, b); }
inline __nv_bfloat162 operator*(__nv_bfloat162 a, __nv_bfloat162 b) { return __hmul2(a, b); }
inline __nv_bfloat16& operator-=(__nv_bfloat16& a, __nv_bfloat16 b) { return a = a - b; }
inline __nv_bfloat16& operator*=(__nv_bfloat16& a, __nv_bfloat16 b) { return a = a * b; }
