// pagedlab CPU executor runtime: fibers, block scheduler, barriers, warp rendezvous, launch.
//
// Model. One OS worker thread runs one block at a time; each CUDA thread of the block is a fiber
// with its own stack. A fiber runs until it reaches a barrier or a warp operation (a rendezvous),
// then control goes back to its worker. Rendezvous are exact: a barrier opens only when every
// thread of the block waits at the same __syncthreads(); a warp operation completes only when
// every lane named in the mask waits at the same operation with the same mask. Anything else is
// reported (Diag), never papered over.
//
// Map of this file, in order:
//   1. Context switch: pl_switch/pl_fiber_trampoline (asm) and fiber_init_stack, per CPU.
//   2. Launch description (pl_launch.h: Status, Progress, Diag, Spec, shared with runner.cpp
//      and mirrored by ctypes in executor.py: change them together), Fiber, Worker; then sanitizer_rt.h part 1 (namespace san).
//   3. Messages and report() (the first error of a launch wins), switch_to_scheduler/resume,
//      fiber_main, fail_and_park.
//   4. Shared-memory canaries: canary_fill/canary_find/smem_check (dynamic shared overruns).
//   5. Barriers: yield_in_order, release_barrier, barrier().
//   6. Warp operations: complete_warp_op, warp_op(); report_stuck (deadlock description).
//   7. Block scheduler: resolve_coalesced, setup_worker (stacks, TLS = __shared__), run_block.
//   8. Isolation: on_fatal_signal, install_crash_handlers; worker_main, run_launch.
//   9. C ABI (extern "C"): pl_syncthreads/pl_warp_op/pl_trap for the prelude; pl_shared_alloc,
//      pl_launch for Python; sanitizer_rt.h part 2 (pl_san_configure, __tsan_* entry points).
//
// Fiber switch. On x86-64 and AArch64 pl_switch saves only the callee-saved registers on the
// current stack, stores sp, loads the other fiber's sp and returns into it (a fresh fiber
// "returns" into pl_fiber_trampoline, which calls fiber_main). Elsewhere, or with
// -DPL_FIBER_UCONTEXT, getcontext/makecontext/swapcontext do the same (PL_FIBER_ASM undefined;
// slower: a signal-mask system call per switch). Each stack has a PROT_NONE guard page below it;
// tops are staggered by 64 bytes per thread so the saved registers of 1024 fibers do not all map
// to one L1 set. Round-robin/reversed barrier arrivals switch straight to the next runnable fiber
// (yield_in_order) instead of going through the scheduler.
//
// Isolation (Spec.isolate=FORKED). pl_launch forks; the child runs run_launch and _exit()s. Output
// arrays and the Diag live in MAP_SHARED memory (pl_shared_alloc, with a PROT_NONE page after
// the end so a write just past an output faults), so the parent sees results and errors. The
// child's crash handler (on an alternate signal stack) records signal, address, pc and whether a
// guard page was hit. The parent's watchdog (executor.py) waits on the pipe with a timeout,
// kills the child, and reads Diag.blocks_done/nblocks and progress[] to say whether a slow
// launch was progressing or stuck.
//
// Sanitizer. sanitizer_rt.h is included twice (state in the namespace, entry points
// in extern "C"); runtime code calls it at fixed points marked "sanitizer":
// worker_setup/worker_end, block_begin/block_end (beside blocks_done and canary_ok),
// san::barrier (a barrier ends an epoch) and san::warp_sync (a completed warp operation orders
// its lanes). With no sanitizer configured these are cheap early returns.
//
// Porting to a new OS/CPU. (1) CPU: add a pl_switch + fiber_init_stack pair under PL_FIBER_ASM
// (save the ABI's callee-saved registers, keep the ABI's stack alignment), or build with
// -DPL_FIBER_UCONTEXT first to get running. (2) on_fatal_signal: read pc/sp from ucontext_t for
// the platform. (3) setup_worker: the dl_iterate_phdr lookup of the kernel library's TLS block
// (__shared__ memory) is Linux-only; without it poisoning falls back to the dynamic arrays.
// (4) pl_launch: fork/pipe2/MAP_SHARED|MAP_ANONYMOUS; the Apple macros below show the pattern.
// (5) compiler.py: flags, the static-TLS fallback (PL_NO_FAST_TLS) and rpath. Then run
// tests/test_cuda_executor.py, test_cuda_api.py, test_cuda_features.py, test_cuda_corpus.py,
// test_cuda_sanitizer.py (and benchmarks/bench_cuda_cpu.py for the switch cost).
#if defined(__APPLE__)
#define _XOPEN_SOURCE 700  // macOS hides ucontext_t's routines without it
#define _DARWIN_C_SOURCE 1
#endif
#include "pl_abi.h"
#include "pl_launch.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <string>
#include <sys/mman.h>
#include <sys/ucontext.h>
#include <unistd.h>
#include <unwind.h>
#if defined(PL_FIBER_UCONTEXT) || !(defined(__x86_64__) || defined(__aarch64__))
#include <ucontext.h>
#endif
#include <vector>
#if defined(__linux__)
#include <link.h>
#endif

thread_local pl::ThreadCtx* pl_cur PL_TLS_FAST = nullptr;

// ============================================================================================
// Context switch. Hand-written for x86-64 and AArch64 (callee-saved registers only); ucontext
// elsewhere or with -DPL_FIBER_UCONTEXT (slower: swapcontext makes a system call per switch).
// ============================================================================================
#if !defined(PL_FIBER_UCONTEXT) && (defined(__x86_64__) || defined(__aarch64__))
#define PL_FIBER_ASM 1
#if defined(__APPLE__)
#define PL_SYM(x) "_" #x
#define PL_HIDDEN(x) ".private_extern _" #x "\n"
#else
#define PL_SYM(x) #x
#define PL_HIDDEN(x) ".hidden " #x "\n"
#endif
extern "C" void pl_switch(void** save_sp, void* new_sp);
extern "C" void pl_fiber_trampoline();
#if defined(__x86_64__)
asm(".text\n"
    ".globl " PL_SYM(pl_switch) "\n" PL_HIDDEN(pl_switch)
    PL_SYM(pl_switch) ":\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".globl " PL_SYM(pl_fiber_trampoline) "\n" PL_HIDDEN(pl_fiber_trampoline)
    PL_SYM(pl_fiber_trampoline) ":\n"
    "  movq %r13, %rdi\n"
    "  callq *%r12\n"
    "  ud2\n");
// Initial frame: r15 r14 r13 r12 rbx rbp ret; after the pops and ret, rsp is 16-byte aligned.
static void* fiber_init_stack(char* top, void (*fn)(void*), void* arg) {
    uintptr_t t = (uintptr_t)top & ~(uintptr_t)15;
    void** sp = (void**)(t - 72);
    sp[0] = nullptr; sp[1] = nullptr; sp[2] = arg; sp[3] = (void*)fn;
    sp[4] = nullptr; sp[5] = nullptr; sp[6] = (void*)&pl_fiber_trampoline;
    return sp;
}
#else  // __aarch64__
asm(".text\n"
    ".globl " PL_SYM(pl_switch) "\n" PL_HIDDEN(pl_switch)
    ".p2align 2\n"
    PL_SYM(pl_switch) ":\n"
    "  sub sp, sp, #176\n"
    "  stp x19, x20, [sp, #0]\n  stp x21, x22, [sp, #16]\n  stp x23, x24, [sp, #32]\n"
    "  stp x25, x26, [sp, #48]\n  stp x27, x28, [sp, #64]\n  stp x29, x30, [sp, #80]\n"
    "  stp d8, d9, [sp, #96]\n  stp d10, d11, [sp, #112]\n  stp d12, d13, [sp, #128]\n"
    "  stp d14, d15, [sp, #144]\n"
    "  mov x2, sp\n  str x2, [x0]\n  mov sp, x1\n"
    "  ldp x19, x20, [sp, #0]\n  ldp x21, x22, [sp, #16]\n  ldp x23, x24, [sp, #32]\n"
    "  ldp x25, x26, [sp, #48]\n  ldp x27, x28, [sp, #64]\n  ldp x29, x30, [sp, #80]\n"
    "  ldp d8, d9, [sp, #96]\n  ldp d10, d11, [sp, #112]\n  ldp d12, d13, [sp, #128]\n"
    "  ldp d14, d15, [sp, #144]\n"
    "  add sp, sp, #176\n"
    "  ret\n"
    ".globl " PL_SYM(pl_fiber_trampoline) "\n" PL_HIDDEN(pl_fiber_trampoline)
    ".p2align 2\n"
    PL_SYM(pl_fiber_trampoline) ":\n"
    "  mov x0, x20\n"
    "  blr x19\n"
    "  brk #0\n");
static void* fiber_init_stack(char* top, void (*fn)(void*), void* arg) {
    uintptr_t t = (uintptr_t)top & ~(uintptr_t)15;
    void** sp = (void**)(t - 176);
    memset(sp, 0, 176);
    sp[0] = (void*)fn; sp[1] = arg; sp[11] = (void*)&pl_fiber_trampoline;  // x19, x20, x30
    return sp;
}
#endif
#endif

namespace {

// ============================================================================================
// Launch description: Status, Progress, Stuck, Diag, Spec live in pl_launch.h, shared with the
// kernel runner (runner.cpp) and filled by Python through ctypes (keep executor.py in sync).
// ============================================================================================
using namespace pl::launch;
constexpr int MAX_DYN = 8;

enum FiberState : int { RUNNABLE = 0, AT_BARRIER = 1, AT_WARP = 2, EXITED = 3 };

struct Fiber {
    void* sp;
    pl::ThreadCtx ctx;
    int state, line, kind, arg, width, lane, warp;
    unsigned mask;
    uint64_t val, res;
};

constexpr uint32_t CANARY = 0x7fbadbadu;  // a NaN as float: reads past the end show as NaN too

struct Worker {
    int id = 0;
    Spec* spec = nullptr;
    void* sched_sp = nullptr;
#ifndef PL_FIBER_ASM
    ucontext_t sched_uc;
    std::vector<ucontext_t> ucs;
#endif
    std::vector<Fiber> fibers;
    std::vector<int> order;
    int nthreads = 0, nwarps = 0, cur = -1;
    int pos = 0;  // where the running fiber stands in `order` (this round of the scheduler)
    char* stacks = nullptr;
    size_t stack_stride = 0, stack_count = 0, page = 4096;
    int bar_arrived = 0, bar_count = 0, bar_and = 1, bar_or = 0, exited = 0;
    int bar_line = 0, bar_kind = 0;  // the first arrival's barrier; bar_split: someone else's
    bool bar_split = false;
    std::vector<unsigned> warp_arrived, warp_exited, warp_exists;
    void* tls_base = nullptr;
    size_t tls_size = 0;
    int ndyn = 0;
    void* dyn[MAX_DYN] = {};
    uint64_t dyn_cap[MAX_DYN] = {};
    bool failed = false;
    alignas(64) unsigned char quick[64];  // the canary's bytes from offset quick_from on (smem_check)
    uint64_t quick_from = ~0ull;
    bool canary_ok = false;  // the last block ended with every canary intact: keep, not refill
    uint3 bid{};
    pl::CoxGuard guard{};  // collapsed kernels: pl_cox_guard
    jmp_buf cox_out;       // collapsed kernels: where a fiber-only call (cox_escape) returns to
    uint64_t rng = 0;
    char* altstack = nullptr;
    pthread_t self{};
};

thread_local Worker* tl_worker PL_TLS_FAST = nullptr;
Spec* g_spec = nullptr;
std::atomic<int> g_next_block{0};
std::atomic<bool> g_abort{false};
std::vector<uint32_t> g_block_order;
Worker* g_workers = nullptr;  // for the watchdog's sample: every worker thread is signalled
int g_nworkers = 0;

// ---- sanitizer and memory-access profile: state and checks ----------------------
#define PL_SAN_PART 1
#include "sanitizer_rt.h"
#undef PL_SAN_PART

// ---- messages ---------------------------------------------------------------------------------
struct Msg {
    std::string s;
    void add(const char* fmt, ...) __attribute__((format(printf, 2, 3))) {
        char buf[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, sizeof buf, fmt, ap);
        va_end(ap);
        s += buf;
    }
};

const char* kind_name(int kind) {
    static const char* names[] = {"__syncwarp", "__shfl_sync", "__shfl_up_sync", "__shfl_down_sync",
                                  "__shfl_xor_sync", "__ballot_sync", "__any_sync", "__all_sync",
                                  "__reduce_add_sync", "__reduce_min_sync", "__reduce_max_sync",
                                  "coalesced_threads"};
    return (kind >= 0 && kind < pl::WARP_KIND_COUNT) ? names[kind] : "warp operation";
}
const char* bar_name(int kind) {
    static const char* names[] = {"__syncthreads", "__syncthreads_count", "__syncthreads_and",
                                  "__syncthreads_or"};
    return (kind >= 0 && kind < 4) ? names[kind] : "__syncthreads";
}

// "0-31, 64, 96-127" from a sorted list of thread indices.
std::string ranges(const std::vector<int>& ids) {
    std::string out;
    char buf[48];
    for (size_t i = 0; i < ids.size();) {
        size_t j = i;
        while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
        if (j == i) snprintf(buf, sizeof buf, "%d", ids[i]);
        else snprintf(buf, sizeof buf, "%d-%d", ids[i], ids[j]);
        if (!out.empty()) out += ", ";
        out += buf;
        i = j + 1;
    }
    return out;
}

std::string where(int line) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s:%d", g_spec->filename, line);
    return buf;
}

std::string block_name(const Worker* w) {
    char buf[96];
    snprintf(buf, sizeof buf, "block (%u, %u, %u)", w->bid.x, w->bid.y, w->bid.z);
    return buf;
}

// First error of the launch wins; later ones (other workers) are dropped.
void report(Worker* w, Status st, const std::string& text, int thread = -1) {
    w->failed = true;
    g_abort.store(true);
    Diag* d = g_spec->diag;
    int32_t expected = ST_OK;
    if (!d->status.compare_exchange_strong(expected, (int32_t)st)) return;
    d->block[0] = w->bid.x; d->block[1] = w->bid.y; d->block[2] = w->bid.z;
    d->thread = thread;
    snprintf(d->message, MSG_LEN, "%s", text.c_str());
}

// ---- fibers -------------------------------------------------------------------------------
void fiber_main(void* arg);

bool smem_check(Worker* w, int line, int thread);

void switch_to_scheduler(Worker* w) {
    Fiber& f = w->fibers[w->cur];
    Progress& p = g_spec->diag->progress[w->id];
    p.line = f.line;
    // An overrun right past the end is almost always an off-by-N index: catch it in the act.
    if (w->ndyn && !w->failed) smem_check(w, 0, w->cur);
#ifdef PL_FIBER_ASM
    pl_switch(&f.sp, w->sched_sp);
#else
    swapcontext(&w->ucs[w->cur], &w->sched_uc);
#endif
}

void resume(Worker* w, int t) {
    w->cur = t;
    pl_cur = &w->fibers[t].ctx;
    g_spec->diag->progress[w->id].thread = t;
#ifdef PL_FIBER_ASM
    pl_switch(&w->sched_sp, w->fibers[t].sp);
#else
    swapcontext(&w->sched_uc, &w->ucs[t]);
#endif
    pl_cur = nullptr;
}

// A fiber that hit an error parks here forever; its stack is simply reused for the next block.
[[noreturn]] void fail_and_park(Worker* w) {
    for (;;) switch_to_scheduler(w);
}

std::string lane_list(unsigned bits);
const char* kind_name(int kind);

void fiber_main(void*) {
    Worker* w = tl_worker;
    w->spec->entry(w->spec->args);
    Fiber& f = w->fibers[w->cur];
    f.state = EXITED;
    w->exited++;
    w->warp_exited[f.warp] |= 1u << f.lane;
    // Lanes of this warp already waiting at a warp operation that names this lane: never completes.
    Fiber* lanes = &w->fibers[f.warp * 32];
    unsigned waiting = 0;
    int first = -1;
    for (int l = 0; l < 32 && f.warp * 32 + l < w->nthreads; ++l)
        if (lanes[l].state == AT_WARP && (lanes[l].mask >> f.lane & 1)) {
            waiting |= 1u << l;
            if (first < 0) first = l;
        }
    if (waiting) {
        Msg m;
        m.add("thread %d (warp %d, lane %d) of %s returned from the kernel while lanes %s of its warp "
              "wait for it at %s(mask 0x%08x) at %s. Every lane named in the mask must call the same "
              "warp operation with the same mask.",
              w->cur, f.warp, f.lane, block_name(w).c_str(), lane_list(waiting).c_str(),
              kind_name(lanes[first].kind), lanes[first].mask, where(lanes[first].line).c_str());
        report(w, ST_WARP, m.s, w->cur);
    }
    for (;;) switch_to_scheduler(w);
}

#ifndef PL_FIBER_ASM
void fiber_main_uc() { fiber_main(nullptr); }
#endif

// ---- dynamic shared memory guard ------------------------------------------------------------
constexpr uint64_t GUARD_WINDOW = 16 * 1024;  // checked at every barrier; all of it at block end

// Fill [from, to) with the canary pattern, aligned to the pattern's period.
void canary_fill(unsigned char* p, uint64_t from, uint64_t to) {
    uint64_t off = from;
    for (; off < to && (off & 3); ++off) p[off] = ((const unsigned char*)&CANARY)[off & 3];
    for (; off + 4 <= to; off += 4) memcpy(p + off, &CANARY, 4);
    for (; off < to; ++off) p[off] = ((const unsigned char*)&CANARY)[off & 3];
}

// First byte in [from, to) that no longer holds the canary, or `to`.
uint64_t canary_find(const unsigned char* p, uint64_t from, uint64_t to) {
    uint64_t off = from;
    for (; off < to && (off & 3); ++off)
        if (p[off] != ((const unsigned char*)&CANARY)[off & 3]) return off;
    // 64 bytes per test (the barrier's 16 KiB window, the block end's whole capacity): the
    // word loop below then finds the first changed byte.
    const uint64_t c8 = ((uint64_t)CANARY << 32) | CANARY;
    typedef uint64_t v2u64 __attribute__((vector_size(16)));  // SSE2 / NEON registers
    const v2u64 c16 = {c8, c8};
    for (; off + 64 <= to; off += 64) {
        v2u64 a, b, c, d;
        memcpy(&a, p + off, 16); memcpy(&b, p + off + 16, 16);
        memcpy(&c, p + off + 32, 16); memcpy(&d, p + off + 48, 16);
        v2u64 diff = (a ^ c16) | (b ^ c16) | (c ^ c16) | (d ^ c16);
        if (diff[0] | diff[1]) break;
    }
    for (; off + 8 <= to; off += 8) {
        uint64_t v, c = c8;
        memcpy(&v, p + off, 8);
        if (v != c) break;
    }
    for (; off < to; ++off)
        if (p[off] != ((const unsigned char*)&CANARY)[off & 3]) return off;
    return to;
}

// Is the canary past `shared_mem` intact? Checked in three places, from cheap to thorough:
//   thread >= 0: when that CUDA thread yields (first QUICK_WINDOW bytes): names the writer;
//   line > 0:    when a barrier opens (first GUARD_WINDOW bytes);
//   otherwise:   when the block ends (everything up to the capacity).
constexpr uint64_t QUICK_WINDOW = 64;  // 16 floats: off-by-a-few writes, named at once; per switch, so kept short

bool smem_check(Worker* w, int line, int thread) {
    uint64_t used = g_spec->shared_mem;
    // Per switch (thread >= 0): one 64-byte compare against the pattern, not a byte-aligned
    // scan; the scan below runs only to say where an overrun is.
    if (thread >= 0 && w->quick_from != used) {
        for (uint64_t k = 0; k < QUICK_WINDOW; ++k)
            w->quick[k] = ((const unsigned char*)&CANARY)[(used + k) & 3];
        w->quick_from = used;
    }
    for (int i = 0; i < w->ndyn; ++i) {
        const unsigned char* p = (const unsigned char*)w->dyn[i];
        uint64_t cap = w->dyn_cap[i];
        if (thread >= 0 && used + QUICK_WINDOW <= cap && !memcmp(p + used, w->quick, QUICK_WINDOW))
            continue;
        uint64_t window = thread >= 0 ? QUICK_WINDOW : line > 0 ? GUARD_WINDOW : cap;
        uint64_t end = used + window < cap ? used + window : cap;
        uint64_t off = used < cap ? canary_find(p, used, end) : end;
        if (off == end) continue;
        Diag* d = g_spec->diag;
        int32_t expected = ST_OK;
        w->failed = true;
        g_abort.store(true);
        if (!d->status.compare_exchange_strong(expected, (int32_t)ST_SMEM)) return false;
        d->smem_index = i;
        d->smem_offset = (int64_t)off;
        d->smem_line = line;
        d->block[0] = w->bid.x; d->block[1] = w->bid.y; d->block[2] = w->bid.z;
        d->thread = thread;
        Msg m;
        if (thread >= 0) {
            const Fiber& f = w->fibers[thread];
            m.add("write past the launch's dynamic shared memory: thread %d of %s wrote byte offset %llu, "
                  "but shared_mem=%llu bytes; ",
                  thread, block_name(w).c_str(), (unsigned long long)off, (unsigned long long)used);
            if (f.state == EXITED) m.add("seen when the thread returned from the kernel");
            else m.add("the write came before it reached %s", where(f.line).c_str());
        } else {
            m.add("write past the launch's dynamic shared memory in %s: shared_mem=%llu bytes, but byte "
                  "offset %llu was written; ",
                  block_name(w).c_str(), (unsigned long long)used, (unsigned long long)off);
            if (line > 0) m.add("detected at the barrier at %s (the write happened before it)", where(line).c_str());
            else m.add("detected when the block finished");
        }
        snprintf(d->message, MSG_LEN, "%s", m.s.c_str());
        return false;
    }
    return true;
}

// ---- barriers -----------------------------------------------------------------------------
// Round-robin and reversed: a thread arriving at a barrier hands over straight to the next
// runnable thread in the schedule's order (the one the scheduler would resume next anyway):
// one context switch per arrival instead of two, about a third of a 1024-thread barrier.
void yield_in_order(Worker* w) {
#ifdef PL_FIBER_ASM
    int sched = g_spec->schedule;
    if (sched == SCHED_ROUND_ROBIN || sched == SCHED_REVERSED) {
        for (int k = w->pos + 1; k < w->nthreads; ++k) {
            int t = w->order[k];
            if (w->fibers[t].state != RUNNABLE) continue;
            Fiber& f = w->fibers[w->cur];
            Progress& p = g_spec->diag->progress[w->id];
            p.line = f.line;
            if (w->ndyn && !w->failed) smem_check(w, 0, w->cur);
            if (w->failed) break;  // the scheduler stops the block
            w->cur = t;
            w->pos = k;
            pl_cur = &w->fibers[t].ctx;
            p.thread = t;
            pl_switch(&f.sp, w->fibers[t].sp);
            return;
        }
    }
#endif
    switch_to_scheduler(w);
}

void release_barrier(Worker* w) {
    int count = w->bar_count, all = w->bar_and, any = w->bar_or;
    for (auto& f : w->fibers) {
        if (f.state != AT_BARRIER) continue;
        f.state = RUNNABLE;
        if (f.kind == pl::BAR_COUNT) f.res = (uint64_t)count;
        else if (f.kind == pl::BAR_AND) f.res = (uint64_t)all;
        else if (f.kind == pl::BAR_OR) f.res = (uint64_t)any;
    }
    w->bar_arrived = 0; w->bar_count = 0; w->bar_and = 1; w->bar_or = 0; w->bar_split = false;
}

// A collapsed kernel (no fibers: w->cur < 0) reached code only fibers can run (collapse.py
// should have kept such a kernel on fibers): fail the launch and leave the block.
[[noreturn]] void cox_escape(Worker* w, Status st, const std::string& text) {
    report(w, st, text);
    longjmp(w->cox_out, 1);
}

int barrier(int line, int kind, int pred) {
    Worker* w = tl_worker;
    if (!w) { fprintf(stderr, "pagedlab: __syncthreads() outside a kernel launch\n"); abort(); }
    if (w->cur < 0)
        cox_escape(w, ST_INTERNAL, "pagedlab internal error: a collapsed kernel reached " + std::string(bar_name(kind)) +
                   "() at " + where(line) + "; run it with PAGEDLAB_CUDA_COLLAPSE=0 and report this");
    Fiber& f = w->fibers[w->cur];
    f.state = AT_BARRIER; f.line = line; f.kind = kind;
    if (w->bar_arrived++ == 0) { w->bar_line = line; w->bar_kind = kind; }
    else if (line != w->bar_line || kind != w->bar_kind) w->bar_split = true;
    w->bar_count += pred; w->bar_and &= pred; w->bar_or |= pred;
    if (w->bar_arrived == w->nthreads) {
        // Everyone waits at a barrier: it must be the same call, or the threads have diverged.
        // (Tracked per arrival, so a matching barrier costs no pass over the block's threads.)
        bool same = !w->bar_split;
        if (!same) {
            std::vector<std::pair<int, int>> sites;  // (line, kind) in order of first thread
            for (auto& g : w->fibers) {
                bool seen = false;
                for (auto& s : sites) seen = seen || (s.first == g.line && s.second == g.kind);
                if (!seen) sites.push_back({g.line, g.kind});
            }
            Msg m;
            m.add("threads of %s wait at different barriers, so no barrier can complete "
                  "(every thread of a block must reach the same __syncthreads()):\n",
                  block_name(w).c_str());
            for (auto& s : sites) {
                std::vector<int> ids;
                for (int t = 0; t < w->nthreads; ++t)
                    if (w->fibers[t].line == s.first && w->fibers[t].kind == s.second) ids.push_back(t);
                m.add("  threads %s wait at %s() at %s\n", ranges(ids).c_str(), bar_name(s.second),
                      where(s.first).c_str());
            }
            m.add("Is a __syncthreads() inside an if or a loop whose condition differs between threads?");
            report(w, ST_BARRIER, m.s);
            fail_and_park(w);
        }
        if (w->ndyn && !smem_check(w, line, -1)) fail_and_park(w);
        if (!san::barrier(w)) fail_and_park(w);  // sanitizer
        release_barrier(w);
    }
    yield_in_order(w);
    if (w->failed) fail_and_park(w);
    return (int)f.res;
}

// ---- warp operations -------------------------------------------------------------------------
void complete_warp_op(Worker* w, int warp, unsigned eff, int kind, unsigned mask) {
    Fiber* lanes = &w->fibers[warp * 32];
    uint64_t ballot = 0, sum = 0, mn = UINT64_MAX, mx = 0;
    for (int l = 0; l < 32; ++l) {
        if (!(eff >> l & 1)) continue;
        uint32_t v = (uint32_t)lanes[l].val;
        if (lanes[l].val) ballot |= 1ull << l;
        sum += v;
        mn = v < mn ? v : mn;
        mx = v > mx ? v : mx;
    }
    for (int l = 0; l < 32; ++l) {
        if (!(eff >> l & 1)) continue;
        Fiber& f = lanes[l];
        int width = f.width, base = l & ~(width - 1), src = l;  // width: a power of two (checked)
        switch (kind) {
            case pl::SHFL_IDX: src = base + (f.arg & (width - 1)); break;
            case pl::SHFL_UP: src = (l - base) >= f.arg ? l - f.arg : l; break;
            case pl::SHFL_DOWN: src = (l - base) + f.arg < width ? l + f.arg : l; break;
            case pl::SHFL_XOR: src = l ^ f.arg; if (src < base || src >= base + width) src = l; break;
            default: break;
        }
        switch (kind) {
            case pl::SHFL_IDX: case pl::SHFL_UP: case pl::SHFL_DOWN: case pl::SHFL_XOR:
                // Reading a lane outside the mask is undefined on a GPU: hand back poison.
                f.res = (src >= 0 && src < 32 && (eff >> src & 1)) ? lanes[src].val : ~0ull;
                break;
            case pl::BALLOT: f.res = ballot & mask; break;
            case pl::ANY: f.res = ballot != 0; break;
            case pl::ALL: f.res = ballot == (uint64_t)eff; break;
            case pl::REDUCE_ADD: f.res = (uint32_t)sum; break;
            case pl::REDUCE_MIN: f.res = (uint32_t)mn; break;
            case pl::REDUCE_MAX: f.res = (uint32_t)mx; break;
            default: f.res = 0;
        }
        f.state = RUNNABLE;
    }
    w->warp_arrived[warp] &= ~eff;
    san::warp_sync(w, warp, eff);  // sanitizer
}

std::string lane_list(unsigned bits) {
    std::vector<int> ids;
    for (int l = 0; l < 32; ++l) if (bits >> l & 1) ids.push_back(l);
    return ranges(ids);
}

uint64_t warp_op(int line, int kind, unsigned mask, uint64_t bits, int arg, int width) {
    Worker* w = tl_worker;
    if (!w) { fprintf(stderr, "pagedlab: warp operation outside a kernel launch\n"); abort(); }
    if (w->cur < 0)
        cox_escape(w, ST_INTERNAL, "pagedlab internal error: a collapsed kernel reached " + std::string(kind_name(kind)) +
                   "() at " + where(line) + "; run it with PAGEDLAB_CUDA_COLLAPSE=0 and report this");
    Fiber& f = w->fibers[w->cur];
    int warp = f.warp, lane = f.lane;
    int tid = w->cur;
    if (!(mask >> lane & 1)) {
        Msg m;
        m.add("%s() at %s: thread %d (warp %d, lane %d) of %s calls it with mask 0x%08x, which does "
              "not include its own lane. The mask must name every lane that executes the call.",
              kind_name(kind), where(line).c_str(), tid, warp, lane, block_name(w).c_str(), mask);
        report(w, ST_WARP, m.s, tid);
        fail_and_park(w);
    }
    if (width <= 0 || width > 32 || (width & (width - 1))) {
        Msg m;
        m.add("%s() at %s: width %d is not a power of two between 1 and 32.", kind_name(kind),
              where(line).c_str(), width);
        report(w, ST_WARP, m.s, tid);
        fail_and_park(w);
    }
    if (kind >= pl::SHFL_IDX && kind <= pl::SHFL_XOR) {
        // A full mask in a partial last warp (blockDim not a multiple of 32): a shuffle from a
        // lane that does not exist returns garbage on a GPU. Say so instead of handing back NaN.
        int base = lane & ~(width - 1), src = lane;
        switch (kind) {
            case pl::SHFL_IDX: src = base + (arg & (width - 1)); break;
            case pl::SHFL_UP: src = (lane - base) >= arg ? lane - arg : lane; break;
            case pl::SHFL_DOWN: src = (lane - base) + arg < width ? lane + arg : lane; break;
            default: src = lane ^ arg; if (src < base || src >= base + width) src = lane; break;
        }
        if (src >= 0 && src < 32 && (mask >> src & 1) && !(w->warp_exists[warp] >> src & 1)) {
            int alive = __builtin_popcount(w->warp_exists[warp]);
            Msg m;
            m.add("%s() at %s: thread %d (warp %d, lane %d) of %s reads lane %d, which does not "
                  "exist: the block has %d threads, so warp %d has lanes 0-%d only, but mask 0x%08x "
                  "names lanes up to 31. On a GPU the value read is undefined. Use the mask of the "
                  "lanes that exist (e.g. __ballot_sync(0xffffffff, true) or __activemask()) and "
                  "read only lanes inside it (check lane + offset < the warp's size).",
                  kind_name(kind), where(line).c_str(), tid, warp, lane, block_name(w).c_str(), src,
                  w->nthreads, warp, alive - 1, mask);
            report(w, ST_WARP, m.s, tid);
            fail_and_park(w);
        }
    }
    if (kind == pl::COALESCE) {  // resolved by run_block once nothing else can run
        f.state = AT_WARP; f.line = line; f.kind = kind; f.mask = 0;
        switch_to_scheduler(w);
        if (w->failed) fail_and_park(w);
        return f.res;
    }
    f.state = AT_WARP; f.line = line; f.kind = kind; f.mask = mask;
    f.val = bits; f.arg = arg; f.width = width;
    w->warp_arrived[warp] |= 1u << lane;
    unsigned eff = mask & w->warp_exists[warp];
    if (unsigned gone = eff & w->warp_exited[warp]) {
        Msg m;
        m.add("%s() at %s in %s, warp %d: mask 0x%08x names lanes %s, which already returned from "
              "the kernel and can never take part.",
              kind_name(kind), where(line).c_str(), block_name(w).c_str(), warp, mask,
              lane_list(gone).c_str());
        report(w, ST_WARP, m.s, tid);
        fail_and_park(w);
    }
    if ((w->warp_arrived[warp] & eff) == eff) {
        Fiber* lanes = &w->fibers[warp * 32];
        unsigned bad = 0;
        for (int l = 0; l < 32; ++l)
            if ((eff >> l & 1) && (lanes[l].kind != kind || lanes[l].mask != mask)) bad |= 1u << l;
        if (bad) {
            Msg m;
            m.add("mismatched warp operation in %s, warp %d: lanes named in one mask must all call the "
                  "same operation with the same mask.\n", block_name(w).c_str(), warp);
            unsigned todo = eff;
            while (todo) {
                int l0 = __builtin_ctz(todo);
                unsigned same = 0;
                for (int l = 0; l < 32; ++l)
                    if ((todo >> l & 1) && lanes[l].kind == lanes[l0].kind &&
                        lanes[l].mask == lanes[l0].mask && lanes[l].line == lanes[l0].line)
                        same |= 1u << l;
                m.add("  lanes %s: %s(mask 0x%08x) at %s\n", lane_list(same).c_str(),
                      kind_name(lanes[l0].kind), lanes[l0].mask, where(lanes[l0].line).c_str());
                todo &= ~same;
            }
            report(w, ST_WARP, m.s, tid);
            fail_and_park(w);
        }
        complete_warp_op(w, warp, eff, kind, mask);
    }
    // Straight to the next thread the scheduler would resume (round-robin, reversed), as at a
    // barrier: one context switch per lane instead of two (the decode kernel's 20 shuffles).
    if (!w->failed) yield_in_order(w);
    else switch_to_scheduler(w);
    if (w->failed) fail_and_park(w);
    return f.res;
}

// ---- deadlock report: nobody can run, yet not everyone has returned ---------------------------
void report_stuck(Worker* w) {
    Msg m;
    bool any_barrier = false;
    for (auto& f : w->fibers) any_barrier = any_barrier || f.state == AT_BARRIER;
    if (any_barrier)
        m.add("__syncthreads() deadlock in %s: not every thread of the block reaches the barrier "
              "(a thread that returned early never arrives).\n", block_name(w).c_str());
    else
        m.add("warp operation deadlock in %s: lanes named in a mask never arrive.\n",
              block_name(w).c_str());
    // Group threads by what they are doing, in thread order.
    std::vector<bool> done(w->nthreads, false);
    for (int t = 0; t < w->nthreads; ++t) {
        if (done[t]) continue;
        const Fiber& a = w->fibers[t];
        std::vector<int> ids;
        for (int u = t; u < w->nthreads; ++u) {
            const Fiber& b = w->fibers[u];
            bool same = b.state == a.state &&
                        (a.state == EXITED || (b.line == a.line && b.kind == a.kind &&
                                               (a.state != AT_WARP || b.mask == a.mask)));
            if (same) { ids.push_back(u); done[u] = true; }
        }
        std::string r = ranges(ids);
        if (a.state == EXITED) m.add("  threads %s returned from the kernel\n", r.c_str());
        else if (a.state == AT_BARRIER)
            m.add("  threads %s wait at %s() at %s\n", r.c_str(), bar_name(a.kind), where(a.line).c_str());
        else
            m.add("  threads %s wait at %s(mask 0x%08x) at %s\n", r.c_str(), kind_name(a.kind), a.mask,
                  where(a.line).c_str());
    }
    m.add(any_barrier ? "Every thread of a block must reach the same __syncthreads(); move the barrier "
                        "out of the branch, or do not return before it."
                      : "Every lane in a warp operation's mask must reach that operation.");
    report(w, any_barrier ? ST_BARRIER : ST_WARP, m.s);
}

// ---- the block scheduler --------------------------------------------------------------------
// coalesced_threads(): when no thread of the block can run, the lanes of a warp that wait at the
// same coalesced_threads() call form one group (the others wait elsewhere or have returned).
bool resolve_coalesced(Worker* w) {
    bool any = false;
    for (int wp = 0; wp < w->nwarps; ++wp) {
        Fiber* lanes = &w->fibers[wp * 32];
        int nl = w->nthreads - wp * 32 < 32 ? w->nthreads - wp * 32 : 32;
        unsigned done = 0;
        for (int l = 0; l < nl; ++l) {
            if (lanes[l].state != AT_WARP || lanes[l].kind != pl::COALESCE || (done >> l & 1)) continue;
            unsigned group = 0;
            for (int k = l; k < nl; ++k)
                if (lanes[k].state == AT_WARP && lanes[k].kind == pl::COALESCE && lanes[k].line == lanes[l].line)
                    group |= 1u << k;
            for (int k = l; k < nl; ++k)
                if (group >> k & 1) { lanes[k].res = group; lanes[k].state = RUNNABLE; }
            done |= group;
            any = true;
        }
    }
    return any;
}

uint64_t splitmix(uint64_t& s) {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

bool setup_worker(Worker* w, int nthreads) {
    w->page = (size_t)sysconf(_SC_PAGESIZE);
    size_t ss = (g_spec->stack_size + w->page - 1) & ~(w->page - 1);
    w->stack_stride = ss + w->page;  // one guard page below each stack: overflow faults
    w->stack_count = g_spec->collapsed ? 1 : (size_t)nthreads;  // collapsed: no fibers run
    size_t total = w->stack_stride * w->stack_count;
    void* mem = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS
#ifdef MAP_NORESERVE
                     | MAP_NORESERVE
#endif
                     , -1, 0);
    if (mem == MAP_FAILED) return false;
    w->stacks = (char*)mem;
    for (size_t i = 0; i < w->stack_count; ++i) mprotect(w->stacks + i * w->stack_stride, w->page, PROT_NONE);
    w->fibers.assign(nthreads, Fiber{});
#ifndef PL_FIBER_ASM
    w->ucs.resize(nthreads);
#endif
    w->nthreads = nthreads;
    w->nwarps = (nthreads + 31) / 32;
    w->warp_arrived.assign(w->nwarps, 0);
    w->warp_exited.assign(w->nwarps, 0);
    w->warp_exists.assign(w->nwarps, 0);
    for (int t = 0; t < nthreads; ++t) w->warp_exists[t / 32] |= 1u << (t % 32);
    // Touch this module's dynamic shared arrays so the kernel library's TLS block exists here.
    w->ndyn = g_spec->smem_info ? g_spec->smem_info(w->dyn, w->dyn_cap, MAX_DYN) : 0;
#if defined(__linux__)
    // All of the kernel library's thread-local storage is __shared__ memory: find it to poison it.
    struct Find { void* code; void* base; size_t size; } find{(void*)g_spec->entry, nullptr, 0};
    dl_iterate_phdr(
        [](struct dl_phdr_info* info, size_t, void* data) -> int {
            Find* fd = (Find*)data;
            bool mine = false;
            size_t tls = 0;
            for (int i = 0; i < info->dlpi_phnum; ++i) {
                const auto& ph = info->dlpi_phdr[i];
                uintptr_t lo = info->dlpi_addr + ph.p_vaddr;
                if (ph.p_type == PT_LOAD && (uintptr_t)fd->code >= lo && (uintptr_t)fd->code < lo + ph.p_memsz)
                    mine = true;
                if (ph.p_type == PT_TLS) tls = ph.p_memsz;
            }
            if (!mine) return 0;
            fd->base = info->dlpi_tls_data;
            fd->size = tls;
            return 1;
        },
        &find);
    w->tls_base = find.base;
    w->tls_size = find.base ? find.size : 0;
#endif
    w->order.resize(nthreads);
    san::worker_setup(w);  // sanitizer
    return true;
}

void run_block(Worker* w, uint32_t linear) {
    Spec* s = g_spec;
    uint32_t gx = s->grid[0], gy = s->grid[1];
    w->bid = uint3{linear % gx, (linear / gx) % gy, linear / (gx * gy)};
    Progress& p = s->diag->progress[w->id];
    p.active = 1; p.block[0] = w->bid.x; p.block[1] = w->bid.y; p.block[2] = w->bid.z;
    p.thread = -1; p.line = 0;

    // Fresh shared memory: poison (0xff bytes: NaN floats, -1 ints), canary past shared_mem.
    // The canary tails (up to ~100 KiB per extern array) are refilled only after a block that
    // damaged them: rewriting them for every block cost more than small blocks' work.
    bool keep = w->canary_ok && w->tls_base;
    if (w->tls_base && !keep) memset(w->tls_base, 0xff, w->tls_size);
    if (keep) {  // poison everything but the intact tails [shared_mem, cap) of the dyn arrays
        char* lo = (char*)w->tls_base;
        char* end = lo + w->tls_size;
        while (lo < end) {
            char* next_tail = end;
            char* tail_end = end;
            for (int i = 0; i < w->ndyn; ++i) {
                char* t0 = (char*)w->dyn[i] + (s->shared_mem < w->dyn_cap[i] ? s->shared_mem : w->dyn_cap[i]);
                char* t1 = (char*)w->dyn[i] + w->dyn_cap[i];
                if (t0 < t1 && t1 > lo && t0 < next_tail) { next_tail = t0 < lo ? lo : t0; tail_end = t1; }
            }
            if (next_tail > lo) memset(lo, 0xff, (size_t)(next_tail - lo));
            lo = tail_end > next_tail ? tail_end : end;
        }
    }
    for (int i = 0; i < w->ndyn; ++i) {
        unsigned char* b = (unsigned char*)w->dyn[i];
        if (!w->tls_base) memset(b, 0xff, s->shared_mem < w->dyn_cap[i] ? s->shared_mem : w->dyn_cap[i]);
        if (!keep && s->shared_mem < w->dyn_cap[i]) canary_fill(b, s->shared_mem, w->dyn_cap[i]);
    }
    w->canary_ok = false;

    if (s->collapsed) {  // collapse.py: the whole block is one call, threads are loops inside it
        pl::ThreadCtx ctx{};
        ctx.bid = w->bid;
        ctx.bdim = dim3(s->block[0], s->block[1], s->block[2]);
        ctx.gdim = dim3(s->grid[0], s->grid[1], s->grid[2]);
        ctx.collapsed = 1;
        w->failed = false;
        w->cur = -1;  // a crash names the block, not a thread
        p.thread = -1;
        san::block_begin(w);
        pl_cur = &ctx;
        if (setjmp(w->cox_out) == 0) s->entry(s->args);
        pl_cur = nullptr;
        if (w->ndyn) w->canary_ok = smem_check(w, 0, -1);
        if (!w->failed) san::block_end(w);
        if (!w->failed) s->diag->blocks_done.fetch_add(1, std::memory_order_relaxed);
        p.active = 0;
        return;
    }
    uint32_t bx = s->block[0], by = s->block[1];
    for (int t = 0; t < w->nthreads; ++t) {
        Fiber& f = w->fibers[t];
        f = Fiber{};
        f.ctx.tid = uint3{t % bx, (t / bx) % by, t / (bx * by)};
        f.ctx.bid = w->bid;
        f.ctx.bdim = dim3(s->block[0], s->block[1], s->block[2]);
        f.ctx.gdim = dim3(s->grid[0], s->grid[1], s->grid[2]);
        f.lane = t % 32; f.warp = t / 32;
        f.state = RUNNABLE;
        // Stagger the stack tops by a cache line per thread: stacks are a multiple of 4 KiB
        // apart, so unstaggered every fiber's saved registers would fall in the same L1 set
        // and each switch would miss (measured: most of a 1024-thread barrier's cost).
        char* top = w->stacks + t * w->stack_stride + w->stack_stride - (size_t)(t % 64) * 64;
#ifdef PL_FIBER_ASM
        f.sp = fiber_init_stack(top, fiber_main, nullptr);
#else
        getcontext(&w->ucs[t]);
        w->ucs[t].uc_stack.ss_sp = w->stacks + t * w->stack_stride + w->page;
        w->ucs[t].uc_stack.ss_size = w->stack_stride - w->page;
        w->ucs[t].uc_link = nullptr;
        makecontext(&w->ucs[t], fiber_main_uc, 0);
        (void)top;
#endif
    }
    w->bar_arrived = 0; w->bar_count = 0; w->bar_and = 1; w->bar_or = 0; w->exited = 0;
    w->bar_split = false;
    w->failed = false;
    for (int i = 0; i < w->nwarps; ++i) w->warp_arrived[i] = w->warp_exited[i] = 0;

    int n = w->nthreads;
    int sched = s->schedule;
    for (int k = 0; k < n; ++k) w->order[k] = k;
    if (sched == SCHED_REVERSED) for (int k = 0; k < n; ++k) w->order[k] = n - 1 - k;
    if (sched == SCHED_WARP0_FIRST) {  // warp 0, then the other warps from the last one down
        int k = 0;
        for (int t = 0; t < n && t < 32; ++t) w->order[k++] = t;
        for (int wp = w->nwarps - 1; wp >= 1; --wp)
            for (int t = wp * 32; t < n && t < wp * 32 + 32; ++t) w->order[k++] = t;
    }
    w->rng = s->seed * 0x9e3779b97f4a7c15ull + linear + 1;
    san::block_begin(w);  // sanitizer

    for (;;) {
        bool progressed = false;
        if (sched == SCHED_RANDOM)
            for (int k = n - 1; k > 0; --k) std::swap(w->order[k], w->order[splitmix(w->rng) % (k + 1)]);
        for (int k = 0; k < n; ++k) {
            int t = w->order[k];
            if (w->fibers[t].state != RUNNABLE) continue;
            w->pos = k;
            resume(w, t);
            k = w->pos;  // threads handed over to each other up to here (yield_in_order)
            progressed = true;
            if (w->failed) goto out;
            if (sched == SCHED_WARP0_FIRST && t >= 32) {
                bool warp0 = false;
                for (int u = 0; u < n && u < 32; ++u) warp0 = warp0 || w->fibers[u].state == RUNNABLE;
                if (warp0) k = -1;  // warp 0 runs ahead whenever it can
            }
        }
        if (!progressed && !resolve_coalesced(w)) break;
    }
    if (w->exited != n) report_stuck(w);
    else if (w->ndyn) w->canary_ok = smem_check(w, 0, -1);
    if (!w->failed) san::block_end(w);  // sanitizer: may still fail the block
    if (!w->failed) s->diag->blocks_done.fetch_add(1, std::memory_order_relaxed);
out:
    p.active = 0;
}

// ---- crash reporting (isolated child only) --------------------------------------------------
void on_fatal_signal(int sig, siginfo_t* info, void* ucv) {
    Diag* d = g_spec->diag;
    int32_t expected = ST_OK;
    if (d->status.compare_exchange_strong(expected, (int32_t)ST_CRASH)) {
        d->signal = sig;
        d->fault_addr = (uint64_t)(uintptr_t)info->si_addr;
        uint64_t pc = 0, sp = 0;
        ucontext_t* uc = (ucontext_t*)ucv;
#if defined(__linux__) && defined(__x86_64__)
        pc = (uint64_t)uc->uc_mcontext.gregs[REG_RIP];
        sp = (uint64_t)uc->uc_mcontext.gregs[REG_RSP];
#elif defined(__linux__) && defined(__aarch64__)
        pc = (uint64_t)uc->uc_mcontext.pc;
        sp = (uint64_t)uc->uc_mcontext.sp;
#elif defined(__APPLE__) && defined(__x86_64__)
        pc = (uint64_t)uc->uc_mcontext->__ss.__rip;
        sp = (uint64_t)uc->uc_mcontext->__ss.__rsp;
#elif defined(__APPLE__) && defined(__aarch64__)
        pc = (uint64_t)uc->uc_mcontext->__ss.__pc;
        sp = (uint64_t)uc->uc_mcontext->__ss.__sp;
#endif
        (void)uc;
        d->fault_pc = pc;
        d->si_code = info->si_code;
        Worker* w = tl_worker;
        if (w) {
            d->block[0] = w->bid.x; d->block[1] = w->bid.y; d->block[2] = w->bid.z;
            d->thread = w->cur;
            uintptr_t a = (uintptr_t)info->si_addr, lo = (uintptr_t)w->stacks;
            if (a >= lo && a < lo + w->stack_stride * w->stack_count && (a - lo) % w->stack_stride < w->page)
                d->stack_overflow = 1;  // the fault hit a guard page
            // ... or the fiber's stack pointer is already below the bottom of its stack
            uintptr_t bottom = lo + (uintptr_t)w->cur * w->stack_stride + w->page;
            if (w->cur >= 0 && sp && sp < bottom && sp + (64u << 20) > bottom) d->stack_overflow = 1;
        } else {
            d->thread = -1;
        }
    }
    _exit(3);
}

_Unwind_Reason_Code collect_frame(struct _Unwind_Context* ctx, void* arg) {
    Stuck* st = (Stuck*)arg;
    uintptr_t ip = _Unwind_GetIP(ctx);
    if (!ip || st->npcs >= STUCK_PCS) return _URC_END_OF_STACK;
    st->pcs[st->npcs++] = ip;
    return _URC_NO_REASON;
}

// The watchdog is about to kill this launch: record where each worker's thread is (the line a
// spinning loop is on, not the last barrier it passed). The first worker signalled passes the
// signal on to the others; the parent waits briefly for every sample.
void on_watchdog(int, siginfo_t*, void* ucv) {
    static std::atomic<bool> forwarded{false};
    Worker* w = tl_worker;
    if (!forwarded.exchange(true))
        for (int i = 0; i < g_nworkers; ++i)
            if (&g_workers[i] != w && g_workers[i].self) pthread_kill(g_workers[i].self, SIGUSR2);
    if (!w || !g_spec) return;
    Stuck& st = g_spec->diag->stuck[w->id];
    st.npcs = 0;
    ucontext_t* uc = (ucontext_t*)ucv;
#if defined(__linux__) && defined(__x86_64__)
    st.pcs[st.npcs++] = (uint64_t)uc->uc_mcontext.gregs[REG_RIP];
#elif defined(__linux__) && defined(__aarch64__)
    st.pcs[st.npcs++] = (uint64_t)uc->uc_mcontext.pc;
#endif
    (void)uc;
    _Unwind_Backtrace(collect_frame, &st);  // this handler, the signal frame, then the kernel
    int kinds = 0;
    for (int t = 0; t < w->nthreads; ++t) {
        const Fiber& f = w->fibers[t];
        if (t == w->cur) continue;
        if (f.state == RUNNABLE) { st.runnable++; continue; }
        if (f.state == EXITED) { st.exited++; continue; }
        int kind = f.state == AT_WARP ? 100 + f.kind : f.kind, k = 0;
        while (k < kinds && !(st.wait_line[k] == f.line && st.wait_kind[k] == kind)) ++k;
        if (k == kinds && kinds < 4) { st.wait_line[k] = f.line; st.wait_kind[k] = kind; ++kinds; }
        if (k < kinds) st.wait_count[k]++;
    }
    st.sampled = 1;
}

void install_crash_handlers() {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fatal_signal;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP}) sigaction(sig, &sa, nullptr);
    sa.sa_sigaction = on_watchdog;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
    sigaction(SIGUSR2, &sa, nullptr);
}

void* worker_main(void* arg) {
    Worker* w = (Worker*)arg;
    tl_worker = w;
    w->self = pthread_self();
    if (g_spec->isolate) {  // the crash handler needs a stack of its own (fiber stacks overflow)
        size_t sz = 1 << 16;
        w->altstack = (char*)malloc(sz);
        stack_t st;
        st.ss_sp = w->altstack; st.ss_size = sz; st.ss_flags = 0;
        sigaltstack(&st, nullptr);
    }
    uint32_t nthreads = g_spec->block[0] * g_spec->block[1] * g_spec->block[2];
    if (!setup_worker(w, (int)nthreads)) {
        report(w, ST_INTERNAL, "could not allocate fiber stacks (mmap failed)");
        return nullptr;
    }
    uint32_t nblocks = (uint32_t)g_block_order.size();
    while (!g_abort.load(std::memory_order_relaxed)) {
        int i = g_next_block.fetch_add(1);
        if ((uint32_t)i >= nblocks) break;
        run_block(w, g_block_order[i]);
    }
    san::worker_end(w);  // sanitizer
    munmap(w->stacks, w->stack_stride * w->stack_count);
    tl_worker = nullptr;
    return nullptr;
}

int run_launch(Spec* s) {
    g_spec = s;
    g_abort.store(false);
    g_next_block.store(0);
    uint32_t nblocks = s->grid[0] * s->grid[1] * s->grid[2];
    g_block_order.resize(nblocks);
    for (uint32_t i = 0; i < nblocks; ++i) g_block_order[i] = i;
    if (s->schedule == SCHED_REVERSED)
        for (uint32_t i = 0; i < nblocks; ++i) g_block_order[i] = nblocks - 1 - i;
    if (s->schedule == SCHED_RANDOM) {
        uint64_t r = s->seed ^ 0x5bd1e995ull;
        for (uint32_t i = nblocks; i > 1; --i) std::swap(g_block_order[i - 1], g_block_order[splitmix(r) % i]);
    }
    int nw = s->workers < 1 ? 1 : s->workers;
    if (nw > MAX_WORKERS) nw = MAX_WORKERS;
    if ((uint32_t)nw > nblocks) nw = (int)nblocks;
    s->diag->nworkers = nw;
    s->diag->nblocks = nblocks;
    std::vector<Worker> workers(nw);
    std::vector<pthread_t> tids(nw);
    for (int i = 0; i < nw; ++i) { workers[i].id = i; workers[i].spec = s; }
    g_workers = workers.data();
    g_nworkers = nw;
    san::launch_begin(s);  // sanitizer: shadow of the argument arrays for global races
    for (int i = 1; i < nw; ++i) {
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, 1 << 20);
        if (pthread_create(&tids[i], &attr, worker_main, &workers[i]) != 0) {
            report(&workers[0], ST_INTERNAL, "could not start a worker thread");
            nw = i;
            break;
        }
    }
    worker_main(&workers[0]);
    for (int i = 1; i < nw; ++i) pthread_join(tids[i], nullptr);
    for (auto& w : workers) free(w.altstack);
    san::launch_end();
    g_nworkers = 0;
    g_workers = nullptr;
    g_spec = nullptr;
    return s->diag->status.load();
}

}  // namespace

// ============================================================================================
// C ABI used by the prelude (inside kernels) and by Python (ctypes).
// ============================================================================================
extern "C" {

void pl_syncthreads(int line) { barrier(line, pl::BAR_PLAIN, 1); }
// A collapsed kernel's dynamic shared memory check: after thread `thread`'s piece (the
// canary right past shared_mem, as at a fiber's switch), or at the barrier at `line`
// (thread -1: the guard window, as the fibers' barrier). Nonzero: the launch failed, stop.
const pl::CoxGuard* pl_cox_guard(void) {
    Worker* w = tl_worker;
    pl::CoxGuard& g = w->guard;
    uint64_t used = g_spec->shared_mem;
    g.n = w->ndyn;
    if (!w->ndyn) return &g;
    if (w->quick_from != used) {
        for (uint64_t k = 0; k < QUICK_WINDOW; ++k)
            w->quick[k] = ((const unsigned char*)&CANARY)[(used + k) & 3];
        w->quick_from = used;
    }
    g.pattern = w->quick;
    for (int i = 0; i < w->ndyn && i < 8; ++i) {
        if (used + QUICK_WINDOW > w->dyn_cap[i]) { g.n = -1; break; }
        g.at[i] = (const unsigned char*)w->dyn[i] + used;
    }
    if (w->ndyn > 8) g.n = -1;
    return &g;
}

int pl_cox_smem(int line, int thread) {
    Worker* w = tl_worker;
    if (!w || !w->ndyn) return 0;
    if (w->failed) return 1;
    if (thread >= 0) {  // what the thread's report says: the cut it reached (0: it returned)
        Fiber& f = w->fibers[thread];
        f.line = line;
        f.state = line > 0 ? RUNNABLE : EXITED;
        smem_check(w, 0, thread);
    } else {
        smem_check(w, line, -1);
    }
    return w->failed;
}
int pl_syncthreads_reduce(int line, int kind, int pred) { return barrier(line, kind, pred); }
uint64_t pl_warp_op(int line, int kind, unsigned mask, uint64_t bits, int arg, int width) {
    return warp_op(line, kind, mask, bits, arg, width);
}
unsigned pl_activemask(void) {
    Worker* w = tl_worker;
    if (!w) return 0;
    if (w->cur < 0)
        cox_escape(w, ST_INTERNAL, "pagedlab internal error: a collapsed kernel called __activemask(); "
                   "run it with PAGEDLAB_CUDA_COLLAPSE=0 and report this");
    Fiber& f = w->fibers[w->cur];
    return w->warp_exists[f.warp] & ~w->warp_exited[f.warp];
}
void pl_trap(int line, const char* what) {
    Worker* w = tl_worker;
    if (!w) abort();
    if (w->cur < 0) {  // collapsed: the thread is not known here
        Msg m;
        m.add("%s at %s in %s", what, where(line).c_str(), block_name(w).c_str());
        cox_escape(w, ST_TRAP, m.s);
    }
    Msg m;
    m.add("%s at %s in thread %d of %s", what, where(line).c_str(), w->cur, block_name(w).c_str());
    report(w, ST_TRAP, m.s, w->cur);
    fail_and_park(w);
}

PL_EXPORT size_t pl_diag_size(void) { return sizeof(Diag); }
PL_EXPORT size_t pl_spec_size(void) { return sizeof(Spec); }

// Memory a forked child can write into: anonymous MAP_SHARED pages, with an inaccessible page
// right after the end, so a write just past an output array faults instead of passing silently.
PL_EXPORT void* pl_shared_alloc(size_t size, size_t* mapped) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t body = (size + page - 1) / page * page;
    if (body == 0) body = page;
    size_t total = body + page;
    void* mem = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) return nullptr;
    mprotect((char*)mem + body, page, PROT_NONE);
    *mapped = total;
    return mem;
}
PL_EXPORT void pl_shared_free(void* mem, size_t mapped) { if (mem) munmap(mem, mapped); }

// Run a launch. IN_PROCESS: here, on this process's threads; returns the status.
// FORKED: in a forked child; returns 0 at once with out_pid and out_fd (a pipe that reaches
// EOF when the child ends) set, and the caller waits (with its own timeout) and reads the Diag.
// IN_RUNNER: this process is already the launch's own (the kernel runner, runner.cpp): install
// the crash handlers and run here; the caller exits with the status.
PL_EXPORT int pl_launch(Spec* s) {
    if (s->isolate == IN_PROCESS) return run_launch(s);
    if (s->isolate == IN_RUNNER) {
        install_crash_handlers();
        return run_launch(s);
    }
    int fds[2];
#if defined(__linux__)
    if (pipe2(fds, O_CLOEXEC) != 0) return -errno;
#else
    if (pipe(fds) != 0) return -errno;
    fcntl(fds[0], F_SETFD, FD_CLOEXEC);
    fcntl(fds[1], F_SETFD, FD_CLOEXEC);
#endif
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(fds[0]); close(fds[1]);
        return -e;
    }
    if (pid == 0) {
        close(fds[0]);
        // Python's handlers would write to the parent's wakeup fd: let Ctrl-C simply end us.
        for (int sig : {SIGINT, SIGTERM, SIGQUIT, SIGHUP}) signal(sig, SIG_DFL);
        if (s->stdout_fd >= 0) dup2(s->stdout_fd, 1);
        install_crash_handlers();
        int st = run_launch(s);
        fflush(stdout);
        fflush(stderr);
        _exit(st == 0 ? 0 : 1);
    }
    close(fds[1]);
    s->out_pid = (int32_t)pid;
    s->out_fd = fds[0];
    return 0;
}

// ---- sanitizer: pl_san_configure and the __tsan_* entry points ------------------
#define PL_SAN_PART 2
#include "sanitizer_rt.h"
#undef PL_SAN_PART

}  // extern "C"
