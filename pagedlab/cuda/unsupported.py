"""CUDA features the CPU executor refuses by name, before the C++ compiler sees the source.

Without this a kernel using them fails with a C++ error about a missing header or an unknown
type, which says nothing about why. Decisions (from a corpus of public CUDA code, tests/cuda_kernels/corpus/):

* Dynamic parallelism (a launch `k<<<...>>>` inside a kernel): refused. Launch the second kernel
  from the host after the first returns.
* Legacy texture references (`texture<T, dim>`, removed in CUDA 12): refused.
* Texture and surface objects (`cudaTextureObject_t`, `tex1D/tex2D/tex1Dfetch` on an object):
  refused. They are created on the host (CuPy's TextureObject) from a CUDA array the CPU
  executor does not have; read through a `const T*` (and `__ldg`) instead, interpolating by hand.
* Tensor-core WMMA (`<mma.h>`, `nvcuda::wmma` fragments): refused. A fragment's layout across a
  warp's lanes is unspecified, so an emulation could not tell right code from code that relies
  on one GPU's layout; write the tile product with shared memory instead.
* FP8 (`<cuda_fp8.h>`, `__nv_fp8_e4m3`/`__nv_fp8_e5m2`): refused; the executor has no FP8
  types or conversions. Store bytes (`unsigned char`) and convert with your own function.
"""

from __future__ import annotations

import re

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
    (r"#\s*include\s*[<\"]mma\.h[>\"]|\bwmma\s*::",
     "tensor-core WMMA fragments (<mma.h>, nvcuda::wmma: load_matrix_sync, mma_sync, "
     "store_matrix_sync)",
     "compute the tile product with shared memory and ordinary arithmetic"),
    (r"#\s*include\s*[<\"]cuda_fp8\.h[>\"]|\b__nv_fp8",
     "FP8 types (<cuda_fp8.h>: __nv_fp8_e4m3, __nv_fp8_e5m2 and their conversions)",
     "store the bytes as unsigned char and convert them with a function of your own"),
]


def refuse_unsupported(code: str, filename: str) -> None:
    """Raise CompileError naming the first unsupported feature the source uses, and its line."""
    text = strip_comments(code)
    for pattern, what, instead in FEATURES:
        m = re.search(pattern, text)
        if m:
            line = text.count("\n", 0, m.start()) + 1
            raise CompileError(
                f"{filename}:{line}: {what} is not supported by pagedlab's CPU executor. "
                f"Instead, {instead}. (On a GPU, backend='cupy' runs it.)")
