// pagedlab CPU executor: <cooperative_groups.h>. Groups are views of the block's threads; their
// operations go through the same exact rendezvous as __syncthreads() and the warp intrinsics, so
// a tile operation that not every lane of the tile reaches is reported, never papered over.
// A tile is at most a warp (1, 2, 4, 8, 16 or 32 threads). Grid-wide sync is not supported: the
// CPU runs blocks a few at a time, so a grid barrier cannot be exact (it stops the launch).
#pragma once
#include <source_location>
#include <type_traits>
#include "vector_types.h"

namespace cooperative_groups {
namespace details {
using where = std::source_location;
inline unsigned block_rank() {
    return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}
inline unsigned block_size() { return blockDim.x * blockDim.y * blockDim.z; }
inline bool pow2_tile(unsigned n) { return n >= 1 && n <= 32 && (n & (n - 1)) == 0; }
}  // namespace details

class thread_block {
public:
    void sync(details::where at = details::where::current()) const { pl_syncthreads(at.line()); }
    unsigned thread_rank() const { return details::block_rank(); }
    unsigned size() const { return details::block_size(); }
    unsigned num_threads() const { return details::block_size(); }
    dim3 group_index() const { return dim3(blockIdx.x, blockIdx.y, blockIdx.z); }
    dim3 thread_index() const { return dim3(threadIdx.x, threadIdx.y, threadIdx.z); }
    dim3 group_dim() const { return blockDim; }
    dim3 dim_threads() const { return blockDim; }
    bool is_valid() const { return true; }
};
inline thread_block this_thread_block() { return thread_block(); }

// A generic group: the whole block (`thread_group g = this_thread_block();`), or a
// power-of-two slice of one warp, `n` consecutive threads by block rank.
class thread_group {
public:
    explicit thread_group(unsigned n, details::where at = details::where::current()) : n_(n) {
        if (!details::pow2_tile(n))
            pl_trap(at.line(), "tiled_partition: the CPU executor supports tiles of 1, 2, 4, 8, 16 or "
                               "32 threads (a power of two, at most a warp)");
    }
    thread_group(const thread_block&) : n_(details::block_size()), block_(true) {}
    unsigned thread_rank() const { return block_ ? details::block_rank() : details::block_rank() % n_; }
    unsigned size() const { return n_; }
    unsigned num_threads() const { return n_; }
    unsigned meta_group_rank() const { return block_ ? 0 : details::block_rank() / n_; }
    unsigned meta_group_size() const { return block_ ? 1 : (details::block_size() + n_ - 1) / n_; }
    bool is_valid() const { return true; }
    // This tile's lanes within its warp.
    unsigned lane_mask() const {
        unsigned lane = details::block_rank() % 32, base = lane / n_ * n_;
        return n_ == 32 ? 0xffffffffu : ((1u << n_) - 1u) << base;
    }
    void sync(details::where at = details::where::current()) const {
        if (block_) pl_syncthreads(at.line());
        else (void)pl_warp_op(at.line(), pl::WARP_SYNC, lane_mask(), 0, 0, 32);
    }
    template <class T> T shfl(T v, int src, details::where at = details::where::current()) const {
        return pl::shfl(at.line(), pl::SHFL_IDX, lane_mask(), v, src, (int)n_);
    }
    template <class T> T shfl_down(T v, unsigned d, details::where at = details::where::current()) const {
        return pl::shfl(at.line(), pl::SHFL_DOWN, lane_mask(), v, (int)d, (int)n_);
    }
    template <class T> T shfl_up(T v, unsigned d, details::where at = details::where::current()) const {
        return pl::shfl(at.line(), pl::SHFL_UP, lane_mask(), v, (int)d, (int)n_);
    }
    template <class T> T shfl_xor(T v, unsigned m, details::where at = details::where::current()) const {
        return pl::shfl(at.line(), pl::SHFL_XOR, lane_mask(), v, (int)m, (int)n_);
    }
    int any(int p, details::where at = details::where::current()) const {
        return (int)pl_warp_op(at.line(), pl::ANY, lane_mask(), p ? 1 : 0, 0, 32);
    }
    int all(int p, details::where at = details::where::current()) const {
        return (int)pl_warp_op(at.line(), pl::ALL, lane_mask(), p ? 1 : 0, 0, 32);
    }
    // Bit k is the tile's thread k.
    unsigned ballot(int p, details::where at = details::where::current()) const {
        unsigned bits = (unsigned)pl_warp_op(at.line(), pl::BALLOT, lane_mask(), p ? 1 : 0, 0, 32);
        return n_ == 32 ? bits : bits >> (details::block_rank() % 32 / n_ * n_);
    }

private:
    unsigned n_;
    bool block_ = false;
};

template <unsigned N, class Parent = void>
class thread_block_tile : public thread_group {
    static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0,
                  "thread_block_tile<N>: the CPU executor supports N = 1, 2, 4, 8, 16 or 32");
public:
    thread_block_tile() : thread_group(N) {}
    static constexpr unsigned num_threads() { return N; }
    static constexpr unsigned size() { return N; }
};

// The parent type is not kept (a tile of a tile is the same slice of the warp).
template <unsigned N, class P>
thread_block_tile<N> tiled_partition(const P&) { return thread_block_tile<N>(); }
template <class P>
thread_group tiled_partition(const P&, unsigned n, details::where at = details::where::current()) {
    return thread_group(n, at);
}

// The lanes of a warp that reach the same coalesced_threads() call together: the runtime lets
// every other thread of the block run until it waits elsewhere, then groups the lanes that wait
// at this call, as a GPU's converged lanes.
class coalesced_group {
public:
    explicit coalesced_group(unsigned mask) : mask_(mask) {}
    unsigned size() const { return (unsigned)std::popcount(mask_); }
    unsigned num_threads() const { return size(); }
    unsigned thread_rank() const {
        unsigned lane = details::block_rank() % 32;
        return (unsigned)std::popcount(mask_ & ((1u << lane) - 1u));
    }
    unsigned meta_group_rank() const { return 0; }
    unsigned meta_group_size() const { return 1; }
    void sync(details::where at = details::where::current()) const {
        (void)pl_warp_op(at.line(), pl::WARP_SYNC, mask_, 0, 0, 32);
    }
    template <class T> T shfl(T v, int rank, details::where at = details::where::current()) const {
        return pl::shfl(at.line(), pl::SHFL_IDX, mask_, v, lane_of((unsigned)rank), 32);
    }
    template <class T> T shfl_down(T v, unsigned d, details::where at = details::where::current()) const {
        unsigned r = thread_rank() + d;
        return pl::shfl(at.line(), pl::SHFL_IDX, mask_, v, lane_of(r < size() ? r : thread_rank()), 32);
    }
    template <class T> T shfl_up(T v, unsigned d, details::where at = details::where::current()) const {
        unsigned r = thread_rank();
        return pl::shfl(at.line(), pl::SHFL_IDX, mask_, v, lane_of(r >= d ? r - d : r), 32);
    }
    int any(int p, details::where at = details::where::current()) const {
        return (int)pl_warp_op(at.line(), pl::ANY, mask_, p ? 1 : 0, 0, 32);
    }
    int all(int p, details::where at = details::where::current()) const {
        return (int)pl_warp_op(at.line(), pl::ALL, mask_, p ? 1 : 0, 0, 32);
    }
    // Bit k is the group's thread of rank k.
    unsigned ballot(int p, details::where at = details::where::current()) const {
        unsigned bits = (unsigned)pl_warp_op(at.line(), pl::BALLOT, mask_, p ? 1 : 0, 0, 32), out = 0;
        for (unsigned r = 0, m = mask_; m; ++r, m &= m - 1)
            if (bits >> std::countr_zero(m) & 1) out |= 1u << r;
        return out;
    }
    unsigned lane_mask() const { return mask_; }

private:
    int lane_of(unsigned rank) const {
        unsigned m = mask_;
        for (unsigned r = 0; r < rank && m; ++r) m &= m - 1;
        return m ? std::countr_zero(m) : -1;
    }
    unsigned mask_;
};
inline coalesced_group coalesced_threads(details::where at = details::where::current()) {
    return coalesced_group((unsigned)pl_warp_op(at.line(), pl::COALESCE, 0xffffffffu, 0, 0, 32));
}

// labeled_partition: the lanes of a tile or coalesced group with the same label, as a coalesced
// group (the samples' warpAggregatedAtomicsCG); binary_partition: the same for a predicate.
template <class Label>
inline coalesced_group labeled_partition(const coalesced_group& g, Label label,
                                         details::where at = details::where::current()) {
    static_assert(std::is_integral_v<Label>, "labeled_partition takes an int or unsigned label");
    return coalesced_group(pl::match_any(at.line(), g.lane_mask(), label));
}
template <unsigned N, class P, class Label>
inline coalesced_group labeled_partition(const thread_block_tile<N, P>& g, Label label,
                                         details::where at = details::where::current()) {
    static_assert(std::is_integral_v<Label>, "labeled_partition takes an int or unsigned label");
    return coalesced_group(pl::match_any(at.line(), g.lane_mask(), label));
}
template <class G>
inline coalesced_group binary_partition(const G& g, bool pred, details::where at = details::where::current()) {
    return labeled_partition(g, (int)pred, at);
}

class grid_group {
public:
    unsigned long long thread_rank() const {
        unsigned long long b = blockIdx.x + (unsigned long long)gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
        return b * details::block_size() + details::block_rank();
    }
    unsigned long long size() const {
        return (unsigned long long)gridDim.x * gridDim.y * gridDim.z * details::block_size();
    }
    unsigned long long num_threads() const { return size(); }
    bool is_valid() const { return true; }
    dim3 group_dim() const { return gridDim; }
    void sync(details::where at = details::where::current()) const {
        pl_trap(at.line(), "this_grid().sync() is not supported by the CPU executor (blocks run a few "
                           "at a time, so a grid-wide barrier cannot be exact): split the kernel into "
                           "two launches at this point");
    }
};
inline grid_group this_grid() { return grid_group(); }

template <class G> void sync(const G& g, details::where at = details::where::current()) { g.sync(at); }
template <class G> unsigned thread_rank(const G& g) { return (unsigned)g.thread_rank(); }
}  // namespace cooperative_groups
