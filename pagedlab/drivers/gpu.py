"""Task 10 on a real GPU: the student's kernel through CuPy, next to the CPU-executor checks.

Imported by the task process for task10 only when CuPy can launch kernels (or when
PAGEDLAB_GRADE_GPU=1 forces it, to prove the wiring on a machine without a GPU: the check then
fails saying there is no GPU). On a CPU-only grader nothing is registered and the score is the
CPU executor's alone.
"""

from __future__ import annotations

import os

from ..spec.catalog import CheckFailure, Expected, check

FORCE_ENV = "PAGEDLAB_GRADE_GPU"  # "1": always add the GPU check; "0": never; unset: when usable
RULE = "notebook 08, The GPU path: paged_attention_v1 equals dense attention, on the GPU through cupy.RawKernel"


def gpu_usable() -> bool:
    from ..kernels import _cupy_usable

    return _cupy_usable()


def wanted() -> bool:
    forced = os.environ.get(FORCE_ENV, "").strip()
    if forced in ("0", "1"):
        return forced == "1"
    return gpu_usable()


def _cases():
    yield "MHA, head 128, lengths 1, 15, 16, 17, 511", dict(
        seq_lens=[1, 15, 16, 17, 511], num_heads=4, head_size=128, block_size=16, seed=310), None
    yield "GQA 8/2, block size 32, scale 0.05", dict(
        seq_lens=[33, 200, 64], num_heads=8, num_kv_heads=2, head_size=64, block_size=32, seed=311), 0.05
    yield "a 2048-token sequence, head 256, shared blocks", dict(
        seq_lens=[2048, 40], num_heads=2, num_kv_heads=1, head_size=256, block_size=16, shared_blocks=2,
        seed=312), None


def _label(context: str) -> str:
    return f"GPU kernel output ({context})"


NAME = "the same kernel on the GPU (CuPy RawKernel)"


def kernel_on_gpu(run):
    """The driver: every case on the GPU through CuPy (module level: the check child finds it by name)."""
    from ..kernels import OUTPUT_TOL, paged_attention_decode
    from .kernel_batch import make_kernel_batch

    if not gpu_usable():
        raise CheckFailure("no usable GPU: CuPy cannot launch kernels on this grader", rule=RULE,
                           hint=f"unset {FORCE_ENV} on machines without an NVIDIA GPU")
    for context, kwargs, scale in _cases():
        try:
            out = paged_attention_decode(*make_kernel_batch(**kwargs).numpy(), scale=scale, impl=run.impl,
                                         backend="cupy")
            out = out.get() if hasattr(out, "get") else out
        except Exception as exc:  # noqa: BLE001 - compile or launch errors of the student's kernel
            run.see(_label(context), "failed to run", shown=f"the kernel failed to run on the GPU: "
                                                            f"{type(exc).__name__}: {exc}")
            continue
        run.see_array(_label(context), out, tol=OUTPUT_TOL,
                      hint="passes on the CPU executor but not on the GPU: look for a race "
                           "(a missing __syncthreads) or reads past the sequence")


def register() -> None:
    check("task10", NAME, rule=RULE, expected=Expected("gpu_kernel"))(kernel_on_gpu)
