// A deliberately broken kernel, shipped for notebook 08's "missing barrier" demo.
//
// softmax_rows: out[r, :] = softmax(x[r, :]) for one row r per thread block of 128 threads.
// The block-wide max and the block-wide sum both pass through the same 4-float shared array
// `scratch`, one slot per warp. Between its two uses a __syncthreads() is MISSING: a warp that
// runs ahead can store its sum in scratch[] while a slower warp still reads the maxima there.
// Whether that happens depends on the order the threads run in, which is the point of the demo.
// The line marked BARRIER is where the barrier belongs (the notebook puts it back).
//
// This is not Task 10's kernel and not a solution of it.

#define ROW_THREADS 128
#define LANES 32

__device__ float lanes_max(float v) {
  for (int step = LANES >> 1; step >= 1; step >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, step));
  return v;
}

__device__ float lanes_add(float v) {
  for (int step = LANES >> 1; step >= 1; step >>= 1)
    v = v + __shfl_xor_sync(0xffffffffu, v, step);
  return v;
}

extern "C" __global__ void softmax_rows(float* out, const float* x, int width) {
  __shared__ float scratch[ROW_THREADS / LANES];
  const float* row_in = x + (long long)blockIdx.x * width;
  float* row_out = out + (long long)blockIdx.x * width;
  const int me = threadIdx.x;
  const int my_warp = me / LANES;
  const bool leader = (me % LANES) == 0;

  // Block-wide max: each warp folds its lanes, its leader posts the result in scratch[].
  float top = -3.0e38f;
  for (int c = me; c < width; c += ROW_THREADS) top = fmaxf(top, row_in[c]);
  top = lanes_max(top);
  if (leader) scratch[my_warp] = top;
  __syncthreads();
  top = fmaxf(fmaxf(scratch[0], scratch[1]), fmaxf(scratch[2], scratch[3]));

  // Block-wide sum of exp(x - top), through the same scratch[].
  float total = 0.0f;
  for (int c = me; c < width; c += ROW_THREADS) total += expf(row_in[c] - top);
  total = lanes_add(total);
  // BARRIER
  if (leader) scratch[my_warp] = total;
  __syncthreads();
  total = scratch[0] + scratch[1] + scratch[2] + scratch[3];

  for (int c = me; c < width; c += ROW_THREADS) row_out[c] = expf(row_in[c] - top) / total;
}
