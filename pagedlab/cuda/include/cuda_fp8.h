// pagedlab CPU executor: <cuda_fp8.h>. FP8 values are their byte (__nv_fp8_storage_t); the
// conversions are CUDA's, bit for bit: round to nearest even from the exact value, __NV_SATFINITE
// clamping what overflows (infinities included) to the largest finite value, __NV_NOSAT giving
// e4m3's NaN or e5m2's infinity, a NaN input the NaN 0x7f (pl_round.h's pl::fp8). Widening to
// half or float is exact. numpy has no FP8 dtype: arrays of FP8 are uint8 arrays of the bytes.
#pragma once
#include <cstdint>
#include "cuda_fp16.h"
#include "cuda_bf16.h"
#include "pl_round.h"

typedef unsigned char __nv_fp8_storage_t;
typedef unsigned short __nv_fp8x2_storage_t;
typedef unsigned int __nv_fp8x4_storage_t;
enum __nv_saturation_t { __NV_NOSAT, __NV_SATFINITE };
enum __nv_fp8_interpretation_t { __NV_E4M3, __NV_E5M2 };

namespace pl::fp8 {
inline uint8_t enc(double x, __nv_saturation_t sat, __nv_fp8_interpretation_t t) {
    uint8_t b = t == __NV_E4M3 ? encode<0>(x, sat == __NV_SATFINITE) : encode<1>(x, sat == __NV_SATFINITE);
    return std::isnan(x) ? (uint8_t)0x7f : b;
}
inline float dec(uint8_t b, __nv_fp8_interpretation_t t) { return t == __NV_E4M3 ? decode<0>(b) : decode<1>(b); }
}  // namespace pl::fp8

inline __nv_fp8_storage_t __nv_cvt_float_to_fp8(float x, __nv_saturation_t sat, __nv_fp8_interpretation_t t) {
    return pl::fp8::enc(x, sat, t);
}
inline __nv_fp8_storage_t __nv_cvt_double_to_fp8(double x, __nv_saturation_t sat, __nv_fp8_interpretation_t t) {
    return pl::fp8::enc(x, sat, t);
}
inline __nv_fp8x2_storage_t __nv_cvt_float2_to_fp8x2(float2 x, __nv_saturation_t sat, __nv_fp8_interpretation_t t) {
    return (__nv_fp8x2_storage_t)(pl::fp8::enc(x.x, sat, t) | pl::fp8::enc(x.y, sat, t) << 8);
}
inline __nv_fp8x2_storage_t __nv_cvt_double2_to_fp8x2(double2 x, __nv_saturation_t sat, __nv_fp8_interpretation_t t) {
    return (__nv_fp8x2_storage_t)(pl::fp8::enc(x.x, sat, t) | pl::fp8::enc(x.y, sat, t) << 8);
}
inline __nv_fp8_storage_t __nv_cvt_halfraw_to_fp8(__half_raw h, __nv_saturation_t sat, __nv_fp8_interpretation_t t) {
    return pl::fp8::enc(pl::rnd::half_to_float(h.x), sat, t);
}
inline __nv_fp8_storage_t __nv_cvt_bfloat16raw_to_fp8(__nv_bfloat16_raw h, __nv_saturation_t sat,
                                                      __nv_fp8_interpretation_t t) {
    return pl::fp8::enc(pl::rnd::bf16_to_float(h.x), sat, t);
}
inline __half_raw __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t b, __nv_fp8_interpretation_t t) {
    __half_raw r;
    r.x = pl::rnd::to_half(pl::fp8::dec(b, t));  // exact: every FP8 value is a half
    return r;
}
inline __half2_raw __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t b, __nv_fp8_interpretation_t t) {
    __half2_raw r;
    r.x = pl::rnd::to_half(pl::fp8::dec((uint8_t)b, t));
    r.y = pl::rnd::to_half(pl::fp8::dec((uint8_t)(b >> 8), t));
    return r;
}

#define PL_FP8_TYPE(NAME, INTERP)                                                                      \
    struct __attribute__((aligned(1))) NAME {                                                          \
        __nv_fp8_storage_t __x;                                                                        \
        NAME() = default;                                                                              \
        explicit NAME(float f) : __x(pl::fp8::enc(f, __NV_SATFINITE, INTERP)) {}                      \
        explicit NAME(double f) : __x(pl::fp8::enc(f, __NV_SATFINITE, INTERP)) {}                     \
        explicit NAME(__half h) : __x(pl::fp8::enc((float)h, __NV_SATFINITE, INTERP)) {}              \
        explicit NAME(__nv_bfloat16 h) : __x(pl::fp8::enc((float)h, __NV_SATFINITE, INTERP)) {}       \
        explicit NAME(int i) : __x(pl::fp8::enc((double)i, __NV_SATFINITE, INTERP)) {}                \
        explicit operator float() const { return pl::fp8::dec(__x, INTERP); }                          \
        explicit operator double() const { return pl::fp8::dec(__x, INTERP); }                         \
        explicit operator __half() const { return __half(pl::fp8::dec(__x, INTERP)); }                 \
        explicit operator __nv_bfloat16() const { return __nv_bfloat16(pl::fp8::dec(__x, INTERP)); }   \
    };                                                                                                 \
    struct __attribute__((aligned(2))) NAME##x2 {                                                      \
        __nv_fp8x2_storage_t __x;                                                                      \
        NAME##x2() = default;                                                                          \
        explicit NAME##x2(float2 f) : __x(__nv_cvt_float2_to_fp8x2(f, __NV_SATFINITE, INTERP)) {}     \
        explicit NAME##x2(__half2 h)                                                                   \
            : __x(__nv_cvt_float2_to_fp8x2(__half22float2(h), __NV_SATFINITE, INTERP)) {}              \
        explicit operator float2() const {                                                             \
            return float2{pl::fp8::dec((uint8_t)__x, INTERP), pl::fp8::dec((uint8_t)(__x >> 8), INTERP)}; \
        }                                                                                              \
        explicit operator __half2() const {                                                            \
            __half2_raw r = __nv_cvt_fp8x2_to_halfraw2(__x, INTERP);                                   \
            return __half2{__ushort_as_half(r.x), __ushort_as_half(r.y)};                              \
        }                                                                                              \
    };                                                                                                 \
    struct __attribute__((aligned(4))) NAME##x4 {                                                      \
        __nv_fp8x4_storage_t __x;                                                                      \
        NAME##x4() = default;                                                                          \
        explicit NAME##x4(float4 f)                                                                    \
            : __x((unsigned)__nv_cvt_float2_to_fp8x2(float2{f.x, f.y}, __NV_SATFINITE, INTERP) |       \
                  (unsigned)__nv_cvt_float2_to_fp8x2(float2{f.z, f.w}, __NV_SATFINITE, INTERP) << 16) {} \
        explicit operator float4() const {                                                             \
            return float4{pl::fp8::dec((uint8_t)__x, INTERP), pl::fp8::dec((uint8_t)(__x >> 8), INTERP), \
                          pl::fp8::dec((uint8_t)(__x >> 16), INTERP), pl::fp8::dec((uint8_t)(__x >> 24), INTERP)}; \
        }                                                                                              \
    };
PL_FP8_TYPE(__nv_fp8_e4m3, __NV_E4M3)
PL_FP8_TYPE(__nv_fp8_e5m2, __NV_E5M2)
template <> struct pl::numpy_code<__nv_fp8_e4m3> { static constexpr const char* v = "u1"; };
template <> struct pl::numpy_code<__nv_fp8_e5m2> { static constexpr const char* v = "u1"; };
