// Part E: the v2 paged-attention decode kernel (vLLM's paged_attention_v2, fp32, simplified).
//
// v1 gives one thread block a whole (head, sequence) pair. For a long context with few
// sequences that is too few blocks to fill a GPU, and the logits of the whole context must fit
// in shared memory. v2 splits every context into partitions of `partition_size` tokens (vLLM
// uses 512) and gives each partition its own thread block ("split-K", as in FlashDecoding):
//   paged_attention_v2         grid = (num_heads, num_seqs, max_num_partitions)
//     block (h, s, p) scores tokens [p * partition_size, min((p + 1) * partition_size, len))
//     and writes three things for its partition to global temporaries:
//       max_logits[s, h, p] = m_p = max of its logits
//       exp_sums[s, h, p]   = l_p = sum of exp(logit - m_p)
//       tmp_out[s, h, p, :] = o_p = sum of exp(logit - m_p) * v      (NOT divided by l_p)
//   paged_attention_v2_reduce  grid = (num_heads, num_seqs)
//     merges the partitions with the log-sum-exp rescaling: with M = max_p m_p,
//       out = sum_p exp(m_p - M) * o_p  /  sum_p exp(m_p - M) * l_p
// A block whose partition starts at or past its sequence's length writes nothing, and the
// reduce kernel reads only the ceil(len / partition_size) partitions that exist.
//
// Layouts (row-major, float32 unless said otherwise) are those of paged_attention.cu:
//   q, out        [num_seqs, num_heads, head_size]
//   k_cache,
//   v_cache       [num_blocks, block_size, num_kv_heads, head_size]
//   block_tables  [num_seqs, max_blocks_per_seq]   int32
//   seq_lens      [num_seqs]                       int32
//   max_logits,
//   exp_sums      [num_seqs, num_heads, max_num_partitions]
//   tmp_out       [num_seqs, num_heads, max_num_partitions, head_size]
// partition_size is a multiple of block_size, so a partition starts at a block boundary.
// Dynamic shared memory: partition_size * 4 bytes (v2), max_num_partitions * 4 bytes (reduce).
//
// No #include: NVRTC compiles this text for a GPU, and pagedlab's CPU executor runs it as is.

#define NUM_THREADS 128
#define WARP_SIZE 32
#define NUM_WARPS (NUM_THREADS / WARP_SIZE)
#define MAX_HEAD_SIZE 256
#define FULL_MASK 0xffffffffu
#define LOWEST_FLOAT (-3.402823466e+38f)

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

// The max over the block of every thread's x. `partial` holds NUM_WARPS floats; the barrier at
// the end lets the caller reuse it at once.
__device__ float block_max(float x, float* partial) {
  const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
  x = warp_max(x);
  if (lane == 0) partial[warp] = x;
  __syncthreads();
  x = warp_max(lane < NUM_WARPS ? partial[lane] : LOWEST_FLOAT);
  __syncthreads();
  return x;
}

__device__ float block_sum(float x, float* partial) {
  const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
  x = warp_sum(x);
  if (lane == 0) partial[warp] = x;
  __syncthreads();
  x = warp_sum(lane < NUM_WARPS ? partial[lane] : 0.f);
  __syncthreads();
  return x;
}

extern "C" __global__ void paged_attention_v2(
    float* exp_sums, float* max_logits, float* tmp_out, const float* q, const float* k_cache,
    const float* v_cache, const int* block_tables, const int* seq_lens, float scale,
    int num_kv_heads, int head_size, int block_size, int max_blocks_per_seq, int partition_size) {
  const int head = blockIdx.x;
  const int seq = blockIdx.y;
  const int partition = blockIdx.z;
  const int num_heads = gridDim.x;
  const int max_num_partitions = gridDim.z;
  const int tid = threadIdx.x;

  const int seq_len = seq_lens[seq];
  const int kv_head = head / (num_heads / num_kv_heads);
  const int* block_table = block_tables + (long long)seq * max_blocks_per_seq;
  const long long token_stride = (long long)num_kv_heads * head_size;
  const long long block_stride = token_stride * block_size;
  // Where this (sequence, head, partition) keeps its max, exp-sum and partial output.
  const long long slot = ((long long)seq * num_heads + head) * max_num_partitions + partition;

  extern __shared__ float logits[];          // [partition_size]: this partition's logits
  __shared__ float q_shared[MAX_HEAD_SIZE];
  __shared__ float partial[NUM_WARPS];

  // 0. This block's tokens: [start, end). Sequences shorter than the longest one have fewer
  //    partitions; a block past the end of its sequence returns without writing anything.
  int start = 0, end = 0;
  // YOUR CODE HERE (Task 14: this partition's token range (and the early exit past the end))
  // Until this part is written the kernel leaves its output unwritten.
  return;

  const float* q_vec = q + ((long long)seq * num_heads + head) * head_size;
  for (int d = tid; d < head_size; d += NUM_THREADS) {
    q_shared[d] = q_vec[d];
  }
  __syncthreads();

  // 1. Logits of the partition's tokens, as in v1 but shifted: token t goes to logits[t - start].
  float thread_max = LOWEST_FLOAT;
  for (int t = start + tid; t < end; t += NUM_THREADS) {
    const int block = block_table[t / block_size];
    const float* k = k_cache + block * block_stride + (t % block_size) * token_stride
                     + kv_head * head_size;
    float dot = 0.f;
    for (int d = 0; d < head_size; ++d) {
      dot += q_shared[d] * k[d];
    }
    logits[t - start] = dot * scale;
    thread_max = fmaxf(thread_max, logits[t - start]);
  }

  // 2. The partition's statistics: m = block max of the logits; replace each logit by
  //    exp(logit - m) and sum them into l. One thread writes m and l to max_logits[slot] and
  //    exp_sums[slot]. (block_max / block_sum end with a barrier: logits[] is then visible to
  //    every thread.)
  // YOUR CODE HERE (Task 14: partition max and exp-sum, written to max_logits and exp_sums)
  // Until this part is written the kernel leaves its output unwritten.
  return;

  // 3. The partition's unnormalised output: tmp_out[slot, d] = sum over the partition's tokens
  //    of exp(logit - m) * v[d]. Do not divide by l: the reduce kernel does, once, globally.
  float* out_vec = tmp_out + slot * head_size;
  // YOUR CODE HERE (Task 14: unnormalised weighted sum of V over the partition, to tmp_out)
  // Until this part is written the kernel leaves its output unwritten.
  return;
}

extern "C" __global__ void paged_attention_v2_reduce(
    float* out, const float* exp_sums, const float* max_logits, const float* tmp_out,
    const int* seq_lens, int head_size, int partition_size, int max_num_partitions) {
  const int head = blockIdx.x;
  const int seq = blockIdx.y;
  const int num_heads = gridDim.x;
  const int tid = threadIdx.x;

  const int seq_len = seq_lens[seq];
  const int num_partitions = (seq_len + partition_size - 1) / partition_size;
  const long long first_slot = ((long long)seq * num_heads + head) * max_num_partitions;
  const float* m = max_logits + first_slot;   // m[p], p < num_partitions
  const float* l = exp_sums + first_slot;     // l[p]
  const float* o = tmp_out + first_slot * head_size;  // o[p * head_size + d]
  float* out_vec = out + ((long long)seq * num_heads + head) * head_size;

  extern __shared__ float weights[];  // [max_num_partitions]: exp(m[p] - M)
  __shared__ float partial[NUM_WARPS];

  // Log-sum-exp merge: M = max of m[p]; weights[p] = exp(m[p] - M) brings every partition to
  // the same reference; total = sum of weights[p] * l[p];
  // out[d] = sum of weights[p] * o[p * head_size + d], divided by total.
  // YOUR CODE HERE (Task 14: reduce, rescale every partition to the global max and combine)
  // Until this part is written the kernel leaves its output unwritten.
  return;
}
