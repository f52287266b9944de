"""The expected records of the numeric checks (Tasks 9, 10, 14), computed on the judge side.

A check registers `expected=Expected(name, data)` (`pagedlab.checks.framework`): `name` is a
function here and `data` the check's public scenario (its cases). `framework.expected_stream`
calls it with the run in the judge's process. The check child never imports this module, so a
submission that replays a check there has no expected values to copy.
"""

from __future__ import annotations

import math

import numpy as np


def attention(cases):
    """Task 9: float64 dense attention of every case's batch."""
    from ..checks.paged_attention import TOL, _attention_label, build_batch

    def expected(run):
        return [(_attention_label(context), build_batch(kwargs).expected(scale).numpy(),
                 TOL[str(kwargs.get("dtype", "torch.float32"))]) for context, kwargs, scale in cases]
    return expected


def kernel_outputs(cases, schedules=None):
    """Task 10: float64 dense attention for every case, once per schedule label."""
    from ..checks.paged_attention_cu import TOL, check_schedules, kernel_label
    from ..kernel_batch import make_kernel_batch

    def expected(run):
        found = []
        for context, kwargs, scale in cases(run) if callable(cases) else cases:
            want = make_kernel_batch(**kwargs).expected(scale)
            found += [(kernel_label(context, s), want, TOL) for s in schedules or check_schedules()]
        return found
    return expected


def v2_outputs(cases, schedules=None):
    """Task 14: the v2 kernels' output, as Task 10's, for every case and schedule."""
    from ..checks.paged_attention_cu import check_schedules
    from ..checks.paged_attention_v2_cu import TOL, _label
    from ..kernel_batch import make_kernel_batch

    def expected(run):
        found = []
        for context, kwargs, scale, _ in cases:
            want = make_kernel_batch(**kwargs).expected(scale)
            found += [(_label(context, s), want, TOL) for s in schedules or check_schedules()]
        return found
    return expected


def v2_temporaries():
    """Task 14's temporaries: each partition's max logit, exp-sum and unnormalised output."""
    from ..checks import paged_attention_v2_cu as v2
    from ..kernel_batch import make_kernel_batch

    def expected(run):
        batch = make_kernel_batch(**v2.TEMP_BATCH)
        found = [(v2._label(v2.TEMP_CONTEXT, v2.TEMP_SCHEDULE), batch.expected(), v2.TOL)]
        head_size = batch.q.shape[-1]
        scale = 1.0 / math.sqrt(head_size)
        for s, n in enumerate(v2.TEMP_LENS):
            k, v = batch.keys[s].astype(np.float64), batch.values[s].astype(np.float64)
            parts = -(-n // v2.TEMP_P)
            m = np.zeros((2, parts))
            sums = np.zeros((2, parts))
            outs = np.zeros((2, parts, head_size))
            for h in range(2):
                q = batch.q[s, h].astype(np.float64)
                for p in range(parts):
                    tokens = slice(p * v2.TEMP_P, min((p + 1) * v2.TEMP_P, n))
                    logits = (k[tokens, 0] @ q) * scale   # one kv head serves both query heads
                    top = logits.max()
                    e = np.exp(logits - top)
                    m[h, p], sums[h, p] = float(top), float(e.sum())
                    outs[h, p] = e @ v[tokens, 0]
            labels = v2._temp_labels(s)
            found += [(labels["max_logits"], m, v2.TOL), (labels["exp_sums"], sums, v2.TOL),
                      (labels["tmp_out"], outs, v2.TOL)]
        return found
    return expected


def gpu_kernel():
    """The GPU feedback check: the same cases as its driver, float64 dense attention."""
    from ..grading import gpu_checks
    from ..kernel_batch import make_kernel_batch
    from ..kernels import OUTPUT_TOL

    def expected(run):
        return [(gpu_checks._label(c), make_kernel_batch(**kw).expected(scale), OUTPUT_TOL)
                for c, kw, scale in gpu_checks._cases()]
    return expected
