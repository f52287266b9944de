"""compile_ptx: the GPU compile check, through NVRTC from a pip wheel (no GPU or driver needed)."""

from __future__ import annotations

import os

from .errors import CompileError


def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError:
        try:
            from cuda import nvrtc  # older cuda-python layout
        except ImportError:
            raise ImportError(
                "compile_ptx needs NVRTC and its Python binding: pip install 'pagedlab[dev]' "
                "(cuda-bindings and nvidia-cuda-nvrtc)") from None
    return nvrtc


def cuda_include_dirs() -> list[str]:
    """CUDA's own headers from the pip wheels (nvidia-cuda-runtime, nvidia-cuda-cccl), so kernels
    that `#include <cooperative_groups.h>` or `<cuda_fp16.h>` compile under NVRTC without a
    CUDA toolkit. Empty when the wheels are not installed."""
    try:
        import nvidia
    except ImportError:
        return []
    found = []
    for root in getattr(nvidia, "__path__", []):
        for sub in ("cu13/include", "cu13/include/cccl", "cuda_runtime/include", "cuda_cccl/include"):
            path = os.path.join(root, sub)
            if os.path.isdir(path) and path not in found:
                found.append(path)
    return found


def _check(nvrtc, result, what: str):
    err = result[0]
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        _, text = nvrtc.nvrtcGetErrorString(err)
        raise CompileError(f"NVRTC {what} failed: {text.decode() if isinstance(text, bytes) else text}")
    return result[1:] if len(result) > 2 else (result[1] if len(result) == 2 else None)


def compile_ptx(code: str, arch: str = "compute_75", name: str | None = None,
                options=()) -> str:
    """Compile CUDA C to PTX with NVRTC; raise CompileError with NVRTC's log on failure.

    `name` is the file name used in messages (default "kernel.cu"). The exception carries
    NVRTC's whole log: "file(line): error: ..." followed by the source line and a caret.
    """
    if not isinstance(code, str):
        raise TypeError(f"code must be a str, got {type(code).__name__}")
    if not isinstance(arch, str) or not arch.startswith(("compute_", "sm_")):
        raise ValueError(f"arch must look like 'compute_75' or 'sm_80', got {arch!r}")
    nvrtc = _nvrtc()
    filename = (name or "kernel.cu").encode()
    prog = _check(nvrtc, nvrtc.nvrtcCreateProgram(code.encode(), filename, 0, [], []),
                  "nvrtcCreateProgram")
    try:
        opts = [f"--gpu-architecture={arch}".encode(), b"-std=c++17"]
        opts += [f"-I{d}".encode() for d in cuda_include_dirs()]
        opts += [o.encode() if isinstance(o, str) else o for o in options]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            log = _log(nvrtc, prog)
            raise CompileError(f"NVRTC could not compile {filename.decode()} for {arch}:\n"
                               + log)
        size = _check(nvrtc, nvrtc.nvrtcGetPTXSize(prog), "nvrtcGetPTXSize")
        buf = b" " * size
        _check(nvrtc, nvrtc.nvrtcGetPTX(prog, buf), "nvrtcGetPTX")
        return buf.rstrip(b"\0").decode()
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _log(nvrtc, prog) -> str:
    size = _check(nvrtc, nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
    buf = b" " * size
    _check(nvrtc, nvrtc.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
    return buf.rstrip(b"\0").decode(errors="replace").strip()

