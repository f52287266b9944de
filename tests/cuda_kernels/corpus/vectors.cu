// pagedlab corpus: CUDA's vector types, and memory alignment as a GPU has it.

// 15. every vector type: sizeof and alignof as CUDA defines them, and make_* fills the fields
#define REPORT(T, k) do { sizes[k] = sizeof(T); aligns[k] = alignof(T); } while (0)
__global__ void vector_type_layout(int* sizes, int* aligns, float* sums) {
    if (threadIdx.x != 0) return;
    REPORT(char1, 0); REPORT(char2, 1); REPORT(char3, 2); REPORT(char4, 3);
    REPORT(uchar1, 4); REPORT(uchar2, 5); REPORT(uchar3, 6); REPORT(uchar4, 7);
    REPORT(short1, 8); REPORT(short2, 9); REPORT(short3, 10); REPORT(short4, 11);
    REPORT(ushort1, 12); REPORT(ushort2, 13); REPORT(ushort3, 14); REPORT(ushort4, 15);
    REPORT(int1, 16); REPORT(int2, 17); REPORT(int3, 18); REPORT(int4, 19);
    REPORT(uint1, 20); REPORT(uint2, 21); REPORT(uint3, 22); REPORT(uint4, 23);
    REPORT(long1, 24); REPORT(long2, 25); REPORT(long3, 26); REPORT(long4, 27);
    REPORT(ulong1, 28); REPORT(ulong2, 29); REPORT(ulong3, 30); REPORT(ulong4, 31);
    REPORT(longlong1, 32); REPORT(longlong2, 33); REPORT(longlong3, 34); REPORT(longlong4, 35);
    REPORT(ulonglong1, 36); REPORT(ulonglong2, 37); REPORT(ulonglong3, 38); REPORT(ulonglong4, 39);
    REPORT(float1, 40); REPORT(float2, 41); REPORT(float3, 42); REPORT(float4, 43);
    REPORT(double1, 44); REPORT(double2, 45); REPORT(double3, 46); REPORT(double4, 47);
    char4 c = make_char4(1, -2, 3, -4);
    uchar3 uc = make_uchar3(250, 2, 3);
    short2 s = make_short2(-300, 301);
    ushort4 us = make_ushort4(1, 2, 3, 65000);
    int3 i3 = make_int3(-7, 8, 9);
    uint2 u2 = make_uint2(4000000000u, 1u);
    long2 l2 = make_long2(-5000000000L, 2L);
    ulong1 ul = make_ulong1(7ul);
    longlong4 ll = make_longlong4(1, 2, 3, -4);
    ulonglong2 ull = make_ulonglong2(10ull, 20ull);
    float4 f = make_float4(0.5f, 1.5f, 2.5f, 3.5f);
    double3 d = make_double3(0.25, 0.5, 0.75);
    uint3 u3 = make_uint3(1u, 2u, 3u);
    sums[0] = c.x + c.y + c.z + c.w;
    sums[1] = uc.x + uc.y + uc.z;
    sums[2] = s.x + s.y;
    sums[3] = us.x + us.y + us.z + us.w;
    sums[4] = i3.x + i3.y + i3.z;
    sums[5] = (float)u2.x + u2.y;
    sums[6] = (float)(l2.x + l2.y);
    sums[7] = (float)ul.x;
    sums[8] = (float)(ll.x + ll.y + ll.z + ll.w);
    sums[9] = (float)(ull.x + ull.y);
    sums[10] = f.x + f.y + f.z + f.w;
    sums[11] = (float)(d.x + d.y + d.z);
    sums[12] = (float)(u3.x + u3.y + u3.z);
}

// 16. float4 loads and stores through global memory (a float32 array on the host)
__global__ void float4_scale(float4* out, const float4* in, float s, int n4) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n4) {
        float4 v = in[i];
        out[i] = make_float4(v.x * s, v.y * s, v.z * s, v.w * s);
    }
}

// 17. a float4 load from a shared tile, which needs 16-byte aligned shared memory
__global__ void shared_float4_tile(float* out, const float* in, unsigned long long* addr_mod) {
    __shared__ char pad[3];
    __shared__ float tile[64];
    int t = threadIdx.x;
    tile[t] = in[blockIdx.x * 64 + t];
    if (t == 0) pad[0] = 1;
    __syncthreads();
    if (t < 16) {
        float4 v = reinterpret_cast<const float4*>(tile)[t];
        out[blockIdx.x * 16 + t] = v.x + v.y + v.z + v.w;
    }
    if (t == 0 && blockIdx.x == 0) addr_mod[0] = (unsigned long long)(size_t)tile % 16;
}

// 18. a larger alignment is kept
struct alignas(32) Wide { float v[8]; };
__global__ void shared_alignas32(unsigned long long* addr_mod, float* out) {
    __shared__ char pad;
    __shared__ Wide w[2];
    if (threadIdx.x == 0) pad = 0;
    w[threadIdx.x / 8].v[threadIdx.x % 8] = (float)threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = w[1 - threadIdx.x / 8].v[threadIdx.x % 8] + pad;
    if (threadIdx.x == 0) addr_mod[0] = (unsigned long long)(size_t)&w[0] % 32;
}

// 19. a misaligned float4 load (what a GPU reports as 'misaligned address')
__global__ void misaligned_float4(float4* out, int offset) {
    __shared__ float tile[64];
    tile[threadIdx.x] = 1.0f;
    tile[threadIdx.x + 32] = 2.0f;
    __syncthreads();
    const float4* p = reinterpret_cast<const float4*>(tile + offset);
    out[threadIdx.x] = p[threadIdx.x % 8];
}
