// pagedlab corpus: headers that samples include must compile and mean what they mean on a GPU.
#include <cuda_runtime.h>
#include <device_launch_parameters.h>
#include <math_constants.h>
#include <cuComplex.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

// 11. cuda_runtime.h + math_constants.h
__global__ void circle_areas(float* out, const float* r, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = CUDART_PI_F * r[i] * r[i];
}

// 12. cuComplex.h: z[i] = a[i] * b[i] + conj(a[i])
__global__ void complex_mul(cuFloatComplex* z, const cuFloatComplex* a, const cuFloatComplex* b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) z[i] = cuCaddf(cuCmulf(a[i], b[i]), cuConjf(a[i]));
}

// 13. cuda_fp16.h: half arithmetic, half2, conversions
__global__ void half_math(__half* out, const __half* a, const __half* b, float* as_float, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        __half s = __hadd(a[i], b[i]);
        __half p = __hmul(s, __float2half(0.5f));
        half2 pair = __halves2half2(a[i], b[i]);
        half2 sq = __hmul2(pair, pair);
        out[i] = p;
        as_float[i] = __half2float(__low2half(sq)) + __high2float(sq);
    }
}

// 14. cuda_bf16.h: bfloat16 (raw uint16 bits on the host)
__global__ void bf16_round(__nv_bfloat16* out, const float* in, float* back, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        __nv_bfloat16 h = __float2bfloat16(in[i]);
        out[i] = h;
        back[i] = __bfloat162float(h);
    }
}
