// Idioms of a fourth set of public kernels (CUDA samples, GEMM ladders, vLLM 2025, CUB's own
// examples), each written for pagedlab in the style the public code uses. tests/
// test_cuda_public_idioms.py runs them against numpy, with the checks off and with check="all".
#include <cooperative_groups.h>
#include <cuda_fp16.h>
namespace cg = cooperative_groups;

// ---- the type before __shared__ (the samples' threadFenceReduction) ------------------------------
__global__ void block_sums_type_first(float* partial, const float* x, unsigned n) {
  extern float __shared__ smem[];
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  smem[threadIdx.x] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) smem[threadIdx.x] += smem[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = smem[0];
}

// ---- a template kernel whose header runs past 300 characters (a GEMM ladder's tile sizes) ---------
template <typename T, size_t BLOCK_TILE_SIZE_X, size_t BLOCK_TILE_SIZE_Y, size_t BLOCK_TILE_SIZE_K,
          size_t WARP_TILE_SIZE_X, size_t WARP_TILE_SIZE_Y, size_t THREAD_TILE_SIZE_X,
          size_t THREAD_TILE_SIZE_Y, size_t NUM_THREADS_PER_WARP_X, size_t NUM_THREADS_PER_WARP_Y,
          size_t NUM_THREADS = 64>
__global__ void gemm_long_template_header(size_t m, size_t n, size_t k, T alpha, T const* A,
                                          T const* B, T beta, T* C) {
  size_t row = blockIdx.y * BLOCK_TILE_SIZE_Y + threadIdx.y;
  size_t col = blockIdx.x * BLOCK_TILE_SIZE_X + threadIdx.x;
  if (row >= m || col >= n) return;
  T acc{0};
  for (size_t i = 0; i < k; ++i) acc += A[row * k + i] * B[i * n + col];
  C[row * n + col] = alpha * acc + beta * C[row * n + col];
}

__global__ void plain_after_long_template(float* out) { out[threadIdx.x] = 2.0f * threadIdx.x; }
