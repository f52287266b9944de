// Idioms of public CUDA code that pagedlab once crashed on or misjudged, written for
// pagedlab in the style of the samples and courses that use them.
#include <cuComplex.h>
#include <cuda_fp16.h>

// ---- extern __shared__ declared inside functions -------------------------------------------
// The samples' helper: a templated struct whose conversion operator declares the array, with a
// specialisation for double (a second array name, as the samples do to avoid a type clash).
template <class T>
struct SharedMemory {
    __device__ inline operator T*() {
        extern __shared__ int helper_smem[];
        return (T*)helper_smem;
    }
};
template <>
struct SharedMemory<double> {
    __device__ inline operator double*() {
        extern __shared__ double helper_smem_d[];
        return helper_smem_d;
    }
};

template <class T>
__global__ void reduce_with_helper(T* partial, const T* in, int n) {
    T* sdata = SharedMemory<T>();
    unsigned t = threadIdx.x, i = blockIdx.x * blockDim.x + threadIdx.x;
    sdata[t] = i < n ? in[i] : T(0);
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) sdata[t] += sdata[t + s];
        __syncthreads();
    }
    if (t == 0) partial[blockIdx.x] = sdata[0];
}

// A plain device function and a function template declaring the array.
__device__ float* row_scratch() {
    extern __shared__ float fn_smem[];
    return fn_smem;
}
template <class T>
__device__ T* typed_scratch() {
    extern __shared__ unsigned char raw_smem[];
    return reinterpret_cast<T*>(raw_smem);
}

__global__ void reverse_through_device_fn(float* out, const float* in) {
    float* s = row_scratch();
    int t = threadIdx.x, base = blockIdx.x * blockDim.x;
    s[t] = in[base + t];
    __syncthreads();
    out[base + t] = s[blockDim.x - 1 - t];
}

__global__ void rotate_through_template_fn(int* out, const int* in) {
    int* s = typed_scratch<int>();
    int t = threadIdx.x, base = blockIdx.x * blockDim.x;
    s[t] = in[base + t] * 2;
    __syncthreads();
    out[base + t] = s[(t + 1) % blockDim.x];
}

// ---- __constant__ variables ------------------------------------------------------------------
extern "C" {
__constant__ float c_gain[4];
__global__ void apply_gain(float* out, const float* in, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] * c_gain[i % 4];
}
}

__constant__ float c_a, c_b, c_c, c_d;
__constant__ int c_lo = 3, c_hi = 7;

__global__ void cubic_clamped(float* out, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = ((c_a * x[i] + c_b) * x[i] + c_c) * x[i] + c_d;
        out[i] = fminf(fmaxf(v, (float)c_lo), (float)c_hi);
    }
}

// ---- a static template kernel, reached through name_expressions -------------------------------
template <int STRIDE>
static __global__ void gather_strided(float* out, const float* in, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i * STRIDE];
}

// ---- a pointer to a struct, fed from a float array (CuPy's custom_struct example) -------------
template <class T>
struct Mat2 {
    T m[2][2];
    __device__ Mat2 operator*(const Mat2& o) const {
        Mat2 r;
        for (int i = 0; i < 2; ++i)
            for (int j = 0; j < 2; ++j) r.m[i][j] = m[i][0] * o.m[0][j] + m[i][1] * o.m[1][j];
        return r;
    }
};

__global__ void batched_mat2(const Mat2<float>* a, const Mat2<float>* b, Mat2<float>* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] * b[i];
}

// ---- double-precision cuComplex ---------------------------------------------------------------
__global__ void complex_axpy_double(cuDoubleComplex* y, const cuDoubleComplex* x, double ar,
                                    double ai, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        cuDoubleComplex a = make_cuDoubleComplex(ar, ai);
        cuDoubleComplex v = cuCfma(a, x[i], y[i]);
        v = cuCadd(v, cuCmul(cuConj(x[i]), make_cuDoubleComplex(0.0, 1.0)));
        y[i] = make_cuDoubleComplex(cuCreal(v), cuCimag(v) + cuCabs(x[i]));
    }
}

// ---- shared-memory atomics: a histogram that reads its bins too early, and the right one -------
__global__ void histogram_reads_early(unsigned* hist, const unsigned char* data, int n, int bins) {
    extern __shared__ unsigned bins_smem[];
    for (int b = threadIdx.x; b < bins; b += blockDim.x) bins_smem[b] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        atomicAdd(&bins_smem[data[i] % bins], 1u);
    // missing __syncthreads(): other threads may still be adding into these bins
    for (int b = threadIdx.x; b < bins; b += blockDim.x) atomicAdd(&hist[b], bins_smem[b]);
}

// ---- half2 in shared memory, reduced in a device function (NVIDIA's FP16 scalar product) ------
__device__ void reduce_half2_in_shared(half2* const v) {
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) v[threadIdx.x] = __hadd2(v[threadIdx.x], v[threadIdx.x + s]);
        __syncthreads();
    }
}

__global__ void half2_dot(float* results, const half2* a, const half2* b, int n) {
    __shared__ half2 partial[128];
    half2 acc = __float2half2_rn(0.f);
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        acc = __hfma2(a[i], b[i], acc);
    partial[threadIdx.x] = acc;
    __syncthreads();
    reduce_half2_in_shared(partial);
    if (threadIdx.x == 0) {
        half2 r = partial[0];
        results[blockIdx.x] = __low2float(r) + __high2float(r);
    }
}

// ---- a spin-wait no thread ends: the watchdog names the loop, not the barrier before it -------
__global__ void spin_after_barrier(volatile int* flag, float* out) {
    __shared__ float tile[32];
    tile[threadIdx.x] = threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = tile[31 - threadIdx.x];
    while (flag[0] == 0) {
        out[threadIdx.x] += 1.0f;
    }
}
