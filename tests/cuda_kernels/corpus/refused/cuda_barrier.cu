// Double buffering with libcu++'s cuda::barrier (SGEMM_CUDA's style): refused by name.
#include <cuda/barrier>

__global__ void copy_tiles(float* out, const float* in, int n) {
    __shared__ cuda::barrier<cuda::thread_scope_block> bar;
    __shared__ float tile[256];
    if (threadIdx.x == 0) init(&bar, blockDim.x);
    __syncthreads();
    tile[threadIdx.x] = in[threadIdx.x];
    bar.arrive_and_wait();
    out[threadIdx.x] = tile[255 - threadIdx.x];
}
