// Part C: the PagedAttention decode kernel (vLLM's paged_attention_v1, in fp32 and simplified).
//
// One decode step: every sequence has one new query token and attends to all of its tokens in
// the paged KV cache. One thread block computes one query head of one sequence:
//   grid  = (num_heads, num_seqs), block = NUM_THREADS threads (4 warps).
// Layouts (row-major, float32 unless said otherwise):
//   q, out        [num_seqs, num_heads, head_size]
//   k_cache,
//   v_cache       [num_blocks, block_size, num_kv_heads, head_size]
//   block_tables  [num_seqs, max_blocks_per_seq]   int32, physical block ids, -1 = unused
//   seq_lens      [num_seqs]                       int32, tokens in the cache per sequence
// Token t of a sequence lives in physical block block_table[t / block_size], at row
// t % block_size of that block. The host launches with seq_len_max * 4 bytes of dynamic shared
// memory: one fp32 logit per token.
//
// No #include: NVRTC compiles this text for a GPU, and pagedlab's CPU executor runs it as is.

#define NUM_THREADS 128
#define WARP_SIZE 32
#define NUM_WARPS (NUM_THREADS / WARP_SIZE)
#define MAX_HEAD_SIZE 256
#define FULL_MASK 0xffffffffu
// Start value of a max: below any finite logit (NVRTC has no <math.h>, hence no INFINITY).
#define LOWEST_FLOAT (-3.402823466e+38f)

// Butterfly reductions inside a warp: after log2(32) = 5 exchanges every lane holds the
// result, so no lane has to broadcast it.
__device__ float warp_max(float x) {
  for (int offset = WARP_SIZE / 2; offset > 0; offset /= 2) {
    x = fmaxf(x, __shfl_xor_sync(FULL_MASK, x, offset));
  }
  return x;
}

__device__ float warp_sum(float x) {
  for (int offset = WARP_SIZE / 2; offset > 0; offset /= 2) {
    x += __shfl_xor_sync(FULL_MASK, x, offset);
  }
  return x;
}

extern "C" __global__ void paged_attention_v1(
    float* out, const float* q, const float* k_cache, const float* v_cache,
    const int* block_tables, const int* seq_lens, float scale, int num_kv_heads,
    int head_size, int block_size, int max_blocks_per_seq) {
  const int head = blockIdx.x;
  const int seq = blockIdx.y;
  const int num_heads = gridDim.x;
  const int tid = threadIdx.x;
  const int warp = tid / WARP_SIZE;
  const int lane = tid % WARP_SIZE;

  const int seq_len = seq_lens[seq];
  // Grouped-query attention: num_heads / num_kv_heads consecutive query heads share a kv head.
  const int kv_head = head / (num_heads / num_kv_heads);
  // This sequence's row of the block table: logical block i -> physical block block_table[i].
  const int* block_table = block_tables + (long long)seq * max_blocks_per_seq;
  // Floats between two consecutive tokens of a block, and between two physical blocks.
  const long long token_stride = (long long)num_kv_heads * head_size;
  const long long block_stride = token_stride * block_size;

  extern __shared__ float logits[];     // [seq_len]: scores, then exp(score - max)
  __shared__ float q_shared[MAX_HEAD_SIZE];  // this head's query, read by every thread
  __shared__ float partial[NUM_WARPS];  // one value per warp for block-wide reductions

  const float* q_vec = q + ((long long)seq * num_heads + head) * head_size;
  for (int d = tid; d < head_size; d += NUM_THREADS) {
    q_shared[d] = q_vec[d];
  }
  __syncthreads();

  // 1. Logits. Thread tid scores tokens t = tid, tid + NUM_THREADS, ... < seq_len: it finds
  //    token t's key (kv head kv_head) through the block table, stores scale * q.k in
  //    logits[t] and keeps the largest logit it wrote in thread_max.
  float thread_max = LOWEST_FLOAT;
  // BEGIN SOLUTION Task 10: logits, scale * q.k for every token, found through the block table
  for (int t = tid; t < seq_len; t += NUM_THREADS) {
    const int block = block_table[t / block_size];
    const float* k = k_cache + block * block_stride + (t % block_size) * token_stride
                     + kv_head * head_size;
    float dot = 0.f;
    for (int d = 0; d < head_size; ++d) {
      dot += q_shared[d] * k[d];
    }
    logits[t] = dot * scale;
    thread_max = fmaxf(thread_max, logits[t]);
  }
  // END SOLUTION

  // 2. Softmax. Combine every thread's thread_max into the block's max (warp_max inside a warp,
  //    then partial[] across the NUM_WARPS warps), replace each logits[t] by exp(logits[t] - max),
  //    sum them over the block the same way and set inv_sum = 1 / sum. partial[] is shared by
  //    all warps: ask yourself when every warp is done reading it.
  float inv_sum = 0.f;
  // BEGIN SOLUTION Task 10: softmax, block-wide max and sum through warp shuffles
  float row_max = warp_max(thread_max);
  if (lane == 0) partial[warp] = row_max;
  __syncthreads();
  row_max = warp_max(lane < NUM_WARPS ? partial[lane] : LOWEST_FLOAT);

  float thread_sum = 0.f;
  for (int t = tid; t < seq_len; t += NUM_THREADS) {
    const float e = expf(logits[t] - row_max);
    logits[t] = e;
    thread_sum += e;
  }
  // partial[] is reused for the sum: wait until every warp has read the max out of it.
  __syncthreads();
  float row_sum = warp_sum(thread_sum);
  if (lane == 0) partial[warp] = row_sum;
  // This barrier also makes every thread's exponentials in logits[] visible to all threads.
  __syncthreads();
  row_sum = warp_sum(lane < NUM_WARPS ? partial[lane] : 0.f);
  inv_sum = 1.f / row_sum;
  // END SOLUTION

  // 3. Output. out_vec[d] = inv_sum * sum over t of logits[t] * value of token t at dimension d.
  //    Thread tid owns dimensions d = tid, tid + NUM_THREADS, ... < head_size. Walking the
  //    sequence block by block reads the block table once per block, not once per token.
  float* out_vec = out + ((long long)seq * num_heads + head) * head_size;
  // BEGIN SOLUTION Task 10: weighted sum of V, normalized, written to out
  for (int d = tid; d < head_size; d += NUM_THREADS) {
    float acc = 0.f;
    for (int first = 0; first < seq_len; first += block_size) {
      const float* v = v_cache + block_table[first / block_size] * block_stride
                       + kv_head * head_size + d;
      const int tokens = seq_len - first < block_size ? seq_len - first : block_size;
      for (int i = 0; i < tokens; ++i) {
        acc += logits[first + i] * v[i * token_stride];
      }
    }
    out_vec[d] = acc * inv_sum;
  }
  // END SOLUTION
}
