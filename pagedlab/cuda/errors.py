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


# ---- the sanitizer: raised only by launches with check=... -------------------------


class SanitizerError(KernelError):
    """A checked launch (`check=`) found a memory error. Attributes say where: `block`,
    `threads` and `lines` (the access that was caught first, then the other one for a race),
    `address`; `report` is the whole structured record."""

    def __init__(self, message: str, **report):
        super().__init__(message)
        self.report = report
        self.block = report.get("block")
        self.threads = report.get("threads", ())
        self.lines = report.get("lines", ())
        self.address = report.get("address")


class RaceError(SanitizerError):
    """Two threads touched one byte of shared memory, at least one writing, with no barrier
    (`__syncthreads()`, or `__syncwarp()` for lanes of one warp) between them; or one word of an
    argument array, from two blocks or from one block with no barrier between (not both atomic)."""


class OutOfBoundsError(SanitizerError):
    """A read or write outside every argument array (global memory) or past the launch's
    dynamic shared memory."""


class UninitializedReadError(SanitizerError):
    """A read of shared memory that no thread of the block had written. `array` and `index` name
    the element (None when the access is not one whole element of a known array)."""

    def __init__(self, message: str, **report):
        super().__init__(message, **report)
        self.array = report.get("array")
        self.index = report.get("index")
