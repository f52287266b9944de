// Kernels written in vLLM's style for the executor's tests (tests/test_cuda_vllm_style.py):
// templates in a namespace, `extern __shared__` declared inside a kernel template, vector
// loads, a bf16 path taken on sm_80+, a table of cache pointers, launch macros in #defines
// that device code never expands, and libcu++'s <cuda/barrier> behind an #if that is not taken.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#ifdef ENABLE_ASYNC_COPY
#include <cuda/barrier>
#endif

#define WARP_SIZE 32
#define DIVIDE_ROUND_UP(a, b) (((a) + (b) - 1) / (b))

namespace lab {

template <int NUM_WARPS>
__device__ __forceinline__ float block_max(float* red, float v) {
  for (int mask = WARP_SIZE / 2; mask >= 1; mask /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, mask));
  const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = lane < NUM_WARPS ? red[lane] : -FLT_MAX;
  for (int mask = NUM_WARPS / 2; mask >= 1; mask /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, mask));
  return __shfl_sync(0xffffffffu, v, 0);
}

template <int NUM_WARPS>
__device__ __forceinline__ float block_sum(float* red, float v) {
  for (int mask = WARP_SIZE / 2; mask >= 1; mask /= 2) v += __shfl_xor_sync(0xffffffffu, v, mask);
  const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
  if (lane == 0) red[NUM_WARPS + warp] = v;
  __syncthreads();
  v = lane < NUM_WARPS ? red[NUM_WARPS + lane] : 0.f;
  for (int mask = NUM_WARPS / 2; mask >= 1; mask /= 2) v += __shfl_xor_sync(0xffffffffu, v, mask);
  return __shfl_sync(0xffffffffu, v, 0);
}

// Decode attention over a paged KV cache: k/v caches [num_blocks, num_kv_heads, BLOCK_SIZE,
// HEAD_SIZE], grid (num_heads, num_seqs), NUM_THREADS threads, logits in dynamic shared memory.
template <typename scalar_t, int HEAD_SIZE, int BLOCK_SIZE, int NUM_THREADS>
__global__ void paged_decode_kernel(scalar_t* __restrict__ out, const scalar_t* __restrict__ q,
                                    const scalar_t* __restrict__ k_cache,
                                    const scalar_t* __restrict__ v_cache,
                                    const int* __restrict__ block_tables,
                                    const int* __restrict__ seq_lens, const float scale,
                                    const int num_kv_heads, const int max_blocks_per_seq) {
  constexpr int NUM_WARPS = NUM_THREADS / WARP_SIZE;
  constexpr int VEC = 4;  // float4 loads of q and k
  extern __shared__ char shared_mem[];
  float* logits = reinterpret_cast<float*>(shared_mem);
  __shared__ float red[2 * NUM_WARPS];
  __shared__ float4 q_vecs[HEAD_SIZE / VEC];

  const int head = blockIdx.x, seq = blockIdx.y, num_heads = gridDim.x;
  const int kv_head = head / (num_heads / num_kv_heads);
  const int seq_len = seq_lens[seq];
  const int* table = block_tables + seq * max_blocks_per_seq;

  const float4* q4 = reinterpret_cast<const float4*>(q + (seq * num_heads + head) * HEAD_SIZE);
  for (int i = threadIdx.x; i < HEAD_SIZE / VEC; i += NUM_THREADS) q_vecs[i] = q4[i];
  __syncthreads();

  float my_max = -FLT_MAX;
  for (int t = threadIdx.x; t < seq_len; t += NUM_THREADS) {
    const int block = table[t / BLOCK_SIZE], slot = t % BLOCK_SIZE;
    const float4* k4 = reinterpret_cast<const float4*>(
        k_cache + ((int64_t)(block * num_kv_heads + kv_head) * BLOCK_SIZE + slot) * HEAD_SIZE);
    float dot = 0.f;
#pragma unroll
    for (int i = 0; i < HEAD_SIZE / VEC; ++i) {
      float4 a = q_vecs[i], b = k4[i];
      dot += a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
    }
    logits[t] = dot * scale;
    my_max = fmaxf(my_max, logits[t]);
  }
  const float row_max = block_max<NUM_WARPS>(red, my_max);
  float my_sum = 0.f;
  for (int t = threadIdx.x; t < seq_len; t += NUM_THREADS) {
    logits[t] = __expf(logits[t] - row_max);
    my_sum += logits[t];
  }
  const float inv_sum = 1.f / (block_sum<NUM_WARPS>(red, my_sum) + 1e-6f);

  for (int d = threadIdx.x; d < HEAD_SIZE; d += NUM_THREADS) {
    float acc = 0.f;
    for (int t = 0; t < seq_len; ++t) {
      const int block = table[t / BLOCK_SIZE], slot = t % BLOCK_SIZE;
      acc += logits[t] * v_cache[((int64_t)(block * num_kv_heads + kv_head) * BLOCK_SIZE + slot) * HEAD_SIZE + d];
    }
    out[(seq * num_heads + head) * HEAD_SIZE + d] = acc * inv_sum;
  }
}

// Scale a float row into bf16 pairs: the sm_80 path, as vLLM's dtype headers guard it.
template <int NUM_THREADS>
__global__ void to_bf16_scaled(__nv_bfloat162* out, const float2* in, const float scale, const int n) {
  const int i = blockIdx.x * NUM_THREADS + threadIdx.x;
  if (i >= n) return;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const __nv_bfloat162 s = __bfloat162bfloat162(__float2bfloat16(scale));
  const __nv_bfloat162 x = __float22bfloat162_rn(in[i]);
  out[i] = __hfma2(x, s, __hmul2(x, __float22bfloat162_rn(make_float2(0.f, 0.f))));
#else
  assert(false);
#endif
}

}  // namespace lab

// One layer's block copy per blockIdx.x, one (src, dst) pair per blockIdx.y: the caches are
// reached through a table of their addresses (int64), as vLLM's copy_blocks does.
void __global__ copy_blocks(int64_t* key_cache_ptrs, int64_t* value_cache_ptrs,
                            const int64_t* __restrict__ block_mapping, const int numel_per_block) {
  const int layer = blockIdx.x, pair = blockIdx.y;
  float* key_cache = reinterpret_cast<float*>(key_cache_ptrs[layer]);
  float* value_cache = reinterpret_cast<float*>(value_cache_ptrs[layer]);
  const int64_t src = block_mapping[2 * pair], dst = block_mapping[2 * pair + 1];
  for (int i = threadIdx.x; i < numel_per_block; i += blockDim.x) {
    key_cache[dst * numel_per_block + i] = key_cache[src * numel_per_block + i];
    value_cache[dst * numel_per_block + i] = value_cache[src * numel_per_block + i];
  }
}

// Host-side launch helpers, as torch bindings write them: never expanded in device code.
#define LAUNCH_PAGED_DECODE(T, HEAD_SIZE)                                                  \
  lab::paged_decode_kernel<T, HEAD_SIZE, 16, 128><<<grid, block, shared_mem_size, stream>>>( \
      out, q, k_cache, v_cache, block_tables, seq_lens, scale, num_kv_heads, max_blocks)
#define LAUNCH_COPY_BLOCKS() copy_blocks<<<dim3(num_layers, num_pairs), 1024>>>(k, v, m, n)
