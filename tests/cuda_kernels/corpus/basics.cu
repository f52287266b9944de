// pagedlab corpus: first kernels of a CUDA course, and parameter types only the compiler knows.
typedef unsigned int uint;
typedef float floatX;
#define REAL float
#ifndef TYPE
#define TYPE float
#endif

// 1. one thread per element
__global__ void vector_add(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

// 2. a grid-stride loop: any grid covers any n
__global__ void saxpy_grid_stride(float a, const float* x, float* y, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        y[i] = a * x[i] + y[i];
}

// 3. typedefs in the signature
__global__ void typedef_scale(floatX* out, const floatX* in, uint n, floatX factor) {
    uint i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] * factor;
}

// 4. a macro type, and TYPE set with -D TYPE=double
__global__ void macro_types(REAL* out, const TYPE* in, TYPE shift, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = (REAL)(in[i] + shift);
}

// 5. a struct by value
struct Affine {
    float scale;
    int offset;
    double bias;
};
__global__ void struct_by_value(float* out, const float* in, Affine p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = (float)(in[(i + p.offset) % n] * p.scale + p.bias);
}

// 6. vector types by value
__global__ void vectors_by_value(float* out, float3 f, double3 d, int2 k) {
    if (threadIdx.x == 0) {
        out[0] = f.x + f.y * f.z;
        out[1] = (float)(d.x - d.y * d.z);
        out[2] = (float)(k.x * k.y);
    }
}

// 7. a device function with a name the C++ library also uses
__device__ float lerp(float a, float b, float t) { return a + t * (b - a); }
__device__ int clamp(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }
__global__ void no_library_leaks(float* out, const float* a, const float* b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = lerp(a[i], b[i], 0.25f) + (float)clamp(i, 2, 5);
}

// 8. raw memory: the kernel sees an array in its memory order (Fortran arrays too)
__global__ void raw_memory_index(float* out, const float* in, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] * 10.0f + (float)i;
}

// 9. reading before the pointer: a view that starts inside a larger array
__global__ void read_before_start(float* out, float* in, int n, int radius) {  // no const, as often
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float s = 0.0f;
        for (int k = -radius; k <= radius; ++k) s += in[i + k];
        out[i] = s;
    }
}

// 10. 64-bit and 16-bit scalar parameters
__global__ void unsigned_long_params(unsigned long long* out, unsigned long long base, long step, short k) {
    int i = threadIdx.x;
    out[i] = base + (unsigned long long)(step * i) + (unsigned long long)k;
}

// 10b. clock_t parameters (a typedef from the C library) and clock()/clock64()
__global__ void timed_copy(float* out, const float* in, clock_t* ticks, int n) {
    clock_t start = clock();
    long long start64 = clock64();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i];
    if (threadIdx.x == 0) ticks[blockIdx.x] = (clock() - start) + (clock_t)(clock64() - start64 >= 0);
}
