// pagedlab CPU executor: the few types and entry points shared by the prelude (compiled into
// every kernel), the runtime library (fibers, barriers, warp rendezvous, launch) and the kernel
// runner (runner.cpp).
#pragma once
#include <stdint.h>

// initial-exec: one instruction per threadIdx read. A process that has used up glibc's static
// TLS reserve cannot load such a library; pagedlab then rebuilds with PL_NO_FAST_TLS.
#if defined(__linux__) && !defined(PL_NO_FAST_TLS)
#define PL_TLS_FAST __attribute__((tls_model("initial-exec")))
#else
#define PL_TLS_FAST
#endif
#define PL_EXPORT extern "C" __attribute__((visibility("default")))

struct uint3 { unsigned int x, y, z; };
struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1)
        : x(vx), y(vy), z(vz) {}
};

namespace pl {

// What a CUDA thread sees through threadIdx / blockIdx / blockDim / gridDim.
struct ThreadCtx {
    uint3 tid;
    uint3 bid;
    dim3 bdim;
    dim3 gdim;
    uint32_t collapsed;  // 1: the kernel runs its collapsed version (collapse.py), whole block
};

enum WarpKind : int {
    WARP_SYNC = 0, SHFL_IDX = 1, SHFL_UP = 2, SHFL_DOWN = 3, SHFL_XOR = 4,
    BALLOT = 5, ANY = 6, ALL = 7, REDUCE_ADD = 8, REDUCE_MIN = 9, REDUCE_MAX = 10,
    COALESCE = 11,  // cooperative_groups::coalesced_threads(): returns the lanes that arrive together
    WARP_KIND_COUNT
};

enum BarrierKind : int { BAR_PLAIN = 0, BAR_COUNT = 1, BAR_AND = 2, BAR_OR = 3 };

// A parameter's type as the compiler sees it (typedefs, macros and -D options resolved), filled
// in by the kernel library's pl_params_* / pl_global_* and read by the kernel runner and the
// executor to check launch arguments; keep in sync with signature.py and kernel.py / runner.py.
struct ParamInfo {
    int32_t pointer, is_const, lanes, is_class;
    int64_t size;       // of the value, or of what the pointer points to (0: void)
    int64_t elem_size;  // of one scalar element (a float4's float), or of the whole struct
    int64_t total;      // globals: the variable's whole size (arrays included)
    char code[8];       // numpy dtype of the element: "f4", "i8", "u1", "b1", "f2"; "" for a struct
    char name[96];      // the type as the compiler spells it
};

// A collapsed kernel's inline dynamic shared memory check (collapse.py): where the canary
// starts in each dynamic shared array and the 64 bytes it holds there. n = -1: call
// pl_cox_smem every time (an array too small for the quick compare).
struct CoxGuard {
    int32_t n;
    const unsigned char* at[8];
    const unsigned char* pattern;
};

}  // namespace pl

#define PL_API __attribute__((visibility("default")))
extern "C" {
// The running CUDA thread of this OS worker; switched with the fiber.
PL_API extern thread_local pl::ThreadCtx* pl_cur PL_TLS_FAST;
PL_API void pl_syncthreads(int line);
PL_API int pl_syncthreads_reduce(int line, int kind, int pred);
PL_API uint64_t pl_warp_op(int line, int kind, unsigned mask, uint64_t bits, int arg, int width);
PL_API unsigned pl_activemask(void);
PL_API [[noreturn]] void pl_trap(int line, const char* what);
PL_API int pl_cox_smem(int line, int thread);
PL_API const pl::CoxGuard* pl_cox_guard(void);
}
