"""The C track's second opinion: run a llm_memory.c on the real allocator under Valgrind or ASan.

`pagedlab.engine.ctrack` routes the student's malloc/free through the tracked heap. This module builds
the same file *without* that (plain libc malloc, exactly the handout's build) into a small
program that replays a session of API calls, runs it under Valgrind (`--leak-check=full`) or
AddressSanitizer, and reads back what the real tools say: how many allocations and frees, how
many bytes, which blocks leaked and where they were allocated. `compare` replays the same session
through ctrack, so a course (and pagedlab's tests) can see that both ledgers agree.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .. import cmem
from ..doctor_row import OK, OPTIONAL, Row
from . import ctrack

# A session: (op, a, b) steps. ("init", blocks, 0) must come first; "destroy" is optional (left
# out, everything still allocated is a leak, as at the end of a C program).
OPS = ("init", "create", "fork", "append", "free", "destroy")
DEMO_SESSION = [("init", 24, 0), ("create", 1, 40), ("create", 2, 250), ("fork", 1, 3), ("append", 3, 17),
                ("append", 2, 9), ("fork", 2, 4), ("append", 4, 11), ("free", 1, 0), ("create", 5, 16),
                ("append", 5, 1), ("destroy", 0, 0)]


@dataclass
class HeapReport:
    tool: str
    allocs: int | None = None          # malloc/calloc/realloc calls (None: the tool does not say)
    frees: int | None = None
    bytes_allocated: int | None = None
    leaks: list = field(default_factory=list)  # sorted (bytes, "llm_memory.c:LINE") per leaked block
    output: str = ""

    @property
    def lost_bytes(self) -> int:
        return sum(size for size, _ in self.leaks)


def valgrind() -> str | None:
    return shutil.which("valgrind")


def asan_available() -> bool:
    try:
        cc = ctrack.find_compiler()
    except ctrack.CCompileError:
        return False
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "probe.c"
        src.write_text("#include <stdlib.h>\nint main(void) { free(malloc(1)); return 0; }\n")
        try:
            built = subprocess.run([cc, "-fsanitize=address", str(src), "-o", str(Path(tmp) / "probe")],
                                   capture_output=True, timeout=60)
            if built.returncode != 0:
                return False
            return subprocess.run([str(Path(tmp) / "probe")], capture_output=True, timeout=60).returncode == 0
        except (OSError, subprocess.SubprocessError):
            return False


def _check_session(session) -> list[tuple[str, int, int]]:
    steps = [(str(op), int(a), int(b)) for op, a, b in session]
    if not steps or steps[0][0] != "init":
        raise ValueError("a session starts with ('init', blocks, 0)")
    bad = [op for op, _, _ in steps if op not in OPS]
    if bad:
        raise ValueError(f"unknown session step {bad[0]!r}; allowed: {', '.join(OPS)}")
    return steps


def _driver(steps) -> str:
    """A C main() replaying `steps` with a static pool and no heap use of its own."""
    blocks = steps[0][1]
    calls = []
    for op, a, b in steps[1:]:
        calls.append({"create": f"create_sequence(e, {a}, {b});", "fork": f"fork_sequence(e, {a}, {b});",
                      "append": f"append_kv(e, {a}, {b});", "free": f"free_sequence(e, {a});",
                      "destroy": "llm_destroy(e);", "init": ""}[op])
    calls.append("e = 0;  /* no live pointer left: what was not freed is lost, not reachable */")
    body = "\n    ".join(calls)
    return (f'#include "hw3.h"\nstatic int pool[{max(blocks, 1)} * KV_PER_BLOCK];\n'
            f"int main(void)\n{{\n    LLMEngine *volatile e = llm_init(pool, sizeof pool);\n    if (!e) return 2;\n"
            f"    {body}\n    return 0;\n}}\n")


def _build(source: Path, steps, tmp: Path, extra: list[str]) -> Path:
    cc = ctrack.find_compiler()
    (tmp / "driver.c").write_text(_driver(steps))
    exe = tmp / "session"
    proc = subprocess.run([cc, "-std=c11", "-g", "-O0", *extra, "-I", str(ctrack.INCLUDE), source.name,
                           str(tmp / "driver.c"), "-o", str(exe)], cwd=source.parent, capture_output=True,
                          text=True, timeout=120)
    if proc.returncode != 0:
        raise ctrack.CCompileError(f"building the session program failed:\n{proc.stderr.strip()}")
    return exe


# "64 bytes in 1 blocks are indirectly lost", "1,336 (40 direct, 1,296 indirect) bytes in 1 blocks
# are definitely lost": each record counts its own blocks (the direct bytes).
_LOST = re.compile(r"(?:([\d,]+)|[\d,]+ \(([\d,]+) direct, [\d,]+ indirect\)) bytes in ([\d,]+) blocks "
                   r"are (?:definitely|indirectly) lost")
_USAGE = re.compile(r"total heap usage: ([\d,]+) allocs, ([\d,]+) frees, ([\d,]+) bytes allocated")


def _num(text: str) -> int:
    return int(text.replace(",", ""))


def _first_line(stack: str, name: str) -> str:
    found = re.search(rf"\b({re.escape(name)}):(\d+)", stack)
    return f"{found.group(1)}:{found.group(2)}" if found else "?"


def run_valgrind(source, session=DEMO_SESSION) -> HeapReport:
    """The session on the real allocator, under `valgrind --leak-check=full`."""
    tool = valgrind()
    if tool is None:
        raise FileNotFoundError("valgrind is not installed (Debian/Ubuntu: apt-get install valgrind)")
    source, steps = Path(source).resolve(), _check_session(session)
    with tempfile.TemporaryDirectory() as tmp:
        exe = _build(source, steps, Path(tmp), [])
        proc = subprocess.run([tool, "--leak-check=full", "--show-leak-kinds=definite,indirect", "--num-callers=8",
                               str(exe)], capture_output=True, text=True, timeout=600)
    text = proc.stderr
    report = HeapReport("valgrind", output=text)
    usage = _USAGE.search(text)
    if usage:
        report.allocs, report.frees, report.bytes_allocated = (_num(g) for g in usage.groups())
    for record in re.split(r"\n==\d+== \n", text):
        lost = _LOST.search(record)
        if lost:
            size, count = _num(lost.group(1) or lost.group(2)), _num(lost.group(3))
            where = _first_line(record, source.name)
            report.leaks += [(size // count, where)] * count
    report.leaks.sort()
    return report


def run_asan(source, session=DEMO_SESSION) -> HeapReport:
    """The session on the real allocator, built with -fsanitize=address (LeakSanitizer's report)."""
    source, steps = Path(source).resolve(), _check_session(session)
    with tempfile.TemporaryDirectory() as tmp:
        exe = _build(source, steps, Path(tmp), ["-fsanitize=address", "-fno-omit-frame-pointer"])
        env = {**os.environ, "ASAN_OPTIONS": "detect_leaks=1:exitcode=0", "LSAN_OPTIONS": "exitcode=0"}
        proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=600, env=env)
    text = proc.stderr
    report = HeapReport("asan", output=text)
    for size, count, stack in re.findall(r"Direct leak of (\d+) byte\(s\) in (\d+) object\(s\) allocated from:\n"
                                         r"((?:\s+#\d+ .*\n?)+)", text):
        report.leaks += [(int(size) // int(count), _first_line(stack, source.name))] * int(count)
    report.leaks.sort()
    return report


def run_tracked(source, session=DEMO_SESSION) -> HeapReport:
    """The same session through pagedlab.engine.ctrack: cmem's ledger of the C code's heap traffic."""
    from .pool import Pool

    source, steps = Path(source).resolve(), _check_session(session)
    mm = ctrack.load(source, show_warnings=False)
    pool = Pool(steps[0][1] * 64)
    before, bytes_before = cmem.snapshot(), ctrack.bytes_allocated()
    engine = mm.llm_init(pool.addr, pool.size)
    for op, a, b in steps[1:]:
        if op == "create":
            mm.create_sequence(engine, a, b)
        elif op == "fork":
            mm.fork_sequence(engine, a, b)
        elif op == "append":
            mm.append_kv(engine, a, b)
        elif op == "free":
            mm.free_sequence(engine, a)
        elif op == "destroy":
            mm.llm_destroy(engine)
    changes = cmem.changes_since(before)
    leaks = sorted((a.size, a.where.split(" in ")[0]) for a in changes.allocated)
    report = HeapReport("pagedlab", changes.mallocs, changes.frees, ctrack.bytes_allocated() - bytes_before, leaks,
                        cmem.leak_report(before))
    for block in changes.allocated:  # leave the process's heap as it was
        cmem.free(block.address)
    return report


def doctor_rows() -> list:
    """`pagedlab doctor` rows for the C track: the C compiler, Valgrind, ASan (all optional)."""
    rows = []
    try:
        cc = ctrack.find_compiler()
        rows.append(Row("C compiler (C track: llm_memory.c)", OK, cc))
    except ctrack.CCompileError:
        rows.append(Row("C compiler (C track: llm_memory.c)", OPTIONAL, "none on PATH",
                        "only for the C track: apt-get install gcc (or set CC)"))
    tool = valgrind()
    rows.append(Row("Valgrind (C track cross-check)", OK if tool else OPTIONAL, tool or "not installed",
                    "" if tool else "optional: apt-get install valgrind"))
    asan = asan_available()
    rows.append(Row("AddressSanitizer (C track cross-check)", OK if asan else OPTIONAL,
                    "gcc -fsanitize=address works" if asan else "unavailable",
                    "" if asan else "optional: a gcc/clang with libasan"))
    return rows
