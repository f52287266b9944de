// Inline PTX as real kernels write it (written for pagedlab, in the idioms of vLLM's
// dtype_float16.cuh, FasterTransformer-style converters and warp-level helpers), run on the CPU
// executor by pagedlab/cuda/ptx.py. tests/test_cuda_ptx.py compares every result with numpy.
#include <cuda_fp16.h>
#include <stdint.h>

// ---- register moves and packs -----------------------------------------------------------------
inline __device__ uint32_t splat(uint16_t a) {
  uint32_t b;
  asm volatile("mov.b32 %0, {%1, %1};" : "=r"(b) : "h"(a));
  return b;
}

inline __device__ void unpack(uint32_t v, uint16_t& lo, uint16_t& hi) {
  asm volatile("mov.b32 {%0, %1}, %2;\n" : "=h"(lo), "=h"(hi) : "r"(v));
}

// out[i] = {lo, hi} swapped, and {lo, lo} of the input word (two packs and one unpack).
__global__ void swap_halves(uint32_t* out, uint32_t* splats, const uint32_t* in, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  uint16_t lo, hi;
  unpack(in[i], lo, hi);
  uint32_t w;
  asm("mov.b32 %0, {%1, %2};" : "=r"(w) : "h"(hi), "h"(lo));
  out[i] = w;
  splats[i] = splat(lo);
}

// ---- conversions in every rounding mode -----------------------------------------------------------
// out[4 * i + m]: x[i] converted to half in mode m (rn, rz, rm, rp); bf16 likewise.
__global__ void to_half_modes(uint16_t* h, uint16_t* b, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float f = x[i];
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h[4 * i + 0]) : "f"(f));
  asm("cvt.rz.f16.f32 %0, %1;" : "=h"(h[4 * i + 1]) : "f"(f));
  asm("cvt.rm.f16.f32 %0, %1;" : "=h"(h[4 * i + 2]) : "f"(f));
  asm("cvt.rp.f16.f32 %0, %1;" : "=h"(h[4 * i + 3]) : "f"(f));
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b[4 * i + 0]) : "f"(f));
  asm("cvt.rz.bf16.f32 %0, %1;" : "=h"(b[4 * i + 1]) : "f"(f));
  asm("cvt.rm.bf16.f32 %0, %1;" : "=h"(b[4 * i + 2]) : "f"(f));
  asm("cvt.rp.bf16.f32 %0, %1;" : "=h"(b[4 * i + 3]) : "f"(f));
}

// Back to float, a saturated half, the x2 pack (high half from the first source), int rounding.
__global__ void from_half_and_back(float* f, uint16_t* sat, uint32_t* pairs, int* ints,
                                   const uint16_t* h, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  asm volatile("cvt.f32.f16 %0, %1;\n" : "=f"(f[i]) : "h"(h[i]));
  asm("cvt.rn.sat.f16.f32 %0, %1;" : "=h"(sat[i]) : "f"(x[i]));
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(pairs[i]) : "f"(x[i]), "f"(-x[i]));
  asm("cvt.rni.s32.f32 %0, %1;" : "=r"(ints[i]) : "f"(x[i] * 1000.0f));
}

// ---- arithmetic: half2 fused multiply-add (rounded once) and f32 fma -----------------------------
__global__ void fma_half2(uint32_t* d, float* f, const uint32_t* a, const uint32_t* b,
                          const uint32_t* c, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  uint32_t r;
  asm volatile("fma.rn.f16x2 %0, %1, %2, %3;\n" : "=r"(r) : "r"(a[i]), "r"(b[i]), "r"(c[i]));
  d[i] = r;
  float y;
  asm("fma.rn.f32 %0, %1, %2, %3;" : "=f"(y) : "f"(x[i]), "f"(x[i]), "f"(-1.0f));
  f[i] = y;
}

// ---- cached loads, vector forms -------------------------------------------------------------------
__global__ void load_nc_vec4(float* out, const float* in, int n4) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n4) return;
  float a, b, c, d;
  asm volatile("ld.global.nc.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(a), "=f"(b), "=f"(c), "=f"(d) : "l"(in + 4 * i));
  uint32_t k;
  asm volatile("ld.global.ca.u32 %0, [%1+4];" : "=r"(k) : "l"(in + 4 * i));
  out[4 * i + 0] = d;
  out[4 * i + 1] = c;
  out[4 * i + 2] = b;
  out[4 * i + 3] = a + __uint_as_float(k);
}

// A load one element past the array: the sanitizer reports it as any other read.
__global__ void load_nc_past_end(float* out, const float* in, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float v;
  asm volatile("ld.global.nc.f32 %0, [%1];" : "=f"(v) : "l"(in + i + 1));
  if (i < n) out[i] = v;
}

// ---- bits: lop3 (a & b | ~c: 0xF0 & 0xCC | ~0xAA = 0xD5), prmt (byte reverse), special registers, shfl.sync ---------------------
__global__ void bits_and_lanes(uint32_t* out, const uint32_t* a, const uint32_t* b, const uint32_t* c) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  uint32_t r, p, lane, lt, s;
  asm("lop3.b32 %0, %1, %2, %3, 0xd5;" : "=r"(r) : "r"(a[i]), "r"(b[i]), "r"(c[i]));
  asm("prmt.b32 %0, %1, %2, 0x0123;" : "=r"(p) : "r"(a[i]), "r"(0));
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
  asm volatile("mov.u32 %0, %%lanemask_lt;" : "=r"(lt));
  asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, %3;" : "=r"(s) : "r"(a[i]), "r"(3), "r"(0xffffffffu));
  out[5 * i + 0] = r;
  out[5 * i + 1] = p;
  out[5 * i + 2] = lane;
  out[5 * i + 3] = lt;
  out[5 * i + 4] = s;
}

// ---- operand constraints: "d" (f64), "n" (an immediate), "m" (a memory operand), "+l" -------------
__global__ void constraints(double* d, float* f, unsigned long long* acc, const double* x,
                            const float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  double r;
  asm("fma.rn.f64 %0, %1, %2, %3;" : "=d"(r) : "d"(x[i]), "d"(x[i]), "d"(-2.0));
  d[i] = r;
  float v;
  asm("ld.global.f32 %0, %1;" : "=f"(v) : "m"(y[i]));
  f[i] = v;
  unsigned long long a = acc[i];
  asm("shl.b64 %0, %0, %1;" : "+l"(a) : "n"(3));
  acc[i] = a;
}
