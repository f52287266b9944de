// Kernels with planted bugs: each must be caught by the CPU executor with the right error.

// BUG: no __syncthreads() between writing warp_sums[] and warp 0 reading it.
extern "C" __global__ void sum_missing_barrier(const float* x, float* total, int n) {
  __shared__ float warp_sums[32];
  float v = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) v += x[i];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_sums[warp] = v;
  if (warp == 0) {
    v = lane < blockDim.x / 32 ? warp_sums[lane] : 0.f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
    if (lane == 0) *total = v;
  }
}

// BUG: thread 0 publishes a value; the others read it without waiting for it.
extern "C" __global__ void broadcast_missing_barrier(const float* x, float* out) {
  __shared__ float value;
  if (threadIdx.x == 0) value = x[0] * 2.f;
  out[threadIdx.x] = value;
}

// BUG: a barrier inside a branch that only half of the block takes.
extern "C" __global__ void divergent_barrier(float* out) {
  __shared__ float s[128];
  s[threadIdx.x] = threadIdx.x;
  if (threadIdx.x < 64) {
    __syncthreads();
    out[threadIdx.x] = s[127 - threadIdx.x];
  } else {
    __syncthreads();
    out[threadIdx.x] = s[127 - threadIdx.x];
  }
}

// BUG: threads past n return before the barrier the others wait at.
extern "C" __global__ void early_return(const float* x, float* out, int n) {
  __shared__ float s[128];
  if (threadIdx.x >= n) return;
  s[threadIdx.x] = x[threadIdx.x];
  __syncthreads();
  out[threadIdx.x] = s[n - 1 - threadIdx.x];
}

// BUG: writes 2 * blockDim.x floats into dynamic shared memory sized for blockDim.x.
extern "C" __global__ void dynamic_shared_overrun(float* out) {
  extern __shared__ float buf[];
  buf[threadIdx.x] = 1.f;
  buf[threadIdx.x + blockDim.x] = 2.f;
  __syncthreads();
  out[threadIdx.x] = buf[threadIdx.x];
}

// BUG: writes through a null pointer (the address comes in as an integer argument).
extern "C" __global__ void null_write(float* out, long long address) {
  float* p = (float*)address;
  p[threadIdx.x] = 1.f;
  out[threadIdx.x] = 1.f;
}

// BUG: waits for a flag that nothing ever sets.
extern "C" __global__ void spin_forever(volatile int* flag, float* out) {
  while (flag[0] == 0) {
  }
  out[threadIdx.x] = 1.f;
}

// BUG: only the lower half of the warp calls a shuffle whose mask names all 32 lanes.
extern "C" __global__ void half_warp_shuffle(float* out) {
  float v = threadIdx.x;
  if (threadIdx.x % 32 < 16) v = __shfl_xor_sync(0xffffffff, v, 1);
  out[threadIdx.x] = v;
}

// BUG: the index runs one past the end of out (n elements).
extern "C" __global__ void write_past_end(float* out, int n) {
  out[threadIdx.x % (n + 1)] = 1.f;
}

// BUG: a 4 MiB local array per thread does not fit a thread's stack.
extern "C" __global__ void huge_local_array(float* out) {
  volatile float big[1 << 20];
  big[threadIdx.x] = 1.f;
  big[(1 << 20) - 1 - threadIdx.x] = 2.f;
  out[threadIdx.x] = big[threadIdx.x] + big[(1 << 20) - 1 - threadIdx.x];
}

// BUG: odd lanes shuffle while even lanes take a ballot, all with the full mask.
extern "C" __global__ void mismatched_warp_ops(float* out) {
  float v = threadIdx.x;
  if (threadIdx.x % 2) v = __shfl_xor_sync(0xffffffff, v, 1);
  else v = __ballot_sync(0xffffffff, v > 3.f);
  out[threadIdx.x] = v;
}

// BUG: asserts something that is false for thread 5.
extern "C" __global__ void failing_assert(const int* x, unsigned int* count) {
  assert(x[threadIdx.x] != 5);
  atomicAdd(count, 1);  // int literal into an unsigned counter: converts, as in CUDA
}

// BUG: the two half-warps name different masks, but the upper half's mask includes the lower.
extern "C" __global__ void mismatched_masks(float* out) {
  float v = threadIdx.x;
  unsigned mask = threadIdx.x < 16 ? 0x0000ffffu : 0xffffffffu;
  v += __shfl_down_sync(mask, v, 1);
  out[threadIdx.x] = v;
}

// BUG: thread 0 writes one float far past the dynamic shared memory (index comes from the host).
extern "C" __global__ void dynamic_shared_far_write(float* out, int index) {
  extern __shared__ float buf[];
  buf[threadIdx.x] = 1.f;
  if (threadIdx.x == 0) buf[index] = 3.f;
  __syncthreads();
  out[threadIdx.x] = buf[threadIdx.x];
}
