// Kernels written for pagedlab in the idioms of vLLM's CUDA sources: the float16 paged attention
// V1 of v0.2.7 (dtype_float16.cuh's PTX packs and conversions, Vec/FloatVec traits, thread
// groups, a K cache laid out [blocks, kv_heads, head/x, block, x]), vLLM 2025's
// merge_attn_states (128-bit packs, fp16/bf16/fp32) and moe_align_sum (cub::BlockScan over 1024
// threads, atomics, __ldg). tests/test_cuda_vllm_fp16.py checks each against numpy.
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cub/cub.cuh>
#include <stdint.h>
#include <float.h>
#include <limits>

#define WARP_SIZE 32
#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define DIVIDE_ROUND_UP(a, b) (((a) + (b) - 1) / (b))
#define VLLM_SHFL_XOR_SYNC(var, lane_mask) __shfl_xor_sync(uint32_t(-1), var, lane_mask)
#define VLLM_SHFL_SYNC(var, src_lane) __shfl_sync(uint32_t(-1), var, src_lane)
#define VLLM_LDG(arg) __ldg(arg)
#define CEILDIV(x, y) (((x) + (y) - 1) / (y))

namespace vllm {

// ---- attention_generic: vector traits -----------------------------------------------------------
template <typename T, int VEC_SIZE> struct Vec {};
template <typename T> struct FloatVec {};

template <typename Acc, typename A, typename B> inline __device__ Acc mul(A a, B b);
template <typename T> inline __device__ float sum(T v);
template <typename T> inline __device__ float dot(T a, T b) { return sum(mul<T, T, T>(a, b)); }
template <typename A, typename T> inline __device__ float dot(T a, T b) { return sum(mul<A, T, T>(a, b)); }
template <typename T> inline __device__ void zero(T& dst) {
  constexpr int WORDS = sizeof(T) / 4;
  union { T raw; uint32_t words[WORDS]; } tmp;
#pragma unroll
  for (int ii = 0; ii < WORDS; ++ii) tmp.words[ii] = 0u;
  dst = tmp.raw;
}

// ---- dtype_float32 --------------------------------------------------------------------------------
struct Float4_ { float2 x, y; };
struct Float8_ { float2 x, y, z, w; };
template <> struct Vec<float, 1> { using Type = float; };
template <> struct Vec<float, 2> { using Type = float2; };
template <> struct Vec<float, 4> { using Type = float4; };
template <> struct FloatVec<float> { using Type = float; };
template <> struct FloatVec<float2> { using Type = float2; };
template <> struct FloatVec<float4> { using Type = float4; };

inline __device__ float add(float a, float b) { return a + b; }
inline __device__ float2 add(float2 a, float2 b) { return make_float2(a.x + b.x, a.y + b.y); }
inline __device__ Float4_ add(Float4_ a, Float4_ b) { return {add(a.x, b.x), add(a.y, b.y)}; }
inline __device__ Float8_ add(Float8_ a, Float8_ b) {
  return {add(a.x, b.x), add(a.y, b.y), add(a.z, b.z), add(a.w, b.w)};
}
template <> inline __device__ float mul<float, float>(float a, float b) { return a * b; }
template <> inline __device__ float2 mul(float2 a, float2 b) { return make_float2(a.x * b.x, a.y * b.y); }
template <> inline __device__ float2 mul(float a, float2 b) { return make_float2(a * b.x, a * b.y); }
inline __device__ float fma(float a, float b, float c) { return a * b + c; }
inline __device__ float2 fma(float2 a, float2 b, float2 c) { return make_float2(fma(a.x, b.x, c.x), fma(a.y, b.y, c.y)); }
inline __device__ float2 fma(float a, float2 b, float2 c) { return make_float2(fma(a, b.x, c.x), fma(a, b.y, c.y)); }
template <> inline __device__ float sum(float v) { return v; }
template <> inline __device__ float sum(float2 v) { return v.x + v.y; }
template <> inline __device__ float sum(Float4_ v) { return v.x.x + v.x.y + v.y.x + v.y.y; }
template <> inline __device__ float sum(Float8_ v) {
  return v.x.x + v.x.y + v.y.x + v.y.y + v.z.x + v.z.y + v.w.x + v.w.y;
}
inline __device__ void from_float(float& dst, float src) { dst = src; }
inline __device__ float to_float(float u) { return u; }

// ---- dtype_float16: half vectors are uint16_t/uint32_t/uint2/uint4, operated on by PTX -------------
template <> struct Vec<uint16_t, 1> { using Type = uint16_t; };
template <> struct Vec<uint16_t, 2> { using Type = uint32_t; };
template <> struct Vec<uint16_t, 4> { using Type = uint2; };
template <> struct Vec<uint16_t, 8> { using Type = uint4; };
template <> struct FloatVec<uint16_t> { using Type = float; };
template <> struct FloatVec<uint32_t> { using Type = float2; };
template <> struct FloatVec<uint2> { using Type = Float4_; };
template <> struct FloatVec<uint4> { using Type = Float8_; };

inline __device__ uint32_t h0_h0(uint16_t a) {
  uint32_t b;
  asm volatile("mov.b32 %0, {%1, %1};" : "=r"(b) : "h"(a));
  return b;
}
inline __device__ float half_to_float(uint16_t h) {
  float f;
  asm volatile("cvt.f32.f16 %0, %1;\n" : "=f"(f) : "h"(h));
  return f;
}
inline __device__ float2 half2_to_float2(uint32_t v) {
  uint16_t lo, hi;
  asm volatile("mov.b32 {%0, %1}, %2;\n" : "=h"(lo), "=h"(hi) : "r"(v));
  return make_float2(half_to_float(lo), half_to_float(hi));
}
inline __device__ uint16_t float_to_half(float f) {
  union { uint32_t u32; uint16_t u16[2]; } tmp;
  asm volatile("cvt.rn.f16.f32 %0, %1;\n" : "=h"(tmp.u16[0]) : "f"(f));
  return tmp.u16[0];
}
inline __device__ uint32_t float2_to_half2(float2 f) {
  union { uint32_t u32; uint16_t u16[2]; } tmp;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(tmp.u32) : "f"(f.y), "f"(f.x));
#else
  asm volatile("cvt.rn.f16.f32 %0, %1;\n" : "=h"(tmp.u16[0]) : "f"(f.x));
  asm volatile("cvt.rn.f16.f32 %0, %1;\n" : "=h"(tmp.u16[1]) : "f"(f.y));
#endif
  return tmp.u32;
}
inline __device__ uint16_t add(uint16_t a, uint16_t b) {
  uint16_t c;
  asm volatile("add.f16 %0, %1, %2;\n" : "=h"(c) : "h"(a), "h"(b));
  return c;
}
inline __device__ uint32_t add(uint32_t a, uint32_t b) {
  uint32_t c;
  asm volatile("add.f16x2 %0, %1, %2;\n" : "=r"(c) : "r"(a), "r"(b));
  return c;
}
inline __device__ uint2 add(uint2 a, uint2 b) { return make_uint2(add(a.x, b.x), add(a.y, b.y)); }
inline __device__ uint4 add(uint4 a, uint4 b) {
  return make_uint4(add(a.x, b.x), add(a.y, b.y), add(a.z, b.z), add(a.w, b.w));
}
inline __device__ float2 add(uint32_t a, float2 fb) { return add(half2_to_float2(a), fb); }
inline __device__ Float4_ add(uint2 a, Float4_ fb) { return {add(a.x, fb.x), add(a.y, fb.y)}; }
inline __device__ Float8_ add(uint4 a, Float8_ fb) {
  return {add(a.x, fb.x), add(a.y, fb.y), add(a.z, fb.z), add(a.w, fb.w)};
}
template <> inline __device__ uint16_t mul(uint16_t a, uint16_t b) {
  uint16_t c;
  asm volatile("mul.f16 %0, %1, %2;\n" : "=h"(c) : "h"(a), "h"(b));
  return c;
}
template <> inline __device__ uint32_t mul(uint32_t a, uint32_t b) {
  uint32_t c;
  asm volatile("mul.f16x2 %0, %1, %2;\n" : "=r"(c) : "r"(a), "r"(b));
  return c;
}
template <> inline __device__ uint32_t mul(uint16_t a, uint32_t b) { return mul<uint32_t, uint32_t, uint32_t>(h0_h0(a), b); }
template <> inline __device__ uint2 mul(uint2 a, uint2 b) {
  return make_uint2(mul<uint32_t, uint32_t, uint32_t>(a.x, b.x), mul<uint32_t, uint32_t, uint32_t>(a.y, b.y));
}
template <> inline __device__ uint4 mul(uint4 a, uint4 b) {
  return make_uint4(mul<uint32_t, uint32_t, uint32_t>(a.x, b.x), mul<uint32_t, uint32_t, uint32_t>(a.y, b.y),
                    mul<uint32_t, uint32_t, uint32_t>(a.z, b.z), mul<uint32_t, uint32_t, uint32_t>(a.w, b.w));
}
template <> inline __device__ float2 mul(uint32_t a, uint32_t b) {
  return mul<float2, float2, float2>(half2_to_float2(a), half2_to_float2(b));
}
template <> inline __device__ Float4_ mul(uint2 a, uint2 b) {
  return {mul<float2, uint32_t, uint32_t>(a.x, b.x), mul<float2, uint32_t, uint32_t>(a.y, b.y)};
}
template <> inline __device__ Float8_ mul(uint4 a, uint4 b) {
  return {mul<float2, uint32_t, uint32_t>(a.x, b.x), mul<float2, uint32_t, uint32_t>(a.y, b.y),
          mul<float2, uint32_t, uint32_t>(a.z, b.z), mul<float2, uint32_t, uint32_t>(a.w, b.w)};
}
inline __device__ uint32_t fma(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm volatile("fma.rn.f16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
inline __device__ float2 fma(uint32_t a, uint32_t b, float2 fc) {
  return fma(half2_to_float2(a), half2_to_float2(b), fc);
}
inline __device__ Float4_ fma(uint2 a, uint2 b, Float4_ fc) { return {fma(a.x, b.x, fc.x), fma(a.y, b.y, fc.y)}; }
inline __device__ Float8_ fma(uint4 a, uint4 b, Float8_ fc) {
  return {fma(a.x, b.x, fc.x), fma(a.y, b.y, fc.y), fma(a.z, b.z, fc.z), fma(a.w, b.w, fc.w)};
}
template <> inline __device__ float sum(uint16_t v) { return half_to_float(v); }
template <> inline __device__ float sum(uint32_t v) {
  float2 tmp = half2_to_float2(v);
  return tmp.x + tmp.y;
}
template <> inline __device__ float sum(uint2 v) { return sum(add(v.x, v.y)); }
template <> inline __device__ float sum(uint4 v) {
  uint32_t c = add(v.x, v.y);
  c = add(c, v.z);
  c = add(c, v.w);
  return sum(c);
}
inline __device__ void from_float(uint16_t& dst, float src) { dst = float_to_half(src); }
inline __device__ void from_float(uint32_t& dst, float2 src) { dst = float2_to_half2(src); }
inline __device__ void from_float(uint2& dst, Float4_ src) {
  dst.x = float2_to_half2(src.x);
  dst.y = float2_to_half2(src.y);
}
inline __device__ void from_float(uint4& dst, Float8_ src) {
  dst.x = float2_to_half2(src.x);
  dst.y = float2_to_half2(src.y);
  dst.z = float2_to_half2(src.z);
  dst.w = float2_to_half2(src.w);
}
inline __device__ float to_float(uint16_t u) { return half_to_float(u); }
inline __device__ float2 to_float(uint32_t u) { return half2_to_float2(u); }

// ---- dtype_bfloat16 (what merge_attn_states needs) -------------------------------------------------
inline __device__ float to_float(__nv_bfloat16 u) { return __bfloat162float(u); }
inline __device__ void from_float(__nv_bfloat16& dst, float src) { dst = __float2bfloat16(src); }

// ---- paged attention V1 ------------------------------------------------------------------------------
template <int NUM_WARPS>
inline __device__ float block_sum(float* red_smem, float sum) {
  int warp = threadIdx.x / WARP_SIZE;
  int lane = threadIdx.x % WARP_SIZE;
#pragma unroll
  for (int mask = WARP_SIZE / 2; mask >= 1; mask /= 2) sum += VLLM_SHFL_XOR_SYNC(sum, mask);
  if (lane == 0) red_smem[warp] = sum;
  __syncthreads();
  if (lane < NUM_WARPS) sum = red_smem[lane];
#pragma unroll
  for (int mask = NUM_WARPS / 2; mask >= 1; mask /= 2) sum += VLLM_SHFL_XOR_SYNC(sum, mask);
  return VLLM_SHFL_SYNC(sum, 0);
}

template <int THREAD_GROUP_SIZE, typename Vec, int N>
inline __device__ float qk_dot_(const Vec (&q)[N], const Vec (&k)[N]) {
  using A_vec = typename FloatVec<Vec>::Type;
  A_vec qk_vec = mul<A_vec, Vec, Vec>(q[0], k[0]);
#pragma unroll
  for (int ii = 1; ii < N; ++ii) qk_vec = fma(q[ii], k[ii], qk_vec);
  float qk = sum(qk_vec);
#pragma unroll
  for (int mask = THREAD_GROUP_SIZE / 2; mask >= 1; mask /= 2) qk += VLLM_SHFL_XOR_SYNC(qk, mask);
  return qk;
}

template <typename T, int THREAD_GROUP_SIZE>
struct Qk_dot {
  template <typename Vec, int N>
  static inline __device__ float dot(const Vec (&q)[N], const Vec (&k)[N]) {
    return qk_dot_<THREAD_GROUP_SIZE>(q, k);
  }
};

template <typename scalar_t, int HEAD_SIZE, int BLOCK_SIZE, int NUM_THREADS>
__global__ void paged_attention_v1_kernel(
    scalar_t* __restrict__ out, const scalar_t* __restrict__ q, const scalar_t* __restrict__ k_cache,
    const scalar_t* __restrict__ v_cache, const int num_kv_heads, const float scale,
    const int* __restrict__ block_tables, const int* __restrict__ context_lens,
    const int max_num_blocks_per_seq, const float* __restrict__ alibi_slopes, const int q_stride,
    const int kv_block_stride, const int kv_head_stride) {
  const int seq_idx = blockIdx.y;
  const int context_len = context_lens[seq_idx];
  const int num_context_blocks = DIVIDE_ROUND_UP(context_len, BLOCK_SIZE);
  const int num_tokens = context_len;

  constexpr int THREAD_GROUP_SIZE = MAX(WARP_SIZE / BLOCK_SIZE, 1);
  constexpr int NUM_THREAD_GROUPS = NUM_THREADS / THREAD_GROUP_SIZE;
  constexpr int NUM_TOKENS_PER_THREAD_GROUP = DIVIDE_ROUND_UP(BLOCK_SIZE, WARP_SIZE);
  constexpr int NUM_WARPS = NUM_THREADS / WARP_SIZE;
  const int thread_idx = threadIdx.x;
  const int warp_idx = thread_idx / WARP_SIZE;
  const int lane = thread_idx % WARP_SIZE;

  const int head_idx = blockIdx.x;
  const int num_heads = gridDim.x;
  const int num_queries_per_kv = num_heads / num_kv_heads;
  const int kv_head_idx = head_idx / num_queries_per_kv;
  const float alibi_slope = alibi_slopes == nullptr ? 0.f : alibi_slopes[head_idx];

  // Each thread group fetches 16 bytes of the key at a time.
  constexpr int VEC_SIZE = MAX(16 / (THREAD_GROUP_SIZE * sizeof(scalar_t)), 1);
  using K_vec = typename Vec<scalar_t, VEC_SIZE>::Type;
  using Q_vec = typename Vec<scalar_t, VEC_SIZE>::Type;
  constexpr int NUM_ELEMS_PER_THREAD = HEAD_SIZE / THREAD_GROUP_SIZE;
  constexpr int NUM_VECS_PER_THREAD = NUM_ELEMS_PER_THREAD / VEC_SIZE;
  const int thread_group_idx = thread_idx / THREAD_GROUP_SIZE;
  const int thread_group_offset = thread_idx % THREAD_GROUP_SIZE;

  const scalar_t* q_ptr = q + seq_idx * q_stride + head_idx * HEAD_SIZE;
  __shared__ Q_vec q_vecs[THREAD_GROUP_SIZE][NUM_VECS_PER_THREAD];
#pragma unroll
  for (int i = thread_group_idx; i < NUM_VECS_PER_THREAD; i += NUM_THREAD_GROUPS) {
    const int vec_idx = thread_group_offset + i * THREAD_GROUP_SIZE;
    q_vecs[thread_group_offset][i] = *reinterpret_cast<const Q_vec*>(q_ptr + vec_idx * VEC_SIZE);
  }
  __syncthreads();

  extern __shared__ char shared_mem[];
  float* logits = reinterpret_cast<float*>(shared_mem);
  __shared__ float red_smem[2 * NUM_WARPS];

  constexpr int x = 16 / sizeof(scalar_t);
  float qk_max = -FLT_MAX;

  const int* block_table = block_tables + seq_idx * max_num_blocks_per_seq;
  for (int block_idx = warp_idx; block_idx < num_context_blocks; block_idx += NUM_WARPS) {
    const int physical_block_number = block_table[block_idx];
    for (int i = 0; i < NUM_TOKENS_PER_THREAD_GROUP; i++) {
      const int physical_block_offset = (thread_group_idx + i * WARP_SIZE) % BLOCK_SIZE;
      const int token_idx = block_idx * BLOCK_SIZE + physical_block_offset;
      K_vec k_vecs[NUM_VECS_PER_THREAD];
#pragma unroll
      for (int j = 0; j < NUM_VECS_PER_THREAD; j++) {
        const scalar_t* k_ptr = k_cache + physical_block_number * kv_block_stride +
                                kv_head_idx * kv_head_stride + physical_block_offset * x;
        const int vec_idx = thread_group_offset + j * THREAD_GROUP_SIZE;
        const int offset1 = (vec_idx * VEC_SIZE) / x;
        const int offset2 = (vec_idx * VEC_SIZE) % x;
        k_vecs[j] = *reinterpret_cast<const K_vec*>(k_ptr + offset1 * BLOCK_SIZE * x + offset2);
      }
      float qk = scale * Qk_dot<scalar_t, THREAD_GROUP_SIZE>::dot(q_vecs[thread_group_offset], k_vecs);
      qk += (alibi_slope != 0) ? alibi_slope * (token_idx - context_len + 1) : 0;
      if (thread_group_offset == 0) {
        const bool mask = token_idx >= context_len;
        logits[token_idx] = mask ? 0.f : qk;
        qk_max = mask ? qk_max : fmaxf(qk_max, qk);
      }
    }
  }

#pragma unroll
  for (int mask = WARP_SIZE / 2; mask >= THREAD_GROUP_SIZE; mask /= 2) {
    qk_max = fmaxf(qk_max, VLLM_SHFL_XOR_SYNC(qk_max, mask));
  }
  if (lane == 0) red_smem[warp_idx] = qk_max;
  __syncthreads();
  qk_max = lane < NUM_WARPS ? red_smem[lane] : -FLT_MAX;
#pragma unroll
  for (int mask = NUM_WARPS / 2; mask >= 1; mask /= 2) qk_max = fmaxf(qk_max, VLLM_SHFL_XOR_SYNC(qk_max, mask));
  qk_max = VLLM_SHFL_SYNC(qk_max, 0);

  float exp_sum = 0.f;
  for (int i = thread_idx; i < num_tokens; i += NUM_THREADS) {
    float val = __expf(logits[i] - qk_max);
    logits[i] = val;
    exp_sum += val;
  }
  exp_sum = block_sum<NUM_WARPS>(&red_smem[NUM_WARPS], exp_sum);
  const float inv_sum = __fdividef(1.f, exp_sum + 1e-6f);
  for (int i = thread_idx; i < num_tokens; i += NUM_THREADS) logits[i] *= inv_sum;
  __syncthreads();

  // Each warp reads V_VEC_SIZE tokens of a block at a time, for NUM_ROWS_PER_THREAD head rows.
  constexpr int V_VEC_SIZE = MIN(16 / sizeof(scalar_t), BLOCK_SIZE);
  using V_vec = typename Vec<scalar_t, V_VEC_SIZE>::Type;
  using L_vec = typename Vec<scalar_t, V_VEC_SIZE>::Type;
  using Float_L_vec = typename FloatVec<L_vec>::Type;
  constexpr int NUM_V_VECS_PER_ROW = BLOCK_SIZE / V_VEC_SIZE;
  constexpr int NUM_ROWS_PER_ITER = WARP_SIZE / NUM_V_VECS_PER_ROW;
  constexpr int NUM_ROWS_PER_THREAD = DIVIDE_ROUND_UP(HEAD_SIZE, NUM_ROWS_PER_ITER);

  float accs[NUM_ROWS_PER_THREAD];
#pragma unroll
  for (int i = 0; i < NUM_ROWS_PER_THREAD; i++) accs[i] = 0.f;

  scalar_t zero_value;
  zero(zero_value);
  for (int block_idx = warp_idx; block_idx < num_context_blocks; block_idx += NUM_WARPS) {
    const int physical_block_number = block_table[block_idx];
    const int physical_block_offset = (lane % NUM_V_VECS_PER_ROW) * V_VEC_SIZE;
    const int token_idx = block_idx * BLOCK_SIZE + physical_block_offset;
    L_vec logits_vec;
    from_float(logits_vec, *reinterpret_cast<Float_L_vec*>(logits + token_idx));

    const scalar_t* v_ptr = v_cache + physical_block_number * kv_block_stride + kv_head_idx * kv_head_stride;
#pragma unroll
    for (int i = 0; i < NUM_ROWS_PER_THREAD; i++) {
      const int row_idx = lane / NUM_V_VECS_PER_ROW + i * NUM_ROWS_PER_ITER;
      if (row_idx < HEAD_SIZE) {
        const int offset = row_idx * BLOCK_SIZE + physical_block_offset;
        V_vec v_vec = *reinterpret_cast<const V_vec*>(v_ptr + offset);
        if (block_idx == num_context_blocks - 1) {
          // The last block's padding slots hold garbage: zero them before the dot product.
          scalar_t* v_vec_ptr = reinterpret_cast<scalar_t*>(&v_vec);
#pragma unroll
          for (int j = 0; j < V_VEC_SIZE; j++) {
            v_vec_ptr[j] = token_idx + j < context_len ? v_vec_ptr[j] : zero_value;
          }
        }
        accs[i] += dot(logits_vec, v_vec);
      }
    }
  }

#pragma unroll
  for (int i = 0; i < NUM_ROWS_PER_THREAD; i++) {
    float acc = accs[i];
#pragma unroll
    for (int mask = NUM_V_VECS_PER_ROW / 2; mask >= 1; mask /= 2) acc += VLLM_SHFL_XOR_SYNC(acc, mask);
    accs[i] = acc;
  }

  // The logits buffer is reused for the cross-warp reduction of the outputs.
  __syncthreads();
  float* out_smem = reinterpret_cast<float*>(shared_mem);
#pragma unroll
  for (int i = NUM_WARPS; i > 1; i /= 2) {
    int mid = i / 2;
    if (warp_idx >= mid && warp_idx < i) {
      float* dst = &out_smem[(warp_idx - mid) * HEAD_SIZE];
#pragma unroll
      for (int j = 0; j < NUM_ROWS_PER_THREAD; j++) {
        const int row_idx = lane / NUM_V_VECS_PER_ROW + j * NUM_ROWS_PER_ITER;
        if (row_idx < HEAD_SIZE && lane % NUM_V_VECS_PER_ROW == 0) dst[row_idx] = accs[j];
      }
    }
    __syncthreads();
    if (warp_idx < mid) {
      const float* src = &out_smem[warp_idx * HEAD_SIZE];
#pragma unroll
      for (int j = 0; j < NUM_ROWS_PER_THREAD; j++) {
        const int row_idx = lane / NUM_V_VECS_PER_ROW + j * NUM_ROWS_PER_ITER;
        if (row_idx < HEAD_SIZE && lane % NUM_V_VECS_PER_ROW == 0) accs[j] += src[row_idx];
      }
    }
    __syncthreads();
  }

  if (warp_idx == 0) {
    scalar_t* out_ptr = out + seq_idx * num_heads * HEAD_SIZE + head_idx * HEAD_SIZE;
#pragma unroll
    for (int i = 0; i < NUM_ROWS_PER_THREAD; i++) {
      const int row_idx = lane / NUM_V_VECS_PER_ROW + i * NUM_ROWS_PER_ITER;
      if (row_idx < HEAD_SIZE && lane % NUM_V_VECS_PER_ROW == 0) from_float(*(out_ptr + row_idx), accs[i]);
    }
  }
}

// ---- merge_attn_states: combine two partial attention results by their log-sum-exps -------------
template <typename scalar_t, const uint NUM_THREADS>
__global__ void merge_attn_states_kernel(scalar_t* output, float* output_lse, const scalar_t* prefix_output,
                                         const float* prefix_lse, const scalar_t* suffix_output,
                                         const float* suffix_lse, const uint num_tokens,
                                         const uint num_heads, const uint head_size) {
  using pack_128b_t = uint4;
  const uint pack_size = 16 / sizeof(scalar_t);
  const uint threads_per_head = head_size / pack_size;
  const uint global_idx = blockIdx.x * NUM_THREADS + threadIdx.x;
  const uint token_head_threads = num_tokens * num_heads * threads_per_head;
  if (global_idx >= token_head_threads) return;

  const uint token_head_idx = global_idx / threads_per_head;
  const uint pack_idx = global_idx % threads_per_head;
  const uint token_idx = token_head_idx / num_heads;
  const uint head_idx = token_head_idx % num_heads;
  const uint pack_offset = pack_idx * pack_size;
  const uint head_offset = token_idx * num_heads * head_size + head_idx * head_size;
  const scalar_t* prefix_head_ptr = prefix_output + head_offset;
  const scalar_t* suffix_head_ptr = suffix_output + head_offset;
  scalar_t* output_head_ptr = output + head_offset;

  float p_lse = prefix_lse[head_idx * num_tokens + token_idx];
  float s_lse = suffix_lse[head_idx * num_tokens + token_idx];
  p_lse = std::isinf(p_lse) ? -std::numeric_limits<float>::infinity() : p_lse;
  s_lse = std::isinf(s_lse) ? -std::numeric_limits<float>::infinity() : s_lse;
  const float max_lse = fmaxf(p_lse, s_lse);
  p_lse = p_lse - max_lse;
  s_lse = s_lse - max_lse;
  const float p_se = expf(p_lse);
  const float s_se = expf(s_lse);
  const float out_se = p_se + s_se;
  const float p_scale = p_se / out_se;
  const float s_scale = s_se / out_se;

  if (pack_offset < head_size) {
    pack_128b_t p_out_pack = reinterpret_cast<const pack_128b_t*>(prefix_head_ptr)[pack_offset / pack_size];
    pack_128b_t s_out_pack = reinterpret_cast<const pack_128b_t*>(suffix_head_ptr)[pack_offset / pack_size];
    pack_128b_t o_out_pack;
#pragma unroll
    for (uint i = 0; i < pack_size; ++i) {
      const float p_out_f = vllm::to_float(reinterpret_cast<const scalar_t*>(&p_out_pack)[i]);
      const float s_out_f = vllm::to_float(reinterpret_cast<const scalar_t*>(&s_out_pack)[i]);
      const float o_out_f = p_out_f * p_scale + (s_out_f * s_scale);
      vllm::from_float(reinterpret_cast<scalar_t*>(&o_out_pack)[i], o_out_f);
    }
    reinterpret_cast<pack_128b_t*>(output_head_ptr)[pack_offset / pack_size] = o_out_pack;
  }
  if (output_lse != nullptr && pack_idx == 0) {
    float out_lse = logf(out_se) + max_lse;
    output_lse[head_idx * num_tokens + token_idx] = out_lse;
  }
}

namespace moe {
// ---- moe_align_sum: sort token slots by expert, each expert's run padded to block_size ----------
template <typename scalar_t>
__global__ void moe_align_block_size_kernel(const scalar_t* __restrict__ topk_ids,
                                            int32_t* __restrict__ sorted_token_ids,
                                            int32_t* __restrict__ expert_ids,
                                            int32_t* __restrict__ total_tokens_post_pad,
                                            int32_t num_experts, int32_t padded_num_experts,
                                            int32_t experts_per_warp, int32_t block_size, size_t numel,
                                            int32_t* __restrict__ cumsum, int32_t max_num_tokens_padded) {
  extern __shared__ int32_t shared_counts[];
  for (size_t it = threadIdx.x; it < max_num_tokens_padded; it += blockDim.x) sorted_token_ids[it] = numel;

  const int warp_id = threadIdx.x / WARP_SIZE;
  const int my_expert_start = warp_id * experts_per_warp;
  for (int i = 0; i < experts_per_warp; ++i) {
    if (my_expert_start + i < padded_num_experts) shared_counts[warp_id * experts_per_warp + i] = 0;
  }
  __syncthreads();

  const size_t tid = threadIdx.x;
  const size_t stride = blockDim.x;
  for (size_t i = tid; i < numel; i += stride) {
    int expert_id = topk_ids[i];
    if (expert_id >= num_experts) continue;
    int warp_idx = expert_id / experts_per_warp;
    int expert_offset = expert_id % experts_per_warp;
    atomicAdd(&shared_counts[warp_idx * experts_per_warp + expert_offset], 1);
  }
  __syncthreads();

  using BlockScan = cub::BlockScan<int32_t, 1024>;
  __shared__ typename BlockScan::TempStorage temp_storage;
  int expert_count = 0;
  int expert_id = threadIdx.x;
  if (expert_id < num_experts) {
    int warp_idx = expert_id / experts_per_warp;
    int expert_offset = expert_id % experts_per_warp;
    expert_count = shared_counts[warp_idx * experts_per_warp + expert_offset];
    expert_count = CEILDIV(expert_count, block_size) * block_size;
  }
  int cumsum_val;
  BlockScan(temp_storage).ExclusiveSum(expert_count, cumsum_val);
  if (expert_id <= num_experts) cumsum[expert_id] = cumsum_val;
  if (expert_id == num_experts) *total_tokens_post_pad = cumsum_val;
  __syncthreads();

  if (threadIdx.x < num_experts) {
    for (int i = cumsum[threadIdx.x]; i < cumsum[threadIdx.x + 1]; i += block_size) {
      expert_ids[i / block_size] = threadIdx.x;
    }
  }
  const size_t fill_start_idx = cumsum[num_experts] / block_size + threadIdx.x;
  const size_t expert_ids_size = CEILDIV(max_num_tokens_padded, block_size);
  for (size_t i = fill_start_idx; i < expert_ids_size; i += blockDim.x) expert_ids[i] = 0;
}

template <typename scalar_t>
__global__ void count_and_sort_expert_tokens_kernel(const scalar_t* __restrict__ topk_ids,
                                                    int32_t* __restrict__ sorted_token_ids,
                                                    int32_t* __restrict__ cumsum_buffer, size_t numel,
                                                    int32_t num_experts) {
  const size_t tid = blockIdx.x * blockDim.x + threadIdx.x;
  const size_t stride = blockDim.x * gridDim.x;
  for (size_t i = tid; i < numel; i += stride) {
    int32_t expert_id = topk_ids[i];
    if (expert_id >= num_experts) continue;
    int32_t rank_post_pad = atomicAdd(&cumsum_buffer[expert_id], 1);
    sorted_token_ids[rank_post_pad] = i;
  }
}

template <typename scalar_t, int TOPK>
__global__ void moe_sum_kernel(scalar_t* __restrict__ out, const scalar_t* __restrict__ input, const int d) {
  const int64_t token_idx = blockIdx.x;
  for (int64_t idx = threadIdx.x; idx < d; idx += blockDim.x) {
    scalar_t x = 0.0;
#pragma unroll
    for (int k = 0; k < TOPK; ++k) x += VLLM_LDG(&input[token_idx * TOPK * d + k * d + idx]);
    out[token_idx * d + idx] = x;
  }
}
}  // namespace moe
}  // namespace vllm
