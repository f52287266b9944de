"""`RawKernel`: CuPy's call shape, on CuPy when a GPU is there, else on the CPU executor."""

from __future__ import annotations

import os
import threading

from . import compiler, executor, sanitizer
from .signature import check_args, kernel_names, parse_params

SCHEDULES = ("round_robin", "warp0_first", "reversed", "random:0")
MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK_DIM = (1024, 1024, 64)
MAX_GRID_DIM = (2**31 - 1, 65535, 65535)
# Host-side limit for shared_mem= on the CPU: CUDA's default without opting in to more.
MAX_DYNAMIC_SHARED_MEMORY = int(os.environ.get("PAGEDLAB_MAX_DYNAMIC_SHARED_MEMORY", 48 * 1024))
DEFAULT_TIMEOUT = float(os.environ.get("PAGEDLAB_CUDA_TIMEOUT", "30"))


def cupy_available() -> bool:
    """True when CuPy is installed and sees a CUDA device."""
    try:
        import cupy
    except Exception:
        return False
    try:
        return bool(cupy.is_available())
    except Exception:
        return False


def parse_schedule(schedule: str) -> tuple[str, int]:
    if not isinstance(schedule, str):
        raise TypeError(f"schedule must be a string such as {SCHEDULES}, got {schedule!r}")
    name, _, seed = schedule.partition(":")
    if name not in executor.SCHEDULE_CODES:
        raise ValueError(f"unknown schedule {schedule!r}; use one of round_robin, warp0_first, "
                         "reversed, random:<seed>")
    if seed and name != "random":
        raise ValueError(f"schedule {schedule!r}: only random takes a seed (random:<int>)")
    try:
        return name, int(seed) if seed else 0
    except ValueError:
        raise ValueError(f"schedule {schedule!r}: the seed must be an integer") from None


def _dims(value, what: str, limits) -> tuple[int, int, int]:
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value,)
    if not isinstance(value, (tuple, list)) or not 1 <= len(value) <= 3:
        raise TypeError(f"{what} must be an int or a tuple of 1-3 ints, got {value!r}")
    for raw in value:
        if isinstance(raw, bool) or not hasattr(raw, "__index__"):
            raise TypeError(f"{what} entries must be ints, got {value!r}")
    dims = tuple(int(v) for v in value) + (1,) * (3 - len(value))
    for axis, (v, lim) in enumerate(zip(dims, limits, strict=True)):
        if not 1 <= v <= lim:
            raise ValueError(f"{what}[{axis}] = {v} is outside CUDA's limit 1..{lim}")
    return dims


class RawKernel:
    """A kernel from CUDA C source, launched as `kernel(grid, block, args, shared_mem=0)`.

    backend: "cupy" (cupy.RawKernel, GPU), "cpu" (pagedlab's executor) or "auto" (CuPy when
    `cupy.is_available()`). `filename` names the source in error reports (CPU only).
    `check` turns on the CPU sanitizer for every launch: "race,memcheck,init" (or True/"all",
    any subset); see `pagedlab.cuda.sanitizer`. A launch's own `check=` overrides it.
    """

    def __init__(self, code: str, name: str, options=(), backend: str = "auto", *,
                 filename: str | None = None, check=None):
        if not isinstance(code, str):
            raise TypeError(f"code must be the kernel source as a str, got {type(code).__name__}")
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"name must be the kernel's identifier, got {name!r}")
        if backend not in ("auto", "cpu", "cupy"):
            raise ValueError(f"backend must be 'auto', 'cpu' or 'cupy', not {backend!r}")
        if backend == "auto":
            backend = "cupy" if cupy_available() else "cpu"
        if name not in kernel_names(code):
            found = ", ".join(kernel_names(code)) or "none"
            raise ValueError(f"no `__global__ void {name}(...)` in the source (found: {found})")
        self.code, self.name, self.options, self.backend = code, name, tuple(options), backend
        self.filename = filename or f"{name}.cu"
        try:
            self.params = parse_params(code, name)
        except ValueError:
            if backend == "cpu":
                raise
            self.params = None  # e.g. a struct parameter: CuPy takes it, unchecked
        self._build = None
        self.check = None if check is None else sanitizer.parse_checks(check)  # issue 16
        self._san_build = None
        self._cupy_kernel = None
        self._lock = threading.Lock()

    def __repr__(self):
        return f"RawKernel({self.name!r}, backend={self.backend!r})"

    def compile(self):
        """Build now (otherwise the first launch does); returns self."""
        if self.backend == "cpu":
            self._cpu_build()
        else:
            self._cupy()
        return self

    def _cpu_build(self) -> compiler.Build:
        with self._lock:
            if self._build is None:
                self._build = compiler.build(self.code, self.filename, self.options)
            return self._build

    def _cupy(self):
        if self._cupy_kernel is None:
            try:
                import cupy
            except ImportError:
                raise ImportError(
                    "backend='cupy' needs CuPy and an NVIDIA GPU: pip install 'pagedlab[gpu]' "
                    "(CUDA 12) or 'pagedlab[gpu-cuda13]'; without a GPU use backend='cpu'") from None
            self._cupy_kernel = cupy.RawKernel(self.code, self.name, options=self.options)
        return self._cupy_kernel

    def __call__(self, grid, block, args, shared_mem: int = 0, *, schedule: str = "round_robin",
                 timeout: float | None = None, workers: int | None = None, check=None,
                 _profile: bool = False):
        checks = (sanitizer.parse_checks(check) if check is not None else  # issue 16
                  self.check if self.check is not None else sanitizer.default_checks())
        grid3 = _dims(grid, "grid", MAX_GRID_DIM)
        block3 = _dims(block, "block", MAX_BLOCK_DIM)
        threads = block3[0] * block3[1] * block3[2]
        if threads > MAX_THREADS_PER_BLOCK:
            raise ValueError(f"block {block3} has {threads} threads; CUDA allows at most "
                             f"{MAX_THREADS_PER_BLOCK} per block")
        if isinstance(shared_mem, bool) or not hasattr(shared_mem, "__index__") or shared_mem < 0:
            raise TypeError(f"shared_mem must be a non-negative int (bytes), got {shared_mem!r}")
        shared_mem = int(shared_mem)
        if self.backend == "cupy":
            if self.params is not None:
                check_args(self.params, tuple(args), self.name, array_module="cupy")
            return self._cupy()(grid3, block3, tuple(args), shared_mem=shared_mem)
        if shared_mem > MAX_DYNAMIC_SHARED_MEMORY:
            raise ValueError(f"shared_mem={shared_mem} bytes exceeds the dynamic shared memory "
                             f"limit of {MAX_DYNAMIC_SHARED_MEMORY} bytes")
        if shared_mem > compiler.DYN_SMEM_CAPACITY:
            raise ValueError(f"shared_mem={shared_mem} exceeds the CPU executor's capacity of "
                             f"{compiler.DYN_SMEM_CAPACITY} bytes")
        check_args(self.params, tuple(args), self.name, array_module="numpy")
        sched, seed = parse_schedule(schedule)
        if timeout is None:
            timeout = DEFAULT_TIMEOUT
        if not timeout > 0:
            raise ValueError(f"timeout must be positive seconds, got {timeout!r}")
        isolate = executor.isolate_default()
        cfg = executor.LaunchConfig(
            grid=grid3, block=block3, shared_mem=shared_mem, schedule=sched, seed=seed,
            timeout=float(timeout), workers=workers or executor.default_workers(),
            isolate=isolate, stack_size=int(os.environ.get("PAGEDLAB_CUDA_STACK_KB", "256")) * 1024)
        if checks or _profile:  # issue 16: the instrumented build, checks and/or profile
            return sanitizer.run(self, tuple(args), cfg, checks, profile=_profile)
        try:
            executor.launch(self._cpu_build(), self.name, self.params, tuple(args), cfg)
        except OSError as e:
            if "static TLS" not in str(e) or compiler.SLOW_TLS:
                raise
            compiler.SLOW_TLS = True  # rebuild without initial-exec TLS and try once more
            with self._lock:
                self._build = None
            executor.launch(self._cpu_build(), self.name, self.params, tuple(args), cfg)

    def profile(self, grid, block, args, shared_mem: int = 0, **launch):
        """Run one launch on the CPU executor and return its memory-access profile
        (`pagedlab.cuda.profile.Profile`): per source line, 32-byte sectors per warp-level
        global request and bank-conflict ways per shared request. Takes the launch's
        keywords (schedule=, workers=, timeout=, check=)."""
        if self.backend != "cpu":
            raise ValueError("the memory-access profile is measured by the CPU executor: "
                             "create the kernel with backend='cpu'")
        session = self(grid, block, args, shared_mem, _profile=True, **launch)
        from .profile import from_entries
        return from_entries(session.kernel._san_build, session.profile_entries, self.code,
                            session.profile_overflow)
