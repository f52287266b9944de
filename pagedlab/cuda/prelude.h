// pagedlab CPU executor prelude: force-included (-include) before an unchanged CUDA C source.
// It maps CUDA's keywords, built-in variables and intrinsics onto C++20 and the runtime.
// Shared memory is `thread_local`: one OS worker runs every fiber (CUDA thread) of a block, so
// per-OS-thread storage is exactly per-block storage, for `__shared__ float x[8];` and for
// `extern __shared__ float buf[];` alike. Rules (barriers, warp masks) are enforced by the runtime.
#pragma once
// Only headers whose names live in namespace std: <math.h> would put C++20's std::lerp (and
// friends) in the global namespace, and a kernel's own `lerp` would then clash. The C math
// functions come in through <cmath>; their float overloads are imported below by name.
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cassert>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <cfloat>
#include <climits>
#include <source_location>
#include <type_traits>
#include <utility>

#include "pl_abi.h"
#include "vector_types.h"

// ---- keywords -----------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __constant__
#define __managed__
// `used`: a shared array no thread writes must still be read from memory (it holds poison),
// not folded to the zero a never-written static would be.
// `aligned(64)`: a GPU aligns every __shared__ variable to at least 16 bytes, so float4 loads
// from a shared tile are legal. GCC lets a variable's aligned() override its type's alignment,
// so 64 also covers alignas(32)/alignas(64) types (larger alignas are capped at 64 here).
#define __shared__ thread_local __attribute__((used, aligned(64)))
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __restrict__ __restrict
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
#define __grid_constant__
#define __CUDACC__ 1
// The architecture the kernel is compiled for: Ampere unless the options name one
// (`-arch=sm_86` becomes -D__CUDA_ARCH__=860, see compiler.cuda_arch).
#ifndef __CUDA_ARCH__
#define __CUDA_ARCH__ 800
#endif
#define __PAGEDLAB_CPU__ 1

// ---- built-in variables ---------------------------------------------------------------------
#define threadIdx (pl_cur->tid)
#define blockIdx (pl_cur->bid)
#define blockDim (pl_cur->bdim)
#define gridDim (pl_cur->gdim)
// Checked builds (-fsanitize=thread): every memory read calls the sanitizer, and the calls stop
// the compiler from keeping threadIdx & co. in registers, so `As[threadIdx.y][k]` in a loop cost
// two extra calls per iteration. Read them through uninstrumented `const` functions instead: a
// CUDA thread's indices never change during one kernel call, so the compiler may hoist them.
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define PL_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_THREAD__) || defined(PL_SANITIZED)
namespace pl {
#define PL_BUILTIN_VAR(fn, T, field) \
    __attribute__((const, noinline, no_sanitize("thread"))) inline T fn() { return pl_cur->field; }
PL_BUILTIN_VAR(san_tid, uint3, tid)
PL_BUILTIN_VAR(san_bid, uint3, bid)
PL_BUILTIN_VAR(san_bdim, dim3, bdim)
PL_BUILTIN_VAR(san_gdim, dim3, gdim)
#undef PL_BUILTIN_VAR
}  // namespace pl
#undef threadIdx
#undef blockIdx
#undef blockDim
#undef gridDim
#define threadIdx (pl::san_tid())
#define blockIdx (pl::san_bid())
#define blockDim (pl::san_bdim())
#define gridDim (pl::san_gdim())
#endif
static constexpr int warpSize = 32;

// ---- math: the overloads CUDA declares in the global namespace (float and double alike) ------
using std::abs; using std::fabs; using std::sqrt; using std::cbrt; using std::exp; using std::exp2;
using std::expm1; using std::log; using std::log2; using std::log10; using std::log1p;
using std::pow; using std::sin; using std::cos; using std::tan; using std::asin; using std::acos;
using std::atan; using std::atan2; using std::sinh; using std::cosh; using std::tanh;
using std::asinh; using std::acosh; using std::atanh; using std::floor; using std::ceil;
using std::round; using std::trunc; using std::rint; using std::nearbyint; using std::lround;
using std::llround; using std::lrint; using std::fmod; using std::remainder; using std::fmin;
using std::fmax; using std::fdim; using std::fma; using std::hypot; using std::erf; using std::erfc;
using std::lgamma; using std::tgamma; using std::copysign; using std::ldexp; using std::frexp;
using std::modf; using std::scalbn; using std::ilogb; using std::logb; using std::nextafter;
using std::isnan; using std::isinf; using std::isfinite; using std::signbit; using std::isnormal;

// ---- barriers and warp operations (macros so the runtime knows the calling line) -------------
#define __syncthreads() pl_syncthreads(__LINE__)
#define __syncthreads_count(p) pl_syncthreads_reduce(__LINE__, pl::BAR_COUNT, (p) ? 1 : 0)
#define __syncthreads_and(p) pl_syncthreads_reduce(__LINE__, pl::BAR_AND, (p) ? 1 : 0)
#define __syncthreads_or(p) pl_syncthreads_reduce(__LINE__, pl::BAR_OR, (p) ? 1 : 0)
#define __syncwarp(...) ((void)pl_warp_op(__LINE__, pl::WARP_SYNC, pl::mask_or_full(__VA_ARGS__), 0, 0, 32))
#define __shfl_sync(...) pl::shfl(__LINE__, pl::SHFL_IDX, __VA_ARGS__)
#define __shfl_up_sync(...) pl::shfl(__LINE__, pl::SHFL_UP, __VA_ARGS__)
#define __shfl_down_sync(...) pl::shfl(__LINE__, pl::SHFL_DOWN, __VA_ARGS__)
#define __shfl_xor_sync(...) pl::shfl(__LINE__, pl::SHFL_XOR, __VA_ARGS__)
#define __ballot_sync(m, p) ((unsigned)pl_warp_op(__LINE__, pl::BALLOT, (m), (p) ? 1 : 0, 0, 32))
#define __any_sync(m, p) ((int)pl_warp_op(__LINE__, pl::ANY, (m), (p) ? 1 : 0, 0, 32))
#define __all_sync(m, p) ((int)pl_warp_op(__LINE__, pl::ALL, (m), (p) ? 1 : 0, 0, 32))
#define __reduce_add_sync(m, v) ((unsigned)pl_warp_op(__LINE__, pl::REDUCE_ADD, (m), (uint32_t)(v), 0, 32))
#define __reduce_min_sync(m, v) ((unsigned)pl_warp_op(__LINE__, pl::REDUCE_MIN, (m), (uint32_t)(v), 0, 32))
#define __reduce_max_sync(m, v) ((unsigned)pl_warp_op(__LINE__, pl::REDUCE_MAX, (m), (uint32_t)(v), 0, 32))
#define __activemask() pl_activemask()
// Pre-CUDA-9 shuffles without a mask (removed for sm_70+, and from CUDA 13 altogether): they
// run on the lanes that have not returned, and pagedlab warns at build time to use *_sync.
#define __shfl(v, ...) pl::shfl(__LINE__, pl::SHFL_IDX, pl_activemask(), v, __VA_ARGS__)
#define __shfl_up(v, ...) pl::shfl(__LINE__, pl::SHFL_UP, pl_activemask(), v, __VA_ARGS__)
#define __shfl_down(v, ...) pl::shfl(__LINE__, pl::SHFL_DOWN, pl_activemask(), v, __VA_ARGS__)
#define __shfl_xor(v, ...) pl::shfl(__LINE__, pl::SHFL_XOR, pl_activemask(), v, __VA_ARGS__)
#define __ballot(p) __ballot_sync(pl_activemask(), p)
#define __any(p) __any_sync(pl_activemask(), p)
#define __all(p) __all_sync(pl_activemask(), p)
#define __trap() pl_trap(__LINE__, "__trap()")
// A failed device-side assert stops the launch with the condition, file line and thread.
#undef assert
#define assert(e) ((e) ? (void)0 : pl_trap(__LINE__, "assertion `" #e "` failed"))
#define __brkpt() pl_trap(__LINE__, "__brkpt()")

namespace pl {
inline unsigned mask_or_full() { return 0xffffffffu; }
inline unsigned mask_or_full(unsigned m) { return m; }

template <class T>
inline T shfl(int line, int kind, unsigned mask, T var, int arg, int width = 32) {
    static_assert(std::is_trivially_copyable_v<T>, "warp shuffles move trivially copyable values");
    // Values wider than 8 bytes (double2, a small struct) move as several 8-byte shuffles,
    // every lane doing the same sequence, as the GPU's headers split them into 32-bit words.
    constexpr int words = (sizeof(T) + 7) / 8;
    uint64_t in[words] = {}, out[words];
    std::memcpy(in, &var, sizeof(T));
    for (int k = 0; k < words; ++k) out[k] = pl_warp_op(line, kind, mask, in[k], arg, width);
    T res;
    std::memcpy(&res, out, sizeof(T));
    return res;
}
}  // namespace pl

// __match_any_sync / __match_all_sync: the lanes of the mask holding the same value, found
// with one exact shuffle per lane of the mask (each a real rendezvous).
namespace pl {
template <class T> inline unsigned match_any(int line, unsigned mask, T v) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "__match_any_sync takes 32/64-bit values");
    uint64_t bits = 0;
    __builtin_memcpy(&bits, &v, sizeof(T));
    unsigned same = 0;
    for (int l = 0; l < 32; ++l)
        if (mask >> l & 1)
            if (pl_warp_op(line, SHFL_IDX, mask, bits, l, 32) == bits) same |= 1u << l;
    return same;
}
template <class T> inline unsigned match_all(int line, unsigned mask, T v, int* pred) {
    unsigned same = match_any(line, mask, v);
    bool all = same == (mask & pl_activemask());
    if (pred) *pred = all;
    return all ? mask : 0u;
}
}  // namespace pl
#define __match_any_sync(m, v) pl::match_any(__LINE__, (m), (v))
#define __match_all_sync(m, v, pred) pl::match_all(__LINE__, (m), (v), (pred))

// ---- fences and loads ------------------------------------------------------------------------
#define __threadfence() std::atomic_thread_fence(std::memory_order_seq_cst)
#define __threadfence_block() std::atomic_thread_fence(std::memory_order_seq_cst)
#define __threadfence_system() std::atomic_thread_fence(std::memory_order_seq_cst)
template <class T> __forceinline__ T __ldg(const T* p) { return *p; }
template <class T> __forceinline__ T __ldcs(const T* p) { return *p; }
template <class T> __forceinline__ void __stcs(T* p, T v) { *p = v; }

// ---- atomics: std::atomic_ref, because blocks run on different OS workers ------------------
namespace pl {
template <class T> using same_t = std::type_identity_t<T>;  // the pointer decides the type
#if defined(__cpp_lib_atomic_ref) && !defined(PL_NO_ATOMIC_REF)
template <class T> using aref = std::atomic_ref<T>;
#else
// Standard libraries without atomic_ref (older libc++): the same operations on GCC/Clang builtins.
template <class T>
struct aref {
    T* p;
    explicit aref(T& x) : p(&x) {}
    T load(int = 0) const { T v; __atomic_load(p, &v, __ATOMIC_SEQ_CST); return v; }
    T exchange(T v) { T old; __atomic_exchange(p, &v, &old, __ATOMIC_SEQ_CST); return old; }
    bool compare_exchange_strong(T& expected, T v) {
        return __atomic_compare_exchange(p, &expected, &v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    }
    bool compare_exchange_weak(T& expected, T v, int = 0) {
        return __atomic_compare_exchange(p, &expected, &v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    }
    T fetch_add(T v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
    T fetch_sub(T v) { return __atomic_fetch_sub(p, v, __ATOMIC_SEQ_CST); }
    T fetch_and(T v) { return __atomic_fetch_and(p, v, __ATOMIC_SEQ_CST); }
    T fetch_or(T v) { return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); }
    T fetch_xor(T v) { return __atomic_fetch_xor(p, v, __ATOMIC_SEQ_CST); }
};
#endif
template <class T, class F>
__forceinline__ T atomic_update(T* addr, F f) {
    aref<T> ref(*addr);
    T old = ref.load();
    while (!ref.compare_exchange_weak(old, f(old))) {}
    return old;
}
}  // namespace pl
template <class T> __forceinline__ T atomicAdd(T* a, pl::same_t<T> v) {
    if constexpr (std::is_integral_v<T>) return pl::aref<T>(*a).fetch_add(v);
    else return pl::atomic_update(a, [v](T o) { return o + v; });
}
template <class T> __forceinline__ T atomicSub(T* a, pl::same_t<T> v) {
    if constexpr (std::is_integral_v<T>) return pl::aref<T>(*a).fetch_sub(v);
    else return pl::atomic_update(a, [v](T o) { return o - v; });
}
template <class T> __forceinline__ T atomicExch(T* a, pl::same_t<T> v) { return pl::aref<T>(*a).exchange(v); }
template <class T> __forceinline__ T atomicMax(T* a, pl::same_t<T> v) {
    return pl::atomic_update(a, [v](T o) { return o < v ? v : o; });
}
template <class T> __forceinline__ T atomicMin(T* a, pl::same_t<T> v) {
    return pl::atomic_update(a, [v](T o) { return v < o ? v : o; });
}
template <class T> __forceinline__ T atomicAnd(T* a, pl::same_t<T> v) { return pl::aref<T>(*a).fetch_and(v); }
template <class T> __forceinline__ T atomicOr(T* a, pl::same_t<T> v) { return pl::aref<T>(*a).fetch_or(v); }
template <class T> __forceinline__ T atomicXor(T* a, pl::same_t<T> v) { return pl::aref<T>(*a).fetch_xor(v); }
template <class T> __forceinline__ T atomicCAS(T* a, pl::same_t<T> cmp, pl::same_t<T> v) {
    pl::aref<T>(*a).compare_exchange_strong(cmp, v);
    return cmp;  // holds the old value whether or not the swap happened
}
__forceinline__ unsigned atomicInc(unsigned* a, unsigned lim) {
    return pl::atomic_update(a, [lim](unsigned o) { return o >= lim ? 0u : o + 1; });
}
__forceinline__ unsigned atomicDec(unsigned* a, unsigned lim) {
    return pl::atomic_update(a, [lim](unsigned o) { return (o == 0 || o > lim) ? lim : o - 1; });
}
#define atomicAdd_block atomicAdd
#define atomicMax_block atomicMax
#define atomicMin_block atomicMin
#define atomicCAS_block atomicCAS
#define atomicExch_block atomicExch

// ---- clocks: clock() is the C library's (a clock_t, as on the device); clock64() a counter ----
__forceinline__ long long clock64() { return (long long)std::clock(); }

// ---- math and bit intrinsics -----------------------------------------------------------------
// The fast-math intrinsics are computed exactly here; the GPU's versions differ in the last bits.
__forceinline__ float __expf(float x) { return expf(x); }
__forceinline__ float __logf(float x) { return logf(x); }
__forceinline__ float __log2f(float x) { return log2f(x); }
__forceinline__ float __sinf(float x) { return sinf(x); }
__forceinline__ float __cosf(float x) { return cosf(x); }
__forceinline__ float __tanf(float x) { return tanf(x); }
__forceinline__ float __powf(float x, float y) { return powf(x, y); }
__forceinline__ float __exp10f(float x) { return powf(10.0f, x); }
__forceinline__ float __fdividef(float a, float b) { return a / b; }
__forceinline__ float __frcp_rn(float a) { return 1.0f / a; }
__forceinline__ float __fsqrt_rn(float a) { return sqrtf(a); }
__forceinline__ float __fadd_rn(float a, float b) { return a + b; }
__forceinline__ float __fmul_rn(float a, float b) { return a * b; }
__forceinline__ float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
__forceinline__ float __saturatef(float x) { return x < 0.f ? 0.f : (x > 1.f ? 1.f : x); }
__forceinline__ float rsqrtf(float x) { return 1.0f / sqrtf(x); }
__forceinline__ double rsqrt(double x) { return 1.0 / sqrt(x); }
__forceinline__ float __frsqrt_rn(float x) { return 1.0f / sqrtf(x); }
__forceinline__ float rcbrtf(float x) { return 1.0f / cbrtf(x); }
__forceinline__ float normcdff(float x) { return 0.5f * erfcf(-x * 0.70710678118654752f); }
__forceinline__ int __float_as_int(float x) { return std::bit_cast<int>(x); }
__forceinline__ unsigned __float_as_uint(float x) { return std::bit_cast<unsigned>(x); }
__forceinline__ float __int_as_float(int x) { return std::bit_cast<float>(x); }
__forceinline__ float __uint_as_float(unsigned x) { return std::bit_cast<float>(x); }
__forceinline__ long long __double_as_longlong(double x) { return std::bit_cast<long long>(x); }
__forceinline__ double __longlong_as_double(long long x) { return std::bit_cast<double>(x); }
__forceinline__ int __float2int_rn(float x) { return (int)nearbyintf(x); }
__forceinline__ int __float2int_rz(float x) { return (int)x; }
__forceinline__ int __float2int_rd(float x) { return (int)floorf(x); }
__forceinline__ int __float2int_ru(float x) { return (int)ceilf(x); }
__forceinline__ float __int2float_rn(int x) { return (float)x; }
__forceinline__ int __popc(unsigned x) { return std::popcount(x); }
__forceinline__ int __popcll(unsigned long long x) { return std::popcount(x); }
__forceinline__ int __clz(int x) { return std::countl_zero((unsigned)x); }
__forceinline__ int __clzll(long long x) { return std::countl_zero((unsigned long long)x); }
__forceinline__ int __ffs(int x) { return x ? std::countr_zero((unsigned)x) + 1 : 0; }
__forceinline__ int __ffsll(long long x) { return x ? std::countr_zero((unsigned long long)x) + 1 : 0; }
__forceinline__ unsigned __brev(unsigned x) {
    unsigned r = 0;
    for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
    return r;
}
__forceinline__ int __mul24(int a, int b) { return a * b; }
__forceinline__ unsigned __umul24(unsigned a, unsigned b) { return a * b; }
__forceinline__ int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
__forceinline__ unsigned __umulhi(unsigned a, unsigned b) {
    return (unsigned)(((unsigned long long)a * b) >> 32);
}
// CUDA's min/max work on any arithmetic mix, like the device library's overloads.
template <class A, class B, class = std::enable_if_t<std::is_arithmetic_v<A> && std::is_arithmetic_v<B>>>
__forceinline__ std::common_type_t<A, B> min(A a, B b) {
    using C = std::common_type_t<A, B>;
    return (C)b < (C)a ? (C)b : (C)a;
}
template <class A, class B, class = std::enable_if_t<std::is_arithmetic_v<A> && std::is_arithmetic_v<B>>>
__forceinline__ std::common_type_t<A, B> max(A a, B b) {
    using C = std::common_type_t<A, B>;
    return (C)a < (C)b ? (C)b : (C)a;
}
#ifndef CUDART_INF_F
#define CUDART_INF_F INFINITY
#endif

// ---- launch glue used by the generated entry points -----------------------------------------
namespace pl {
template <class... P, size_t... I>
inline void invoke_impl(void (*f)(P...), void** a, std::index_sequence<I...>) {
    f(*static_cast<std::remove_cv_t<std::remove_reference_t<P>>*>(a[I])...);
}
template <class... P>
inline void invoke(void (*f)(P...), void** a) { invoke_impl(f, a, std::index_sequence_for<P...>{}); }

// ParamInfo (a parameter's or global's type, as the executor reads it): pl_abi.h.
template <class T> constexpr const char* pretty() { return __PRETTY_FUNCTION__; }
template <class T> inline void type_name(char* out, size_t n) {
    const char* s = pretty<T>();  // "... [with T = const float*]" (GCC), "... [T = const float *]"
    const char* at = std::strstr(s, "T = ");
    const char* end = std::strrchr(s, ']');
    size_t k = 0;
    if (at && end && end > at)
        for (at += 4; at < end && k + 1 < n; ++at) out[k++] = *at;
    out[k] = 0;
}
template <class E> inline void elem_code(char* out) {
    out[0] = 0;
    if constexpr (std::is_enum_v<E>) {
        elem_code<std::underlying_type_t<E>>(out);
    } else if constexpr (std::is_same_v<E, bool>) {
        std::strcpy(out, "b1");
    } else if constexpr (std::is_floating_point_v<E>) {
        std::snprintf(out, 8, "f%d", (int)sizeof(E));
    } else if constexpr (std::is_integral_v<E>) {
        std::snprintf(out, 8, "%c%d", std::is_signed_v<E> ? 'i' : 'u', (int)sizeof(E));
    } else if constexpr (numpy_code<E>::v != nullptr) {
        std::snprintf(out, 8, "%s", numpy_code<E>::v);
    }
}
template <class P> inline void describe_one(ParamInfo* o) {
    using V = std::remove_cvref_t<P>;
    using E0 = std::conditional_t<std::is_pointer_v<V>, std::remove_pointer_t<V>, V>;
    using E = std::remove_cv_t<E0>;
    *o = ParamInfo{};
    o->pointer = std::is_pointer_v<V>;
    o->is_const = std::is_const_v<E0>;
    type_name<P>(o->name, sizeof o->name);
    if constexpr (!std::is_void_v<E> && !std::is_function_v<E>) {
        o->size = o->elem_size = o->total = sizeof(E);
        o->is_class = std::is_class_v<E>;
        if constexpr (vec_info<E>::lanes > 0) {
            o->lanes = vec_info<E>::lanes;
            o->elem_size = sizeof(typename vec_info<E>::elem);
            elem_code<typename vec_info<E>::elem>(o->code);
        } else {
            elem_code<E>(o->code);
        }
    }
}
template <class... P> inline int describe(void (*)(P...), ParamInfo* out, int max) {
    int i = 0;
    ((i < max ? describe_one<P>(&out[i]) : void(), ++i), ...);
    return (int)sizeof...(P);
}
template <class G> inline void* describe_global(G& g, ParamInfo* info) {
    describe_one<std::remove_all_extents_t<G>>(info);
    info->total = sizeof(G);
    info->pointer = 0;
    return (void*)&g;
}
}  // namespace pl

// ---- inline PTX: what pagedlab/cuda/ptx.py rewrites `asm` statements into ---------------------
#include "pl_ptx.h"

// ---- memcpy / memmove / memset into an object whose size the compiler knows ------------------
// A copy past the end of a local array overwrites the fiber's stack (its saved registers): the
// crash came later, as a "misaligned access" somewhere else. The size is checked at the call
// instead (free when the compiler can prove it fits) and reported as the out-of-bounds write it
// is, with the object and the line. Macros, so `std::memcpy` is checked as well.
namespace pl {
inline void copy_bounds(size_t n, size_t cap, int line, const char* fn, const char* dst) {
    if (cap == (size_t)-1 || n <= cap) return;
    char msg[256];
    std::snprintf(msg, sizeof msg, "out-of-bounds write: %s of %zu bytes into `%s`, which has %zu bytes", fn, n,
                  dst[0] == '&' ? dst + 1 : dst, cap);
    pl_trap(line, msg);
}
}  // namespace pl
inline void* pl_memcpy_checked(void* d, const void* s, size_t n, size_t cap, int line, const char* dst) {
    pl::copy_bounds(n, cap, line, "memcpy", dst);
    return std::memcpy(d, s, n);
}
inline void* pl_memmove_checked(void* d, const void* s, size_t n, size_t cap, int line, const char* dst) {
    pl::copy_bounds(n, cap, line, "memmove", dst);
    return std::memmove(d, s, n);
}
inline void* pl_memset_checked(void* d, int c, size_t n, size_t cap, int line, const char* dst) {
    pl::copy_bounds(n, cap, line, "memset", dst);
    return std::memset(d, c, n);
}
namespace std {
using ::pl_memcpy_checked;
using ::pl_memmove_checked;
using ::pl_memset_checked;
}  // namespace std
#define memcpy(d, s, n) pl_memcpy_checked((d), (s), (n), __builtin_object_size((d), 0), __LINE__, #d)
#define memmove(d, s, n) pl_memmove_checked((d), (s), (n), __builtin_object_size((d), 0), __LINE__, #d)
#define memset(d, c, n) pl_memset_checked((d), (c), (n), __builtin_object_size((d), 0), __LINE__, #d)

// ---- collapsed kernels (collapse.py): the helpers of a block run as loops over thread ids ----
namespace pl {
inline size_t cox_round(size_t n) { return (n + 63) & ~(size_t)63; }
// One allocation per block for every variable that lives across a barrier or warp operation,
// one element per thread.
inline char* cox_frame(int nt, int n, const size_t* sizes) {
    size_t total = 64;
    for (int i = 0; i < n; ++i) total += cox_round(sizes[i] * (size_t)nt);
    return (char*)::operator new(total, std::align_val_t{64});
}
inline void cox_free(char* p) { ::operator delete(p, std::align_val_t{64}); }
// The thread a shuffle reads, as the runtime's complete_warp_op picks it (full warps only).
inline int cox_src(int kind, int t, int arg, int width) {
    int lane = t & 31, base = lane & ~(width - 1), src = lane;
    switch (kind) {
        case SHFL_IDX: src = base + (arg & (width - 1)); break;
        case SHFL_UP: src = (lane - base) >= arg ? lane - arg : lane; break;
        case SHFL_DOWN: src = (lane - base) + arg < width ? lane + arg : lane; break;
        default: src = lane ^ arg; if (src < base || src >= base + width) src = lane; break;
    }
    if (src < 0 || src > 31) src = lane;
    return (t & ~31) + src;
}
// The canary right past shared_mem intact in every dynamic shared array (the fibers' check
// at a switch, inline); false: ask pl_cox_smem, which reports.
inline bool cox_guard_ok(const CoxGuard* g) {
    if (g->n <= 0) return g->n == 0;
    for (int i = 0; i < g->n; ++i) {
        uint64_t x = 0;
        for (int k = 0; k < 8; ++k) {
            uint64_t a, b;
            __builtin_memcpy(&a, g->at[i] + 8 * k, 8);
            __builtin_memcpy(&b, g->pattern + 8 * k, 8);
            x |= a ^ b;
        }
        if (x) return false;
    }
    return true;
}
inline unsigned cox_vote(int kind, const unsigned* pred, int t) {
    const unsigned* w = pred + (t & ~31);
    unsigned bits = 0;
    for (int l = 0; l < 32; ++l) bits |= (w[l] ? 1u : 0u) << l;
    if (kind == ANY) return bits != 0;
    if (kind == ALL) return bits == 0xffffffffu;
    return bits;
}
}  // namespace pl
