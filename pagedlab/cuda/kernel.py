"""`RawKernel`: CuPy's call shape, on CuPy when a GPU is there, else on the CPU executor."""

from __future__ import annotations

import ctypes
import os
import re
import threading

import numpy as np

from . import compiler, executor, sanitizer
from .signature import check_args, from_compiler, kernel_names, param_names, parse_params

SCHEDULES = ("round_robin", "warp0_first", "reversed", "random:0")
MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK_DIM = (1024, 1024, 64)
MAX_GRID_DIM = (2**31 - 1, 65535, 65535)
# Host-side limit for shared_mem= on the CPU: CUDA's default without opting in to more.
MAX_DYNAMIC_SHARED_MEMORY = int(os.environ.get("PAGEDLAB_MAX_DYNAMIC_SHARED_MEMORY", 48 * 1024))
DEFAULT_TIMEOUT = float(os.environ.get("PAGEDLAB_CUDA_TIMEOUT", "30"))
# A checked launch (or the interleaved schedule) runs the instrumented build, up to about 10x
# the CPU time: its default watchdog is this many times longer (a 1024^3 tiled matmul takes
# ~29 s of wall time checked on two idle cores, more on a loaded one).
CHECKED_TIMEOUT_FACTOR = 4


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
                         "reversed, random:<seed>, interleaved")
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
                 filename: str | None = None, check=None, _module: RawModule | None = None):
        if not isinstance(code, str):
            raise TypeError(f"code must be the kernel source as a str, got {type(code).__name__}")
        if not isinstance(name, str) or not (name.isidentifier() or _module is not None):
            raise ValueError(f"name must be the kernel's identifier, got {name!r}")
        if backend not in ("auto", "cpu", "cupy"):
            raise ValueError(f"backend must be 'auto', 'cpu' or 'cupy', not {backend!r}")
        if backend == "auto":
            backend = "cupy" if cupy_available() else "cpu"
        if _module is None and name not in kernel_names(code):
            found = ", ".join(kernel_names(code)) or "none"
            hint = (" (a template kernel: use RawModule(code=..., name_expressions=[...]))"
                    if re.search(rf"template\s*<[^;{{}}]*>\s*(?:\w+\s+)*__global__[^;{{}}(]*\b{name}\s*\(", code) else "")
            raise ValueError(f"no `__global__ void {name}(...)` in the source (found: {found}){hint}")
        self.code, self.name, self.options, self.backend = code, name, tuple(options), backend
        self.filename = filename or f"{name.split('<')[0].strip()}.cu"
        self._module = _module
        if backend == "cpu":
            self._params = None  # from the compiler, at the first launch (or .params)
        else:
            try:
                self._params = parse_params(code, name)
            except ValueError:
                self._params = None  # e.g. a struct parameter: CuPy takes it, unchecked
        self._build = None
        self.check = None if check is None else sanitizer.parse_checks(check)
        self._san_build = None
        self._cupy_kernel = None
        self._lock = threading.Lock()
        # How the last CPU launch ran: "collapsed" (collapse.py: the block's threads as loops)
        # or "fibers" (one fiber per CUDA thread); None before the first launch.
        self.last_mode = None

    def __repr__(self):
        return f"RawKernel({self.name!r}, backend={self.backend!r})"

    @property
    def collapsible(self) -> str:
        """"" when unchecked round_robin launches of this kernel run collapsed (collapse.py),
        else why they run on fibers (needs a build)."""
        return self._cpu_build().collapsed.get(self.name, "not collapsed")

    def compile(self):
        """Build now (otherwise the first launch does); returns self."""
        if self.backend == "cpu":
            self._cpu_build()
        else:
            self._cupy()
        return self

    @property
    def params(self):
        """The parameter list: on the CPU as the compiler sees it (typedefs, macros, -D options,
        templates resolved), which needs a build; on CuPy read from the source text."""
        if self.backend == "cpu" and self._params is None:
            self._params = compiler_params(self._cpu_build(), self.name, self.code)
        return self._params

    @params.setter
    def params(self, value):
        self._params = value

    def _cpu_build(self) -> compiler.Build:
        if self._module is not None:
            return self._module._cpu_build()
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
            if self._module is not None:
                self._cupy_kernel = self._module._cupy().get_function(self.name)
            else:
                self._cupy_kernel = cupy.RawKernel(self.code, self.name, options=self.options)
        return self._cupy_kernel

    def __call__(self, grid, block, args, shared_mem: int = 0, *, schedule: str = "round_robin",
                 timeout: float | None = None, workers: int | None = None, check=None,
                 _profile: bool = False):
        checks = (sanitizer.parse_checks(check) if check is not None else
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
        params = self.params
        check_args(params, tuple(args), self.name, array_module="numpy")
        sched, seed = parse_schedule(schedule)
        if timeout is None:
            timeout = DEFAULT_TIMEOUT * (CHECKED_TIMEOUT_FACTOR if checks or sched == "interleaved" else 1)
        if not timeout > 0:
            raise ValueError(f"timeout must be positive seconds, got {timeout!r}")
        isolate = executor.isolate_default()
        cfg = executor.LaunchConfig(
            grid=grid3, block=block3, shared_mem=shared_mem, schedule=sched, seed=seed,
            timeout=float(timeout), workers=workers or executor.default_workers(),
            isolate=isolate, stack_size=int(os.environ.get("PAGEDLAB_CUDA_STACK_KB", "256")) * 1024)
        if checks or _profile or sched == "interleaved":  # the instrumented build
            self.last_mode = "fibers"
            return sanitizer.run(self, tuple(args), cfg, checks, profile=_profile)
        globals_ = self._module.launch_globals() if self._module is not None else None
        self.last_mode = "fibers"
        try:
            self.last_mode = executor.launch(self._cpu_build(), self.name, self.params, tuple(args),
                                             cfg, globals=globals_)
        except OSError as e:
            if "static TLS" not in str(e) or compiler.SLOW_TLS:
                raise
            compiler.SLOW_TLS = True  # rebuild without initial-exec TLS and try once more
            with self._lock:
                self._build = None
            if self._module is not None:
                self._module._build = None
            self.last_mode = executor.launch(self._cpu_build(), self.name, self.params, tuple(args),
                                             cfg, globals=globals_)

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


class ParamInfo(ctypes.Structure):
    """pl::ParamInfo in pl_abi.h."""
    _fields_ = [("pointer", ctypes.c_int32), ("is_const", ctypes.c_int32),
                ("lanes", ctypes.c_int32), ("is_class", ctypes.c_int32),
                ("size", ctypes.c_int64), ("elem_size", ctypes.c_int64), ("total", ctypes.c_int64),
                ("code", ctypes.c_char * 8), ("name", ctypes.c_char * 96)]


def compiler_params(build: compiler.Build, name: str, code: str):
    """The kernel's parameters as the compiler resolved them (exported by the build's glue)."""
    n, raw = executor.param_infos(build, name)  # from the runner: never loaded in Python
    infos = (ParamInfo * 64)()
    ctypes.memmove(infos, raw, min(len(raw), ctypes.sizeof(infos)))
    if n > 64:
        raise ValueError(f"{name} has {n} parameters; the CPU executor supports at most 64")
    names = param_names(code, name.split("<")[0].strip()) or []
    out = []
    for i in range(n):
        p = infos[i]
        out.append(from_compiler(i, names[i] if i < len(names) and names[i] else None,
                                 bool(p.pointer), bool(p.is_const), int(p.size), int(p.lanes),
                                 bool(p.is_class), p.code.decode(), p.name.decode(errors="replace")))
    return out


class RawModule:
    """CuPy's `RawModule(code=..., options=..., name_expressions=[...])`: several kernels,
    template instantiations, and `__constant__`/`__device__` variables written from the host.

    `get_function("add<float>")` returns a launchable kernel (a RawKernel); `get_global(name)`
    the variable's memory: on the CPU a writable numpy array (its dtype and length from the
    compiler, e.g. float32 of 16 for `__constant__ float c[16]`; bytes for a struct), on CuPy
    CuPy's memory pointer (or an array when `dtype` is given). Values written before a launch
    are what the kernel reads, with or without `check=` (the array is the module's one copy,
    written into whichever build runs the launch); on the CPU, a kernel's own writes to a
    `__device__` variable are not copied back (each launch runs in the kernel runner). `check=` (the sanitizer) is the default
    sanitizer setting of every kernel get_function returns, as on RawKernel.
    """

    def __init__(self, code: str | None = None, options=(), name_expressions=(),
                 backend: str = "auto", *, filename: str = "module.cu", path: str | None = None,
                 check=None):
        if path is not None:
            if code is not None:
                raise ValueError("give either code= or path=, not both")
            with open(path, encoding="utf-8") as fh:
                code = fh.read()
            filename = os.path.basename(path)
        if not isinstance(code, str):
            raise TypeError(f"code must be the module source as a str, got {type(code).__name__}")
        if backend not in ("auto", "cpu", "cupy"):
            raise ValueError(f"backend must be 'auto', 'cpu' or 'cupy', not {backend!r}")
        if isinstance(name_expressions, str):
            raise TypeError("name_expressions must be a list of strings, e.g. ['add<float>']")
        self.code, self.options = code, tuple(options)
        self.name_expressions = tuple(name_expressions)
        compiler.entry_symbols([], self.name_expressions)  # validates the expressions
        self.backend = ("cupy" if cupy_available() else "cpu") if backend == "auto" else backend
        self.filename = filename
        self._build = None
        self._cupy_module = None
        self._lock = threading.Lock()
        self._functions: dict[str, RawKernel] = {}
        self._globals: dict[str, tuple[np.ndarray, ParamInfo]] = {}  # name -> (bytes, type)
        self.check = None if check is None else sanitizer.parse_checks(check)

    def __repr__(self):
        return f"RawModule({len(self.name_expressions)} name expressions, backend={self.backend!r})"

    def _cpu_build(self) -> compiler.Build:
        with self._lock:
            if self._build is None:
                self._build = compiler.build(self.code, self.filename, self.options,
                                             name_expressions=self.name_expressions)
            return self._build

    def _cupy(self):
        if self._cupy_module is None:
            import cupy
            self._cupy_module = cupy.RawModule(code=self.code, options=self.options,
                                               name_expressions=self.name_expressions or None)
        return self._cupy_module

    def compile(self):
        """Build now (otherwise the first get_function launch or get_global does)."""
        if self.backend == "cpu":
            self._cpu_build()
        else:
            self._cupy()
        return self

    def get_function(self, name: str) -> RawKernel:
        if not isinstance(name, str):
            raise TypeError(f"get_function takes a kernel name or name expression, got {name!r}")
        if name not in self._functions:
            known = list(kernel_names(self.code)) + list(self.name_expressions)
            if name not in known:
                raise ValueError(f"{name!r} is neither a non-template kernel of the module nor one of "
                                 f"its name_expressions (known: {', '.join(known) or 'none'}); "
                                 "template kernels must be listed in name_expressions")
            self._functions[name] = RawKernel(self.code, name, self.options, self.backend,
                                              filename=self.filename, check=self.check, _module=self)
        return self._functions[name]

    def get_global(self, name: str, dtype=None):
        """The memory of the `__constant__`/`__device__` variable `name` (see the class doc)."""
        if self.backend == "cupy":
            ptr = self._cupy().get_global(name)
            if dtype is None:
                return ptr
            import cupy
            return cupy.ndarray((ptr.mem.size // np.dtype(dtype).itemsize,), dtype, ptr)
        raw, info = self._global_memory(name)
        if dtype is not None:
            return raw.view(np.dtype(dtype))
        code = info.code.decode()
        from .signature import _CODES
        if code not in _CODES:
            return raw
        view = raw.view(np.dtype(_CODES[code]))
        return view.reshape(-1, int(info.lanes)) if info.lanes else view

    def _global_memory(self, name: str):
        """The one truth of a global: host bytes, seeded from the build's initial value and
        written into whichever build (checked or not) runs each launch."""
        with self._lock:
            if name in self._globals:
                return self._globals[name]
        build = self._cpu_build()
        if name not in build.globals:
            raise ValueError(f"no file-scope __constant__ or __device__ variable {name!r} in the "
                             f"module (found: {', '.join(build.globals) or 'none'})")
        # Asked of the runner (describe mode): no Python process loads a student's library.
        record, initial = executor.describe(build).globals[name]
        info = ParamInfo.from_buffer_copy(record)
        raw = np.frombuffer(bytearray(initial), np.uint8)
        with self._lock:
            return self._globals.setdefault(name, (raw, info))

    def launch_globals(self) -> dict[str, bytes]:
        """Current values of the globals the host has seen (get_global), for executor.launch."""
        with self._lock:
            return {name: raw.tobytes() for name, (raw, _) in self._globals.items()}
