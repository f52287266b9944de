// pagedlab CPU executor: CUB's block and warp primitives (BlockReduce, BlockScan, BlockLoad,
// BlockStore, WarpReduce), with CUB's API and its temporary-storage rules.
//
// Each block primitive works through its TempStorage in __shared__ memory as CUB's algorithms
// do (warp partials written, a barrier, partials read), and reads it again after its last
// barrier. So a kernel that reuses a TempStorage without a __syncthreads() in between, which
// CUB's documentation forbids, has a real shared-memory race that check="race" reports, with
// the lines of the two calls. Results are where CUB defines them (a block reduction's in thread
// 0, a warp reduction's in lane 0); other threads get partial values, as on a GPU.
// WarpReduce uses shuffles only (CUB's SHFL path), so its TempStorage is never touched.
// The reduction order differs from a GPU's, so float results may differ in the last bits.
#pragma once
#include <source_location>
#include <type_traits>

namespace cub {
using pl_where = std::source_location;

struct Sum {
    template <class T> __forceinline__ T operator()(const T& a, const T& b) const { return a + b; }
};
struct Max {
    template <class T> __forceinline__ T operator()(const T& a, const T& b) const { return a < b ? b : a; }
};
struct Min {
    template <class T> __forceinline__ T operator()(const T& a, const T& b) const { return b < a ? b : a; }
};
struct NullType {};

enum BlockReduceAlgorithm { BLOCK_REDUCE_RAKING_COMMUTATIVE_ONLY, BLOCK_REDUCE_RAKING,
                            BLOCK_REDUCE_WARP_REDUCTIONS };
enum BlockScanAlgorithm { BLOCK_SCAN_RAKING, BLOCK_SCAN_RAKING_MEMOIZE, BLOCK_SCAN_WARP_SCANS };
enum BlockLoadAlgorithm { BLOCK_LOAD_DIRECT, BLOCK_LOAD_STRIPED, BLOCK_LOAD_VECTORIZE,
                          BLOCK_LOAD_TRANSPOSE, BLOCK_LOAD_WARP_TRANSPOSE,
                          BLOCK_LOAD_WARP_TRANSPOSE_TIMESLICED };
enum BlockStoreAlgorithm { BLOCK_STORE_DIRECT, BLOCK_STORE_STRIPED, BLOCK_STORE_VECTORIZE,
                           BLOCK_STORE_TRANSPOSE, BLOCK_STORE_WARP_TRANSPOSE,
                           BLOCK_STORE_WARP_TRANSPOSE_TIMESLICED };

namespace detail {
template <int BX, int BY, int BZ> __forceinline__ int linear_tid() {
    return (int)threadIdx.x + (BY > 1 || BZ > 1 ? BX * ((int)threadIdx.y + BY * (int)threadIdx.z) : 0);
}
// Lanes of warp `warp` that exist in a block of `threads` threads.
__forceinline__ unsigned warp_lanes(int threads, int warp) {
    int n = threads - warp * 32;
    return n >= 32 ? 0xffffffffu : (1u << n) - 1u;
}
__forceinline__ unsigned detail_lane() {
    return ((unsigned)threadIdx.x + blockDim.x * ((unsigned)threadIdx.y + blockDim.y * (unsigned)threadIdx.z)) % 32u;
}
// Inclusive reduction of a warp's (first `valid`) lanes down to lane 0, by shuffles.
template <class T, class Op>
__forceinline__ T warp_reduce(T v, Op op, unsigned mask, int width, int valid, int line) {
    int lane = (int)(detail_lane()) % width;
    for (int off = 1; off < width; off <<= 1) {
        T other = pl::shfl(line, pl::SHFL_DOWN, mask, v, off, width);
        if (lane + off < valid) v = op(v, other);
    }
    return v;
}
}  // namespace detail

// ---- BlockReduce ----------------------------------------------------------------------------------
template <class T, int BLOCK_DIM_X, BlockReduceAlgorithm ALGORITHM = BLOCK_REDUCE_WARP_REDUCTIONS,
          int BLOCK_DIM_Y = 1, int BLOCK_DIM_Z = 1, int LEGACY_PTX_ARCH = 0>
class BlockReduce {
    static constexpr int BLOCK_THREADS = BLOCK_DIM_X * BLOCK_DIM_Y * BLOCK_DIM_Z;
    static constexpr int WARPS = (BLOCK_THREADS + 31) / 32;
    struct Storage { T warp_aggregates[WARPS]; };

public:
    struct TempStorage : Storage {};
    __forceinline__ explicit BlockReduce(TempStorage& temp) : temp_(temp) {}

    template <class Op>
    __forceinline__ T Reduce(T input, Op op, pl_where at = pl_where::current()) {
        return reduce(input, op, BLOCK_THREADS, at.line());
    }
    template <class Op>
    __forceinline__ T Reduce(T input, Op op, int num_valid, pl_where at = pl_where::current()) {
        return reduce(input, op, num_valid, at.line());
    }
    template <int N, class Op>
    __forceinline__ T Reduce(T (&inputs)[N], Op op, pl_where at = pl_where::current()) {
        T v = inputs[0];
        for (int i = 1; i < N; ++i) v = op(v, inputs[i]);
        return reduce(v, op, BLOCK_THREADS, at.line());
    }
    __forceinline__ T Sum(T input, pl_where at = pl_where::current()) {
        return reduce(input, cub::Sum(), BLOCK_THREADS, at.line());
    }
    __forceinline__ T Sum(T input, int num_valid, pl_where at = pl_where::current()) {
        return reduce(input, cub::Sum(), num_valid, at.line());
    }
    template <int N>
    __forceinline__ T Sum(T (&inputs)[N], pl_where at = pl_where::current()) {
        return Reduce(inputs, cub::Sum(), at);
    }

private:
    template <class Op> __forceinline__ T reduce(T input, Op op, int num_valid, int line) {
        int tid = detail::linear_tid<BLOCK_DIM_X, BLOCK_DIM_Y, BLOCK_DIM_Z>();
        int warp = tid / 32, lane = tid % 32;
        int valid_here = num_valid - warp * 32;
        valid_here = valid_here < 0 ? 0 : valid_here > 32 ? 32 : valid_here;
        T v = detail::warp_reduce(input, op, detail::warp_lanes(BLOCK_THREADS, warp), 32, valid_here, line);
        if (lane == 0) temp_.warp_aggregates[warp] = v;
        pl_syncthreads(line);
        if (!tid) {  // thread 0 folds the warps' partials, in order
            int used = (num_valid + 31) / 32;
            for (int w = 1; w < used && w < WARPS; ++w) v = op(v, temp_.warp_aggregates[w]);
        }
        return v;
    }
    TempStorage& temp_;
};

// ---- BlockScan ----------------------------------------------------------------------------------------
template <class T, int BLOCK_DIM_X, BlockScanAlgorithm ALGORITHM = BLOCK_SCAN_RAKING,
          int BLOCK_DIM_Y = 1, int BLOCK_DIM_Z = 1, int LEGACY_PTX_ARCH = 0>
class BlockScan {
    static constexpr int BLOCK_THREADS = BLOCK_DIM_X * BLOCK_DIM_Y * BLOCK_DIM_Z;
    static constexpr int WARPS = (BLOCK_THREADS + 31) / 32;
    struct Storage { T warp_aggregates[WARPS]; };

public:
    struct TempStorage : Storage {};
    __forceinline__ explicit BlockScan(TempStorage& temp) : temp_(temp) {}

    // ---- one item per thread
    __forceinline__ void ExclusiveSum(T input, T& output, pl_where at = pl_where::current()) {
        T agg;
        scan(input, output, agg, cub::Sum(), true, T(), true, at.line());
    }
    __forceinline__ void ExclusiveSum(T input, T& output, T& block_aggregate, pl_where at = pl_where::current()) {
        scan(input, output, block_aggregate, cub::Sum(), true, T(), true, at.line());
    }
    __forceinline__ void InclusiveSum(T input, T& output, pl_where at = pl_where::current()) {
        T agg;
        scan(input, output, agg, cub::Sum(), false, T(), false, at.line());
    }
    __forceinline__ void InclusiveSum(T input, T& output, T& block_aggregate, pl_where at = pl_where::current()) {
        scan(input, output, block_aggregate, cub::Sum(), false, T(), false, at.line());
    }
    template <class Op>
    __forceinline__ void ExclusiveScan(T input, T& output, T initial, Op op, pl_where at = pl_where::current()) {
        T agg;
        scan(input, output, agg, op, true, initial, true, at.line());
    }
    template <class Op>
    __forceinline__ void ExclusiveScan(T input, T& output, T initial, Op op, T& block_aggregate,
                                       pl_where at = pl_where::current()) {
        scan(input, output, block_aggregate, op, true, initial, true, at.line());
    }
    template <class Op>
    __forceinline__ void InclusiveScan(T input, T& output, Op op, pl_where at = pl_where::current()) {
        T agg;
        scan(input, output, agg, op, false, T(), false, at.line());
    }
    template <class Op>
    __forceinline__ void InclusiveScan(T input, T& output, Op op, T& block_aggregate, pl_where at = pl_where::current()) {
        scan(input, output, block_aggregate, op, false, T(), false, at.line());
    }
    // ---- ITEMS_PER_THREAD consecutive items per thread (a blocked arrangement)
    template <int N>
    __forceinline__ void ExclusiveSum(T (&input)[N], T (&output)[N], pl_where at = pl_where::current()) {
        T agg;
        items(input, output, agg, cub::Sum(), true, T(), true, at.line());
    }
    template <int N>
    __forceinline__ void ExclusiveSum(T (&input)[N], T (&output)[N], T& block_aggregate,
                                      pl_where at = pl_where::current()) {
        items(input, output, block_aggregate, cub::Sum(), true, T(), true, at.line());
    }
    template <int N>
    __forceinline__ void InclusiveSum(T (&input)[N], T (&output)[N], pl_where at = pl_where::current()) {
        T agg;
        items(input, output, agg, cub::Sum(), false, T(), false, at.line());
    }
    template <int N>
    __forceinline__ void InclusiveSum(T (&input)[N], T (&output)[N], T& block_aggregate,
                                      pl_where at = pl_where::current()) {
        items(input, output, block_aggregate, cub::Sum(), false, T(), false, at.line());
    }
    template <int N, class Op>
    __forceinline__ void ExclusiveScan(T (&input)[N], T (&output)[N], T initial, Op op, T& block_aggregate,
                                       pl_where at = pl_where::current()) {
        items(input, output, block_aggregate, op, true, initial, true, at.line());
    }
    template <int N, class Op>
    __forceinline__ void InclusiveScan(T (&input)[N], T (&output)[N], Op op, T& block_aggregate,
                                       pl_where at = pl_where::current()) {
        items(input, output, block_aggregate, op, false, T(), false, at.line());
    }
    template <int N, class Op>
    __forceinline__ void ExclusiveScan(T (&input)[N], T (&output)[N], T initial, Op op,
                                       pl_where at = pl_where::current()) {
        T agg;
        items(input, output, agg, op, true, initial, true, at.line());
    }
    template <int N, class Op>
    __forceinline__ void InclusiveScan(T (&input)[N], T (&output)[N], Op op, pl_where at = pl_where::current()) {
        T agg;
        items(input, output, agg, op, false, T(), false, at.line());
    }

private:
    // Warp-level inclusive scans by shuffles, the warps' totals through TempStorage.
    template <class Op>
    __forceinline__ void scan(T input, T& output, T& aggregate, Op op, bool exclusive, T initial,
                              bool seeded, int line) {
        int tid = detail::linear_tid<BLOCK_DIM_X, BLOCK_DIM_Y, BLOCK_DIM_Z>();
        int warp = tid / 32, lane = tid % 32;
        unsigned mask = detail::warp_lanes(BLOCK_THREADS, warp);
        int lanes = std::popcount(mask);
        T inc = input;
        for (int off = 1; off < 32; off <<= 1) {
            T up = pl::shfl(line, pl::SHFL_UP, mask, inc, off, 32);
            if (lane >= off) inc = op(up, inc);
        }
        T before = pl::shfl(line, pl::SHFL_UP, mask, inc, 1, 32);  // this lane's warp-exclusive
        if (lane == lanes - 1) temp_.warp_aggregates[warp] = inc;
        pl_syncthreads(line);
        T prefix{};
        bool have = false;
        for (int w = 0; w < WARPS; ++w) {  // every thread folds the totals of the warps before it
            T t = temp_.warp_aggregates[w];
            if (w < warp) { prefix = have ? op(prefix, t) : t; have = true; }
            aggregate = w == 0 ? t : op(aggregate, t);
        }
        if (seeded) {
            prefix = have ? op(initial, prefix) : initial;
            have = true;
            aggregate = op(initial, aggregate);
        }
        if (exclusive) {
            if (lane == 0) output = have ? prefix : T();
            else output = have ? op(prefix, before) : before;
        } else {
            output = have ? op(prefix, inc) : inc;
        }
    }
    template <int N, class Op>
    __forceinline__ void items(T (&input)[N], T (&output)[N], T& aggregate, Op op, bool exclusive,
                               T initial, bool seeded, int line) {
        T total = input[0];
        for (int i = 1; i < N; ++i) total = op(total, input[i]);
        T prefix;
        scan(total, prefix, aggregate, op, true, initial, seeded, line);
        int tid = detail::linear_tid<BLOCK_DIM_X, BLOCK_DIM_Y, BLOCK_DIM_Z>();
        bool have = seeded || tid > 0;
        T run = prefix;
        for (int i = 0; i < N; ++i) {
            T x = input[i];
            if (exclusive) { output[i] = have ? run : T(); run = have ? op(run, x) : x; }
            else { run = have ? op(run, x) : x; output[i] = run; }
            have = true;
        }
    }
    TempStorage& temp_;
};

// ---- BlockLoad / BlockStore -------------------------------------------------------------------------------
// DIRECT, VECTORIZE, TRANSPOSE and WARP_TRANSPOSE give the blocked arrangement (thread t holds
// items t*N .. t*N+N-1), STRIPED the striped one (item i of thread t is i*BLOCK_THREADS + t).
// The TRANSPOSE variants exchange through TempStorage as CUB's BlockExchange does.
template <class T, int BLOCK_DIM_X, int ITEMS_PER_THREAD, BlockLoadAlgorithm ALGORITHM = BLOCK_LOAD_DIRECT,
          int BLOCK_DIM_Y = 1, int BLOCK_DIM_Z = 1, int LEGACY_PTX_ARCH = 0>
class BlockLoad {
    static constexpr int BLOCK_THREADS = BLOCK_DIM_X * BLOCK_DIM_Y * BLOCK_DIM_Z;
    static constexpr bool EXCHANGE = ALGORITHM == BLOCK_LOAD_TRANSPOSE || ALGORITHM == BLOCK_LOAD_WARP_TRANSPOSE ||
                                     ALGORITHM == BLOCK_LOAD_WARP_TRANSPOSE_TIMESLICED;
    struct Storage { T items[EXCHANGE ? BLOCK_THREADS * ITEMS_PER_THREAD : 1]; };

public:
    struct TempStorage : Storage {};
    __forceinline__ BlockLoad() : temp_(nullptr) {}
    __forceinline__ explicit BlockLoad(TempStorage& temp) : temp_(&temp) {}

    template <class It>
    __forceinline__ void Load(It block_itr, T (&items)[ITEMS_PER_THREAD], pl_where at = pl_where::current()) {
        load(block_itr, items, BLOCK_THREADS * ITEMS_PER_THREAD, nullptr, at.line());
    }
    template <class It>
    __forceinline__ void Load(It block_itr, T (&items)[ITEMS_PER_THREAD], int valid_items,
                              pl_where at = pl_where::current()) {
        load(block_itr, items, valid_items, nullptr, at.line());
    }
    template <class It, class D>
    __forceinline__ void Load(It block_itr, T (&items)[ITEMS_PER_THREAD], int valid_items, D oob_default,
                              pl_where at = pl_where::current()) {
        T d = (T)oob_default;
        load(block_itr, items, valid_items, &d, at.line());
    }

private:
    template <class It>
    __forceinline__ void load(It itr, T (&items)[ITEMS_PER_THREAD], int valid, const T* oob, int line) {
        int tid = detail::linear_tid<BLOCK_DIM_X, BLOCK_DIM_Y, BLOCK_DIM_Z>();
        bool striped = ALGORITHM == BLOCK_LOAD_STRIPED || EXCHANGE;
        for (int i = 0; i < ITEMS_PER_THREAD; ++i) {
            int idx = striped ? i * BLOCK_THREADS + tid : tid * ITEMS_PER_THREAD + i;
            if (idx < valid) items[i] = itr[idx];
            else if (oob) items[i] = *oob;
        }
        if (!EXCHANGE) return;
        if (!temp_) pl_trap(line, "cub::BlockLoad with a TRANSPOSE algorithm needs its TempStorage");
        for (int i = 0; i < ITEMS_PER_THREAD; ++i) temp_->items[i * BLOCK_THREADS + tid] = items[i];
        pl_syncthreads(line);
        for (int i = 0; i < ITEMS_PER_THREAD; ++i) items[i] = temp_->items[tid * ITEMS_PER_THREAD + i];
    }
    TempStorage* temp_;
};

template <class T, int BLOCK_DIM_X, int ITEMS_PER_THREAD, BlockStoreAlgorithm ALGORITHM = BLOCK_STORE_DIRECT,
          int BLOCK_DIM_Y = 1, int BLOCK_DIM_Z = 1, int LEGACY_PTX_ARCH = 0>
class BlockStore {
    static constexpr int BLOCK_THREADS = BLOCK_DIM_X * BLOCK_DIM_Y * BLOCK_DIM_Z;
    static constexpr bool EXCHANGE = ALGORITHM == BLOCK_STORE_TRANSPOSE || ALGORITHM == BLOCK_STORE_WARP_TRANSPOSE ||
                                     ALGORITHM == BLOCK_STORE_WARP_TRANSPOSE_TIMESLICED;
    struct Storage { T items[EXCHANGE ? BLOCK_THREADS * ITEMS_PER_THREAD : 1]; };

public:
    struct TempStorage : Storage {};
    __forceinline__ BlockStore() : temp_(nullptr) {}
    __forceinline__ explicit BlockStore(TempStorage& temp) : temp_(&temp) {}

    template <class It>
    __forceinline__ void Store(It block_itr, T (&items)[ITEMS_PER_THREAD], pl_where at = pl_where::current()) {
        store(block_itr, items, BLOCK_THREADS * ITEMS_PER_THREAD, at.line());
    }
    template <class It>
    __forceinline__ void Store(It block_itr, T (&items)[ITEMS_PER_THREAD], int valid_items,
                               pl_where at = pl_where::current()) {
        store(block_itr, items, valid_items, at.line());
    }

private:
    template <class It>
    __forceinline__ void store(It itr, T (&items)[ITEMS_PER_THREAD], int valid, int line) {
        int tid = detail::linear_tid<BLOCK_DIM_X, BLOCK_DIM_Y, BLOCK_DIM_Z>();
        T local[ITEMS_PER_THREAD];
        for (int i = 0; i < ITEMS_PER_THREAD; ++i) local[i] = items[i];
        if (EXCHANGE) {  // blocked -> striped through TempStorage, then coalesced stores
            if (!temp_) pl_trap(line, "cub::BlockStore with a TRANSPOSE algorithm needs its TempStorage");
            for (int i = 0; i < ITEMS_PER_THREAD; ++i) temp_->items[tid * ITEMS_PER_THREAD + i] = local[i];
            pl_syncthreads(line);
            for (int i = 0; i < ITEMS_PER_THREAD; ++i) local[i] = temp_->items[i * BLOCK_THREADS + tid];
        }
        bool striped = ALGORITHM == BLOCK_STORE_STRIPED || EXCHANGE;
        for (int i = 0; i < ITEMS_PER_THREAD; ++i) {
            int idx = striped ? i * BLOCK_THREADS + tid : tid * ITEMS_PER_THREAD + i;
            if (idx < valid) itr[idx] = local[i];
        }
    }
    TempStorage* temp_;
};

// ---- WarpReduce ---------------------------------------------------------------------------------------------
template <class T, int LOGICAL_WARP_THREADS = 32, int LEGACY_PTX_ARCH = 0>
class WarpReduce {
    static_assert(LOGICAL_WARP_THREADS >= 1 && LOGICAL_WARP_THREADS <= 32 &&
                  (LOGICAL_WARP_THREADS & (LOGICAL_WARP_THREADS - 1)) == 0,
                  "cub::WarpReduce on the CPU executor: LOGICAL_WARP_THREADS a power of two up to 32");

public:
    struct TempStorage { NullType unused_; };
    __forceinline__ explicit WarpReduce(TempStorage&) {}

    template <class Op>
    __forceinline__ T Reduce(T input, Op op, pl_where at = pl_where::current()) {
        return reduce(input, op, LOGICAL_WARP_THREADS, at.line());
    }
    template <class Op>
    __forceinline__ T Reduce(T input, Op op, int valid_items, pl_where at = pl_where::current()) {
        return reduce(input, op, valid_items, at.line());
    }
    __forceinline__ T Sum(T input, pl_where at = pl_where::current()) {
        return reduce(input, cub::Sum(), LOGICAL_WARP_THREADS, at.line());
    }
    __forceinline__ T Sum(T input, int valid_items, pl_where at = pl_where::current()) {
        return reduce(input, cub::Sum(), valid_items, at.line());
    }

private:
    template <class Op> __forceinline__ T reduce(T input, Op op, int valid, int line) {
        unsigned lane = detail::detail_lane(), base = lane / LOGICAL_WARP_THREADS * LOGICAL_WARP_THREADS;
        unsigned mask = LOGICAL_WARP_THREADS == 32 ? 0xffffffffu
                                                   : ((1u << LOGICAL_WARP_THREADS) - 1u) << base;
        return detail::warp_reduce(input, op, mask & pl_activemask(), LOGICAL_WARP_THREADS, valid, line);
    }
};
}  // namespace cub
