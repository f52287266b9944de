// pagedlab kernel runner: runs one CPU-executor launch in a process with no Python in it.
//
// Why: a kernel library loaded into the Python process (or a fork of it) can look up the
// interpreter's C API and compute its answer with torch. This program is linked against the
// runtime only; the kernel library is dlopened here, never in a Python process that launches.
//
// Protocol (executor.py / runner.py write it):
//   argv: pagedlab-runner KERNEL_LIBRARY ENTRY_SYMBOL [--go|--serve]
//   fd 3: the launch region (a memfd or a file in a private folder), mapped shared. It starts
//         with a Header; the Spec, Diag, argument slots and cells, argument buffers, sanitizer
//         Config and report, and bytes of __constant__/__device__ globals all live inside it.
//         Pointers in it were written in the parent's mapping: the words listed in `reloc` are
//         moved to this process's mapping before the launch.
//   stdout: where kernel printf goes (the parent shows it).
//   exit status: 0 launch ok, 1 launch reported an error in the Diag, 3 runner could not start
//         (Header.error says why).
// Before the kernel library is loaded the process drops the ability to exec or fork
// (no_new_privs + seccomp), so neither a kernel nor the library's constructors can start a Python.
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pl_abi.h"     // pl::ParamInfo, as the kernel library fills it in
#include "pl_launch.h"  // Spec and Diag, as the runtime reads them
#include "pl_seal.h"    // lock_down(), confine_files()
#if defined(__linux__)
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#endif

namespace {

using namespace pl::launch;
using pl::ParamInfo;

// Keep in sync with RunnerHeader in runner.py.
struct Header {
    char magic[8];                 // "PLRUN01"
    uint64_t size;                 // bytes of the region
    uint64_t parent_base;          // where the parent mapped the region
    uint64_t runner_base;          // written here: where this process mapped it
    uint64_t lib_base;             // written here: load address of the kernel library
    uint64_t spec_off, san_off;    // the Spec; the sanitizer Config (0: none)
    uint64_t nreloc, reloc_off;    // uint64 offsets of words holding parent addresses
    uint64_t nseg, seg_off;        // Segment records: the argument buffers
    uint64_t nglobal, global_off;  // Global records
    int32_t locked, pad_;          // written here: 1 when exec and fork were taken away
    uint64_t cpu_ns;               // written here after each launch: this process's CPU time so far
    char error[512];               // written here when the runner cannot start the launch
};
struct Global { uint64_t name_off, data_off, len; };
// An argument buffer: `len` bytes (whole pages) at `off` in the region. Each is mapped again on
// its own, GAP bytes from the next and followed by an inaccessible page, so a write just past
// it faults and a wild index lands nearer its own array than its neighbour's, as with separate
// allocations on a GPU. runner_addr: written here, where it was mapped.
struct Segment { uint64_t off, len, runner_addr; };
constexpr uint64_t GAP = 64ull << 20;

#if defined(MAP_POPULATE)
#define PL_MAP_POPULATE MAP_POPULATE  // one call maps every page: far cheaper than a fault each
#else
#define PL_MAP_POPULATE 0
#endif

constexpr int REGION_FD = 3;
// With a third argument "--go": the parent copies the argument buffers in while this process
// starts, and writes one byte on GO_FD when they are complete (EOF: it gave up).
constexpr int GO_FD = 4;
// With "--serve" instead: the same for each launch, and after each one its status (0 ok, 1 the
// Diag reports an error) as one byte on DONE_FD; the runner waits for the next byte on GO_FD.
constexpr int DONE_FD = 5;

Header* g_hdr = nullptr;

[[noreturn]] void fail(const char* fmt, const char* what) {
    if (g_hdr) snprintf(g_hdr->error, sizeof g_hdr->error, fmt, what);
    else fprintf(stderr, fmt, what);
    _exit(3);
}


void write_globals(void* lib, char* base) {
    Global* g = (Global*)(base + g_hdr->global_off);
    for (uint64_t i = 0; i < g_hdr->nglobal; ++i) {
        const char* name = base + g[i].name_off;
        auto get = (void* (*)(ParamInfo*))dlsym(lib, name);
        if (!get) fail("the kernel library has no %s", name);
        ParamInfo info{};
        void* addr = get(&info);
        if ((uint64_t)info.total < g[i].len) fail("global %s is smaller than the bytes sent", name);
        // a const global (read-only memory) holds its bytes already: never rewritten
        if (memcmp(addr, base + g[i].data_off, g[i].len) != 0) memcpy(addr, base + g[i].data_off, g[i].len);
    }
}

// lock_down() and confine_files(): pl_seal.h (shared with the C track's runner).

// Where the argument buffers of the mapped launch are (a served runner keeps them between
// launches: mapping 16 MB of arguments again costs as much as the copy itself).
char* g_arena = nullptr;
uint64_t g_arena_len = 0;
uint64_t g_mapped[2 * 64];  // (off, len) of each mapped segment
uint64_t g_nmapped = 0;

bool same_segments(const Segment* seg) {
    if (!g_arena || g_hdr->nseg != g_nmapped || g_nmapped > 64) return false;
    for (uint64_t i = 0; i < g_nmapped; ++i)
        if (seg[i].off != g_mapped[2 * i] || seg[i].len != g_mapped[2 * i + 1]) return false;
    return true;
}

void map_segments(char* base) {
    Segment* seg = (Segment*)(base + g_hdr->seg_off);
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), total = GAP;
    for (uint64_t i = 0; i < g_hdr->nseg; ++i) total += seg[i].len + page + GAP;
    if (same_segments(seg)) {  // the same files at the same places: only say where they are
        char* at = g_arena + GAP;
        for (uint64_t i = 0; i < g_hdr->nseg; ++i) {
            seg[i].runner_addr = (uint64_t)(uintptr_t)at;
            at += seg[i].len + page + GAP;
        }
        return;
    }
    if (g_arena) munmap(g_arena, g_arena_len);
    g_arena = nullptr;
    g_nmapped = 0;
    char* arena = (char*)mmap(nullptr, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                              -1, 0);
    if (arena == MAP_FAILED) fail("cannot reserve address space for the arguments: %s", strerror(errno));
    char* at = arena + GAP;
    for (uint64_t i = 0; i < g_hdr->nseg; ++i) {
        if (mmap(at, seg[i].len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED | PL_MAP_POPULATE,
                 REGION_FD, (off_t)seg[i].off) == MAP_FAILED)
            fail("cannot map an argument buffer: %s", strerror(errno));
        seg[i].runner_addr = (uint64_t)(uintptr_t)at;
        at += seg[i].len + page + GAP;
    }
    g_arena = arena;
    g_arena_len = total;
    if (g_hdr->nseg <= 64) {
        for (uint64_t i = 0; i < g_hdr->nseg; ++i) {
            g_mapped[2 * i] = seg[i].off;
            g_mapped[2 * i + 1] = seg[i].len;
        }
        g_nmapped = g_hdr->nseg;
    }
}

// Parent addresses -> ours: into an argument buffer's own mapping, else the region's; a word
// outside the region (a null pointer) stays as it is.
void relocate(char* base) {
    uint64_t lo = g_hdr->parent_base, hi = lo + g_hdr->size;
    Segment* seg = (Segment*)(base + g_hdr->seg_off);
    uint64_t* reloc = (uint64_t*)(base + g_hdr->reloc_off);
    for (uint64_t i = 0; i < g_hdr->nreloc; ++i) {
        uint64_t* word = (uint64_t*)(base + reloc[i]);
        if (*word < lo || *word > hi) continue;
        uint64_t off = *word - lo, to = (uint64_t)(uintptr_t)base + off;
        for (uint64_t k = 0; k < g_hdr->nseg; ++k)
            if (off >= seg[k].off && off <= seg[k].off + seg[k].len) to = seg[k].runner_addr + (off - seg[k].off);
        *word = to;
    }
}

}  // namespace

extern "C" void pl_san_configure(void* cfg);

// Describe mode (argv[2] == "--describe"): the region holds `nglobal` Query records instead of
// a launch; the answers the parent needs about the library (parameters, globals' sizes and
// initial bytes) come from here, so a Python process never loads a student's library.
struct Query { uint64_t name_off, out_off, cap; int32_t kind, result; };
enum QueryKind : int32_t { Q_PARAMS = 1, Q_GLOBAL = 2 };

int describe(void* lib, char* base) {
    Query* q = (Query*)(base + g_hdr->global_off);
    for (uint64_t i = 0; i < g_hdr->nglobal; ++i) {
        const char* name = base + q[i].name_off;
        void* fn = dlsym(lib, name);
        if (!fn) fail("the kernel library has no %s", name);
        char* out = base + q[i].out_off;
        if (q[i].kind == Q_PARAMS) {
            q[i].result = ((int (*)(ParamInfo*, int))fn)((ParamInfo*)out,
                                                         (int)(q[i].cap / sizeof(ParamInfo)));
        } else {
            ParamInfo* info = (ParamInfo*)out;
            void* addr = ((void* (*)(ParamInfo*))fn)(info);
            if ((uint64_t)info->total > q[i].cap - sizeof(ParamInfo)) fail("global %s is too large", name);
            memcpy(out + sizeof(ParamInfo), addr, (size_t)info->total);
            q[i].result = 1;
        }
    }
    return 0;
}

int main(int argc, char** argv) {
#if defined(__linux__)
    // Non-dumpable: no process of this uid opens our /proc/<pid>/mem or attaches to us (exec
    // reset what the parent had set, so it is set here, before anything else runs).
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    // Ended with the thread that spawned us: a notebook kernel killed during a launch that never
    // finishes (a restart at 2 a.m.) must not leave this process spinning on a core with no
    // watchdog left to stop it. Dying before this line is caught by the go pipe's EOF.
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
#endif
    bool go = argc == 4 && strcmp(argv[3], "--go") == 0;
    bool serve = argc == 4 && strcmp(argv[3], "--serve") == 0;
    if (argc != 3 && !go && !serve)
        fail("usage: %s KERNEL_LIBRARY ENTRY_SYMBOL|--describe [--go|--serve]\n", argv[0]);
    struct stat st;
    if (fstat(REGION_FD, &st) != 0 || st.st_size < (off_t)sizeof(Header))
        fail("no launch region on fd 3%s\n", "");
    char* base = (char*)mmap(nullptr, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED,
                             REGION_FD, 0);
    if (base == MAP_FAILED) fail("cannot map the launch region: %s\n", strerror(errno));
    g_hdr = (Header*)base;
    if (memcmp(g_hdr->magic, "PLRUN01", 8) != 0 || g_hdr->size != (uint64_t)st.st_size)
        fail("the launch region has the wrong format%s", "");
    g_hdr->runner_base = (uint64_t)(uintptr_t)base;
    map_segments(base);
    if (!serve) close(REGION_FD);  // a served runner maps the next launches' buffers from it

    // Before the library's own code (its constructors) runs: no exec, no fork from here on.
    int32_t locked = lock_down() ? 1 : 0;
    g_hdr->locked = locked;
    if (locked) confine_files(argv[1]);
    void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) fail("cannot load the kernel library: %s", dlerror());
    if (strcmp(argv[2], "--describe") == 0) _exit(describe(lib, base));
    auto entry = (void (*)(void**))dlsym(lib, argv[2]);
    auto smem_info = (SmemInfo)dlsym(lib, "pl_smem_info");
    if (!entry || !smem_info) fail("the kernel library has no %s", argv[2]);
    uint64_t lib_base = 0;
    Dl_info info;
    if (dladdr((void*)entry, &info)) lib_base = (uint64_t)(uintptr_t)info.dli_fbase;
    g_hdr->lib_base = lib_base;

    // --serve: one launch per byte on GO_FD, each answered by its status on DONE_FD, until the
    // parent closes GO_FD. The parent rewrites the whole region (header included) in between.
    for (uint64_t launches = 0;; ++launches) {
        if (go || serve) {  // the argument buffers (and pointer tables) are written by now
            char byte = 0;
            ssize_t n;
            do n = read(GO_FD, &byte, 1); while (n < 0 && errno == EINTR);
            if (n == 0 && serve && launches) _exit(0);  // the parent is done with us
            if (n != 1) _exit(3);
        }
        if (launches) {
            if (memcmp(g_hdr->magic, "PLRUN01", 8) != 0 || g_hdr->size != (uint64_t)st.st_size)
                fail("the launch region has the wrong format%s", "");
            g_hdr->runner_base = (uint64_t)(uintptr_t)base;
            g_hdr->locked = locked;
            g_hdr->lib_base = lib_base;
            map_segments(base);
        }
        Spec* spec = (Spec*)(base + g_hdr->spec_off);
        spec->entry = entry;
        spec->smem_info = smem_info;
        relocate(base);
        write_globals(lib, base);

        spec->isolate = IN_RUNNER;
        spec->stdout_fd = -1;  // our stdout already is the parent's printf file
        if (g_hdr->san_off) pl_san_configure(base + g_hdr->san_off);
        int status = pl_launch(spec);
        fflush(stdout);
        fflush(stderr);
        if (!serve) _exit(status == 0 ? 0 : 1);
        struct rusage ru;  // a served runner is never reaped between launches: it says its CPU time
        if (getrusage(RUSAGE_SELF, &ru) == 0)
            g_hdr->cpu_ns = (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000ull
                            + (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000ull;
        char answer = status == 0 ? 0 : 1;
        if (write(DONE_FD, &answer, 1) != 1) _exit(3);
    }
}
