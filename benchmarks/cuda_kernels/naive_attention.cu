// llm.c dev/cuda attention_forward kernel 1 style (written for pagedlab): one thread per (b, t, h[, t2]),
// every access to global memory: the checked build's worst case (benchmarks/bench_cuda_corpus.py).
__global__ void attention_query_key_kernel1(float* preatt, const float* inp, int B, int T, int C, int NH) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int total_threads = B * NH * T * T;
    if (idx < total_threads) {
        int t2 = idx % T;
        int t = (idx / T) % T;
        if (t2 > t) { preatt[idx] = -INFINITY; return; }
        int h = (idx / (T * T)) % NH;
        int b = idx / (NH * T * T);
        int C3 = C * 3, hs = C / NH;
        const float* query_t = inp + b * T * C3 + t * C3 + h * hs;
        const float* key_t2 = inp + b * T * C3 + t2 * C3 + h * hs + C;
        float val = 0.0f;
        for (int i = 0; i < hs; i++) val += query_t[i] * key_t2[i];
        val *= 1.0 / sqrtf(hs);
        preatt[idx] = val;
    }
}
__global__ void attention_softmax_kernel1(float* att, const float* preatt, int B, int T, int NH) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < B * T * NH) {
        int h = idx % NH, t = (idx / NH) % T, b = idx / (NH * T);
        const float* preatt_bth = preatt + b * NH * T * T + h * T * T + t * T;
        float* att_bth = att + b * NH * T * T + h * T * T + t * T;
        float maxval = -10000.0f;
        for (int t2 = 0; t2 <= t; t2++) if (preatt_bth[t2] > maxval) maxval = preatt_bth[t2];
        float expsum = 0.0f;
        for (int t2 = 0; t2 <= t; t2++) { float expv = expf(preatt_bth[t2] - maxval); expsum += expv; att_bth[t2] = expv; }
        float expsum_inv = expsum == 0.0f ? 0.0f : 1.0f / expsum;
        for (int t2 = 0; t2 < T; t2++) att_bth[t2] = t2 <= t ? att_bth[t2] * expsum_inv : 0.0f;
    }
}
__global__ void attention_value_kernel1(float* out, const float* att, const float* inp, int B, int T, int C, int NH) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < B * T * NH) {
        int h = idx % NH, t = (idx / NH) % T, b = idx / (NH * T);
        int C3 = C * 3, hs = C / NH;
        float* out_bth = out + b * T * C + t * C + h * hs;
        const float* att_bth = att + b * NH * T * T + h * T * T + t * T;
        for (int i = 0; i < hs; i++) out_bth[i] = 0.0f;
        for (int t2 = 0; t2 <= t; t2++) {
            const float* value_t2 = inp + b * T * C3 + t2 * C3 + h * hs + C * 2;
            float att_btht2 = att_bth[t2];
            for (int i = 0; i < hs; i++) out_bth[i] += att_btht2 * value_t2[i];
        }
    }
}
