// pagedlab corpus: the classic kernels of a CUDA course, small sizes.
#include <math_constants.h>
#define TILE 16

// 40. tiled matrix multiply: C[M,N] = A[M,K] B[K,N], TILE x TILE blocks
__global__ void matmul_tiled(const float* A, const float* B, float* C, int M, int N, int K) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        As[threadIdx.y][threadIdx.x] = (row < M && k0 + threadIdx.x < K) ? A[row * K + k0 + threadIdx.x] : 0.0f;
        Bs[threadIdx.y][threadIdx.x] = (col < N && k0 + threadIdx.y < K) ? B[(k0 + threadIdx.y) * N + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = acc;
}

// 41. transpose through a padded shared tile (no bank conflicts on the column read)
__global__ void transpose_padded(float* out, const float* in, int rows, int cols) {
    __shared__ float tile[TILE][TILE + 1];
    int x = blockIdx.x * TILE + threadIdx.x, y = blockIdx.y * TILE + threadIdx.y;
    if (x < cols && y < rows) tile[threadIdx.y][threadIdx.x] = in[y * cols + x];
    __syncthreads();
    x = blockIdx.y * TILE + threadIdx.x;
    y = blockIdx.x * TILE + threadIdx.y;
    if (x < rows && y < cols) out[y * rows + x] = tile[threadIdx.x][threadIdx.y];
}

// 42. inclusive scan of one block (Hillis-Steele, double buffered)
__global__ void scan_block(int* out, const int* in, int n) {
    __shared__ int buf[2][256];
    int t = threadIdx.x, cur = 0;
    buf[0][t] = t < n ? in[t] : 0;
    __syncthreads();
    for (int off = 1; off < (int)blockDim.x; off *= 2) {
        int v = buf[cur][t];
        if (t >= off) v += buf[cur][t - off];
        buf[1 - cur][t] = v;
        cur = 1 - cur;
        __syncthreads();
    }
    if (t < n) out[t] = buf[cur][t];
}

// 43. histogram with a private copy per block in shared memory
__global__ void histogram_private(unsigned* hist, const unsigned char* data, int n, int bins) {
    extern __shared__ unsigned local[];
    for (int b = threadIdx.x; b < bins; b += blockDim.x) local[b] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        atomicAdd(&local[data[i] % bins], 1u);
    __syncthreads();
    for (int b = threadIdx.x; b < bins; b += blockDim.x) atomicAdd(&hist[b], local[b]);
}

// 44. bitonic sort of one block's keys in shared memory
__global__ void bitonic_sort(float* keys) {
    extern __shared__ float s[];
    unsigned t = threadIdx.x, n = blockDim.x;
    s[t] = keys[blockIdx.x * n + t];
    __syncthreads();
    for (unsigned size = 2; size <= n; size <<= 1) {
        for (unsigned stride = size >> 1; stride > 0; stride >>= 1) {
            unsigned partner = t ^ stride;
            if (partner > t) {
                bool up = (t & size) == 0;
                float a = s[t], b = s[partner];
                if ((a > b) == up) { s[t] = b; s[partner] = a; }
            }
            __syncthreads();
        }
    }
    keys[blockIdx.x * n + t] = s[t];
}

// 45. row softmax, one block per row: max, then sum of exponentials
__global__ void softmax_rows(float* out, const float* in, int cols) {
    __shared__ float red[128];
    const float* x = in + blockIdx.x * cols;
    float m = -CUDART_INF_F;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, x[c]);
    red[threadIdx.x] = m;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
        __syncthreads();
    }
    m = red[0];
    __syncthreads();
    float sum = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) sum += expf(x[c] - m);
    red[threadIdx.x] = sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    float inv = 1.0f / red[0];
    for (int c = threadIdx.x; c < cols; c += blockDim.x) out[blockIdx.x * cols + c] = expf(x[c] - m) * inv;
}

// 46. layer norm, one warp per row, shuffles for mean and variance
__global__ void layernorm_rows(float* out, const float* in, const float* gamma, const float* beta,
                               int rows, int cols, float eps) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows) return;
    const float* x = in + row * cols;
    float s = 0.0f;
    for (int c = lane; c < cols; c += 32) s += x[c];
    for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
    float mean = s / cols, v = 0.0f;
    for (int c = lane; c < cols; c += 32) v += (x[c] - mean) * (x[c] - mean);
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    float rstd = rsqrtf(v / cols + eps);
    for (int c = lane; c < cols; c += 32) out[row * cols + c] = (x[c] - mean) * rstd * gamma[c] + beta[c];
}

// 47. 1D stencil with a halo loaded into shared memory
#define RADIUS 3
__global__ void stencil_halo(float* out, const float* in, int n) {
    extern __shared__ float tmp[];
    int g = blockIdx.x * blockDim.x + threadIdx.x, l = threadIdx.x + RADIUS;
    tmp[l] = g < n ? in[g] : 0.0f;
    if (threadIdx.x < RADIUS) {
        int left = g - RADIUS, right = g + blockDim.x;
        tmp[l - RADIUS] = left >= 0 ? in[left] : 0.0f;
        tmp[l + blockDim.x] = right < n ? in[right] : 0.0f;
    }
    __syncthreads();
    if (g < n) {
        float s = 0.0f;
        for (int k = -RADIUS; k <= RADIUS; ++k) s += tmp[l + k];
        out[g] = s;
    }
}

// 48. Black-Scholes call and put prices
__device__ float cnd(float d) { return 0.5f * erfcf(-d * 0.70710678118654752f); }
__global__ void black_scholes(float* call, float* put, const float* S, const float* K, const float* T,
                              float r, float v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float sq = sqrtf(T[i]);
    float d1 = (logf(S[i] / K[i]) + (r + 0.5f * v * v) * T[i]) / (v * sq);
    float d2 = d1 - v * sq;
    float disc = expf(-r * T[i]);
    call[i] = S[i] * cnd(d1) - K[i] * disc * cnd(d2);
    put[i] = K[i] * disc * cnd(-d2) - S[i] * cnd(-d1);
}

// 49. a slow launch (many blocks of busy work), for the watchdog's progress report
__global__ void busy_blocks(float* out, int iters) {
    float a = (float)threadIdx.x;
    for (int k = 0; k < iters; ++k) a = a * 0.999f + 1.0f;
    out[blockIdx.x * blockDim.x + threadIdx.x] = a;
}
