// pagedlab corpus: dynamic shared memory of element types the glue must size correctly.

// 20. extern __shared__ short
__global__ void dyn_shared_short(short* out, const short* in) {
    extern __shared__ short s_short[];
    int t = threadIdx.x;
    s_short[t] = in[blockIdx.x * blockDim.x + t];
    __syncthreads();
    out[blockIdx.x * blockDim.x + t] = s_short[blockDim.x - 1 - t];
}

// 21. extern __shared__ long
__global__ void dyn_shared_long(long* out, const long* in) {
    extern __shared__ long s_long[];
    int t = threadIdx.x;
    s_long[t] = in[blockIdx.x * blockDim.x + t] * 3;
    __syncthreads();
    out[blockIdx.x * blockDim.x + t] = s_long[(t + 1) % blockDim.x];
}

// 22. __syncthreads_count / _and / _or
__global__ void barrier_votes(int* out, const int* flags) {
    int f = flags[threadIdx.x];
    int c = __syncthreads_count(f);
    int a = __syncthreads_and(f);
    int o = __syncthreads_or(f);
    if (threadIdx.x == 0) { out[0] = c; out[1] = a; out[2] = o; }
}
