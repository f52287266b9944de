// Dequantising an FP8 (e4m3) KV cache block to float: refused by name.
#include <cuda_fp8.h>

__global__ void dequant_e4m3(float* out, const __nv_fp8_e4m3* in, float scale, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = float(in[i]) * scale;
}
