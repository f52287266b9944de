// pagedlab CPU executor: <mma.h>, nvcuda::wmma emulated. A fragment holds its tile spread over
// the warp's 32 lanes, num_elements = (rows x cols) / 32 each, in an order of pagedlab's own:
// CUDA leaves the mapping of fragment elements to lanes unspecified, so code that only loads,
// stores, fills, multiplies and applies one operation to every x[i] runs right, and code that
// relies on one GPU's mapping gets wrong numbers here, as it would on another GPU.
// load/store/mma are warp-collective: every lane of the warp must call them (a lane that does
// not is reported like a missing __syncwarp()). mma_sync accumulates in float (double for
// double, int for 8-bit integers) in k order; a GPU's order is unspecified, so float results
// may differ in the last bits. tf32 inputs keep their top 10 mantissa bits, as tensor cores do.
#pragma once
#include <cstdint>
#include <cstring>
#include <source_location>
#include <type_traits>
#include "cuda_fp16.h"
#include "cuda_bf16.h"

namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
namespace precision {
struct tf32 {};
}  // namespace precision

namespace detail {
using where = std::source_location;
template <class Use, int M, int N, int K> struct dims;
template <int M, int N, int K> struct dims<matrix_a, M, N, K> { static constexpr int rows = M, cols = K; };
template <int M, int N, int K> struct dims<matrix_b, M, N, K> { static constexpr int rows = K, cols = N; };
template <int M, int N, int K> struct dims<accumulator, M, N, K> { static constexpr int rows = M, cols = N; };
template <class T> struct storage { using type = T; };
template <> struct storage<precision::tf32> { using type = float; };
template <int M, int N, int K> constexpr bool shape_ok() {
    return (M == 16 && N == 16 && K == 16) || (M == 32 && N == 8 && K == 16) || (M == 8 && N == 32 && K == 16) ||
           (M == 16 && N == 16 && K == 8) || (M == 8 && N == 8 && K == 4);
}
inline unsigned rank() { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }
inline void warp_sync(int line) { (void)pl_warp_op(line, pl::WARP_SYNC, 0xffffffffu, 0, 0, 32); }
inline float tf32_bits(float x) {  // what a tensor core reads of a tf32 operand
    uint32_t u = std::bit_cast<uint32_t>(x);
    return std::isfinite(x) ? std::bit_cast<float>(u & 0xffffe000u) : x;
}
template <class T> inline auto widen(T v) {
    if constexpr (std::is_same_v<T, double>) return v;
    else if constexpr (std::is_integral_v<T>) return (int)v;
    else return (float)v;
}
// The fragments taking part in one mma_sync, published per thread for the warp's lanes to read.
inline thread_local const void* pl_wmma_operands[1024][3];
}  // namespace detail

template <class Use, int M, int N, int K, class T, class Layout = void>
class fragment {
    static_assert(detail::shape_ok<M, N, K>(), "nvcuda::wmma on the CPU executor: shapes m16n16k16, "
                  "m32n8k16, m8n32k16 (half, bf16, 8-bit integers), m16n16k8 (tf32), m8n8k4 (double)");
    static constexpr int ROWS = detail::dims<Use, M, N, K>::rows, COLS = detail::dims<Use, M, N, K>::cols;

public:
    using element_type = typename detail::storage<T>::type;
    using storage_element_type = element_type;
    static constexpr int num_elements = ROWS * COLS / 32;
    static constexpr int rows = ROWS, cols = COLS;
    element_type x[num_elements];
};

template <class Use, int M, int N, int K, class T, class L, class V>
inline void fill_fragment(fragment<Use, M, N, K, T, L>& f, const V& v) {
    for (int i = 0; i < f.num_elements; ++i) f.x[i] = (typename fragment<Use, M, N, K, T, L>::element_type)v;
}

// Element i of this lane's share of the tile is tile element lane * num_elements + i, row-major.
namespace detail {
inline size_t offset(int idx, int cols, unsigned ldm, bool col) {
    int r = idx / cols, c = idx % cols;
    return col ? (size_t)c * ldm + r : (size_t)r * ldm + c;
}
template <class F, class P> inline void load(F& f, const P* ptr, unsigned ldm, bool col) {
    unsigned lane = rank() % 32u;
    for (int i = 0; i < F::num_elements; ++i)
        f.x[i] = (typename F::element_type)ptr[offset((int)lane * F::num_elements + i, F::cols, ldm, col)];
}
template <class F, class P> inline void store(P* ptr, const F& f, unsigned ldm, bool col) {
    unsigned lane = rank() % 32u;
    for (int i = 0; i < F::num_elements; ++i)
        ptr[offset((int)lane * F::num_elements + i, F::cols, ldm, col)] = (P)f.x[i];
}
}  // namespace detail

template <class Use, int M, int N, int K, class T, class L, class P>
inline void load_matrix_sync(fragment<Use, M, N, K, T, L>& f, const P* ptr, unsigned ldm,
                             detail::where at = detail::where::current()) {
    static_assert(!std::is_same_v<Use, accumulator>, "an accumulator's load_matrix_sync takes a layout_t");
    detail::warp_sync(at.line());
    detail::load(f, ptr, ldm, std::is_same_v<L, col_major>);
}
template <int M, int N, int K, class T, class P>
inline void load_matrix_sync(fragment<accumulator, M, N, K, T>& f, const P* ptr, unsigned ldm, layout_t layout,
                             detail::where at = detail::where::current()) {
    detail::warp_sync(at.line());
    detail::load(f, ptr, ldm, layout == mem_col_major);
}
template <int M, int N, int K, class T, class P>
inline void store_matrix_sync(P* ptr, const fragment<accumulator, M, N, K, T>& f, unsigned ldm, layout_t layout,
                              detail::where at = detail::where::current()) {
    detail::warp_sync(at.line());
    detail::store(ptr, f, ldm, layout == mem_col_major);
}

// D = A x B + C for the warp: each lane publishes where its fragments are, the lanes meet, each
// computes its own elements of D from every lane's shares, and they meet again before anyone
// may change a fragment another lane is still reading.
template <int M, int N, int K, class TA, class LA, class TB, class LB, class TC, class TD>
inline void mma_sync(fragment<accumulator, M, N, K, TD>& d, const fragment<matrix_a, M, N, K, TA, LA>& a,
                     const fragment<matrix_b, M, N, K, TB, LB>& b, const fragment<accumulator, M, N, K, TC>& c,
                     bool satf = false, detail::where at = detail::where::current()) {
    using FA = fragment<matrix_a, M, N, K, TA, LA>;
    using FB = fragment<matrix_b, M, N, K, TB, LB>;
    using FC = fragment<accumulator, M, N, K, TC>;
    using FD = fragment<accumulator, M, N, K, TD>;
    unsigned t = detail::rank(), lane = t % 32u, base = t - lane;
    detail::pl_wmma_operands[t][0] = &a;
    detail::pl_wmma_operands[t][1] = &b;
    detail::pl_wmma_operands[t][2] = &c;
    detail::warp_sync(at.line());
    auto elem_a = [&](int r, int k) {
        int idx = r * K + k;
        auto v = ((const FA*)detail::pl_wmma_operands[base + idx / FA::num_elements][0])->x[idx % FA::num_elements];
        if constexpr (std::is_same_v<TA, precision::tf32>) return detail::tf32_bits(v);
        else return detail::widen(v);
    };
    auto elem_b = [&](int k, int n) {
        int idx = k * N + n;
        auto v = ((const FB*)detail::pl_wmma_operands[base + idx / FB::num_elements][1])->x[idx % FB::num_elements];
        if constexpr (std::is_same_v<TB, precision::tf32>) return detail::tf32_bits(v);
        else return detail::widen(v);
    };
    typename FD::element_type out[FD::num_elements];
    for (int i = 0; i < FD::num_elements; ++i) {
        int idx = (int)lane * FD::num_elements + i, r = idx / N, n = idx % N;
        auto acc = detail::widen(((const FC*)detail::pl_wmma_operands[base + idx / FC::num_elements][2])
                                     ->x[idx % FC::num_elements]);
        for (int k = 0; k < K; ++k) acc += elem_a(r, k) * elem_b(k, n);
        if (satf && std::is_floating_point_v<decltype(acc)>) acc = std::isnan(acc) ? 0 : acc;
        out[i] = (typename FD::element_type)acc;
    }
    detail::warp_sync(at.line());
    for (int i = 0; i < FD::num_elements; ++i) d.x[i] = out[i];
}

inline float __float_to_tf32(float x) {  // cvt.rna.tf32.f32: nearest, ties away, 10 mantissa bits
    if (!std::isfinite(x)) return x;
    uint32_t u = std::bit_cast<uint32_t>(x);
    u = (u + 0x1000u) & 0xffffe000u;
    return std::bit_cast<float>(u);
}
}  // namespace wmma
}  // namespace nvcuda
