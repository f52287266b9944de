"""Build a CUDA C source into a shared library for the CPU executor, cached by content hash.

The source is compiled unchanged: it is written to a file of its own name (so diagnostics and
reports name the student's file and line) and `#include`d by a generated translation unit
that adds the glue: definitions for the `extern __shared__` arrays (sized to the
executor's capacity plus a guard region) and one `pl_entry_<kernel>(void** args)` per kernel.
The prelude header is force-included with `-include`. The runtime (fibers, scheduler) is a
separate library built once, so the kernel library's thread-local storage holds nothing but
the kernel's `__shared__` memory, which the runtime can then poison wholesale at block start.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from . import ptx
from .errors import CompileError
from .signature import _namespaces_at, kernel_names, kernel_scopes, strip_comments
from .unsupported import asm_refusal, refuse_unsupported

HERE = Path(__file__).resolve().parent
PRELUDE = HERE / "prelude.h"
ABI = HERE / "pl_abi.h"
RUNTIME = HERE / "runtime.cpp"
# CUDA's headers for the CPU (cooperative_groups.h, cuda_fp16.h, ...), on the include path.
INCLUDE = HERE / "include"
SANITIZER_RT = HERE / "sanitizer_rt.h"  # included by runtime.cpp
LAUNCH = HERE / "pl_launch.h"  # the launch description: runtime.cpp and runner.cpp include it
# Everything the runtime library is compiled from: all of it is in the library's cache key, so
# an edited header rebuilds it (tests/test_cuda_build_inputs.py checks the list is complete).
RUNTIME_SOURCES = (RUNTIME, ABI, LAUNCH, SANITIZER_RT)
FORMAT_VERSION = "7"


def header_bytes() -> bytes:
    """The prelude and every header a kernel may include: part of each build's cache key."""
    parts = [PRELUDE.read_bytes(), ABI.read_bytes()]
    for h in sorted(p for p in INCLUDE.rglob("*") if p.is_file()):  # .h, .cuh, extensionless
        parts += [str(h.relative_to(INCLUDE)).encode(), h.read_bytes()]
    return b"\0".join(parts)

# Every `extern __shared__` array gets this many bytes on the CPU: room for the largest
# dynamic shared memory a launch may ask for plus a canary region that catches overruns.
DYN_SMEM_CAPACITY = 96 * 1024
DYN_SMEM_GUARD = 16 * 1024

# No fast-math and no FMA contraction: float results follow IEEE rules op by op.
BASE_FLAGS = ["-std=c++20", "-O2", "-fPIC", "-shared", "-fno-fast-math", "-ffp-contract=off",
              "-pthread"]
# -fstack-clash-protection: a large local array probes its stack page by page, so it faults on
# the fiber's guard page instead of silently landing in the next CUDA thread's stack.
# -fno-strict-aliasing: CUDA code type-puns through reinterpret_cast all the time (vLLM packs
# eight bf16 into a uint4 through a __nv_bfloat16*); GCC's alias analysis deleted those stores.
KERNEL_FLAGS = ["-g1", "-w", "-fvisibility=hidden", "-fno-semantic-interposition", "-fno-strict-aliasing"]
if sys.platform.startswith("linux"):
    KERNEL_FLAGS.append("-fstack-clash-protection")
# __shared__ variables are thread_local in a dlopen()ed library: with the default TLS dialect
# every access may call __tls_get_addr (11% of a tiled matmul's time); TLS descriptors resolve
# to a load of an offset instead. (AArch64 uses descriptors already.)
if sys.platform.startswith("linux") and platform.machine() in ("x86_64", "AMD64"):
    KERNEL_FLAGS.append("-mtls-dialect=gnu2")


def cache_dir() -> Path:
    """$PAGEDLAB_CACHE/cuda, else ~/.cache/pagedlab/cuda; a temp folder if home is read-only."""
    root = os.environ.get("PAGEDLAB_CACHE")
    base = Path(root).expanduser() / "cuda" if root else Path.home() / ".cache" / "pagedlab" / "cuda"
    try:
        base.mkdir(parents=True, exist_ok=True)
        if os.access(base, os.W_OK):
            return base
    except OSError:
        if root:
            raise
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    base = Path(tempfile.gettempdir()) / f"pagedlab-{uid}" / "cuda"
    base.mkdir(parents=True, exist_ok=True)
    return base


# A folder of pagedlab's own builds (runtime, runner, precompiled prelude) made by someone this
# process trusts: root, for a sandboxed grading child that cannot read root's cache. Looked in
# before the cache, never written; the student's kernels are still built in the cache.
TRUSTED_ENV = "PAGEDLAB_TRUSTED_BUILDS"


def trusted_build(name: str) -> Path | None:
    """`name` in the trusted builds folder, if it is there."""
    folder = os.environ.get(TRUSTED_ENV)
    if not folder:
        return None
    path = Path(folder) / name
    return path if os.access(path, os.R_OK) else None


def find_compiler() -> str:
    """The C++ compiler: $CXX, else g++, clang++ or c++ from PATH."""
    env = os.environ.get("CXX")
    candidates = [env] if env else ["g++", "clang++", "c++"]
    for c in candidates:
        path = shutil.which(c)
        if path:
            return path
    raise CompileError(
        "no C++ compiler found (looked for " + ", ".join(candidates) + "). The CPU executor "
        "needs g++ >= 12 or clang >= 15 with C++20: on Debian/Ubuntu `apt install g++`, on macOS "
        "`xcode-select --install`, or set CXX.")


_VERSION_CACHE: dict[str, str] = {}


def compiler_version(cxx: str) -> str:
    if cxx not in _VERSION_CACHE:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=60)
        _VERSION_CACHE[cxx] = out.stdout.splitlines()[0] if out.stdout else cxx
    return _VERSION_CACHE[cxx]


def instrument_flags(cxx: str) -> list[str]:
    """Compiler flags that make every memory access call __tsan_readN/__tsan_writeN."""
    # -g, not -g1: GCC's minimal line tables name the including glue file, not the .cu, for
    # some of the instrumentation calls.
    # -fsanitize=bounds: an index past a fixed-size array (a thread's local array, a static
    # __shared__ array) calls __ubsan_handle_out_of_bounds_abort, which the runtime reports.
    bounds = ["-fsanitize=bounds", "-fno-sanitize-recover=bounds"]
    version = compiler_version(cxx).lower()
    if "clang" in version:
        return ["-g", "-fsanitize=thread", *bounds, "-mllvm", "-tsan-instrument-func-entry-exit=0"]
    return ["-g", "-fsanitize=thread", *bounds, "--param", "tsan-instrument-func-entry-exit=0"]


def _digest(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode() if isinstance(p, str) else p)
        h.update(b"\0")
    return h.hexdigest()[:20]


def _run(cmd: list[str], what: str, shown: dict[str, str], cwd=None) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=cwd)
    if proc.returncode != 0:
        log = proc.stderr
        for long, short in shown.items():
            log = log.replace(long, short)
        lines = [ln for ln in log.strip().splitlines()
                 if not re.match(r"(In file included from|\s+from) \S*_pagedlab_glue", ln)]
        if len(lines) > 80:
            lines = lines[:80] + [f"... ({len(lines) - 80} more lines)"]
        error = CompileError(f"{what} failed:\n" + "\n".join(lines))
        # Killed by a signal (out of memory?), itself or the compiler proper: worth another try.
        error.killed = proc.returncode < 0 or "signal terminated program" in proc.stderr
        raise error


def _atomic_build(target: Path, build) -> None:
    """Run build(tmp_path) and move the result into place: concurrent builders never clash."""
    fd, tmp = tempfile.mkstemp(prefix=target.name + ".", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        build(tmp)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def copied(source: Path | None, target: Path, complete: str = "") -> bool:
    """Copy `target.name` (a file, or a folder holding `complete`) from the folder `source` to
    `target`, whole or not at all; False when `source` has no finished copy of it."""
    if source is None or source.resolve() == target.parent.resolve():
        return False
    original = source / target.name
    if not (original / complete if complete else original).is_file():
        return False
    if complete:
        tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", suffix=".tmp", dir=target.parent))
        try:
            for item in original.iterdir():
                shutil.copyfile(item, tmp / item.name)
            os.rename(tmp, target)
        except OSError:  # another process put it there first
            shutil.rmtree(tmp, ignore_errors=True)
        return (target / complete).exists()
    _atomic_build(target, lambda tmp: shutil.copy(original, tmp))  # with its mode (a program's x)
    return True


# Set when loading failed with "cannot allocate memory in static TLS block".
SLOW_TLS = False


def fiber_flags() -> list[str]:
    """Runtime variants: PAGEDLAB_CUDA_FIBERS=ucontext selects the portable (slower) context
    switch; SLOW_TLS the general-dynamic TLS model for the current-thread pointer."""
    mode = os.environ.get("PAGEDLAB_CUDA_FIBERS", "auto")
    if mode not in ("auto", "ucontext"):
        raise ValueError(f"PAGEDLAB_CUDA_FIBERS must be 'auto' or 'ucontext', not {mode!r}")
    flags = ["-DPL_FIBER_UCONTEXT"] if mode == "ucontext" else []
    return flags + (["-DPL_NO_FAST_TLS"] if SLOW_TLS else [])


def runtime_library(into: Path | None = None, copy_from: Path | None = None) -> Path:
    """The runtime library: the trusted one if there is one, else built in the cache; or in
    `into`, copied from `copy_from` when it has it (see sandbox.trusted_builds)."""
    cxx = find_compiler()
    flags = BASE_FLAGS + ["-fvisibility=hidden"] + fiber_flags()
    key = _digest(FORMAT_VERSION, *(p.read_bytes() for p in RUNTIME_SOURCES), compiler_version(cxx),
                  " ".join(flags), sys.platform)
    name = f"libpagedlab_rt_{key}.so"
    if into is None and (found := trusted_build(name)):
        return found
    target = (into or cache_dir()) / name
    if not target.exists() and not copied(copy_from, target):
        soname = ["-Wl,-install_name,@rpath/" + name] if sys.platform == "darwin" else [f"-Wl,-soname,{name}"]
        _atomic_build(target, lambda tmp: _run(
            [cxx, *flags, f"-I{HERE}", "-o", tmp, str(RUNTIME), *soname]
            + ([] if sys.platform == "darwin" else ["-ldl"]),
            "building the pagedlab CPU runtime", {}))
    return target


def _is_gcc(cxx: str) -> bool:
    v = compiler_version(cxx).lower()
    return "clang" not in v and ("g++" in v or "gcc" in v)


def precompiled_prelude(cxx: str, flags: list[str], into: Path | None = None,
                        copy_from: Path | None = None) -> Path:
    """Folder holding prelude.h (+ its GCC precompiled header): saves ~0.4 s per build.

    The trusted one if there is one, else built in the cache; or in `into`, copied from
    `copy_from` when it has it. Falls back to the package's own prelude when the compiler is not
    GCC or the PCH fails; GCC itself ignores a PCH whose flags do not match and reads the header
    instead.
    """
    if not _is_gcc(cxx):
        return HERE
    pch_flags = [f for f in flags if f != "-shared"]
    key = _digest(FORMAT_VERSION, header_bytes(), compiler_version(cxx),
                  " ".join(pch_flags), sys.platform)
    if into is None and (found := trusted_build(f"pch_{key}/prelude.h.gch")):
        return found.parent
    out_dir = into or cache_dir()
    folder = out_dir / f"pch_{key}"
    if (folder / "prelude.h.gch").exists() or copied(copy_from, folder, "prelude.h.gch"):
        return folder
    tmp = None
    try:
        tmp = Path(tempfile.mkdtemp(prefix="pch_tmp_", dir=out_dir))
        shutil.copy(PRELUDE, tmp / "prelude.h")
        shutil.copy(ABI, tmp / "pl_abi.h")
        # -I. as well: headers under include/ name "pl_abi.h", which sits beside the prelude.
        _run([cxx, *pch_flags, "-I.", f"-I{INCLUDE}", "-x", "c++-header", "prelude.h", "-o", "prelude.h.gch"],
             "precompiling the prelude", {}, cwd=tmp)
        try:
            os.rename(tmp, folder)
        except OSError:  # another process won the race: use theirs, unless theirs is broken
            if not (folder / "prelude.h.gch").exists():
                shutil.rmtree(folder, ignore_errors=True)
                try:
                    os.rename(tmp, folder)
                except OSError:
                    pass
            shutil.rmtree(tmp, ignore_errors=True)
    except (CompileError, OSError):
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        return HERE
    return folder if (folder / "prelude.h.gch").exists() else HERE


# The element type is every word of the declaration but `extern`, `__shared__` and the name
# (alignment attributes dropped): `short`, `unsigned long long`, `float4`; CUDA lets the type
# stand before `__shared__` as well (`extern float __shared__ smem[];`, the samples'
# threadFenceReduction). The glue sizes the array with sizeof().
_DECL_WORDS = r"[^;{}()\[\]]*?(?:\([^;{}]*?\)[^;{}()\[\]]*?)*"
_EXTERN_SHARED = re.compile(
    r"\bextern\s+(" + _DECL_WORDS + r")\b__shared__\b\s*(" + _DECL_WORDS
    + r")\s*\b([A-Za-z_]\w*)\s*\[\s*\]")
_ALIGN = re.compile(r"(__align__|alignas)\s*\([^()]*\)|__attribute__\s*\(\([^()]*(\([^()]*\))?[^()]*\)\)")


@dataclass
class DynArray:
    name: str
    ctype: str
    # Declared inside a template (the samples' SharedMemory<T>): GCC then calls the array's TLS
    # init function without checking that it exists, so the glue must define one (empty).
    in_template: bool = False
    # Enclosing namespaces ("" for an anonymous one): `extern __shared__ char smem[];` inside a
    # kernel in `namespace vllm` declares vllm::smem, so the glue defines it there.
    namespaces: tuple[str, ...] = ()

    @property
    def qualified(self) -> str:
        """How the glue (at file scope) names the array."""
        named = [n for n in self.namespaces if n]
        return "::" + "::".join([*named, self.name])

    @property
    def tls_init_symbol(self) -> str:
        """The Itanium name of the array's TLS init function: _ZTH + the variable's name."""
        if not self.namespaces:
            return f"_ZTH{len(self.name)}{self.name}"
        parts = ["12_GLOBAL__N_1" if not n else f"{len(n)}{n}" for n in self.namespaces]
        return "_ZTHN" + "".join(parts) + f"{len(self.name)}{self.name}E"


@dataclass
class Build:
    library: Path
    runtime: Path
    filename: str
    kernels: list[str]
    dyn_arrays: list[DynArray] = field(default_factory=list)
    cached: bool = False
    # kernel or name expression ("add<float>") -> the suffix of its pl_entry_/pl_params_ symbols
    entries: dict[str, str] = field(default_factory=dict)
    globals: list[str] = field(default_factory=list)
    # kernel -> "" when the library has its collapsed version (collapse.py, pl_cox_<symbol>),
    # else why it runs on fibers only
    collapsed: dict[str, str] = field(default_factory=dict)

    def symbol(self, name: str) -> str:
        return self.entries.get(name, name)


def dynamic_shared_arrays(code: str) -> list[DynArray]:
    found: dict[tuple, DynArray] = {}
    text = strip_comments(code)
    top = _file_scope(text, named=True)
    for m in _EXTERN_SHARED.finditer(text):
        words = _ALIGN.sub(" ", m.group(1) + " " + m.group(2))
        ctype, name = " ".join(words.split()), m.group(3)
        spaces = _namespaces_at(text, m.start())
        arr = found.setdefault((spaces, name), DynArray(name, ctype, namespaces=spaces))
        arr.in_template = arr.in_template or (not top[m.start()] and _inside_template(text, top, m.start()))
    return list(found.values())


def _inside_template(text: str, top: list[bool], pos: int) -> bool:
    """Is the file-scope construct enclosing `pos` a template (or one's specialisation)?"""
    brace = pos
    while brace > 0 and not top[brace - 1]:
        brace -= 1
    i = brace - 1  # the construct's outermost `{`; its head runs back to the previous `;`/`}`
    while i > 0 and not (top[i - 1] and text[i - 1] in ";}"):
        i -= 1
    return re.search(r"\btemplate\s*<", text[i:brace]) is not None


def _file_scope(text: str, named: bool = False) -> list[bool]:
    """For each offset: is it at file scope? `extern "C" { ... }` and `namespace { ... }` bodies
    count as file scope (a `__constant__` declared there is still a module global); with
    `named`, bodies of named namespaces too."""
    stack, out = [], []
    head_re = r'extern\s*"C"\s*$|namespace\s*$' + (r"|namespace\s+[A-Za-z_][\w:]*\s*$" if named else "")
    for i, ch in enumerate(text):
        if ch == "{":
            head = text[max(0, i - 80):i]
            stack.append(bool(re.search(head_re, head)))
        elif ch == "}" and stack:
            stack.pop()
        out.append(all(stack))
    return out


_VAR_KEYWORD = re.compile(r"\b(?:__constant__|__device__)\b")


def _declarators(text: str, start: int) -> list[str] | None:
    """The declarators of the declaration starting at `start` (`float a, b[4] = {..}, c`);
    None when it is a function (a parenthesis before any `=`)."""
    parts, cur, depth, i, init = [], "", 0, start, False
    while i < len(text):
        ch = text[i]
        if ch in "([{":
            if depth == 0 and not init and ch in "({":
                return None
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif depth == 0 and ch == "=":
            init = True
        elif depth == 0 and ch in ",;":
            parts.append(cur)
            if ch == ";":
                return parts
            cur, init = "", False
            i += 1
            continue
        cur += ch
        i += 1
    return None


def global_variables(code: str) -> list[str]:
    """Names of the file-scope `__constant__`/`__device__` variables (for get_global), every
    declarator of `__constant__ float a, b, c;` included."""
    text = strip_comments(code)
    top = _file_scope(text)
    names = []
    for m in _VAR_KEYWORD.finditer(text):
        if not top[m.start()]:
            continue
        decls = _declarators(text, m.end())
        for d in decls or ():
            lhs = re.split(r"[=\[]", d, maxsplit=1)[0]
            ident = re.findall(r"[A-Za-z_]\w*", lhs)
            name = ident[-1] if ident else None
            if name and name not in names and name not in ("const", "volatile", "__constant__",
                                                            "__device__", "static", "extern"):
                names.append(name)
    return names


def entry_symbols(kernels: list[str], name_expressions=()) -> dict[str, str]:
    entries = {k: k for k in kernels}
    for i, expr in enumerate(name_expressions):
        if not isinstance(expr, str) or not expr.strip():
            raise TypeError(f"name_expressions must be strings such as 'add<float>', got {expr!r}")
        if expr not in entries:
            entries[expr] = f"x{i}_" + re.sub(r"\W", "_", expr)[:40]
    return entries


# __CUDA_ARCH__ when the options name no architecture (prelude.h's default): Ampere, so code
# with a bf16 path for sm_80+ takes it.
DEFAULT_ARCH = 800
_ARCH_OPTION = re.compile(r"(?:sm|compute|lto)_(\d+)[a-z]?")


def cuda_arch(options) -> int:
    """__CUDA_ARCH__ for `-arch=sm_86` / `--gpu-architecture=compute_90` (or the option and
    its value as two strings), as CuPy passes them; DEFAULT_ARCH when none is given."""
    arch, it = DEFAULT_ARCH, iter(options or ())
    for opt in it:
        if not isinstance(opt, str):
            continue
        value = None
        if opt in ("-arch", "--gpu-architecture", "-gencode"):
            value = next(it, "")
        elif re.match(r"(-arch|--gpu-architecture|-gencode)[= ]", opt):
            value = re.split(r"[= ]", opt, maxsplit=1)[1]
        m = _ARCH_OPTION.search(value or "")
        if m:
            arch = int(m.group(1)) * 10
    return arch


def _defines(options) -> list[str]:
    """Keep the -D/--define-macro options (and the architecture, as __CUDA_ARCH__); NVRTC's
    other code-generation options mean nothing on a CPU."""
    out, it = [], iter(options or ())
    for opt in it:
        if not isinstance(opt, str):
            raise TypeError(f"compile options must be strings, got {opt!r}")
        if opt.startswith("-D") and len(opt) > 2:
            out.append(opt)
        elif opt in ("-D", "--define-macro"):
            out.append("-D" + next(it, ""))
        elif opt.startswith("--define-macro="):
            out.append("-D" + opt.split("=", 1)[1])
    arch = cuda_arch(options)
    if arch != DEFAULT_ARCH:
        out.append(f"-D__CUDA_ARCH__={arch}")
    return out


def translation_unit(code: str, filename: str, kernels: list[str], dyn: list[DynArray],
                     entries: dict[str, str] | None = None, globals_: list[str] = ()) -> str:
    cap = DYN_SMEM_CAPACITY + DYN_SMEM_GUARD
    tail = [f'\n#line 1 "<pagedlab generated glue for {filename}>"']
    for k, d in enumerate(dyn):
        opening = "".join(f"namespace {n} {{ " for n in d.namespaces)
        tail.append(f"{opening}thread_local __attribute__((aligned(64))) {d.ctype} {d.name}"
                    f"[({cap} + sizeof({d.ctype}) - 1) / sizeof({d.ctype})];{' }' * len(d.namespaces)}")
        if d.in_template:
            tail.append(f'extern "C" void pl_tls_init_{k}_{d.name}() __asm__("{d.tls_init_symbol}");')
            tail.append(f'extern "C" __attribute__((visibility("hidden"))) void pl_tls_init_{k}_{d.name}() {{}}')
    # 64: the TLS block (all __shared__ memory) is then 64-byte aligned, so alignas(32) holds.
    tail.append("static thread_local __attribute__((aligned(64))) char pl_tls_anchor_;")
    tail.append("PL_EXPORT int pl_smem_info(void** addr, uint64_t* cap, int max) {")
    tail.append("    *(volatile char*)&pl_tls_anchor_ = 0;  // makes this thread's TLS block exist")
    tail.append("    int n = 0;")
    for d in dyn:
        tail.append(f"    if (n < max) {{ addr[n] = (void*){d.qualified}; cap[n] = sizeof({d.qualified}); ++n; }}")
    tail.append("    return n;\n}")
    scopes = kernel_scopes(code, kernels)
    for expr, sym in (entries if entries is not None else {k: k for k in kernels}).items():
        expr = scopes.get(expr, expr)
        tail.append(f"PL_EXPORT void pl_entry_{sym}(void** a) {{ pl::invoke({expr}, a); }}")
        tail.append(f"PL_EXPORT int pl_params_{sym}(pl::ParamInfo* o, int n) "
                    f"{{ return pl::describe({expr}, o, n); }}")
    for g in globals_:
        tail.append(f"PL_EXPORT void* pl_global_{g}(pl::ParamInfo* o) "
                    f"{{ return pl::describe_global({g}, o); }}")
    return f'#include "{filename}"\n' + "\n".join(tail) + "\n"


def collapse_enabled() -> bool:
    """PAGEDLAB_CUDA_COLLAPSE=0 turns collapsing off: at build (no collapsed version) and at
    launch (a cached build that has one still runs on fibers)."""
    return os.environ.get("PAGEDLAB_CUDA_COLLAPSE", "1") != "0"


def collapsed_source(code: str, filename: str, kernels: list[str]) -> tuple[str, dict[str, str]]:
    """The source with the collapsed version of each kernel in collapse.py's class put into
    the kernel (collapse.apply), and per kernel "" (collapsed) or why not.
    PAGEDLAB_CUDA_COLLAPSE=0 turns it off."""
    from . import collapse
    if not collapse_enabled():
        return code, {k: "PAGEDLAB_CUDA_COLLAPSE=0" for k in kernels}
    done, status = [], {}
    for k in kernels:
        got = collapse.collapse(code, k, filename)
        status[k] = got if isinstance(got, str) else ""
        if not isinstance(got, str):
            done.append(got)
    return collapse.apply(code, done), status


def kernel_flags(cxx: str, sanitize: bool = False, options=()) -> list[str]:
    """The compiler flags of a kernel library (and of its precompiled prelude)."""
    flags = BASE_FLAGS + KERNEL_FLAGS + (["-DPL_NO_FAST_TLS"] if SLOW_TLS else []) + _defines(options)
    if sanitize:  # the sanitizer: instrumented compile, linked without the TSan runtime
        # Default TLS dialect: with TLS descriptors (gnu2) GCC's instrumentation misses
        # static __shared__ accesses, and racecheck saw no race in a kernel with one.
        # -fno-plt: each of the many __tsan_* calls goes straight through the GOT.
        # More inlining than -O2 gives: instrumented helpers (SGEMM's processFromSmem) grow past
        # GCC's limits, and a local array whose address escapes into a call is instrumented.
        flags = ([f for f in flags if not f.startswith("-mtls-dialect")] + instrument_flags(cxx)
                 + ["-fno-plt", "-O3"] + (["--param", "max-inline-insns-single=2000", "--param",
                                          "max-inline-insns-auto=400", "--param",
                                          "max-completely-peel-times=16", "--param",
                                          "max-completely-peeled-insns=800"] if _is_gcc(cxx) else []))
    return flags


def build(code: str, filename: str = "kernel.cu", options=(), sanitize: bool = False, *,
          name_expressions=()) -> Build:
    """Compile `code` (cached); raise CompileError with the compiler's messages on failure.

    sanitize: instrument every memory access for pagedlab.cuda.sanitizer (a separate build).
    name_expressions: template instantiations to export (RawModule), e.g. ["add<float>"].
    An unchecked build also holds the collapsed version of each kernel in collapse.py's class;
    should that not compile, the kernel is built without it (fibers only).
    """
    if not sanitize:
        try:
            return _build(code, filename, options, sanitize, name_expressions, collapse=True)
        except CompileError as exc:
            if getattr(exc, "killed", False) or not getattr(exc, "collapsed", False):
                raise
    return _build(code, filename, options, sanitize, name_expressions, collapse=False)


def _build(code: str, filename: str, options, sanitize: bool, name_expressions, collapse: bool
           ) -> Build:
    if not isinstance(code, str):
        raise TypeError(f"kernel code must be a str, got {type(code).__name__}")
    filename = Path(filename).name
    if not re.fullmatch(r"[\w.+-]+", filename):
        raise ValueError(f"filename {filename!r}: use letters, digits, '.', '_', '-' only")
    cxx = find_compiler()
    flags = kernel_flags(cxx, sanitize, options)
    refuse_unsupported(code, filename, lambda: preprocessed(code, cxx, kernel_flags(cxx, False, options)))
    kernels = kernel_names(code)
    entries = entry_symbols(kernels, name_expressions)
    globals_ = global_variables(code)
    dyn = dynamic_shared_arrays(code)
    _warn_legacy(code, filename)
    rt = runtime_library()
    unit = translation_unit(code, filename, kernels, dyn, entries, globals_)
    source, status = collapsed_source(code, filename, kernels) if collapse else (code, {})
    if collapse and source == code:  # nothing collapsed: the plain build, under its own key
        collapse = False
    # Inline PTX becomes C++ on its own lines (ptx.py): what the compiler reads of the file.
    compiled = ptx.rewrite(source)
    key = _digest(FORMAT_VERSION, compiled, unit, header_bytes(), rt.name, PTX_SOURCE.read_bytes(),
                  COLLAPSE_SOURCE.read_bytes() if collapse else b"", compiler_version(cxx),
                  " ".join(flags), sys.platform)
    out_dir = cache_dir()
    target = out_dir / f"k_{Path(filename).stem}{'_san' if sanitize else ''}_{key}.so"
    result = Build(target, rt, filename, kernels, dyn, cached=target.exists(), entries=entries,
                   globals=globals_, collapsed=status if collapse else {
                       k: status.get(k) or "not collapsed" for k in kernels})
    if result.cached:
        try:
            os.utime(target)  # recently used: keep it when old builds are pruned
        except OSError:
            pass
        return result

    if target in _FAILED:  # the same source and flags: the compiler would say the same again
        error = CompileError(_FAILED[target])
        error.collapsed = collapse
        raise error
    pre = precompiled_prelude(cxx, flags) if not _defines(options) else HERE

    def compile_into(tmp: str) -> None:
        with tempfile.TemporaryDirectory(prefix="pl_build_", dir=out_dir) as d:
            # The kernel text goes into a file of its own name, unchanged: diagnostics then
            # quote it with line numbers and carets, and line tables name it for crash reports.
            (Path(d) / filename).write_text(compiled)
            glue = Path(filename).stem + "_pagedlab_glue.cpp"
            (Path(d) / glue).write_text(unit)
            rpath = runtime_rpath(rt, out_dir)
            cmd = [cxx, *flags, "-include", str(pre / "prelude.h"), f"-I{pre}", f"-I{INCLUDE}",
                   "-x", "c++", glue,
                   "-x", "none", str(rt), *rpath, "-o", tmp]
            if sanitize:  # the sanitizer: compile with instrumentation, link without its runtime
                obj = str(Path(d) / "kernel.o")
                _run(cmd[:cmd.index("-x", cmd.index(glue))] + ["-c", "-o", obj],
                     f"compiling {filename} for the CPU executor (sanitizer)",
                     {str(pre / "prelude.h"): "prelude.h", str(pre) + "/": ""}, cwd=d)
                cmd = [cxx, *BASE_FLAGS, obj, str(rt), *rpath, "-o", tmp]
            _run(cmd, f"compiling {filename} for the CPU executor",
                 {str(pre / "prelude.h"): "prelude.h", str(pre) + "/": ""}, cwd=d)

    try:
        _atomic_build(target, compile_into)
    except CompileError as exc:
        refused = ptx_refusal(str(exc), filename) or asm_refusal(str(exc), code, filename)
        if refused is not None:
            exc = refused
        elif getattr(exc, "killed", False):
            raise
        _FAILED[target] = str(exc)
        exc.collapsed = collapse
        raise exc from None
    _prune(out_dir)
    return result


PTX_SOURCE = HERE / "ptx.py"  # the rewrite is part of every build's cache key
COLLAPSE_SOURCE = HERE / "collapse.py"  # so is the collapsing, in builds that have it
_PTX_REFUSED = re.compile(r"__pl_ptx_refused_(\d+)_\d+.{0,8} declared with attribute error: "
                          + re.escape(ptx.REFUSED_MARK) + r"([^\n]*)")


def ptx_refusal(log: str, filename: str) -> CompileError | None:
    """The refusal of an inline PTX instruction the executor does not run, when the compiler
    met a call of its stand-in (ptx.py): named, on the asm statement's line."""
    m = _PTX_REFUSED.search(log)
    if m is None:
        return None
    return CompileError(f"{filename}:{m.group(1)}: {m.group(2).strip()}")


REFUSED_HEADERS = HERE / "refused"  # stubs of headers refused by name (unsupported.py)
_PREPROCESSED: dict[str, tuple[str, str] | None] = {}


def preprocessed(code: str, cxx: str, flags: list[str]) -> tuple[str, str] | None:
    """The kernel as the compiler reads it (`-E`, the prelude and every macro of the build),
    with the kernel's own lines marked `<stdin>`; None when the preprocessor fails (the build
    then reports the error)."""
    key = _digest(code, " ".join(flags), compiler_version(cxx))
    if key not in _PREPROCESSED:
        cmd = [cxx, *[f for f in flags if f.startswith(("-D", "-U", "-std"))], "-E",
               "-include", str(PRELUDE), f"-I{HERE}", f"-I{INCLUDE}", f"-I{REFUSED_HEADERS}",
               "-x", "c++", "-"]
        try:
            proc = subprocess.run(cmd, input=code, capture_output=True, text=True, timeout=120)
            _PREPROCESSED[key] = (proc.stdout, "<stdin>") if proc.returncode == 0 else None
        except (OSError, subprocess.SubprocessError):
            _PREPROCESSED[key] = None
    return _PREPROCESSED[key]


def runtime_rpath(rt: Path, out_dir: Path) -> list[str]:
    """Link flags that let a program or library in `out_dir` find the runtime `rt`: beside it
    ($ORIGIN), or in the trusted builds folder when that is where the runtime came from."""
    flags = ["-Wl,-rpath,@loader_path" if sys.platform == "darwin" else "-Wl,-rpath,$ORIGIN"]
    if rt.parent.resolve() != out_dir.resolve():
        flags.append(f"-Wl,-rpath,{rt.parent}")
    return flags


# Builds that failed in this process, by target: every check of a task builds the same kernel,
# and a compile error would otherwise cost one compiler run per check (seconds each).
_FAILED: dict[Path, str] = {}


_LEGACY = re.compile(r"\b(__shfl(?:_up|_down|_xor)?|__ballot|__any|__all)\s*\(")


def _warn_legacy(code: str, filename: str) -> None:
    """nvcc warns about the pre-CUDA-9 warp intrinsics (and CUDA 13 removed them): say so."""
    found = sorted({m.group(1) for m in _LEGACY.finditer(strip_comments(code))})
    if found:
        import warnings
        warnings.warn(
            f"{filename}: {', '.join(found)} without a mask are deprecated (removed for sm_70+ "
            f"and in CUDA 13); the CPU executor runs them on the lanes that have not returned. "
            f"Use the *_sync forms, e.g. __shfl_down_sync(0xffffffff, v, delta).",
            FutureWarning, stacklevel=4)


KEEP_BUILDS = 500


def _prune(out_dir: Path) -> None:
    """Students rebuild after every edit: keep the newest KEEP_BUILDS kernel libraries."""
    builds = sorted(out_dir.glob("k_*.so"), key=lambda p: p.stat().st_mtime if p.exists() else 0)
    for old in builds[:-KEEP_BUILDS]:
        try:
            old.unlink()
        except OSError:
            pass
