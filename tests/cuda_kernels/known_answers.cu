// Kernels with known answers for the CPU executor's tests. No #include: NVRTC compiles this too.

// c = a + b over a 2-D grid of 2-D blocks; the matrix is rows x cols, row-major.
extern "C" __global__ void matrix_add(const float* a, const float* b, float* c, int rows, int cols) {
  int col = blockIdx.x * blockDim.x + threadIdx.x;
  int row = blockIdx.y * blockDim.y + threadIdx.y;
  if (row < rows && col < cols) {
    c[row * cols + col] = a[row * cols + col] + b[row * cols + col];
  }
}

// out = in^T with a 32x32 shared tile (padded against bank conflicts), blocks of 32x8 threads.
#define TILE 32
#define ROWS_PER_PASS 8
extern "C" __global__ void transpose(const float* in, float* out, int rows, int cols) {
  __shared__ float tile[TILE][TILE + 1];
  int x = blockIdx.x * TILE + threadIdx.x;
  int y = blockIdx.y * TILE + threadIdx.y;
  for (int j = 0; j < TILE; j += ROWS_PER_PASS) {
    if (x < cols && y + j < rows) tile[threadIdx.y + j][threadIdx.x] = in[(y + j) * cols + x];
  }
  __syncthreads();
  x = blockIdx.y * TILE + threadIdx.x;  // swapped block coordinates
  y = blockIdx.x * TILE + threadIdx.y;
  for (int j = 0; j < TILE; j += ROWS_PER_PASS) {
    if (x < rows && y + j < cols) out[(y + j) * rows + x] = tile[threadIdx.x][threadIdx.y + j];
  }
}

// *total += sum(x): a grid-stride loop, warp shuffles, one shared slot per warp, atomicAdd.
extern "C" __global__ void block_sum(const float* x, float* total, int n) {
  __shared__ float warp_sums[32];
  float v = 0.f;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) v += x[i];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffff, v, o);
  int lane = threadIdx.x % warpSize, warp = threadIdx.x / warpSize;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < blockDim.x / warpSize ? warp_sums[lane] : 0.f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
    if (lane == 0) atomicAdd(total, v);
  }
}

// counts[b] += number of values == b; a private shared histogram per block, then global atomics.
extern "C" __global__ void histogram(const int* values, int n, unsigned int* counts, int bins) {
  extern __shared__ unsigned int local[];
  for (int b = threadIdx.x; b < bins; b += blockDim.x) local[b] = 0;
  __syncthreads();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    atomicAdd(&local[values[i]], 1u);
  }
  __syncthreads();
  for (int b = threadIdx.x; b < bins; b += blockDim.x) atomicAdd(&counts[b], local[b]);
}

// Inclusive prefix sum of each block's slice (Hillis-Steele, double-buffered dynamic shared
// memory of 2 * blockDim.x floats); the number of set bits of each ballot is checked too.
extern "C" __global__ void block_scan(const float* in, float* out, int n, int* positive) {
  extern __shared__ float buf[];
  int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  float* src = buf;
  float* dst = buf + blockDim.x;
  src[t] = i < n ? in[i] : 0.f;
  unsigned ballot = __ballot_sync(0xffffffff, i < n && in[i] > 0.f);
  if (t % warpSize == 0) atomicAdd(positive, __popc(ballot));
  __syncthreads();
  for (int offset = 1; offset < blockDim.x; offset *= 2) {
    dst[t] = t >= offset ? src[t] + src[t - offset] : src[t];
    __syncthreads();
    float* tmp = src; src = dst; dst = tmp;
  }
  if (i < n) out[i] = src[t];
}

// Warp primitives side by side: out[tid * 4 + k] for k = shfl idx, up, down, any/all bits.
extern "C" __global__ void warp_ops(const int* x, int* out) {
  int t = threadIdx.x, v = x[t];
  out[t * 4 + 0] = __shfl_sync(0xffffffff, v, 3);
  out[t * 4 + 1] = __shfl_up_sync(0xffffffff, v, 2);
  out[t * 4 + 2] = __shfl_down_sync(0xffffffff, v, 5, 16);
  out[t * 4 + 3] = __any_sync(0xffffffff, v > 90) * 2 + __all_sync(0xffffffff, v >= 0);
}

// Reads a shared array no thread wrote: on the executor it is poisoned (NaN).
extern "C" __global__ void read_unwritten(float* out) {
  __shared__ float never_written[64];
  out[threadIdx.x] = never_written[threadIdx.x];
}

// Block-wide votes and a partial last warp (48 threads: lanes 16-31 of warp 1 do not exist,
// so the full mask means "every lane that exists").
extern "C" __global__ void votes(const float* x, int* out) {
  float v = x[blockIdx.x * blockDim.x + threadIdx.x];
  int positive = __syncthreads_count(v > 0.f);
  int all_small = __syncthreads_and(fabsf(v) < 10.f);
  int any_big = __syncthreads_or(v > 1.f);
  unsigned ballot = __ballot_sync(0xffffffff, v > 0.f);
  if (threadIdx.x == 0) {
    out[blockIdx.x * 4 + 0] = positive;
    out[blockIdx.x * 4 + 1] = all_small;
    out[blockIdx.x * 4 + 2] = any_big;
  }
  if (threadIdx.x == 32) out[blockIdx.x * 4 + 3] = (int)ballot;
}

extern "C" __global__ void say_hello(int tag) {
  if (threadIdx.x == 1) printf("hello %d from block %d\n", tag, blockIdx.x);
}
