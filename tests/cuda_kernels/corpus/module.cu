// pagedlab corpus: a module (RawModule) with __constant__ memory written from the host, a
// __device__ variable, and template kernels instantiated through name expressions.

// 36. __constant__ polynomial coefficients set with get_global
__constant__ float coeffs[4];
__constant__ int degree;
__global__ void poly_eval(float* y, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float acc = 0.0f;
        for (int k = degree; k >= 0; --k) acc = acc * x[i] + coeffs[k];
        y[i] = acc;
    }
}

// 37. a template kernel over the element type
template <typename T>
__global__ void scale_by(T* out, const T* in, T factor, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] * factor;
}

// 38. a template kernel over a compile-time block size (static shared memory sized by it)
template <int BLOCK>
__global__ void block_sum(float* partial, const float* x) {
    __shared__ float s[BLOCK];
    s[threadIdx.x] = x[blockIdx.x * BLOCK + threadIdx.x];
    __syncthreads();
    for (int k = BLOCK / 2; k > 0; k /= 2) {
        if ((int)threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
}

// 39. a __device__ table read by the kernel
__device__ int lookup[8] = {0, 1, 4, 9, 16, 25, 36, 49};
__global__ void table_lookup(int* out, const int* idx, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = lookup[idx[i] & 7];
}
