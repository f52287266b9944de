// pagedlab corpus: pre-CUDA-9 warp intrinsics without a mask (removed for sm_70+, and in CUDA 13).

// 35. a warp sum with __shfl_down and __shfl_xor
__global__ void legacy_warp_sum(float* out, const float* in) {
    float v = in[threadIdx.x];
    for (int off = 16; off > 0; off /= 2) v += __shfl_down(v, off);
    float w = in[threadIdx.x];
    for (int m = 16; m > 0; m /= 2) w += __shfl_xor(w, m);
    out[threadIdx.x] = threadIdx.x % 32 == 0 ? v : w;
}
