// pagedlab CPU executor: what inline PTX statements run as. pagedlab/cuda/ptx.py rewrites each
// `asm("..." : outputs : inputs)` of a kernel into calls of the functions below, on the asm's own
// line; loads and stores are plain C++ accesses, so the sanitizer checks them like any other.
// Operands move between C++ variables and PTX registers by their bits (`in`, `out`), as nvcc
// binds an "r"/"h"/"l"/"f"/"d" operand to a register of that width.
#pragma once
#include <atomic>
#include <bit>
#include <cfenv>
#include <limits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <type_traits>
#include "pl_round.h"

namespace pl::ptx {

// ---- operands ---------------------------------------------------------------------------------
template <class T, class S>
__attribute__((always_inline)) inline T in(const S& s) {
    using U = std::remove_cvref_t<S>;
    if constexpr (std::is_pointer_v<U>) {
        return (T)(uintptr_t)s;
    } else if constexpr (std::is_integral_v<T> && (std::is_integral_v<U> || std::is_enum_v<U>)) {
        return static_cast<T>(s);  // an "r"(int) read as .u32, a "h"(int) as .u16, sign-extended
    } else if constexpr (sizeof(T) == sizeof(U)) {
        return std::bit_cast<T>(s);
    } else if constexpr (std::is_arithmetic_v<T> && std::is_arithmetic_v<U>) {
        return static_cast<T>(s);
    } else {
        T t{};
        std::memcpy(&t, &s, sizeof(T) < sizeof(U) ? sizeof(T) : sizeof(U));
        return t;
    }
}

template <class D, class V>
__attribute__((always_inline)) inline void out(D& d, V v) {
    using U = std::remove_cvref_t<D>;
    if constexpr (std::is_pointer_v<U>) {
        d = (U)(uintptr_t)v;
    } else if constexpr (std::is_integral_v<U> && std::is_integral_v<V>) {
        d = static_cast<U>(v);
    } else if constexpr (sizeof(U) == sizeof(V)) {
        d = std::bit_cast<U>(v);
    } else if constexpr (std::is_arithmetic_v<U> && std::is_arithmetic_v<V>) {
        d = static_cast<U>(v);
    } else {
        U t{};
        std::memcpy(&t, &v, sizeof(U) < sizeof(V) ? sizeof(U) : sizeof(V));
        d = t;
    }
}

// ---- special registers ---------------------------------------------------------------------------
inline uint32_t tid_rank() { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }
inline uint32_t laneid() { return tid_rank() % 32u; }
inline uint32_t warpid() { return tid_rank() / 32u; }
inline uint32_t lanemask(int kind) {  // 0 eq, 1 lt, 2 le, 3 gt, 4 ge
    uint32_t l = laneid(), eq = 1u << l, lt = eq - 1u;
    switch (kind) {
        case 0: return eq;
        case 1: return lt;
        case 2: return lt | eq;
        case 3: return ~(lt | eq);
        default: return ~lt;
    }
}
inline uint64_t clock64_() { return (uint64_t)std::clock(); }
inline uint64_t globaltimer() {
    timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

// ---- memory: plain accesses (so checked builds check them) -------------------------------------
template <class T> __attribute__((always_inline)) inline T ld(uint64_t addr) {
    return *reinterpret_cast<const T*>((uintptr_t)addr);
}
template <class T> __attribute__((always_inline)) inline void st(uint64_t addr, T v) {
    *reinterpret_cast<T*>((uintptr_t)addr) = v;
}
template <class P> __attribute__((always_inline)) inline uint64_t addr_of(P* p) { return (uint64_t)(uintptr_t)p; }

// ---- 16-bit floats: K = 0 half, 1 bfloat16 --------------------------------------------------------
template <int K> inline float h2f(uint16_t h) { return K ? rnd::bf16_to_float(h) : rnd::half_to_float(h); }
template <int K> inline uint16_t f2h(double x, int mode = rnd::RN) { return K ? rnd::to_bf16(x, mode) : rnd::to_half(x, mode); }
inline float sat01(float x) { return std::isnan(x) ? 0.0f : (x < 0.f ? 0.f : (x > 1.f ? 1.f : x)); }
enum HOp : int { H_ADD, H_SUB, H_MUL, H_MIN, H_MAX, H_MIN_NAN, H_MAX_NAN };
template <int K> inline uint16_t h_bin(int op, uint16_t a, uint16_t b, bool sat) {
    float x = h2f<K>(a), y = h2f<K>(b), r;
    switch (op) {
        case H_ADD: r = x + y; break;  // float has >= 2p+2 bits: rounding twice is exact here
        case H_SUB: r = x - y; break;
        case H_MUL: r = x * y; break;
        case H_MIN: case H_MAX: {
            if (std::isnan(x) && std::isnan(y)) return 0x7fffu;
            if (std::isnan(x)) return b;
            if (std::isnan(y)) return a;
            bool lt = x < y || (x == y && (a & 0x8000u) && !(b & 0x8000u));  // -0 < +0
            return (op == H_MIN) == lt ? a : b;
        }
        default: {  // .NaN variants: a NaN operand gives the canonical NaN
            if (std::isnan(x) || std::isnan(y)) return 0x7fffu;
            bool lt = x < y || (x == y && (a & 0x8000u) && !(b & 0x8000u));
            return (op == H_MIN_NAN) == lt ? a : b;
        }
    }
    if (sat) r = sat01(r);
    return f2h<K>(r);
}
template <int K> inline uint16_t h_fma(uint16_t a, uint16_t b, uint16_t c, bool sat, bool relu) {
    double r = rnd::fma_odd(h2f<K>(a), h2f<K>(b), h2f<K>(c));
    uint16_t h = f2h<K>(r);
    if (sat) h = f2h<K>(sat01(h2f<K>(h)));
    if (relu && !rnd::is_nan16(h, K ? 0x7f80u : 0x7c00u) && (h & 0x8000u)) h = 0;
    return h;
}
template <int K> inline uint32_t h2_bin(int op, uint32_t a, uint32_t b, bool sat) {
    return (uint32_t)h_bin<K>(op, (uint16_t)a, (uint16_t)b, sat)
           | (uint32_t)h_bin<K>(op, (uint16_t)(a >> 16), (uint16_t)(b >> 16), sat) << 16;
}
template <int K> inline uint32_t h2_fma(uint32_t a, uint32_t b, uint32_t c, bool sat, bool relu) {
    return (uint32_t)h_fma<K>((uint16_t)a, (uint16_t)b, (uint16_t)c, sat, relu)
           | (uint32_t)h_fma<K>((uint16_t)(a >> 16), (uint16_t)(b >> 16), (uint16_t)(c >> 16), sat, relu) << 16;
}

// ---- f32 / f64 arithmetic with a rounding mode ------------------------------------------------------
template <class T, class F> inline T with_mode(int mode, F f) {
    if (mode == rnd::RN) return f();
    int old = std::fegetround();
    std::fesetround(mode == rnd::RZ ? FE_TOWARDZERO : mode == rnd::RM ? FE_DOWNWARD : FE_UPWARD);
    volatile T r = f();
    std::fesetround(old);
    return r;
}
template <class T> inline T f_add(T a, T b, int mode) {
    volatile T x = a, y = b;
    return with_mode<T>(mode, [&] { return (T)(x + y); });
}
template <class T> inline T f_sub(T a, T b, int mode) {
    volatile T x = a, y = b;
    return with_mode<T>(mode, [&] { return (T)(x - y); });
}
template <class T> inline T f_mul(T a, T b, int mode) {
    volatile T x = a, y = b;
    return with_mode<T>(mode, [&] { return (T)(x * y); });
}
template <class T> inline T f_div(T a, T b, int mode) {
    volatile T x = a, y = b;
    return with_mode<T>(mode, [&] { return (T)(x / y); });
}
template <class T> inline T f_fma(T a, T b, T c, int mode) {
    volatile T x = a, y = b, z = c;
    return with_mode<T>(mode, [&] { return (T)std::fma((T)x, (T)y, (T)z); });
}
template <class T> inline T f_sqrt(T a, int mode) {
    volatile T x = a;
    return with_mode<T>(mode, [&] { return (T)std::sqrt((T)x); });
}
template <class T> inline T f_sat(T x, bool sat) { return sat ? (T)sat01((float)x) : x; }
template <class T> inline T f_min(T a, T b) { return std::isnan(a) ? b : std::isnan(b) ? a : (b < a ? b : a); }
template <class T> inline T f_max(T a, T b) { return std::isnan(a) ? b : std::isnan(b) ? a : (a < b ? b : a); }

// ---- conversions (cvt) -------------------------------------------------------------------------------
// Float to integer: round to an integral value in the mode, then saturate (PTX's rule; NaN -> 0).
template <class I> inline I f2i(double x, int mode) {
    if (std::isnan(x)) return 0;
    double r = mode == rnd::RN ? std::nearbyint(x) : mode == rnd::RZ ? std::trunc(x)
             : mode == rnd::RM ? std::floor(x) : std::ceil(x);
    if (r <= (double)std::numeric_limits<I>::min()) return std::numeric_limits<I>::min();
    if (r >= (double)std::numeric_limits<I>::max()) return std::numeric_limits<I>::max();
    return (I)r;
}
template <class T> inline T round_integral(T x, int mode) {
    return mode == rnd::RN ? std::nearbyint(x) : mode == rnd::RZ ? std::trunc(x)
         : mode == rnd::RM ? std::floor(x) : std::ceil(x);
}
// Integer to float in a rounding mode: exact in long double for 64-bit integers, then rounded.
template <class F, class I> inline F i2f(I v, int mode) {
    if constexpr (sizeof(F) == 4) {
        double d = (double)v;  // exact for <= 32-bit integers
        if constexpr (sizeof(I) == 8) {
            volatile I x = v;
            return with_mode<F>(mode, [&] { return (F)(I)x; });
        }
        return rnd::to_float(d, mode);
    } else {
        volatile I x = v;
        return with_mode<F>(mode, [&] { return (F)(I)x; });
    }
}
template <class I> inline I sat_int(long double v) {
    if (v <= (long double)std::numeric_limits<I>::min()) return std::numeric_limits<I>::min();
    if (v >= (long double)std::numeric_limits<I>::max()) return std::numeric_limits<I>::max();
    return (I)v;
}

template <class T> inline T relu(T x) { return x < (T)0 ? (T)0 : x; }  // NaN stays NaN

// ---- bit manipulation ----------------------------------------------------------------------------------
inline uint32_t lop3(uint32_t a, uint32_t b, uint32_t c, uint32_t lut) {
    uint32_t r = 0;
    for (int i = 0; i < 8; ++i)
        if (lut >> i & 1u) r |= ((i & 4) ? a : ~a) & ((i & 2) ? b : ~b) & ((i & 1) ? c : ~c);
    return r;
}
inline uint32_t prmt(uint32_t a, uint32_t b, uint32_t c) {  // the default (generic) mode
    uint64_t bytes = (uint64_t)b << 32 | a;
    uint32_t r = 0;
    for (int i = 0; i < 4; ++i) {
        uint32_t sel = (c >> (4 * i)) & 0xfu;
        uint32_t byte = (uint32_t)(bytes >> (8 * (sel & 7u))) & 0xffu;
        if (sel & 8u) byte = (byte & 0x80u) ? 0xffu : 0u;  // replicate the byte's sign
        r |= byte << (8 * i);
    }
    return r;
}
template <class U> inline U bit_reverse(U x) {
    U r = 0;
    for (unsigned i = 0; i < sizeof(U) * 8; ++i) r |= (U)((x >> i) & 1u) << (sizeof(U) * 8 - 1 - i);
    return r;
}
template <class T> inline T bfe(T a, uint32_t pos, uint32_t len) {
    using U = std::make_unsigned_t<T>;
    constexpr uint32_t bits = sizeof(T) * 8;
    pos &= 0xffu; len &= 0xffu;
    U u = (U)a;
    bool sign = std::is_signed_v<T> && len > 0 && ((u >> (pos + len - 1 < bits ? pos + len - 1 : bits - 1)) & 1u);
    U r = 0;
    for (uint32_t i = 0; i < bits; ++i) {
        U bit = i < len ? (pos + i < bits ? (u >> (pos + i)) & 1u : (U)(std::is_signed_v<T> ? (u >> (bits - 1)) & 1u : 0u))
                        : (U)(sign ? 1u : 0u);
        r |= bit << i;
    }
    return (T)r;
}
template <class T> inline T bfi(T f, T b, uint32_t pos, uint32_t len) {
    constexpr uint32_t bits = sizeof(T) * 8;
    pos &= 0xffu; len &= 0xffu;
    T r = b;
    for (uint32_t i = 0; i < len && pos + i < bits; ++i) {
        T m = (T)1 << (pos + i);
        r = (T)((r & ~m) | (((f >> i) & 1) ? m : 0));
    }
    return r;
}
template <class T> inline uint32_t bfind(T a) {  // position of the most significant non-sign bit
    using U = std::make_unsigned_t<T>;
    U u = (U)a;
    if constexpr (std::is_signed_v<T>) if (a < 0) u = ~u;
    if (!u) return 0xffffffffu;
    return (uint32_t)(sizeof(T) * 8 - 1 - std::countl_zero(u));
}

// ---- warp operations: the runtime's exact rendezvous ---------------------------------------------
inline uint32_t shfl(int line, int kind, uint32_t a, uint32_t b, uint32_t c, uint32_t mask, bool* valid) {
    int width = 32 - (int)((c >> 8) & 0x1fu);
    if (width <= 0 || (width & (width - 1))) width = 32;
    uint32_t lane = laneid(), base = lane / (uint32_t)width * (uint32_t)width;
    if (valid) {
        switch (kind) {
            case pl::SHFL_UP: *valid = lane - base >= b; break;
            case pl::SHFL_DOWN: *valid = lane - base + b < (uint32_t)width; break;
            case pl::SHFL_XOR: *valid = ((lane ^ b) - base) < (uint32_t)width; break;
            default: *valid = true;
        }
    }
    return (uint32_t)pl_warp_op(line, kind, mask, a, (int)b, width);
}
}  // namespace pl::ptx
