// pagedlab CPU executor: the arithmetic, comparison and math intrinsics cuda_fp16.h and
// cuda_bf16.h share (the same names, overloaded on __half/__half2 and on
// __nv_bfloat16/__nv_bfloat162). PL_H16_OPS(H, H2, K) defines them for one pair; K is 0 for
// half, 1 for bfloat16 (pl_round.h's conventions). Rounding is IEEE round-to-nearest-even of
// the exact result, as the GPU's instructions: one operation in float then rounded (exact, see
// pl_round.h), a fused multiply-add through round-to-odd. A NaN result is the canonical 0x7fff.
#pragma once
#include <cmath>
#include "pl_round.h"

namespace pl::h16 {
inline float sat(float x) { return std::isnan(x) ? 0.0f : x < 0.f ? 0.f : x > 1.f ? 1.f : x; }
template <int K> inline uint16_t bits(double x) { return K ? rnd::to_bf16(x) : rnd::to_half(x); }
template <int K> inline float value(uint16_t b) { return K ? rnd::bf16_to_float(b) : rnd::half_to_float(b); }
template <int K> inline bool is_nan(uint16_t b) { return (b & 0x7fffu) > (K ? 0x7f80u : 0x7c00u); }
// max/min as the GPU's: a NaN operand is ignored unless both are NaN; -0 < +0.
template <int K> inline uint16_t max(uint16_t a, uint16_t b, bool nan) {
    if (is_nan<K>(a) || is_nan<K>(b)) {
        if (nan || (is_nan<K>(a) && is_nan<K>(b))) return 0x7fffu;
        return is_nan<K>(a) ? b : a;
    }
    float x = value<K>(a), y = value<K>(b);
    if (x == y) return (a & 0x8000u) ? b : a;
    return x < y ? b : a;
}
template <int K> inline uint16_t min(uint16_t a, uint16_t b, bool nan) {
    if (is_nan<K>(a) || is_nan<K>(b)) {
        if (nan || (is_nan<K>(a) && is_nan<K>(b))) return 0x7fffu;
        return is_nan<K>(a) ? b : a;
    }
    float x = value<K>(a), y = value<K>(b);
    if (x == y) return (a & 0x8000u) ? a : b;
    return y < x ? b : a;
}
}  // namespace pl::h16

// ---- the shared set, for one 16-bit type H, its pair H2 and K --------------------------------------
#define PL_H16_OPS(H, H2, K)                                                                           \
    inline H pl_h16_make_##K(uint16_t b) { H h; h.__x = b; return h; }                                \
    inline float pl_h16_f_##K(H h) { return pl::h16::value<K>(h.__x); }                              \
    inline H pl_h16_r_##K(double x) { return pl_h16_make_##K(pl::h16::bits<K>(x)); }                 \
    /* arithmetic */                                                                                   \
    inline H __hadd(H a, H b) { return pl_h16_r_##K(pl_h16_f_##K(a) + pl_h16_f_##K(b)); }            \
    inline H __hsub(H a, H b) { return pl_h16_r_##K(pl_h16_f_##K(a) - pl_h16_f_##K(b)); }            \
    inline H __hmul(H a, H b) { return pl_h16_r_##K(pl_h16_f_##K(a) * pl_h16_f_##K(b)); }            \
    inline H __hdiv(H a, H b) { return pl_h16_r_##K(pl_h16_f_##K(a) / pl_h16_f_##K(b)); }            \
    inline H __hadd_rn(H a, H b) { return __hadd(a, b); }                                             \
    inline H __hsub_rn(H a, H b) { return __hsub(a, b); }                                             \
    inline H __hmul_rn(H a, H b) { return __hmul(a, b); }                                             \
    inline H __hadd_sat(H a, H b) { return pl_h16_r_##K(pl::h16::sat(pl_h16_f_##K(__hadd(a, b)))); } \
    inline H __hsub_sat(H a, H b) { return pl_h16_r_##K(pl::h16::sat(pl_h16_f_##K(__hsub(a, b)))); } \
    inline H __hmul_sat(H a, H b) { return pl_h16_r_##K(pl::h16::sat(pl_h16_f_##K(__hmul(a, b)))); } \
    inline H __hfma(H a, H b, H c) {                                                                  \
        return pl_h16_r_##K(pl::rnd::fma_odd(pl_h16_f_##K(a), pl_h16_f_##K(b), pl_h16_f_##K(c)));    \
    }                                                                                                  \
    inline H __hfma_sat(H a, H b, H c) { return pl_h16_r_##K(pl::h16::sat(pl_h16_f_##K(__hfma(a, b, c)))); } \
    inline H __hfma_relu(H a, H b, H c) {                                                             \
        H r = __hfma(a, b, c);                                                                         \
        return (!pl::h16::is_nan<K>(r.__x) && (r.__x & 0x8000u)) ? pl_h16_make_##K(0) : r;            \
    }                                                                                                  \
    inline H __hneg(H a) { return pl_h16_make_##K((uint16_t)(a.__x ^ 0x8000u)); }                     \
    inline H __habs(H a) { return pl_h16_make_##K((uint16_t)(a.__x & 0x7fffu)); }                     \
    inline H __hmax(H a, H b) { return pl_h16_make_##K(pl::h16::max<K>(a.__x, b.__x, false)); }       \
    inline H __hmin(H a, H b) { return pl_h16_make_##K(pl::h16::min<K>(a.__x, b.__x, false)); }       \
    inline H __hmax_nan(H a, H b) { return pl_h16_make_##K(pl::h16::max<K>(a.__x, b.__x, true)); }    \
    inline H __hmin_nan(H a, H b) { return pl_h16_make_##K(pl::h16::min<K>(a.__x, b.__x, true)); }    \
    /* comparisons: ordered (false on NaN) and unordered (true on NaN) */                             \
    inline bool __heq(H a, H b) { return pl_h16_f_##K(a) == pl_h16_f_##K(b); }                        \
    inline bool __hne(H a, H b) { float x = pl_h16_f_##K(a), y = pl_h16_f_##K(b); return x < y || x > y; } \
    inline bool __hlt(H a, H b) { return pl_h16_f_##K(a) < pl_h16_f_##K(b); }                         \
    inline bool __hle(H a, H b) { return pl_h16_f_##K(a) <= pl_h16_f_##K(b); }                        \
    inline bool __hgt(H a, H b) { return pl_h16_f_##K(a) > pl_h16_f_##K(b); }                         \
    inline bool __hge(H a, H b) { return pl_h16_f_##K(a) >= pl_h16_f_##K(b); }                        \
    inline bool __hequ(H a, H b) { return !(__hlt(a, b) || __hgt(a, b)); }                            \
    inline bool __hneu(H a, H b) { return !__heq(a, b); }                                             \
    inline bool __hltu(H a, H b) { return !__hge(a, b); }                                             \
    inline bool __hleu(H a, H b) { return !__hgt(a, b); }                                             \
    inline bool __hgtu(H a, H b) { return !__hle(a, b); }                                             \
    inline bool __hgeu(H a, H b) { return !__hlt(a, b); }                                             \
    inline bool __hisnan(H a) { return pl::h16::is_nan<K>(a.__x); }                                   \
    inline int __hisinf(H a) {                                                                         \
        return (a.__x & 0x7fffu) == (K ? 0x7f80u : 0x7c00u) ? ((a.__x & 0x8000u) ? -1 : 1) : 0;      \
    }                                                                                                  \
    /* math: computed in float, rounded once (the GPU's may differ in the last bit) */                \
    inline H hsqrt(H a) { return pl_h16_r_##K(std::sqrt(pl_h16_f_##K(a))); }                           \
    inline H hrsqrt(H a) { return pl_h16_r_##K(1.0f / std::sqrt(pl_h16_f_##K(a))); }                   \
    inline H hrcp(H a) { return pl_h16_r_##K(1.0f / pl_h16_f_##K(a)); }                                \
    inline H hexp(H a) { return pl_h16_r_##K(std::exp(pl_h16_f_##K(a))); }                             \
    inline H hexp2(H a) { return pl_h16_r_##K(std::exp2(pl_h16_f_##K(a))); }                           \
    inline H hexp10(H a) { return pl_h16_r_##K(std::pow(10.0f, pl_h16_f_##K(a))); }                    \
    inline H hlog(H a) { return pl_h16_r_##K(std::log(pl_h16_f_##K(a))); }                             \
    inline H hlog2(H a) { return pl_h16_r_##K(std::log2(pl_h16_f_##K(a))); }                           \
    inline H hlog10(H a) { return pl_h16_r_##K(std::log10(pl_h16_f_##K(a))); }                         \
    inline H hsin(H a) { return pl_h16_r_##K(std::sin(pl_h16_f_##K(a))); }                             \
    inline H hcos(H a) { return pl_h16_r_##K(std::cos(pl_h16_f_##K(a))); }                             \
    inline H htanh(H a) { return pl_h16_r_##K(std::tanh(pl_h16_f_##K(a))); }                           \
    inline H hfloor(H a) { return pl_h16_r_##K(std::floor(pl_h16_f_##K(a))); }                         \
    inline H hceil(H a) { return pl_h16_r_##K(std::ceil(pl_h16_f_##K(a))); }                           \
    inline H htrunc(H a) { return pl_h16_r_##K(std::trunc(pl_h16_f_##K(a))); }                         \
    inline H hrint(H a) { return pl_h16_r_##K(std::nearbyint(pl_h16_f_##K(a))); }                      \
    /* operators */                                                                                    \
    inline H operator+(H a, H b) { return __hadd(a, b); }                                             \
    inline H operator-(H a, H b) { return __hsub(a, b); }                                             \
    inline H operator*(H a, H b) { return __hmul(a, b); }                                             \
    inline H operator/(H a, H b) { return __hdiv(a, b); }                                             \
    inline H operator-(H a) { return __hneg(a); }                                                      \
    inline H operator+(H a) { return a; }                                                              \
    inline H& operator+=(H& a, H b) { return a = a + b; }                                              \
    inline H& operator-=(H& a, H b) { return a = a - b; }                                              \
    inline H& operator*=(H& a, H b) { return a = a * b; }                                              \
    inline H& operator/=(H& a, H b) { return a = a / b; }                                              \
    inline bool operator==(H a, H b) { return __heq(a, b); }                                          \
    inline bool operator!=(H a, H b) { return __hneu(a, b); }                                         \
    inline bool operator<(H a, H b) { return __hlt(a, b); }                                           \
    inline bool operator<=(H a, H b) { return __hle(a, b); }                                          \
    inline bool operator>(H a, H b) { return __hgt(a, b); }                                           \
    inline bool operator>=(H a, H b) { return __hge(a, b); }                                          \
    /* pairs: each lane rounded once, as the x2 instructions */                                       \
    inline H2 pl_h2_##K(H x, H y) { H2 r; r.x = x; r.y = y; return r; }                              \
    inline H2 __hadd2(H2 a, H2 b) { return pl_h2_##K(__hadd(a.x, b.x), __hadd(a.y, b.y)); }          \
    inline H2 __hsub2(H2 a, H2 b) { return pl_h2_##K(__hsub(a.x, b.x), __hsub(a.y, b.y)); }          \
    inline H2 __hmul2(H2 a, H2 b) { return pl_h2_##K(__hmul(a.x, b.x), __hmul(a.y, b.y)); }          \
    inline H2 __h2div(H2 a, H2 b) { return pl_h2_##K(__hdiv(a.x, b.x), __hdiv(a.y, b.y)); }          \
    inline H2 __hadd2_rn(H2 a, H2 b) { return __hadd2(a, b); }                                        \
    inline H2 __hsub2_rn(H2 a, H2 b) { return __hsub2(a, b); }                                        \
    inline H2 __hmul2_rn(H2 a, H2 b) { return __hmul2(a, b); }                                        \
    inline H2 __hadd2_sat(H2 a, H2 b) { return pl_h2_##K(__hadd_sat(a.x, b.x), __hadd_sat(a.y, b.y)); } \
    inline H2 __hsub2_sat(H2 a, H2 b) { return pl_h2_##K(__hsub_sat(a.x, b.x), __hsub_sat(a.y, b.y)); } \
    inline H2 __hmul2_sat(H2 a, H2 b) { return pl_h2_##K(__hmul_sat(a.x, b.x), __hmul_sat(a.y, b.y)); } \
    inline H2 __hfma2(H2 a, H2 b, H2 c) { return pl_h2_##K(__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y)); } \
    inline H2 __hfma2_sat(H2 a, H2 b, H2 c) {                                                         \
        return pl_h2_##K(__hfma_sat(a.x, b.x, c.x), __hfma_sat(a.y, b.y, c.y));                        \
    }                                                                                                  \
    inline H2 __hfma2_relu(H2 a, H2 b, H2 c) {                                                        \
        return pl_h2_##K(__hfma_relu(a.x, b.x, c.x), __hfma_relu(a.y, b.y, c.y));                      \
    }                                                                                                  \
    inline H2 __hneg2(H2 a) { return pl_h2_##K(__hneg(a.x), __hneg(a.y)); }                           \
    inline H2 __habs2(H2 a) { return pl_h2_##K(__habs(a.x), __habs(a.y)); }                           \
    inline H2 __hmax2(H2 a, H2 b) { return pl_h2_##K(__hmax(a.x, b.x), __hmax(a.y, b.y)); }          \
    inline H2 __hmin2(H2 a, H2 b) { return pl_h2_##K(__hmin(a.x, b.x), __hmin(a.y, b.y)); }          \
    inline H2 __hmax2_nan(H2 a, H2 b) { return pl_h2_##K(__hmax_nan(a.x, b.x), __hmax_nan(a.y, b.y)); } \
    inline H2 __hmin2_nan(H2 a, H2 b) { return pl_h2_##K(__hmin_nan(a.x, b.x), __hmin_nan(a.y, b.y)); } \
    /* pair comparisons: 1.0/0.0 per lane, a 0xffff/0 mask per lane, or one bool for both */        \
    PL_H16_CMP2(H, H2, K, eq) PL_H16_CMP2(H, H2, K, ne) PL_H16_CMP2(H, H2, K, lt)                     \
    PL_H16_CMP2(H, H2, K, le) PL_H16_CMP2(H, H2, K, gt) PL_H16_CMP2(H, H2, K, ge)                     \
    PL_H16_CMP2(H, H2, K, equ) PL_H16_CMP2(H, H2, K, neu) PL_H16_CMP2(H, H2, K, ltu)                  \
    PL_H16_CMP2(H, H2, K, leu) PL_H16_CMP2(H, H2, K, gtu) PL_H16_CMP2(H, H2, K, geu)                  \
    inline H2 __hisnan2(H2 a) {                                                                        \
        return pl_h2_##K(pl_h16_r_##K(__hisnan(a.x) ? 1.0 : 0.0), pl_h16_r_##K(__hisnan(a.y) ? 1.0 : 0.0)); \
    }                                                                                                  \
    inline H2 h2sqrt(H2 a) { return pl_h2_##K(hsqrt(a.x), hsqrt(a.y)); }                              \
    inline H2 h2rsqrt(H2 a) { return pl_h2_##K(hrsqrt(a.x), hrsqrt(a.y)); }                           \
    inline H2 h2rcp(H2 a) { return pl_h2_##K(hrcp(a.x), hrcp(a.y)); }                                 \
    inline H2 h2exp(H2 a) { return pl_h2_##K(hexp(a.x), hexp(a.y)); }                                 \
    inline H2 h2exp2(H2 a) { return pl_h2_##K(hexp2(a.x), hexp2(a.y)); }                              \
    inline H2 h2log(H2 a) { return pl_h2_##K(hlog(a.x), hlog(a.y)); }                                 \
    inline H2 h2log2(H2 a) { return pl_h2_##K(hlog2(a.x), hlog2(a.y)); }                              \
    inline H2 h2sin(H2 a) { return pl_h2_##K(hsin(a.x), hsin(a.y)); }                                 \
    inline H2 h2cos(H2 a) { return pl_h2_##K(hcos(a.x), hcos(a.y)); }                                 \
    inline H2 h2floor(H2 a) { return pl_h2_##K(hfloor(a.x), hfloor(a.y)); }                           \
    inline H2 h2ceil(H2 a) { return pl_h2_##K(hceil(a.x), hceil(a.y)); }                              \
    inline H2 h2trunc(H2 a) { return pl_h2_##K(htrunc(a.x), htrunc(a.y)); }                           \
    inline H2 h2rint(H2 a) { return pl_h2_##K(hrint(a.x), hrint(a.y)); }                              \
    inline H2 operator+(H2 a, H2 b) { return __hadd2(a, b); }                                         \
    inline H2 operator-(H2 a, H2 b) { return __hsub2(a, b); }                                         \
    inline H2 operator*(H2 a, H2 b) { return __hmul2(a, b); }                                         \
    inline H2 operator/(H2 a, H2 b) { return __h2div(a, b); }                                         \
    inline H2 operator-(H2 a) { return __hneg2(a); }                                                  \
    inline H2& operator+=(H2& a, H2 b) { return a = a + b; }                                          \
    inline H2& operator-=(H2& a, H2 b) { return a = a - b; }                                          \
    inline H2& operator*=(H2& a, H2 b) { return a = a * b; }                                          \
    inline H2& operator/=(H2& a, H2 b) { return a = a / b; }                                          \
    inline bool operator==(H2 a, H2 b) { return __hbeq2(a, b); }                                      \
    inline bool operator!=(H2 a, H2 b) { return __hbneu2(a, b); }

#define PL_H16_CMP2(H, H2, K, OP)                                                                      \
    inline H2 __h##OP##2(H2 a, H2 b) {                                                                 \
        return pl_h2_##K(pl_h16_r_##K(__h##OP(a.x, b.x) ? 1.0 : 0.0), pl_h16_r_##K(__h##OP(a.y, b.y) ? 1.0 : 0.0)); \
    }                                                                                                  \
    inline unsigned __h##OP##2_mask(H2 a, H2 b) {                                                      \
        return (__h##OP(a.x, b.x) ? 0xffffu : 0u) | (__h##OP(a.y, b.y) ? 0xffff0000u : 0u);           \
    }                                                                                                  \
    inline bool __hb##OP##2(H2 a, H2 b) { return __h##OP(a.x, b.x) && __h##OP(a.y, b.y); }
