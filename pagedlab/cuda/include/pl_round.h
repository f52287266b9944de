// pagedlab CPU executor: IEEE rounding of floats to half, bfloat16 and FP8, in all four PTX
// rounding modes, shared by cuda_fp16.h, cuda_bf16.h, cuda_fp8.h and the inline-PTX helpers.
//
// Why not just `(_Float16)x`: that is round-to-nearest only, keeps a NaN's payload (the GPU
// gives the canonical NaN 0x7fff) and, for a fused multiply-add computed in float, rounds
// twice. Rules used here:
//  * +, -, *, /, sqrt of two halves (or two bf16) computed in float and rounded once more are
//    correctly rounded: float has at least 2p+2 bits for p = 11 (half) and 8 (bf16), which
//    makes the double rounding innocuous;
//  * a fused multiply-add is computed exactly as a double sum with its error (TwoSum), rounded
//    to odd in double, then to the target: round-to-odd with 2+ spare bits then any rounding
//    gives the correctly rounded result.
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>

namespace pl::rnd {
enum Mode : int { RN = 0, RZ = 1, RM = 2, RP = 3 };

// ---- sign-magnitude neighbours of a 16-bit float (half or bf16); `inf` is its +inf bits ----
inline uint16_t next_up16(uint16_t h) {
    if ((h & 0x7fffu) == 0) return 1u;           // +-0 -> smallest positive subnormal
    return (h & 0x8000u) ? (uint16_t)(h - 1) : (uint16_t)(h + 1);
}
inline uint16_t next_down16(uint16_t h) { return (uint16_t)(next_up16((uint16_t)(h ^ 0x8000u)) ^ 0x8000u); }
inline bool is_nan16(uint16_t h, uint16_t inf) { return (h & 0x7fffu) > inf; }

// Step a round-to-nearest result `h` (whose exact value is `hv`) to the directed mode's answer
// for the exact value `x`.
inline uint16_t direct16(uint16_t h, double hv, double x, int mode) {
    if (mode == RN || hv == x || std::isnan(x)) return h;
    if (mode == RM) return hv > x ? next_down16(h) : h;
    if (mode == RP) return hv < x ? next_up16(h) : h;
    // RZ: one step toward zero when round-to-nearest went away from it
    if (std::fabs(hv) > std::fabs(x)) return (h & 0x8000u) ? next_up16(h) : next_down16(h);
    return h;
}

// ---- half ----------------------------------------------------------------------------------
inline float half_to_float(uint16_t h) { return (float)std::bit_cast<_Float16>(h); }
inline uint16_t half_rn(double x) {
    if (std::isnan(x)) return 0x7fffu;  // the GPU's canonical NaN
    return std::bit_cast<uint16_t>((_Float16)x);  // correctly rounded (libgcc's truncdfhf2)
}
inline uint16_t half_rn(float x) {
    if (std::isnan(x)) return 0x7fffu;
    return std::bit_cast<uint16_t>((_Float16)x);
}
inline uint16_t to_half(double x, int mode = RN) {
    uint16_t h = half_rn(x);
    if (mode == RN || is_nan16(h, 0x7c00u)) return h;
    return direct16(h, (double)half_to_float(h), x, mode);
}

// ---- bfloat16 ------------------------------------------------------------------------------
inline float bf16_to_float(uint16_t b) { return std::bit_cast<float>((uint32_t)b << 16); }
inline uint16_t bf16_rn(float f) {
    uint32_t u = std::bit_cast<uint32_t>(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;  // canonical NaN, as the GPU
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
// A double rounded to float "to odd": exact values stay, others take the neighbour with an odd
// last bit. Rounding that again to <= 22 bits is then correctly rounded.
inline float odd_float(double d) {
    float f = (float)d;
    if (std::isnan(d) || (double)f == d) return f;
    if (std::bit_cast<uint32_t>(f) & 1u) return f;
    return std::nextafter(f, d > (double)f ? INFINITY : -INFINITY);
}
inline uint16_t to_bf16(double x, int mode = RN) {
    uint16_t b = bf16_rn(odd_float(x));
    if (mode == RN || is_nan16(b, 0x7f80u)) return b;
    return direct16(b, (double)bf16_to_float(b), x, mode);
}

// ---- float from double (cvt.f32.f64 with a rounding mode) ----------------------------------
inline float to_float(double x, int mode = RN) {
    float f = (float)x;
    if (mode == RN || std::isnan(x) || (double)f == x) return f;
    if (mode == RM) return (double)f > x ? std::nextafter(f, -INFINITY) : f;
    if (mode == RP) return (double)f < x ? std::nextafter(f, INFINITY) : f;
    return std::fabs((double)f) > std::fabs(x) ? std::nextafter(f, 0.0f) : f;
}

// ---- a*b + c exactly, rounded to odd in double (a*b must be exact in double: operands of at
// most 26 significant bits, as halves, bf16 and FP8 are) ----------------------------------
inline double fma_odd(double a, double b, double c) {
    double p = a * b;
    double s = p + c;
    if (!std::isfinite(s)) return s;
    double bb = s - p;                      // TwoSum: s + e == p + c exactly
    double e = (p - (s - bb)) + (c - bb);
    if (e == 0) return s;
    if (std::bit_cast<uint64_t>(s) & 1u) return s;
    return std::nextafter(s, e > 0 ? INFINITY : -INFINITY);
}
}  // namespace pl::rnd

// ---- FP8 (OCP formats as CUDA has them): K = 0 e4m3 (bias 7, no infinity, max 448, NaN
// S.1111.111), K = 1 e5m2 (bias 15, max 57344, infinity S.11111.00). Round to nearest even;
// `satfinite` clamps what overflows to the largest finite value (CUDA's __NV_SATFINITE).
namespace pl::fp8 {
template <int K> inline uint8_t encode(double x, bool satfinite = true) {
    constexpr int man = K ? 2 : 3, bias = K ? 15 : 7;
    const double max_finite = K ? 57344.0 : 448.0;
    const double min_normal = std::ldexp(1.0, 1 - bias);
    uint8_t sign = std::signbit(x) ? 0x80u : 0u;
    if (std::isnan(x)) return 0x7fu | sign;
    double a = std::fabs(x);
    double r;
    if (a < min_normal) {
        double q = std::ldexp(1.0, 1 - bias - man);
        r = std::nearbyint(a / q) * q;
    } else if (std::isinf(a)) {
        r = a;
    } else {
        int e;
        std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
        double q = std::ldexp(1.0, e - 1 - man);
        r = std::nearbyint(a / q) * q;
    }
    if (r > max_finite) {
        if (satfinite) r = max_finite;
        else return K ? (uint8_t)(0x7cu | sign) : (uint8_t)(0x7fu | sign);
    }
    if (r == 0) return sign;
    if (r < min_normal) return (uint8_t)(sign | (uint8_t)(r / std::ldexp(1.0, 1 - bias - man)));
    int e;
    std::frexp(r, &e);
    int exp = e - 1 + bias;
    int mant = (int)(r / std::ldexp(1.0, e - 1 - man)) - (1 << man);
    return (uint8_t)(sign | exp << man | mant);
}
template <int K> inline float decode(uint8_t b) {
    constexpr int man = K ? 2 : 3, bias = K ? 15 : 7;
    int exp = (b & 0x7f) >> man, mant = b & ((1 << man) - 1);
    float sign = (b & 0x80u) ? -1.0f : 1.0f;
    if (K == 0 && (b & 0x7f) == 0x7f) return NAN;
    if (K == 1 && exp == 31) return mant ? NAN : sign * INFINITY;
    if (exp == 0) return sign * std::ldexp((float)mant, 1 - bias - man);
    return sign * std::ldexp((float)(mant + (1 << man)), exp - bias - man);
}
}  // namespace pl::fp8
