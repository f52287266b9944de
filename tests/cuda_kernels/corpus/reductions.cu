// pagedlab corpus: the sum of an array, in the five styles a CUDA course walks through.
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;

// 23. style 1: every thread adds into one global counter (atomics)
__global__ void reduce_atomic(float* total, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(total, x[i]);
}

// 24. style 2: a shared-memory tree, sequential addressing; one partial sum per block
__global__ void reduce_shared_tree(float* partial, const float* x, int n) {
    extern __shared__ float sdata[];
    unsigned t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    sdata[t] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) sdata[t] += sdata[t + s];
        __syncthreads();
    }
    if (t == 0) partial[blockIdx.x] = sdata[0];
}

// 25. style 3: warp shuffles, then one shared slot per warp
__device__ float warp_sum(float v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    return v;
}
__global__ void reduce_warp_shuffle(float* partial, const float* x, int n) {
    __shared__ float per_warp[32];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = warp_sum(i < n ? x[i] : 0.0f);
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) per_warp[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < (int)(blockDim.x / 32) ? per_warp[lane] : 0.0f;
        v = warp_sum(v);
        if (lane == 0) partial[blockIdx.x] = v;
    }
}

// 26. style 4: cooperative groups, cg::reduce over 32-thread tiles
__global__ void reduce_cg(float* partial, const float* x, int n) {
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> tile = cg::tiled_partition<32>(block);
    __shared__ float per_tile[32];
    unsigned i = blockIdx.x * blockDim.x + block.thread_rank();
    float v = cg::reduce(tile, i < (unsigned)n ? x[i] : 0.0f, cg::plus<float>());
    if (tile.thread_rank() == 0) per_tile[tile.meta_group_rank()] = v;
    block.sync();
    if (block.thread_rank() == 0) {
        float s = 0.0f;
        for (unsigned k = 0; k < tile.meta_group_size(); ++k) s += per_tile[k];
        partial[blockIdx.x] = s;
    }
}

// 27. style 5: thread coarsening (a grid-stride sum per thread), then a tree; doubles
__global__ void reduce_coarsened(double* partial, const float* x, int n) {
    __shared__ double sdata[256];
    double acc = 0.0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) acc += x[i];
    sdata[threadIdx.x] = acc;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sdata[threadIdx.x] += sdata[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = sdata[0];
}
