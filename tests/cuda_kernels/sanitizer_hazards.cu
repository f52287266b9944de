// Kernels with planted shared-memory hazards, out-of-bounds accesses and uninitialised reads:
// each must be caught by the CPU executor's sanitizer (check=...) under every schedule.
// A marker `// <- name` tags each line the report for kernel `name` must name (the
// canonical report: the first hazard met under round_robin with one worker).
// No #include: NVRTC compiles this too.

#define TILE 16

// BUG: the tile is reloaded for the next step while other threads still read the current one
// (the second __syncthreads() of a tiled matrix product is missing). c = a . b, n x n.
extern "C" __global__ void matmul_tile_reload(const float* a, const float* b, float* c, int n) {
  __shared__ float as[TILE][TILE];
  __shared__ float bs[TILE][TILE];
  int tx = threadIdx.x, ty = threadIdx.y;
  int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
  float acc = 0.f;
  for (int t0 = 0; t0 < n; t0 += TILE) {
    as[ty][tx] = a[row * n + t0 + tx];  // <- matmul_tile_reload
    bs[ty][tx] = b[(t0 + ty) * n + col];
    __syncthreads();
    for (int k = 0; k < TILE; ++k) acc += as[ty][k] * bs[k][tx];  // <- matmul_tile_reload
  }
  c[row * n + col] = acc;
}

// BUG: a warp-synchronous reduction through volatile shared memory without __syncwarp():
// lanes of a warp do not run in lockstep on Volta and later. 64 threads.
extern "C" __global__ void volatile_warp_reduce(const float* x, float* out) {
  __shared__ float s[64];
  int tid = threadIdx.x;
  s[tid] = x[tid];
  __syncthreads();
  if (tid < 32) {
    volatile float* v = s;
    v[tid] += v[tid + 32];  // <- volatile_warp_reduce
    v[tid] += v[tid + 16];
    v[tid] += v[tid + 8];
    v[tid] += v[tid + 4];
    v[tid] += v[tid + 2];
    v[tid] += v[tid + 1];  // <- volatile_warp_reduce
  }
  if (tid == 0) out[0] = s[0];
}

// BUG: every thread writes the same slot in one barrier interval (write-write).
extern "C" __global__ void all_write_one_slot(int* out) {
  __shared__ int winner;
  winner = threadIdx.x;  // <- all_write_one_slot
  __syncthreads();
  if (threadIdx.x == 0) out[blockIdx.x] = winner;
}

// BUG: thread 0 publishes a value to threads of other warps without a barrier. 128 threads.
extern "C" __global__ void publish_without_barrier(const float* x, float* out) {
  __shared__ float scale;
  if (threadIdx.x == 0) scale = x[0];      // <- publish_without_barrier
  out[threadIdx.x] = x[threadIdx.x] * scale;  // <- publish_without_barrier
}

// ---- out of bounds --------------------------------------------------------------------------

// Reads x[i + offset] for i < n: offset 1 reads one past the end, a large one far away.
extern "C" __global__ void read_shifted(const float* x, float* y, int n, int offset) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i + offset];  // <- read_shifted
}

// Writes y[i + offset] for i < n.
extern "C" __global__ void write_shifted(const float* x, float* y, int n, int offset) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i + offset] = x[i];  // <- write_shifted
}

// Reads element `index` of the launch's dynamic shared memory.
extern "C" __global__ void dynamic_shared_read(float* out, int index) {
  extern __shared__ float dyn[];
  dyn[threadIdx.x] = 1.f;
  __syncthreads();
  if (threadIdx.x == 0) out[0] = dyn[index];  // <- dynamic_shared_read
}

// ---- uninitialised --------------------------------------------------------------------------

// BUG: a histogram that never clears its shared counters.
extern "C" __global__ void histogram_without_clearing(const int* values, int n, unsigned int* counts) {
  __shared__ unsigned int local[16];
  for (int i = threadIdx.x; i < n; i += blockDim.x) atomicAdd(&local[values[i]], 1u);  // <- histogram_without_clearing
  __syncthreads();
  if (threadIdx.x < 16) counts[threadIdx.x] = local[threadIdx.x];
}

// BUG: half of the buffer is filled, all of it is read (after a correct barrier).
extern "C" __global__ void read_half_filled(float* out) {
  __shared__ float buf[64];
  if (threadIdx.x < 32) buf[threadIdx.x] = threadIdx.x;
  __syncthreads();
  out[threadIdx.x] = buf[threadIdx.x];  // <- read_half_filled
}
