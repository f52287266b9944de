/* pl_runtime.c: linked with a student's llm_memory.c by pagedlab.engine.ctrack.
 *
 * Two jobs:
 * - the heap hooks behind pl_heap.h's malloc/calloc/realloc/free macros: each call goes to a
 *   Python callback (pagedlab.cmem's ledger) with the caller's file and line;
 * - one trampoline per API function (pl_call_*), which runs the student's function so that a
 *   crash comes back as a status instead of killing Python: SIGSEGV/SIGBUS/SIGFPE/SIGILL/SIGABRT
 *   and a per-call time limit (SIGALRM) jump back to the trampoline (sigsetjmp/siglongjmp) with
 *   the faulting address, the PC, the registers and a backtrace; Python turns the PC into
 *   llm_memory.c:LINE with addr2line.
 * A block the call frees is made unreadable (mprotect) until the call returns: Python puts every
 * block the C code allocates on pages of its own (pagedlab.engine.carena) and answers a free with how many
 * bytes those pages span, so the line that reads freed memory (a list walk that reads node->next
 * after freeing the node) faults right there, where a poisoned pointer would only fault later,
 * inside some other function.
 * Why not a forked child per call (as pagedlab.cuda does): the engine, its sequences and the heap
 * ledger must persist between calls and be read by the checks; a child's mallocs and writes would
 * be lost. The hooks are Python callbacks in a notebook; in the graded check child the library
 * runs in pl_runner.c's process and the hooks are its messages to the child.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <ucontext.h>
#include <unistd.h>

#include "hw3.h"

/* The student's functions: weak, so a file that lacks one still builds and the call says so. */
extern LLMEngine *llm_init(void *pool_addr, size_t pool_size) __attribute__((weak));
extern Sequence *create_sequence(LLMEngine *engine, int seq_id, int initial_kv_len) __attribute__((weak));
extern int free_sequence(LLMEngine *engine, int seq_id) __attribute__((weak));
extern Sequence *fork_sequence(LLMEngine *engine, int parent_seq_id, int new_seq_id) __attribute__((weak));
extern int append_kv(LLMEngine *engine, int seq_id, int kv_data) __attribute__((weak));
extern int llm_destroy(LLMEngine *engine) __attribute__((weak));

enum { PL_OK = 0, PL_HEAP = 1, PL_SIGNAL = 2, PL_TIMEOUT = 3, PL_MISSING = 4, PL_BUSY = 5, PL_EXIT = 6, PL_TODO = 7 };
enum { HEAP_MALLOC = 0, HEAP_CALLOC = 1, HEAP_REALLOC = 2, HEAP_FREE = 3 };
#define PL_MAX_FRAMES 48
#define PL_MAX_REGS 32

/* Returns 0, or nonzero when Python recorded a heap error (double free, bad free). */
typedef int (*pl_heap_hook)(int kind, void *ptr, size_t count, size_t size, const char *file,
                            int line, const char *func, void **out);
/* Text the C code printed: stream 1 stdout, 2 stderr. */
typedef void (*pl_out_hook)(int stream, const char *text);

/* exit_*: where exit() was called; for PL_TODO (a stub) exit_file holds the stub's task label. */
struct pl_diag {
    int32_t status, signal, code, nframes, nregs, exit_line;
    char exit_file[256], exit_func[64];
    uint64_t fault_addr, pc;
    uint64_t frames[PL_MAX_FRAMES];
    uint64_t regs[PL_MAX_REGS];
};

struct pl_diag pl_diag;
static pl_heap_hook heap_hook;
static pl_out_hook out_hook;
static sigjmp_buf env;
static volatile sig_atomic_t active, in_hook, pending;
static pthread_t owner;
static double call_seconds = 5.0;

static const int caught[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGALRM};
#define NCAUGHT ((int)(sizeof caught / sizeof caught[0]))
static struct sigaction saved[NCAUGHT];
static stack_t saved_stack;
static struct itimerval saved_timer;
static char alt_stack[1 << 16];

/* Pages of blocks freed during the current call, unreadable until it returns. */
#define PL_MAX_FENCED 8192
static struct { uintptr_t start; size_t bytes; } fenced[PL_MAX_FENCED];
static int nfenced;

static void fence(void *ptr, size_t span)
{
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t start = (uintptr_t)ptr & ~(uintptr_t)(page - 1);
    if (!ptr || !span || nfenced >= PL_MAX_FENCED || page <= 0)
        return;
    if (mprotect((void *)start, span, PROT_NONE) == 0) {
        fenced[nfenced].start = start;
        fenced[nfenced].bytes = span;
        nfenced++;
    }
}

static void unfence(void)
{
    while (nfenced > 0) {
        nfenced--;
        mprotect((void *)fenced[nfenced].start, fenced[nfenced].bytes, PROT_READ | PROT_WRITE);
    }
}

void pl_set_hook(pl_heap_hook hook, pl_out_hook out, double seconds)
{
    void *warm[2];
    heap_hook = hook;
    out_hook = out;
    call_seconds = seconds;
    backtrace(warm, 2); /* loads the unwinder now: not from inside a signal handler */
}

uint64_t pl_base(void)
{
    Dl_info info;
    return dladdr((void *)&pl_base, &info) ? (uint64_t)(uintptr_t)info.dli_fbase : 0;
}

static void record_context(void *uc_void)
{
    ucontext_t *uc = uc_void;
    pl_diag.nregs = 0;
    pl_diag.pc = 0;
    if (!uc)
        return;
#if defined(__linux__) && defined(__x86_64__)
    pl_diag.pc = (uint64_t)uc->uc_mcontext.gregs[REG_RIP];
    for (int i = 0; i < NGREG && i < PL_MAX_REGS; i++)
        pl_diag.regs[pl_diag.nregs++] = (uint64_t)uc->uc_mcontext.gregs[i];
#elif defined(__linux__) && defined(__aarch64__)
    pl_diag.pc = (uint64_t)uc->uc_mcontext.pc;
    for (int i = 0; i < 31 && i < PL_MAX_REGS; i++)
        pl_diag.regs[pl_diag.nregs++] = (uint64_t)uc->uc_mcontext.regs[i];
#else
    (void)uc; /* other systems: no PC; the backtrace still finds the C line */
#endif
}

static void record_frames(void)
{
    void *frames[PL_MAX_FRAMES];
    int n = backtrace(frames, PL_MAX_FRAMES);
    for (int i = 0; i < n; i++)
        pl_diag.frames[i] = (uint64_t)(uintptr_t)frames[i];
    pl_diag.nframes = n;
}

static int slot_of(int sig)
{
    for (int i = 0; i < NCAUGHT; i++)
        if (caught[i] == sig)
            return i;
    return -1;
}

static void on_signal(int sig, siginfo_t *info, void *uc)
{
    int mine = active && pthread_equal(pthread_self(), owner);
    if (!mine || (in_hook && sig != SIGALRM)) {
        /* Not the student's code (or inside the Python hook): let the previous handler have it. */
        int slot = slot_of(sig);
        if (slot >= 0)
            sigaction(sig, &saved[slot], NULL);
        return; /* the faulting instruction runs again and meets that handler */
    }
    pl_diag.signal = sig;
    pl_diag.code = info ? info->si_code : 0;
    pl_diag.fault_addr = info ? (uint64_t)(uintptr_t)info->si_addr : 0;
    record_context(uc);
    record_frames();
    if (sig == SIGALRM) {
        pl_diag.status = PL_TIMEOUT;
        if (in_hook) { /* Python is running: stop at the next return into C instead */
            pending = 1;
            return;
        }
    } else {
        pl_diag.status = PL_SIGNAL;
    }
    siglongjmp(env, 1);
}

static void arm(void)
{
    struct sigaction act;
    stack_t stack;
    struct itimerval timer;
    memset(&pl_diag, 0, sizeof pl_diag);
    memset(&act, 0, sizeof act);
    act.sa_sigaction = on_signal;
    act.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&act.sa_mask);
    stack.ss_sp = alt_stack;
    stack.ss_size = sizeof alt_stack;
    stack.ss_flags = 0;
    sigaltstack(&stack, &saved_stack);
    for (int i = 0; i < NCAUGHT; i++)
        sigaction(caught[i], &act, &saved[i]);
    memset(&timer, 0, sizeof timer);
    timer.it_value.tv_sec = (time_t)call_seconds;
    timer.it_value.tv_usec = (suseconds_t)((call_seconds - (double)(time_t)call_seconds) * 1e6);
    setitimer(ITIMER_REAL, &timer, &saved_timer);
    owner = pthread_self();
    pending = 0;
    in_hook = 0;
    active = 1;
}

static void disarm(void)
{
    struct itimerval off;
    unfence(); /* before anything reads the heap again (the checks, in this process or the parent) */
    active = 0;
    memset(&off, 0, sizeof off);
    setitimer(ITIMER_REAL, &off, NULL);
    for (int i = 0; i < NCAUGHT; i++)
        sigaction(caught[i], &saved[i], NULL);
    sigaltstack(&saved_stack, NULL);
    setitimer(ITIMER_REAL, &saved_timer, NULL);
}

/* -- the heap hooks ------------------------------------------------------------------------ */
static void *through_hook(int kind, void *ptr, size_t count, size_t size, const char *file, int line,
                          const char *func)
{
    void *out = NULL;
    int failed;
    if (!heap_hook)
        return NULL;
    in_hook = 1;
    failed = heap_hook(kind, ptr, count, size, file, line, func, &out);
    in_hook = 0;
    if (active && (failed || pending)) {
        if (failed)
            pl_diag.status = PL_HEAP;
        siglongjmp(env, 1);
    }
    return out;
}

void *pl_malloc(size_t size, const char *file, int line, const char *func)
{
    return through_hook(HEAP_MALLOC, NULL, 1, size, file, line, func);
}

void *pl_calloc(size_t count, size_t size, const char *file, int line, const char *func)
{
    return through_hook(HEAP_CALLOC, NULL, count, size, file, line, func);
}

void *pl_realloc(void *ptr, size_t size, const char *file, int line, const char *func)
{
    return through_hook(HEAP_REALLOC, ptr, 1, size, file, line, func);
}

void pl_free(void *ptr, const char *file, int line, const char *func)
{
    /* The answer to a free is the bytes of pages the block had to itself (0: none). */
    void *span = through_hook(HEAP_FREE, ptr, 0, 0, file, line, func);
    if (active)
        fence(ptr, (size_t)(uintptr_t)span);
}

/* -- exit() and output ---------------------------------------------------------------------- */
void pl_exit(int code, const char *file, int line, const char *func)
{
    if (!active)
        exit(code);
    pl_diag.status = PL_EXIT;
    pl_diag.code = code;
    pl_diag.exit_line = line;
    snprintf(pl_diag.exit_file, sizeof pl_diag.exit_file, "%s", file);
    snprintf(pl_diag.exit_func, sizeof pl_diag.exit_func, "%s", func);
    siglongjmp(env, 1);
}

void pl_not_implemented(const char *task, const char *file, int line, const char *func)
{
    (void)file; /* always the student's file: the macro is used in its stubs */
    if (!active)
        return; /* not inside a call pagedlab made: the stub returns as written */
    pl_diag.status = PL_TODO;
    pl_diag.exit_line = line;
    snprintf(pl_diag.exit_file, sizeof pl_diag.exit_file, "%s", task);
    snprintf(pl_diag.exit_func, sizeof pl_diag.exit_func, "%s", func);
    siglongjmp(env, 1);
}

static int emit(int stream, const char *format, va_list args)
{
    char small[1024];
    va_list again;
    va_copy(again, args);
    int n = vsnprintf(small, sizeof small, format, args);
    if (n < 0) {
        va_end(again);
        return n;
    }
    char *text = small;
    if ((size_t)n >= sizeof small) {
        text = malloc((size_t)n + 1); /* libc's malloc: pl_heap.h does not reach this file */
        if (text)
            vsnprintf(text, (size_t)n + 1, format, again);
    }
    va_end(again);
    if (text) {
        if (out_hook) {
            in_hook = 1;
            out_hook(stream, text);
            in_hook = 0;
        } else {
            fputs(text, stream == 2 ? stderr : stdout);
        }
    }
    if (text != small)
        free(text);
    if (active && pending)
        siglongjmp(env, 1);
    return n;
}

int pl_printf(const char *format, ...)
{
    va_list args;
    va_start(args, format);
    int n = emit(1, format, args);
    va_end(args);
    return n;
}

int pl_fprintf(FILE *stream, const char *format, ...)
{
    va_list args;
    int n;
    va_start(args, format);
    if (stream == stdout || stream == stderr)
        n = emit(stream == stderr ? 2 : 1, format, args);
    else
        n = vfprintf(stream, format, args);
    va_end(args);
    return n;
}

int pl_puts(const char *text)
{
    return pl_printf("%s\n", text);
}

int pl_putchar(int c)
{
    return pl_printf("%c", c) < 0 ? EOF : (unsigned char)c;
}

/* -- trampolines: status 0 and *out set, or a PL_* status with pl_diag filled in ------------ */
#define PL_TRAMPOLINE(fn, ret, params, args)                        \
    int pl_call_##fn params                                          \
    {                                                                \
        if (!fn)                                                     \
            return PL_MISSING;                                       \
        if (active)                                                  \
            return PL_BUSY;                                          \
        if (sigsetjmp(env, 1)) {                                     \
            int status = pl_diag.status;                             \
            disarm();                                                \
            return status;                                           \
        }                                                            \
        arm();                                                       \
        *out = fn args;                                              \
        disarm();                                                    \
        return PL_OK;                                                \
    }

PL_TRAMPOLINE(llm_init, LLMEngine *, (void *pool_addr, size_t pool_size, LLMEngine **out), (pool_addr, pool_size))
PL_TRAMPOLINE(create_sequence, Sequence *, (LLMEngine *engine, int seq_id, int len, Sequence **out), (engine, seq_id, len))
PL_TRAMPOLINE(free_sequence, int, (LLMEngine *engine, int seq_id, int *out), (engine, seq_id))
PL_TRAMPOLINE(fork_sequence, Sequence *, (LLMEngine *engine, int parent, int child, Sequence **out), (engine, parent, child))
PL_TRAMPOLINE(append_kv, int, (LLMEngine *engine, int seq_id, int kv_data, int *out), (engine, seq_id, kv_data))
PL_TRAMPOLINE(llm_destroy, int, (LLMEngine *engine, int *out), (engine))

/* Layout facts, so Python can refuse a header that drifted from pagedlab.hw3. */
size_t pl_layout(int which)
{
    switch (which) {
    case 0: return sizeof(Sequence);
    case 1: return offsetof(Sequence, node);
    case 2: return sizeof(LLMEngine);
    case 3: return offsetof(LLMEngine, active_seqs);
    default: return 0;
    }
}
