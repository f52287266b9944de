/* pl_runner.c: the C track's runner, a process with no Python in it that runs a student's
 * llm_memory.c library for the graded check child (pagedlab.engine.ctrack, runner mode).
 *
 * Why: a library loaded into the check child's Python process can look up the interpreter's C API
 * (PyRun_SimpleString) from a constructor and do anything there. Here it finds no interpreter,
 * and after the seal (no exec, no fork, no sockets, no file but the library) it cannot load one.
 *
 * argv: pl-runner LIBRARY ARENA_ADDRESS ARENA_BYTES CALL_SECONDS PARENT_PID
 * fd 3: the arena (a memfd), mapped shared at ARENA_ADDRESS as in the parent, so the engine's
 *       pointers mean the same bytes in both processes (the parent's cmem allocates there);
 * fd 4: requests from the parent (struct pl_req), fd 5: records to it (struct pl_rec).
 * Every record is fixed-size; the parent answers a HEAP record with one HEAP_REPLY request.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <link.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "pl_seal.h"

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

enum { ARENA_FD = 3, REQ_FD = 4, REC_FD = 5 };
/* Keep in sync with pagedlab/engine/ctrack.py (REC_*, REQ_*, RECORD_BYTES, REQUEST_BYTES). */
enum { REC_READY = 1, REC_ERROR = 2, REC_HEAP = 3, REC_OUT = 4, REC_DONE = 5 };
enum { REQ_CALL = 1, REQ_HEAP_REPLY = 2 };
#define PAYLOAD 1240

struct pl_rec {            /* runner -> parent, 1280 bytes */
    uint32_t kind;
    int32_t a, b, c;
    uint64_t x, y, z;
    char payload[PAYLOAD];
};
struct pl_req {            /* parent -> runner, 32 bytes */
    uint32_t kind;
    int32_t a;
    uint64_t x, y, z;
};

typedef int (*heap_hook_t)(int, void *, size_t, size_t, const char *, int, const char *, void **);
typedef void (*out_hook_t)(int, const char *);

static void put(const struct pl_rec *r)
{
    const char *p = (const char *)r;
    size_t left = sizeof *r;
    while (left) {
        ssize_t n = write(REC_FD, p, left);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            _exit(4); /* the parent is gone */
        p += n;
        left -= (size_t)n;
    }
}

static void get(struct pl_req *q)
{
    char *p = (char *)q;
    size_t left = sizeof *q;
    while (left) {
        ssize_t n = read(REQ_FD, p, left);
        if (n < 0 && errno == EINTR)
            continue; /* the call's time limit (SIGALRM) while the parent works: read on */
        if (n <= 0)
            _exit(0); /* the parent closed the pipe: done */
        p += n;
        left -= (size_t)n;
    }
}

static void fail(const char *what, const char *detail)
{
    struct pl_rec r;
    memset(&r, 0, sizeof r);
    r.kind = REC_ERROR;
    snprintf(r.payload, sizeof r.payload, "%s%s%s", what, detail ? ": " : "", detail ? detail : "");
    put(&r);
    _exit(3);
}

static void copy_text(char *to, size_t cap, const char *from)
{
    size_t n = from ? strnlen(from, cap - 1) : 0;
    memcpy(to, from ? from : "", n);
    to[n] = 0;
}

static int heap_hook(int kind, void *ptr, size_t count, size_t size, const char *file, int line,
                     const char *func, void **out)
{
    struct pl_rec r;
    struct pl_req q;
    memset(&r, 0, sizeof r);
    r.kind = REC_HEAP;
    r.a = kind;
    r.b = line;
    r.x = (uint64_t)(uintptr_t)ptr;
    r.y = count;
    r.z = size;
    copy_text(r.payload, 256, file);
    copy_text(r.payload + 256, 64, func);
    put(&r);
    get(&q);
    if (q.kind != REQ_HEAP_REPLY)
        _exit(5);
    *out = (void *)(uintptr_t)q.x;
    return q.a;
}

static void out_hook(int stream, const char *text)
{
    size_t n = text ? strlen(text) : 0;
    do {
        struct pl_rec r;
        size_t chunk = n < PAYLOAD ? n : PAYLOAD;
        memset(&r, 0, 40);
        r.kind = REC_OUT;
        r.a = stream;
        r.b = (int32_t)chunk;
        memcpy(r.payload, text, chunk);
        put(&r);
        text += chunk;
        n -= chunk;
    } while (n);
}

struct span { uintptr_t base, end; };

static int find_span(struct dl_phdr_info *info, size_t size, void *data)
{
    struct span *s = data;
    (void)size;
    if (info->dlpi_addr != s->base)
        return 0;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_LOAD) {
            uintptr_t end = info->dlpi_addr + info->dlpi_phdr[i].p_vaddr + info->dlpi_phdr[i].p_memsz;
            if (end > s->end)
                s->end = end;
        }
    return 1;
}

static const char *const NAMES[] = {"pl_call_llm_init", "pl_call_create_sequence", "pl_call_free_sequence",
                                    "pl_call_fork_sequence", "pl_call_append_kv", "pl_call_llm_destroy"};
#define NFUNCS 6

int main(int argc, char **argv)
{
    /* Non-dumpable first (exec reset what the parent set); die with the parent. */
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (argc != 6)
        fail("usage: pl-runner LIBRARY ARENA_ADDRESS ARENA_BYTES CALL_SECONDS PARENT_PID", NULL);
    if (getppid() != (pid_t)strtol(argv[5], NULL, 10))
        _exit(6);
    uintptr_t want = (uintptr_t)strtoull(argv[2], NULL, 0);
    size_t bytes = (size_t)strtoull(argv[3], NULL, 0);
    double seconds = strtod(argv[4], NULL);
    void *arena = mmap((void *)want, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED_NOREPLACE | MAP_NORESERVE,
                       ARENA_FD, 0);
    if (arena == MAP_FAILED || (uintptr_t)arena != want)
        fail("cannot map the shared arena at the parent's address", strerror(errno));
    close(ARENA_FD);

    /* Before the seal: what the library needs from disk later (the unwinder behind backtrace,
     * libdl and libpthread its link names) is loaded now, while files can still be opened. */
    void *warm[2];
    backtrace(warm, 2);
    dlopen("libdl.so.2", RTLD_NOW | RTLD_GLOBAL);
    dlopen("libpthread.so.0", RTLD_NOW | RTLD_GLOBAL);
    int locked = lock_down() ? 1 : 0;
    int confined = locked && confine_files(argv[1]) ? 1 : 0;

    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL); /* the student's constructors run here */
    if (!lib)
        fail("cannot load the C library", dlerror());
    void (*set_hook)(heap_hook_t, out_hook_t, double) = (void (*)(heap_hook_t, out_hook_t, double))dlsym(lib, "pl_set_hook");
    uint64_t (*base_of)(void) = (uint64_t(*)(void))dlsym(lib, "pl_base");
    size_t (*layout)(int) = (size_t(*)(int))dlsym(lib, "pl_layout");
    const char *diag = dlsym(lib, "pl_diag");
    void *calls[NFUNCS];
    for (int i = 0; i < NFUNCS; i++)
        calls[i] = dlsym(lib, NAMES[i]);
    if (!set_hook || !base_of || !layout || !diag)
        fail("the library lacks pagedlab's C runtime (pl_set_hook, pl_base, pl_layout, pl_diag)", NULL);
    for (int i = 0; i < NFUNCS; i++)
        if (!calls[i])
            fail("the library lacks a trampoline", NAMES[i]);
    set_hook(heap_hook, out_hook, seconds);

    struct pl_rec r;
    memset(&r, 0, sizeof r);
    r.kind = REC_READY;
    r.a = locked;
    r.b = confined;
    struct span s = {(uintptr_t)base_of(), 0};
    dl_iterate_phdr(find_span, &s);
    r.x = s.base;
    r.y = s.end > s.base ? s.end - s.base : 0;
    for (int i = 0; i < 4; i++) {
        uint64_t v = layout(i);
        memcpy(r.payload + 8 * i, &v, 8);
    }
    put(&r);

    for (;;) {
        struct pl_req q;
        get(&q);
        if (q.kind != REQ_CALL || q.a < 0 || q.a >= NFUNCS)
            _exit(5);
        uint64_t out = 0;
        int status;
        void *c = calls[q.a];
        void *p0 = (void *)(uintptr_t)q.x;
        switch (q.a) {
        case 0: status = ((int (*)(void *, size_t, void **))c)(p0, (size_t)q.y, (void **)&out); break;
        case 1: case 3: {
            void *seq = NULL;
            status = ((int (*)(void *, int, int, void **))c)(p0, (int)q.y, (int)q.z, &seq);
            out = (uint64_t)(uintptr_t)seq;
            break;
        }
        case 2: case 5: default: {
            int v = 0;
            status = q.a == 5 ? ((int (*)(void *, int *))c)(p0, &v)
                              : ((int (*)(void *, int, int *))c)(p0, (int)q.y, &v);
            out = (uint64_t)(int64_t)v;
            break;
        }
        case 4: {
            int v = 0;
            status = ((int (*)(void *, int, int, int *))c)(p0, (int)q.y, (int)q.z, &v);
            out = (uint64_t)(int64_t)v;
            break;
        }
        }
        memset(&r, 0, 40);
        r.kind = REC_DONE;
        r.a = status;
        r.x = out;
        memcpy(r.payload, diag, 1000); /* struct pl_diag (pl_runtime.c) */
        put(&r);
    }
}
