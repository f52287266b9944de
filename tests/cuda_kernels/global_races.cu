// Global-memory races, one kernel per class, each with its fixed version beside it.
// Written for the sanitizer's global-race tests (tests/test_cuda_global_races.py).

// Every warp reduces its values with shuffles, then lane 0 adds the warp's sum into out[0].
// The plain `+=` is a read-modify-write that another warp (or block) can interleave with.
__device__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
    return v;
}

__global__ void warps_add_plain(float* out, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = warp_sum(i < n ? x[i] : 0.f);
    if ((threadIdx.x & 31) == 0) out[0] += v;
}

__global__ void warps_add_atomic(float* out, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = warp_sum(i < n ? x[i] : 0.f);
    if ((threadIdx.x & 31) == 0) atomicAdd(out, v);
}

// In-place tree reduction over global memory inside one launch: each step reads a partner's
// element that a thread of another block wrote in the previous step; a barrier orders one block
// only, so the steps across blocks race.
__global__ void reduce_in_place(float* data, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    for (int stride = 1; stride < n; stride *= 2) {
        if (i % (2 * stride) == 0 && i + stride < n) data[i] += data[i + stride];
        __syncthreads();
    }
}

// The same reduction kept inside each block (every block owns its slice), then one partial
// per block: no element is touched by two blocks.
__global__ void reduce_in_place_per_block(float* data, float* partial, int n) {
    int base = blockIdx.x * blockDim.x, t = threadIdx.x;
    for (int stride = 1; stride < blockDim.x; stride *= 2) {
        if (t % (2 * stride) == 0 && t + stride < blockDim.x && base + t + stride < n)
            data[base + t] += data[base + t + stride];
        __syncthreads();
    }
    if (t == 0) partial[blockIdx.x] = data[base];
}

// A neighbour list built with plain increments: particles in one cell bump its count.
__global__ void neighbour_counts_plain(int* count, const int* cell_of, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) count[cell_of[i]] = count[cell_of[i]] + 1;
}

__global__ void neighbour_counts_atomic(int* count, const int* cell_of, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&count[cell_of[i]], 1);
}

// The last block to finish sums the per-block partials: each block publishes its partial with
// __threadfence() before taking a ticket from an atomic counter. Not a race.
__global__ void last_block_sums(float* partial, unsigned* ticket, float* total, const float* x, int n) {
    __shared__ bool last;
    __shared__ float part[32];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = warp_sum(i < n ? x[i] : 0.f);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.f;
        for (int w = 0; w < blockDim.x / 32; ++w) s += part[w];
        partial[blockIdx.x] = s;
        __threadfence();
        last = atomicInc(ticket, gridDim.x) == gridDim.x - 1;
    }
    __syncthreads();
    if (last && threadIdx.x == 0) {
        float s = 0.f;
        for (int b = 0; b < gridDim.x; ++b) s += partial[b];
        *total = s;
        *ticket = 0;
    }
}
