// pagedlab corpus: cooperative groups, one operation per kernel.
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cooperative_groups/scan.h>
namespace cg = cooperative_groups;

// 28. this_thread_block: rank, size, indices, sync
__global__ void cg_block(int* out) {
    cg::thread_block b = cg::this_thread_block();
    __shared__ int seen[128];
    seen[b.thread_rank()] = (int)b.thread_rank();
    b.sync();
    unsigned r = b.thread_rank();
    int base = (blockIdx.x * b.size() + r) * 4;
    out[base + 0] = seen[(r + 1) % b.size()];
    out[base + 1] = (int)b.size();
    out[base + 2] = (int)(b.group_index().x * 1000 + b.thread_index().y * 100 + b.thread_index().x);
    out[base + 3] = (int)(b.group_dim().x * b.group_dim().y);
}

// 29. tiled_partition<16>: ranks, shfl, shfl_down, shfl_up, shfl_xor
__global__ void cg_tile_shuffles(int* out) {
    cg::thread_block b = cg::this_thread_block();
    cg::thread_block_tile<16> t = cg::tiled_partition<16>(b);
    int v = (int)b.thread_rank() * 10;
    int base = b.thread_rank() * 6;
    out[base + 0] = t.shfl(v, 3);
    out[base + 1] = t.shfl_down(v, 2);
    out[base + 2] = t.shfl_up(v, 1);
    out[base + 3] = t.shfl_xor(v, 5);
    out[base + 4] = (int)(t.meta_group_rank() * 100 + t.thread_rank());
    out[base + 5] = (int)(t.meta_group_size() * 100 + t.size());
    t.sync();
}

// 30. tiled_partition(block, 8): a tile whose size is a run-time value
__global__ void cg_dynamic_tile(int* out, int tile_size) {
    cg::thread_block b = cg::this_thread_block();
    cg::thread_group g = cg::tiled_partition(b, tile_size);
    __shared__ int vals[64];
    vals[b.thread_rank()] = (int)b.thread_rank();
    g.sync();
    unsigned first = b.thread_rank() - g.thread_rank();
    int s = 0;
    for (unsigned k = 0; k < g.size(); ++k) s += vals[first + k];
    out[b.thread_rank()] = s;
}

// 31. tile votes: any, all, ballot
__global__ void cg_tile_votes(unsigned* out, const int* pred) {
    cg::thread_block_tile<8> t = cg::tiled_partition<8>(cg::this_thread_block());
    int p = pred[threadIdx.x];
    out[threadIdx.x * 3 + 0] = t.any(p);
    out[threadIdx.x * 3 + 1] = t.all(p);
    out[threadIdx.x * 3 + 2] = t.ballot(p);
}

// 32. cg::reduce with plus, less and greater on int tiles of 4
__global__ void cg_reduce_ops(int* out, const int* in) {
    cg::thread_block_tile<4> t = cg::tiled_partition<4>(cg::this_thread_block());
    int v = in[threadIdx.x];
    out[threadIdx.x * 3 + 0] = cg::reduce(t, v, cg::plus<int>());
    out[threadIdx.x * 3 + 1] = cg::reduce(t, v, cg::less<int>());
    out[threadIdx.x * 3 + 2] = cg::reduce(t, v, cg::greater<int>());
}

// 33. coalesced_threads: warp-aggregated atomics (one atomicAdd per warp for the selected lanes)
__global__ void cg_coalesced_filter(int* out, int* count, const int* in, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && in[i] > 0) {
        cg::coalesced_group g = cg::coalesced_threads();
        int slot;
        if (g.thread_rank() == 0) slot = atomicAdd(count, (int)g.size());
        slot = g.shfl(slot, 0) + (int)g.thread_rank();
        out[slot] = in[i];
    }
}

// 34. a grid-wide barrier: the CPU executor refuses it with a clear error
__global__ void cg_grid_sync(int* out) {
    cg::grid_group grid = cg::this_grid();
    out[grid.thread_rank()] = 1;
    grid.sync();
    out[grid.thread_rank()] += 1;
}

// 34b. a generic thread_group holding the whole block, passed to a device function
__device__ int group_sum(cg::thread_group g, int* scratch, int v) {
    unsigned r = g.thread_rank();
    for (unsigned half = g.size() / 2; half > 0; half /= 2) {
        scratch[r] = v;
        g.sync();
        if (r < half) v += scratch[r + half];
        g.sync();
    }
    return v;
}
__global__ void cg_generic_group(int* out, const int* in) {
    __shared__ int scratch[128];
    cg::thread_group g = cg::this_thread_block();
    int s = group_sum(g, scratch, in[blockIdx.x * blockDim.x + threadIdx.x]);
    if (g.thread_rank() == 0) out[blockIdx.x] = s;
}

// 34c. cg::inclusive_scan / exclusive_scan over 16-thread tiles
__global__ void cg_tile_scan(int* inc, int* exc, const int* in) {
    cg::thread_block_tile<16> t = cg::tiled_partition<16>(cg::this_thread_block());
    int v = in[threadIdx.x];
    inc[threadIdx.x] = cg::inclusive_scan(t, v);
    exc[threadIdx.x] = cg::exclusive_scan(t, v, cg::plus<int>());
}
