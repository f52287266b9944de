// pagedlab CPU executor: the launch description, one definition for the two programs that read
// it: the runtime (runtime.cpp, which runs the launch) and the kernel runner (runner.cpp, which
// fills in the kernel's entry points and hands the Spec to pl_launch). Python writes the same
// layout through ctypes (executor.py's Spec and Diag); the runtime's pl_spec_size and
// pl_diag_size let it refuse a runtime built from another version of this file.
// Not part of a kernel's build: kernels see pl_abi.h only.
#pragma once
#include <atomic>
#include <stdint.h>

namespace pl::launch {

constexpr int MAX_WORKERS = 64;
constexpr int MSG_LEN = 8192;
constexpr int STUCK_PCS = 16;

enum Status : int32_t {
    ST_OK = 0, ST_BARRIER = 1, ST_WARP = 2, ST_SMEM = 3, ST_CRASH = 4, ST_TRAP = 5, ST_INTERNAL = 6,
};
enum Schedule : int32_t { SCHED_ROUND_ROBIN = 0, SCHED_WARP0_FIRST = 1, SCHED_REVERSED = 2, SCHED_RANDOM = 3 };

// Spec.isolate: where pl_launch runs the launch.
enum Isolation : int32_t {
    IN_PROCESS = 0,  // on the caller's threads
    FORKED = 1,      // in a forked child; the caller waits on out_fd and reads the Diag
    IN_RUNNER = 2,   // the caller is already the launch's own process (the kernel runner)
};

struct Progress {  // what each worker is doing, for the watchdog's report
    int32_t active, block[3], thread, line;
};

// Where a worker's running thread was when the watchdog fired (SIGUSR2 before the kill): the
// interrupted pc and return addresses (pcs[0] exact), and what the block's other threads did.
struct Stuck {
    uint64_t pcs[STUCK_PCS];
    int32_t npcs, sampled;
    int32_t wait_line[4], wait_count[4], wait_kind[4];  // kind: barrier 0..3, warp op 100 + k
    int32_t runnable, exited;
};

struct Diag {  // lives in MAP_SHARED memory so a forked child or the runner can report to the parent
    std::atomic<int32_t> status;
    int32_t signal;
    uint64_t fault_addr, fault_pc;
    int32_t block[3], thread;          // where the error happened (thread: linear index, -1 n/a)
    int32_t stack_overflow;
    int32_t smem_index, smem_line;     // dynamic shared memory overrun: which array, barrier line
    int64_t smem_offset;               // first byte written past shared_mem
    int32_t nworkers;
    Progress progress[MAX_WORKERS];
    char message[MSG_LEN];
    std::atomic<int64_t> blocks_done;  // for the watchdog: is a slow launch making progress?
    int64_t nblocks;
    int32_t si_code, pad_;             // of a fatal signal: tells a misaligned access from a null one
    Stuck stuck[MAX_WORKERS];          // filled when the watchdog samples a launch it will kill
};

// The kernel library's pl_smem_info: this thread's dynamic shared arrays and their capacities.
using SmemInfo = int (*)(void** addrs, uint64_t* caps, int max);

struct Spec {
    void (*entry)(void**);  // the kernel library's pl_entry_<kernel>
    void** args;
    uint32_t grid[3], block[3];
    uint64_t shared_mem;
    int32_t schedule, workers;
    uint64_t seed;
    SmemInfo smem_info;
    Diag* diag;
    const char* filename;
    uint64_t stack_size;
    int32_t isolate;
    int32_t out_pid, out_fd;
    int32_t stdout_fd;  // forked child: printf output goes here (the parent shows it), or -1
    // entry is a collapsed kernel (collapse.py): it runs a whole block in one call, its threads
    // as loops over thread ids; no fibers.
    int32_t collapsed;
};

}  // namespace pl::launch

extern "C" int pl_launch(pl::launch::Spec* s);
