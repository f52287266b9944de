// Correct kernels the sanitizer must accept (no false positives): reductions, scans,
// transposes, a tiled product, histograms with atomics, byte-sized shared flags.
// No #include: NVRTC compiles this too.

#define TILE 16

// Tree reduction in shared memory, a barrier per step. blockDim.x a power of two <= 256.
extern "C" __global__ void reduce_tree(const float* x, float* out, int n) {
  __shared__ float s[256];
  int tid = threadIdx.x, i = blockIdx.x * blockDim.x + tid;
  s[tid] = i < n ? x[i] : 0.f;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (tid < stride) s[tid] += s[tid + stride];
    __syncthreads();
  }
  if (tid == 0) out[blockIdx.x] = s[0];
}

// The last warp reduces through shared memory, ordered by __syncwarp() (read, sync, write,
// sync): the Volta-safe form of the warp-synchronous reduction. 64 threads.
extern "C" __global__ void reduce_warp_synced(const float* x, float* out) {
  __shared__ float s[64];
  int tid = threadIdx.x;
  s[tid] = x[blockIdx.x * 64 + tid];
  __syncthreads();
  if (tid < 32) {
    float v = s[tid] + s[tid + 32];
    __syncwarp();
    s[tid] = v;
    __syncwarp();
    for (int offset = 16; offset > 0; offset /= 2) {
      v += s[tid + offset];
      __syncwarp();
      s[tid] = v;
      __syncwarp();
    }
  }
  if (tid == 0) out[blockIdx.x] = s[0];
}

// Work-efficient (Blelloch) exclusive scan of 2 * blockDim.x elements in place.
extern "C" __global__ void scan_blelloch(const float* x, float* y) {
  extern __shared__ float t[];
  int tid = threadIdx.x, n = 2 * blockDim.x;
  const float* in = x + blockIdx.x * n;
  t[2 * tid] = in[2 * tid];
  t[2 * tid + 1] = in[2 * tid + 1];
  int offset = 1;
  for (int d = n / 2; d > 0; d /= 2) {
    __syncthreads();
    if (tid < d) {
      int ai = offset * (2 * tid + 1) - 1, bi = offset * (2 * tid + 2) - 1;
      t[bi] += t[ai];
    }
    offset *= 2;
  }
  if (tid == 0) t[n - 1] = 0.f;
  for (int d = 1; d < n; d *= 2) {
    offset /= 2;
    __syncthreads();
    if (tid < d) {
      int ai = offset * (2 * tid + 1) - 1, bi = offset * (2 * tid + 2) - 1;
      float v = t[ai];
      t[ai] = t[bi];
      t[bi] += v;
    }
  }
  __syncthreads();
  y[blockIdx.x * n + 2 * tid] = t[2 * tid];
  y[blockIdx.x * n + 2 * tid + 1] = t[2 * tid + 1];
}

// The same tiled product with both barriers: c = a . b, n x n, n a multiple of TILE.
extern "C" __global__ void matmul_tiled(const float* a, const float* b, float* c, int n) {
  __shared__ float as[TILE][TILE];
  __shared__ float bs[TILE][TILE];
  int tx = threadIdx.x, ty = threadIdx.y;
  int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
  float acc = 0.f;
  for (int t0 = 0; t0 < n; t0 += TILE) {
    as[ty][tx] = a[row * n + t0 + tx];
    bs[ty][tx] = b[(t0 + ty) * n + col];
    __syncthreads();
    for (int k = 0; k < TILE; ++k) acc += as[ty][k] * bs[k][tx];
    __syncthreads();
  }
  c[row * n + col] = acc;
}

// ---- transposes, n x n (n a multiple of 32), blocks of 32 x 8 threads -----------------------

extern "C" __global__ void transpose_naive(const float* in, float* out, int n) {
  int x = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y * 32 + threadIdx.y;
  for (int j = 0; j < 32; j += 8) out[x * n + y + j] = in[(y + j) * n + x];  // naive store
}

extern "C" __global__ void transpose_tiled(const float* in, float* out, int n) {
  __shared__ float tile[32][32];
  int x = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y * 32 + threadIdx.y;
  for (int j = 0; j < 32; j += 8) tile[threadIdx.y + j][threadIdx.x] = in[(y + j) * n + x];  // tiled load
  __syncthreads();
  x = blockIdx.y * 32 + threadIdx.x;
  y = blockIdx.x * 32 + threadIdx.y;
  for (int j = 0; j < 32; j += 8) out[(y + j) * n + x] = tile[threadIdx.x][threadIdx.y + j];  // tiled store
}

extern "C" __global__ void transpose_padded(const float* in, float* out, int n) {
  __shared__ float tile[32][33];
  int x = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y * 32 + threadIdx.y;
  for (int j = 0; j < 32; j += 8) tile[threadIdx.y + j][threadIdx.x] = in[(y + j) * n + x];  // padded load
  __syncthreads();
  x = blockIdx.y * 32 + threadIdx.x;
  y = blockIdx.x * 32 + threadIdx.y;
  for (int j = 0; j < 32; j += 8) out[(y + j) * n + x] = tile[threadIdx.x][threadIdx.y + j];  // padded store
}

// ---- copies for the profile ------------------------------------------------------------------

extern "C" __global__ void copy_coalesced(const float* in, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i];  // coalesced
}

// Thread i copies element i * stride: each lane of a warp lands in its own sector.
extern "C" __global__ void copy_strided(const float* in, float* out, int n, int stride) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i * stride < n) out[i * stride] = in[i * stride];  // strided
}

// ---- atomics and bytes -------------------------------------------------------------------------

// Shared counters cleared, then updated with atomics by every thread: atomics do not race.
extern "C" __global__ void histogram_atomics(const int* values, int n, unsigned int* counts) {
  __shared__ unsigned int local[16];
  if (threadIdx.x < 16) local[threadIdx.x] = 0;
  __syncthreads();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    atomicAdd(&local[values[i]], 1u);
  __syncthreads();
  if (threadIdx.x < 16) atomicAdd(&counts[threadIdx.x], local[threadIdx.x]);
}

// Neighbouring threads write neighbouring bytes: no two threads touch the same byte.
extern "C" __global__ void byte_flags(const int* x, int* out) {
  __shared__ unsigned char positive[128];
  positive[threadIdx.x] = x[threadIdx.x] > 0;
  __syncthreads();
  if (threadIdx.x == 0) {
    int count = 0;
    for (int i = 0; i < 128; ++i) count += positive[i];
    out[0] = count;
  }
}
