// pagedlab CPU executor: <cuda_fp16.h>. __half holds the 16 IEEE bits; arithmetic is done in
// float and rounded back to half (round to nearest even), which gives the correctly rounded
// result for one +, -, *, / as the GPU's half instructions do. Arrays of __half are numpy
// float16 arrays.
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>
#include "vector_types.h"

struct __attribute__((aligned(2))) __half {
    unsigned short __x;
    __half() = default;
    __half(float f) : __x(std::bit_cast<unsigned short>((_Float16)f)) {}
    __half(double f) : __x(std::bit_cast<unsigned short>((_Float16)f)) {}
    __half(int i) : __half((float)i) {}
    __half(unsigned i) : __half((float)i) {}
    __half(long long i) : __half((float)i) {}
    operator float() const { return (float)std::bit_cast<_Float16>(__x); }
};
struct __attribute__((aligned(4))) __half2 {
    __half x, y;
};
typedef __half half;
typedef __half2 half2;
struct __half_raw { unsigned short x; };
template <> struct pl::numpy_code<__half> { static constexpr const char* v = "f2"; };
template <> struct pl::vec_info<__half2> { using elem = __half; static constexpr int lanes = 2; };

inline float __half2float(__half h) { return (float)h; }
inline __half __float2half(float f) { return __half(f); }
inline __half __float2half_rn(float f) { return __half(f); }
inline __half __double2half(double d) { return __half(d); }
inline __half __int2half_rn(int i) { return __half((float)i); }
inline int __half2int_rn(__half h) { return (int)std::nearbyint((float)h); }
inline int __half2int_rz(__half h) { return (int)(float)h; }
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
inline short __half_as_short(__half h) { return (short)h.__x; }
inline __half __ushort_as_half(unsigned short u) { __half h; h.__x = u; return h; }
inline __half __short_as_half(short s) { return __ushort_as_half((unsigned short)s); }

inline __half __hadd(__half a, __half b) { return __half((float)a + (float)b); }
inline __half __hsub(__half a, __half b) { return __half((float)a - (float)b); }
inline __half __hmul(__half a, __half b) { return __half((float)a * (float)b); }
inline __half __hdiv(__half a, __half b) { return __half((float)a / (float)b); }
inline __half __hneg(__half a) { return __ushort_as_half(a.__x ^ 0x8000u); }
inline __half __habs(__half a) { return __ushort_as_half(a.__x & 0x7fffu); }
// fma rounds once: the float product of two halves is exact, so fmaf then one rounding.
inline __half __hfma(__half a, __half b, __half c) { return __half(std::fma((float)a, (float)b, (float)c)); }
inline __half __hmax(__half a, __half b) { return (float)a < (float)b ? b : a; }
inline __half __hmin(__half a, __half b) { return (float)b < (float)a ? b : a; }
inline bool __heq(__half a, __half b) { return (float)a == (float)b; }
inline bool __hne(__half a, __half b) { return (float)a != (float)b; }
inline bool __hlt(__half a, __half b) { return (float)a < (float)b; }
inline bool __hle(__half a, __half b) { return (float)a <= (float)b; }
inline bool __hgt(__half a, __half b) { return (float)a > (float)b; }
inline bool __hge(__half a, __half b) { return (float)a >= (float)b; }
inline bool __hisnan(__half a) { return std::isnan((float)a); }
inline bool __hisinf(__half a) { return std::isinf((float)a); }
inline __half hsqrt(__half a) { return __half(std::sqrt((float)a)); }
inline __half hrsqrt(__half a) { return __half(1.0f / std::sqrt((float)a)); }
inline __half hexp(__half a) { return __half(std::exp((float)a)); }
inline __half hlog(__half a) { return __half(std::log((float)a)); }
inline __half hrcp(__half a) { return __half(1.0f / (float)a); }
inline __half hfloor(__half a) { return __half(std::floor((float)a)); }
inline __half hceil(__half a) { return __half(std::ceil((float)a)); }

inline __half operator+(__half a, __half b) { return __hadd(a, b); }
inline __half operator-(__half a, __half b) { return __hsub(a, b); }
inline __half operator*(__half a, __half b) { return __hmul(a, b); }
inline __half operator/(__half a, __half b) { return __hdiv(a, b); }
inline __half operator-(__half a) { return __hneg(a); }
inline __half& operator+=(__half& a, __half b) { return a = a + b; }
inline __half& operator-=(__half& a, __half b) { return a = a - b; }
inline __half& operator*=(__half& a, __half b) { return a = a * b; }
inline __half& operator/=(__half& a, __half b) { return a = a / b; }
inline bool operator==(__half a, __half b) { return __heq(a, b); }
inline bool operator!=(__half a, __half b) { return __hne(a, b); }
inline bool operator<(__half a, __half b) { return __hlt(a, b); }
inline bool operator<=(__half a, __half b) { return __hle(a, b); }
inline bool operator>(__half a, __half b) { return __hgt(a, b); }
inline bool operator>=(__half a, __half b) { return __hge(a, b); }

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
inline __half2 __lowhigh2highlow(__half2 h) { return __half2{h.y, h.x}; }
inline __half2 __hadd2(__half2 a, __half2 b) { return {__hadd(a.x, b.x), __hadd(a.y, b.y)}; }
inline __half2 __hsub2(__half2 a, __half2 b) { return {__hsub(a.x, b.x), __hsub(a.y, b.y)}; }
inline __half2 __hmul2(__half2 a, __half2 b) { return {__hmul(a.x, b.x), __hmul(a.y, b.y)}; }
inline __half2 __h2div(__half2 a, __half2 b) { return {__hdiv(a.x, b.x), __hdiv(a.y, b.y)}; }
inline __half2 __hfma2(__half2 a, __half2 b, __half2 c) {
    return {__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y)};
}
inline __half2 __hneg2(__half2 a) { return {__hneg(a.x), __hneg(a.y)}; }
inline __half2 operator+(__half2 a, __half2 b) { return __hadd2(a, b); }
inline __half2 operator-(__half2 a, __half2 b) { return __hsub2(a, b); }
inline __half2 operator*(__half2 a, __half2 b) { return __hmul2(a, b); }
inline __half2 operator/(__half2 a, __half2 b) { return __h2div(a, b); }
inline __half2& operator+=(__half2& a, __half2 b) { return a = a + b; }
inline __half2& operator*=(__half2& a, __half2 b) { return a = a * b; }
