/* pl_seal.h: how a runner seals itself before it loads a submission's library. Shared by the
 * kernel runner (runner.cpp) and the C track's runner (pagedlab/include/pl_runner.c): plain C that
 * also compiles as C++.
 *
 * lock_down(): no new programs and no new processes from here on (no_new_privs + seccomp).
 * confine_files(library): nothing on disk but `library` may be opened (Landlock), so a library
 * that would dlopen libpython to run an interpreter in the runner finds nothing.
 */
#ifndef PAGEDLAB_PL_SEAL_H
#define PAGEDLAB_PL_SEAL_H

#ifndef __cplusplus
#include <stdbool.h>
#endif
#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>
#if defined(__linux__)
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#endif

#if defined(__linux__) && (defined(__x86_64__) || defined(__aarch64__))
#if defined(__x86_64__)
#define PL_AUDIT_ARCH AUDIT_ARCH_X86_64
#else
#define PL_AUDIT_ARCH AUDIT_ARCH_AARCH64
#endif
/* clone() flags that make a namespace (CLONE_NEWNS ... CLONE_NEWNET, CLONE_NEWTIME): seal.py's */
#define PL_CLONE_NEW_ANY 0x7E020080u
#define PL_DENY(nr, err) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), \
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (err))

/* execve/execveat, fork/vfork and clone without CLONE_THREAD fail with EPERM; clone3 says ENOSYS
 * so glibc's pthread_create falls back to clone, whose flags a filter can read (a thread that asks
 * for a namespace is refused too). ptrace, process_vm_* and pidfd_getfd would reach the parent
 * (which is non-dumpable too, so /proc/<ppid>/mem is closed); sockets would reach out.
 *
 * Complete on its own: every call the check child's filter refuses (pagedlab/sandbox/seal.py's
 * ALWAYS_DENIED) is refused here as well, whether or not the parent was sealed (a runner of the
 * reference's run, or a notebook's, has this filter alone); tests/test_redteam_os.py compares the
 * two lists and calls each one under each filter. */
static bool lock_down(void) {
    struct sock_filter prog[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, PL_AUDIT_ARCH, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
#if defined(__x86_64__)
        BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, 0, 1),  /* x32 numbers */
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        PL_DENY(__NR_fork, EPERM),
        PL_DENY(__NR_vfork, EPERM),
#endif
        PL_DENY(__NR_execve, EPERM),
        PL_DENY(__NR_execveat, EPERM),
        PL_DENY(__NR_ptrace, EPERM),
        PL_DENY(__NR_process_vm_readv, EPERM),
        PL_DENY(__NR_process_vm_writev, EPERM),
        PL_DENY(__NR_pidfd_getfd, EPERM),
        PL_DENY(__NR_process_madvise, EPERM),
        /* No network and no other way out: a runner needs none of these. */
        PL_DENY(__NR_socket, EPERM),
        PL_DENY(__NR_socketpair, EPERM),
        PL_DENY(__NR_io_uring_setup, EPERM),
        PL_DENY(__NR_io_uring_enter, EPERM),
        PL_DENY(__NR_io_uring_register, EPERM),
        PL_DENY(__NR_unshare, EPERM),
        PL_DENY(__NR_setns, EPERM),
        PL_DENY(__NR_bpf, EPERM),
        PL_DENY(__NR_perf_event_open, EPERM),
        PL_DENY(__NR_userfaultfd, EPERM),
        /* A user's keyrings outlive all of its processes: bytes left there would reach the
         * pool user's next job. */
        PL_DENY(__NR_add_key, EPERM),
        PL_DENY(__NR_request_key, EPERM),
        PL_DENY(__NR_keyctl, EPERM),
        PL_DENY(__NR_clone3, ENOSYS),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone, 0, 4),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
        BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, PL_CLONE_NEW_ANY, 1, 0),  /* a namespace: refused */
        BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, CLONE_THREAD, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog fprog = {(unsigned short)(sizeof prog / sizeof prog[0]), prog};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return false;
    return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog) == 0;
}
#else
static bool lock_down(void) { return false; }  /* no seccomp here: the runner still has no Python */
#endif

#if defined(__linux__) && defined(__has_include)
#if __has_include(<linux/landlock.h>)
#define PL_HAVE_LANDLOCK 1
#endif
#endif
#ifdef PL_HAVE_LANDLOCK
#include <fcntl.h>
#include <linux/landlock.h>
#ifndef __NR_landlock_create_ruleset
#define __NR_landlock_create_ruleset 444
#define __NR_landlock_add_rule 445
#define __NR_landlock_restrict_self 446
#endif
/* Nothing on disk but the library from here on (Landlock, after no_new_privs): a library that
 * would dlopen libpython to run an interpreter here, or read any file, finds nothing. Every right
 * the kernel's Landlock knows is handled (and so refused), not only the first version's: from
 * version 2 linking or renaming across folders, 3 truncating a file by its path, 5 device ioctls.
 * Best effort: a kernel without Landlock runs without it (the seccomp filter still holds). */
static bool confine_files(const char *library) {
    struct landlock_ruleset_attr attr;
    struct landlock_path_beneath_attr rule;
    memset(&attr, 0, sizeof attr);
    memset(&rule, 0, sizeof rule);
    long abi = syscall(__NR_landlock_create_ruleset, NULL, 0, 1 /* LANDLOCK_CREATE_RULESET_VERSION */);
    if (abi < 1) return false;
    attr.handled_access_fs = (1ULL << 13) - 1;  /* every right of Landlock's first ABI */
    if (abi >= 2) attr.handled_access_fs |= 1ULL << 13;  /* REFER */
    if (abi >= 3) attr.handled_access_fs |= 1ULL << 14;  /* TRUNCATE */
    if (abi >= 5) attr.handled_access_fs |= 1ULL << 15;  /* IOCTL_DEV */
    int rs = (int)syscall(__NR_landlock_create_ruleset, &attr, sizeof attr.handled_access_fs, 0);
    if (rs < 0) return false;
    rule.allowed_access = LANDLOCK_ACCESS_FS_READ_FILE;
    rule.parent_fd = open(library, O_PATH | O_CLOEXEC);
    bool ok = rule.parent_fd >= 0 &&
              syscall(__NR_landlock_add_rule, rs, LANDLOCK_RULE_PATH_BENEATH, &rule, 0) == 0 &&
              syscall(__NR_landlock_restrict_self, rs, 0) == 0;
    if (rule.parent_fd >= 0) close(rule.parent_fd);
    close(rs);
    return ok;
}
#else
static bool confine_files(const char *library) { (void)library; return false; }
#endif

#endif
