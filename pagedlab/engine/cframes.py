"""Where in the C file a crash happened: program counters to `llm_memory.c:LINE` (debug info
through addr2line), and a fault's address and access said in the student's words (a read of a
freed block, a write through NULL).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .. import cmem
from .heap import SI_KERNEL


# ---------------------------------------------------------------------------------------------
# From a program counter to llm_memory.c:LINE
# ---------------------------------------------------------------------------------------------
class _DlInfo(ctypes.Structure):
    _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p),
                ("sname", ctypes.c_char_p), ("saddr", ctypes.c_void_p)]


_libdl = ctypes.CDLL(None)


@dataclass(frozen=True)
class CFrame:
    function: str
    file: str      # as in the debug info
    line: int

    def __str__(self) -> str:
        return f"{os.path.basename(self.file)}:{self.line} in {self.function}"


def frames_in(library: Path, base: int, addresses: list[tuple[int, bool]], span: int | None = None) -> list[CFrame]:
    """Source positions of the addresses that fall in `library` (exact PC or return address).
    `span`: the library is loaded in the runner at `base`, `span` bytes long (not here)."""
    offsets = []
    for addr, exact in addresses[:64]:
        if span is not None:
            if base < addr <= base + span:
                offsets.append(addr - base - (0 if exact else 1))
            continue
        info = _DlInfo()
        if not _libdl.dladdr(ctypes.c_void_p(addr), ctypes.byref(info)) or not info.fname:
            continue
        if info.fbase != base:
            continue
        offsets.append(addr - base - (0 if exact else 1))
    if not offsets:
        return []
    tool = shutil.which("addr2line")
    if tool is None:
        return []
    try:
        proc = subprocess.run([tool, "-e", str(library), "-f", "-C", *[hex(o) for o in offsets]],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return []
    lines = proc.stdout.splitlines()
    frames = []
    for function, position in zip(lines[0::2], lines[1::2], strict=False):
        file, _, number = position.partition(" ")[0].rpartition(":")
        if number.isdigit():
            frames.append(CFrame(function, file, int(number)))
    return frames


def _source_line(path: Path, line: int) -> str:
    try:
        return path.read_text(errors="replace").splitlines()[line - 1].strip()
    except (OSError, IndexError):
        return ""


_REG_ERR = 19  # x86-64 Linux: gregs[REG_ERR], the page fault's error code (bit 1: a write)


def freed_read(sig: int, addr: int, regs: list[int]) -> str:
    """A fault inside a block freed earlier in the call (its pages fenced, pl_runtime.c): the
    access itself, at the line that made it, in words; "" for any other fault."""
    if sig != signal.SIGSEGV or not addr:
        return ""
    block = cmem.freed_block_at(addr)
    if block is None:
        return ""
    access = "an access to"
    if sys.platform.startswith("linux") and os.uname().machine == "x86_64" and len(regs) > _REG_ERR:
        access = "a write to" if regs[_REG_ERR] & 2 else "a read of"
    return (f"{access} freed memory (use after free): {addr - block.address} bytes into the "
            f"{block.size}-byte block allocated at {block.where} and freed at {block.freed_at}")


def fault_words(sig: int, code: int, addr: int, regs: list[int]) -> str:
    """What the faulting access was, in words a student can act on."""
    poisoned = {r >> 32 for r in regs}
    if sig in (signal.SIGSEGV, signal.SIGBUS):
        if code == SI_KERNEL or addr == 0 and 0xDDDDDDDD in poisoned:
            if 0xDDDDDDDD in poisoned:
                return ("a pointer read out of freed memory (0xdddd..., the poison of free): use after free")
            if 0xCDCDCDCD in poisoned:
                return "an uninitialised pointer (0xcdcd..., malloc'd memory never written)"
            return "a wild pointer (a non-canonical address)"
        if addr < 4096:
            return (f"a NULL pointer dereference (address {addr:#x}: "
                    + ("NULL itself)" if addr == 0 else f"a field at offset {addr} of a NULL struct pointer)"))
        if addr >> 32 in (0xDDDDDDDD, 0xCDCDCDCD):
            return f"address {addr:#x}: a pointer from freed (0xdd) or uninitialised (0xcd) memory"
        return f"address {addr:#x}, which is not mapped (a stale or wild pointer?)"
    if sig == signal.SIGFPE:
        return "an arithmetic error (integer division or modulo by zero?)"
    if sig == signal.SIGABRT:
        return "abort() was called (a failed assert?)"
    if sig == signal.SIGILL:
        return "an illegal instruction (a function that fell off its end without a return?)"
    return "a fatal signal"
