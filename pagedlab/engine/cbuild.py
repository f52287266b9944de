"""Building a student's llm_memory.c: the system C compiler, the shipped header and runtime.

The file is compiled with the handout's flags (`-std=c11 -Wall -Wextra -g`) against
`pagedlab/include/hw3.h`, with `pl_heap.h` force-included so its malloc/free reach the tracked
heap (`heap`), and linked with the trampoline runtime (`pl_runtime.c`) that catches a crash or a
hang in one API call. Builds are cached by content hash ($PAGEDLAB_CACHE/c, else
~/.cache/pagedlab/c), so a notebook's second load costs nothing.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..harness import hw3

INCLUDE = Path(__file__).resolve().parent.parent / "include"
C_SOURCE = "llm_memory.c"
MODULE = "memory_manager"
# Student files a C file can stand in for (the grader's intake and missing-file test read this).
ALTERNATE_FILES = {"memory_manager.py": (C_SOURCE,)}
STUDENT_FLAGS = ["-std=c11", "-Wall", "-Wextra", "-g", "-O0", "-fPIC", "-fno-omit-frame-pointer"]
RUNTIME_FLAGS = ["-std=gnu11", "-g", "-O1", "-fPIC", "-w"]
# -Bsymbolic: the library's calls to its own functions never bind to another loaded student's.
LINK_FLAGS = (["-dynamiclib", "-undefined", "dynamic_lookup"] if sys.platform == "darwin"
              else ["-shared", "-Wl,-Bsymbolic", "-Wl,-z,defs"])


class CCompileError(RuntimeError):
    """The C file did not compile or link; the message is the compiler's."""


def available() -> bool:
    """True when a C compiler is on PATH (or $CC names one)."""
    try:
        find_compiler()
    except CCompileError:
        return False
    return True


def find_compiler() -> str:
    env = os.environ.get("CC")
    for name in ([env] if env else ["cc", "gcc", "clang"]):
        path = shutil.which(name)
        if path:
            return path
    raise CCompileError("no C compiler found (looked for $CC, cc, gcc, clang): on Debian/Ubuntu "
                        "`apt install gcc`, on macOS `xcode-select --install`")


def cache_dir() -> Path:
    root = os.environ.get("PAGEDLAB_CACHE")
    base = Path(root).expanduser() / "c" if root else Path.home() / ".cache" / "pagedlab" / "c"
    try:
        base.mkdir(parents=True, exist_ok=True)
        if os.access(base, os.W_OK):
            return base
    except OSError:
        pass
    base = Path(tempfile.gettempdir()) / f"pagedlab-{os.getuid() if hasattr(os, 'getuid') else 'user'}" / "c"
    base.mkdir(parents=True, exist_ok=True)
    return base


# ---------------------------------------------------------------------------------------------
# Building
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Build:
    source: Path
    library: Path
    warnings: str
    seconds: float  # 0.0 when it came from the cache


def run_compiler(cmd: list[str], cwd: Path, what: str) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=120)
    if proc.returncode != 0:
        log = proc.stderr.strip() or proc.stdout.strip()
        exc = CCompileError(f"{what} failed:\n{log}")
        exc.c_compile_log = log  # the compiler's own words, for the checks' one report of them
        exc.c_phase = what.split(" ", 1)[0]  # compiling | linking | building
        first = re.search(r"^[^\s:]*?llm_memory\.c:(\d+):(?:\d+:)? (?:fatal )?error", log, re.MULTILINE)
        exc.line = int(first.group(1)) if first else 0  # the first error, for the checks' "at file:line"
        raise exc
    return proc.stderr.strip()


def _runtime_object(cc: str, out: Path) -> Path:
    """pagedlab's C runtime, compiled once per compiler and runtime source: it is the same in every
    student's library and costs twice what a student's file does to compile."""
    digest = hashlib.sha256()
    # Every file of include/, not only what pl_runtime.c includes today: a header it starts to
    # include later must not leave a stale runtime in the cache.
    sources = sorted(p for p in INCLUDE.iterdir() if p.is_file())
    for part in [cc.encode(), " ".join(RUNTIME_FLAGS).encode()] + [p.name.encode() + p.read_bytes() for p in sources]:
        digest.update(part + b"\0")
    obj = out / f"pl_runtime-{digest.hexdigest()[:20]}.o"
    if not obj.is_file():
        with tempfile.TemporaryDirectory(dir=out) as tmp:
            run_compiler([cc, *RUNTIME_FLAGS, "-I", str(INCLUDE), "-c", str(INCLUDE / "pl_runtime.c"), "-o",
                  str(Path(tmp) / "runtime.o")], Path(tmp), "compiling pagedlab's C runtime")
            os.replace(Path(tmp) / "runtime.o", obj)  # whole or absent: another build may be linking it
    return obj


def build(source: str | os.PathLike) -> Build:
    """Compile `source` (a student's llm_memory.c) with the tracked heap and the crash runtime."""
    source = Path(source).resolve()
    if not source.is_file():
        raise FileNotFoundError(f"{source} does not exist")
    cc = find_compiler()
    digest = hashlib.sha256()
    for part in [source.read_bytes(), str(source).encode(), cc.encode(), " ".join(STUDENT_FLAGS).encode()]:
        digest.update(part + b"\0")
    for name in ("hw3.h", "pl_heap.h", "pl_runtime.c"):
        digest.update((INCLUDE / name).read_bytes() + b"\0")
    key = digest.hexdigest()[:20]
    out = cache_dir()
    library, log = out / f"llm_memory-{key}.so", out / f"llm_memory-{key}.warnings"
    if library.is_file() and log.is_file():
        return Build(source, library, log.read_text(), 0.0)
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=out) as tmp:
        tmp = Path(tmp)
        # Compiled from its own folder, so __FILE__ and the debug info say "llm_memory.c".
        warnings = run_compiler([cc, *STUDENT_FLAGS, "-include", "pl_heap.h", "-I", str(INCLUDE), "-c", source.name,
                         "-o", str(tmp / "student.o")], source.parent, f"compiling {source.name}")
        runtime = _runtime_object(cc, out)
        run_compiler([cc, *LINK_FLAGS, str(tmp / "student.o"), str(runtime), "-o", str(tmp / "lib.so"),
              "-ldl", "-lpthread"], tmp, f"linking {source.name}")
        (tmp / "warnings").write_text(warnings)
        os.replace(tmp / "lib.so", library)
        os.replace(tmp / "warnings", log)
    return Build(source, library, warnings, round(time.perf_counter() - began, 3))


def expect_layout(got: list[int]) -> None:
    """`got`: the library's pl_layout(0..3), the sizes and offsets hw3.h gives the structs."""
    want = [ctypes.sizeof(hw3.Sequence), hw3.Sequence.node.offset, ctypes.sizeof(hw3.LLMEngine),
            hw3.LLMEngine.active_seqs.offset]
    if got != want:
        raise RuntimeError(f"hw3.h and pagedlab.hw3 disagree on the struct layout: C {got}, Python {want}")


# The functions the C track offers (CEngine's methods that call into llm_memory.c).
C_API = ("llm_init", "create_sequence", "free_sequence", "fork_sequence", "append_kv", "llm_destroy")
