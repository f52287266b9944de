"""Exceptions of the CPU executor: one class per kind of CUDA rule a kernel can break.

They all derive from `KernelError` (a `RuntimeError`), so `except KernelError` catches any
failure of a launch while a wrong argument stays a `TypeError`/`ValueError` raised before it.
"""

from __future__ import annotations


class KernelError(RuntimeError):
    """A kernel failed to build or broke a CUDA rule while it ran."""


class CompileError(KernelError):
    """The C++ compiler (CPU) or NVRTC (GPU check) rejected the kernel source."""


class BarrierError(KernelError):
    """`__syncthreads()` was not reached by every thread of a block at the same call."""


class WarpSyncError(KernelError):
    """A warp operation's mask named lanes that did not take part, or lanes disagreed."""


class SharedMemoryError(KernelError):
    """A write went past the launch's dynamic shared memory (`shared_mem` bytes)."""


class KernelCrash(KernelError):
    """The kernel died on a signal (segfault, bus error, ...); the Python process lives on."""


class KernelTimeout(KernelError):
    """The launch ran past the watchdog timeout (an endless loop or spin-wait)."""
