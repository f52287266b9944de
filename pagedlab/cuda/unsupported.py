"""CUDA features the CPU executor refuses by name, before the C++ compiler sees the source.

Without this a kernel using them fails with a C++ error about a missing header or an unknown
type, which says nothing about why. Decisions (from a corpus of public CUDA code, tests/cuda_kernels/corpus/):

* Dynamic parallelism (a launch `k<<<...>>>` inside a kernel): refused. Launch the second kernel
  from the host after the first returns.
* Legacy texture references (`texture<T, dim>`, removed in CUDA 12): refused.
* Texture and surface objects (`cudaTextureObject_t`, `tex1D/tex2D/tex1Dfetch` on an object):
  refused. They are created on the host (CuPy's TextureObject) from a CUDA array the CPU
  executor does not have; read through a `const T*` (and `__ldg`) instead, interpolating by hand.
* Tensor-core WMMA (`<mma.h>`) and FP8 (`<cuda_fp8.h>`) are emulated (include/mma.h,
  include/cuda_fp8.h): fragments keep the lane layout CUDA leaves unspecified opaque.
* libcu++'s `cuda::barrier` / `cuda::pipeline` / `cuda::memcpy_async` (`<cuda/barrier>`):
  refused, with the `__syncthreads()` rewrite.
* Inline PTX (`asm("...")`) runs (ptx.py); an instruction outside what it runs is refused by
  name, with the CUDA C that does the same, where a kernel calls it (ptx.py says how).

Decided on what the compiler reads, not on the raw text: when the text mentions a refused
feature at all, the source is preprocessed with the executor's own command line (prelude, macros
such as __CUDA_ARCH__, -D options), so a launch inside a `#define` that device code never
expands, or `#include <cuda/barrier>` under an `#if` not taken, is not refused. Refused headers are
stubs on the include path of that one run (pagedlab/cuda/refused/), so a taken #include shows.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable

from .errors import CompileError
from .signature import strip_comments

# (pattern, what it is, what to do instead)
FEATURES = [
    (r"\b[A-Za-z_][\w:]*\s*(?:<[^<>;]*>\s*)?<<<",
     "a kernel launch inside a kernel (dynamic parallelism)",
     "launch the second kernel from the host after the first one returns"),
    (r"\btexture\s*<",
     "a legacy texture reference (`texture<...>`, removed in CUDA 12)",
     "pass the array as a `const T*` argument and read it directly (or with __ldg)"),
    (r"\bcuda(?:Texture|Surface)Object_t\b",
     "texture/surface objects (cudaTextureObject_t; tex1D, tex2D, tex1Dfetch, surf2Dwrite)",
     "pass the array as a `const T*` argument, read it directly and interpolate by hand"),
    (r"#\s*include\s*[<\"]cuda/(?:barrier|pipeline)[>\"]|\bcuda::(?:barrier|pipeline|memcpy_async)\b",
     "libcu++'s asynchronous barriers and copies (<cuda/barrier>, <cuda/pipeline>: cuda::barrier, "
     "cuda::memcpy_async)",
     "copy with ordinary loads and stores and use __syncthreads(): a block-wide barrier's "
     "arrive_and_wait() is one __syncthreads(), and double buffering needs one after the tile is "
     "loaded and one before it is overwritten"),
]

_ASM = re.compile(r"\b(?:asm|__asm__|__asm)\b\s*(?:\b(?:volatile|__volatile__)\b\s*)?\(\s*((?:\"[^\"]*\"\s*)+)")
# PTX instruction (its first word, options included) -> the CUDA C that does the same
_PTX_INSTEAD = [
    (r"^mov\.b32\s*\{", "unpack the two halves of a 32-bit word with `__low2half(h2)` / "
                          "`__high2half(h2)` on a `__half2` (or std::memcpy the word)"),
    (r"^mov\.b32\s*%\w+\s*,\s*\{", "pack two halves with `__halves2half2(lo, hi)` (or std::memcpy "
                                     "them into a uint32_t)"),
    (r"^mov\.b64", "move 64-bit words with std::memcpy between the two types"),
    (r"^cvt\.\w*\.?f16\.f32", "convert with `__float2half_rn(x)`"),
    (r"^cvt\.f32\.f16", "convert with `__half2float(h)`"),
    (r"^cvt\.\w*\.?bf16x?2?\.f32", "convert with `__float2bfloat16_rn(x)` (two at once: "
                                    "`__float22bfloat162_rn`)"),
    (r"^cvt\.f32\.bf16", "convert with `__bfloat162float(b)`"),
    (r"^cvt\.\w*\.?f16x2\.f32", "convert with `__floats2half2_rn(a, b)`"),
    (r"^cvt", "convert with a C++ cast or the matching intrinsic (__float2half_rn, __float2int_rn)"),
    (r"^(?:ld|st)\.", "load or store through an ordinary pointer (`__ldg` for read-only data)"),
    (r"^(?:mma|ldmatrix|wgmma|cp\.async)", "use shared-memory tiles and ordinary arithmetic (no "
                                            "tensor cores or asynchronous copies on the CPU)"),
]


def _asm_feature(m: re.Match) -> tuple[str, str]:
    ptx = " ".join(re.findall(r'"([^"]*)"', m.group(1))).strip()
    first = ptx.split(";")[0].strip()
    instead = next((text for pat, text in _PTX_INSTEAD if re.search(pat, first)),
                   "write in CUDA C the intrinsic or arithmetic the instruction computes")
    # Reached only for asm statements ptx.py could not read (a template that is not a string
    # literal, e.g. built by a macro): those it reads run or are refused there.
    return (f"inline PTX (`asm(\"{first}\")`, a statement the CPU executor could not read)", instead)


def _candidates(text: str) -> bool:
    return any(re.search(p, text) for p, _, _ in FEATURES)


_ASM_FAILURE = re.compile(r"impossible constraint in .asm.|invalid .asm.|unknown register name|"
                          r"Assembler messages|asm operand|no such instruction")


def asm_refusal(log: str, code: str, filename: str) -> CompileError | None:
    """The refusal of inline PTX, when a failed compile's log says the compiler or the
    assembler choked on an `asm` statement; None when the failure is about something else."""
    if not _ASM_FAILURE.search(log):
        return None
    text = strip_comments(code)
    lines = text.splitlines()
    starts = [0]
    for ln in lines:
        starts.append(starts[-1] + len(ln) + 1)
    found = None
    at = re.search(rf"{re.escape(filename)}:(\d+):\d+: error: [^\n]*asm", log)
    if at:  # the compiler's own line: the asm statement starts there
        m = _ASM.search(text, starts[min(int(at.group(1)), len(lines)) - 1])
        found = m
    if found is None:  # the assembler names the instruction only: find the asm that has it
        ins = re.search(r"no such instruction: .([\w.]+)", log)
        for m in _ASM.finditer(text):
            if ins is None or ins.group(1) in m.group(1):
                found = m
                break
    if found is None:
        return None
    line = bisect.bisect_right(starts, found.start())
    what, instead = _asm_feature(found)
    return CompileError(f"{filename}:{line}: {what} is not supported by pagedlab's CPU executor. "
                        f"Instead, {instead}. (On a GPU, backend='cupy' runs it.)")


_MARKER = re.compile(r'__pagedlab_refused_header__\s*"([^"]+)"')
_LINEMARK = re.compile(r'^#\s*(\d+)\s+"((?:[^"\\]|\\.)*)"((?:\s+\d)*)\s*$')


def user_lines(preprocessed: str, source_name: str) -> list[tuple[int, str]]:
    """(line, text) of each line the preprocessor output attributes to the kernel's own file
    (macro expansions included); a refused header's stub becomes `#include <name>` on the line
    of the #include that pulled it in."""
    out: list[tuple[int, str]] = []
    current, line, user_line = None, 0, 0
    for raw in preprocessed.splitlines():
        mark = _LINEMARK.match(raw)
        if mark:
            flags = mark.group(3).split()
            if current == source_name and "1" in flags:
                user_line = line  # entering a header: the #include is on the kernel's line
            current, line = mark.group(2), int(mark.group(1))
            continue
        if current == source_name:
            out.append((line, raw))
        else:
            stub = _MARKER.search(raw)
            if stub:
                out.append((user_line, f"#include <{stub.group(1)}>"))
        line += 1
    return out


def refuse_unsupported(code: str, filename: str,
                       preprocess: Callable[[], tuple[str, str] | None] | None = None) -> None:
    """Raise CompileError naming the first unsupported feature the source uses, and its line.

    preprocess: returns (preprocessed text, the name its line markers give the kernel's own
    file), or None when the preprocessor failed (the raw text is judged then)."""
    text = strip_comments(code)
    if not _candidates(text):
        return
    found = preprocess() if preprocess is not None else None
    if found is not None:
        lines = user_lines(*found)
    else:
        lines = list(enumerate(text.splitlines(), 1))
    joined = "\n".join(ln for _, ln in lines)
    starts = [0]
    for _, ln in lines:
        starts.append(starts[-1] + len(ln) + 1)

    def line_at(pos: int) -> int:
        return lines[bisect.bisect_right(starts, pos) - 1][0]

    for pattern, what, instead in FEATURES:
        m = re.search(pattern, joined)
        if m:
            _refuse(filename, line_at(m.start()), what, instead)


def _refuse(filename: str, line: int, what: str, instead: str):
    raise CompileError(
        f"{filename}:{line}: {what} is not supported by pagedlab's CPU executor. "
        f"Instead, {instead}. (On a GPU, backend='cupy' runs it.)")
