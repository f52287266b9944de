"""The expected records of the numeric checks (Tasks 9, 10, 14), computed on the judge side.

A check registers `expected=Expected(name, data)` (`pagedlab.spec.catalog`): `name` is a
function here and `data` the check's public scenario (its cases). `expected_stream` below
calls it with the run in the judge's process. The check child never imports this module, so a
submission that replays a check there has no expected values to copy.
"""

from __future__ import annotations

import math

import numpy as np

from .attention import kernel_expected


def outputs(expected, run) -> list:
    """[(label, array, tol[, hints])] of a check's `expected`: a `catalog.Expected` names a
    function here; anything else (a test's stand-in checks) is called with the run."""
    from ...spec.catalog import Expected

    if isinstance(expected, Expected):
        return globals()[expected.function](*expected.args)(run)
    return expected(run)


def expected_stream(c, seed: int = 0, scenario=None):
    """For checks with trusted numeric expectations: the record a correct implementation makes."""
    from ...drivers.record import Run
    from ...spec.catalog import scenario_data

    if c.scenario is not None:
        run = Run(None, 0, scenario=scenario_data(c, seed) if scenario is None else scenario)
    else:
        run = Run(None, seed)
    for what, array, tol, *when in outputs(c.expected, run):
        # a fourth item: this output's own conditional hints (what a known bug computes there)
        run.see_array(what, array, tol=tol, rule=c.rule, hint=c.hint, when=c.when + tuple(*when))
    return run.stream


def attention(cases):
    """Task 9: float64 dense attention of every case's batch, with the padding hint's trigger."""
    from ...drivers.paged_attention import _attention_label, attention_tol, build_batch
    from .reference import paged_expected  # torch: only Task 9's judging pays its import

    def expected(run):
        found = []
        for context, kwargs, scale in cases:
            batch, tol = build_batch(kwargs), attention_tol(kwargs)
            found.append((_attention_label(context), paged_expected(batch, scale).numpy(), tol,
                          padding_hints(batch, scale, tol)))
        return found
    return expected


# What known bugs compute, for the hints shown only when a submission's output matches one. They
# are near-answers (with nothing to drop they are the answer), so they live here, judge side.
def padded_attention(batch, scale, width: int):
    """What a softmax computes when `width - seq_len` padding positions join it with a logit of 0
    (and a value of 0): the output of padding "masked" with 0 instead of -inf."""
    import numpy as np

    from .attention import _sequence_tokens

    rows = []
    for s in range(len(batch.seq_lens)):
        q = batch.q[s].double().numpy()
        k, v = (t.astype(np.float64) for t in _sequence_tokens(batch, s))
        group = q.shape[0] // k.shape[1]
        k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
        step = float(scale) if scale is not None else 1.0 / np.sqrt(q.shape[-1])
        logits = np.einsum("hd,nhd->hn", q, k) * step
        pad = np.zeros((logits.shape[0], max(width - logits.shape[1], 0)))
        top = np.maximum(logits.max(1, keepdims=True), 0 if pad.size else -np.inf)
        weights, rest = np.exp(logits - top), np.exp(pad - top)
        rows.append(np.einsum("hn,nhd->hd", weights, v) / (weights.sum(1) + rest.sum(1))[:, None])
    return np.stack(rows)


def padding_hints(batch, scale, tol) -> list:
    """The padding hint, shown when the output is what a 0-masked padding computes (padded to
    the block table's width, or to the batch's longest sequence)."""
    widths = {batch.block_tables.shape[1] * batch.block_size, int(batch.seq_lens.max())}
    from ...drivers.hints import When
    from ...drivers.paged_attention import PADDING_HINT

    return [When("close", PADDING_HINT, {"array": padded_attention(batch, scale, w), "tol": max(tol, 1e-6) * 10})
            for w in sorted(widths)]


def _partition_ends(n: int, partition_size: int, bug: str) -> list[tuple[int, int]]:
    """The token range [start, end) each partition of an `n`-token sequence covers under `bug`:
    one token short (`end = min(start + P - 1, n)`: full partitions lose their last token;
    `end = min(start + P, n) - 1`: every partition does) or the sequence's last token dropped
    (`end = min(start + P, n - 1)`)."""
    ranges = []
    for start in range(0, n, partition_size):
        end = {"short_full": min(start + partition_size - 1, n), "short_all": min(start + partition_size, n) - 1,
               "last_token": min(start + partition_size, n - 1)}[bug]
        ranges.append((start, max(end, start)))
    return ranges


def _kept_attention(logits, v, ranges):
    """Attention over the tokens the partitions keep, merged as the v2 reduce merges them: an
    empty partition weighs nothing, and a sequence with no token left is 0 / 0 (NaN)."""
    keep = np.zeros(logits.shape[1], bool)
    for start, end in ranges:
        keep[start:end] = True
    if not keep.any():
        return np.full((logits.shape[0], v.shape[-1]), np.nan)
    e = np.exp(logits[:, keep] - logits[:, keep].max(1, keepdims=True))
    return np.einsum("hn,nhd->hd", e, v[keep]) / e.sum(1)[:, None]


SHORT_BUGS = ("short_full", "short_all", "last_token")


def v2_bug_outputs(batch, scale, partition_size: int) -> dict:
    """What known bugs of a split-K kernel compute, in float64: the reduce without the
    exp(m_p - M) rescaling, the last partition of every longer sequence dropped, and partition
    ends one token short (`_partition_ends`)."""
    from .attention import _sequence_tokens

    found = {"rescale": [], "dropped": [], **{bug: [] for bug in SHORT_BUGS}}
    for s in range(len(batch.seq_lens)):
        q = np.asarray(batch.q[s], np.float64)
        k, v = (t.astype(np.float64) for t in _sequence_tokens(batch, s))
        group = q.shape[0] // k.shape[1]
        k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
        step = float(scale) if scale is not None else 1.0 / math.sqrt(q.shape[-1])
        logits = np.einsum("hd,nhd->hn", q, k) * step
        sums, outs = 0.0, 0.0
        for first in range(0, logits.shape[1], partition_size):
            part = logits[:, first:first + partition_size]
            e = np.exp(part - part.max(1, keepdims=True))
            sums = sums + e.sum(1)
            outs = outs + np.einsum("hn,nhd->hd", e, v[first:first + partition_size])
        found["rescale"].append(outs / sums[:, None])
        n = logits.shape[1]
        cut = (n - 1) // partition_size * partition_size if n > partition_size else n
        e = np.exp(logits[:, :cut] - logits[:, :cut].max(1, keepdims=True))
        found["dropped"].append(np.einsum("hn,nhd->hd", e, v[:cut]) / e.sum(1)[:, None])
        for bug in SHORT_BUGS:
            found[bug].append(_kept_attention(logits, v, _partition_ends(n, partition_size, bug)))
    return {name: np.stack(rows) for name, rows in found.items()}


def v2_bug_hints(batch, scale, partition_size: int) -> list:
    from ...drivers import paged_attention_v2_cu as v2
    from ...drivers.hints import When

    bugs = v2_bug_outputs(batch, scale, partition_size)
    texts = {"rescale": v2.RESCALE_HINT, "dropped": v2.DROPPED_HINT, "short_full": v2.SHORT_HINT,
             "short_all": v2.SHORT_HINT, "last_token": v2.LAST_TOKEN_HINT}
    return [When("close", texts[bug], {"array": array, "tol": 10 * v2.TOL}) for bug, array in bugs.items()]


def kernel_outputs(cases, schedules=None):
    """Task 10: float64 dense attention for every case, once per schedule label."""
    from ...drivers.kernel_batch import make_kernel_batch
    from ...drivers.paged_attention_cu import check_schedules, kernel_label, output_tol

    def expected(run):
        found = []
        for context, kwargs, scale in cases(run) if callable(cases) else cases:
            want = kernel_expected(make_kernel_batch(**kwargs), scale)
            found += [(kernel_label(context, s), want, output_tol(kwargs)) for s in schedules or check_schedules()]
        return found
    return expected


def v2_outputs(cases, schedules=None):
    """Task 14: the v2 kernels' output, as Task 10's (the same tolerance), for every case and schedule."""
    from ...drivers.kernel_batch import make_kernel_batch
    from ...drivers.paged_attention_cu import check_schedules, output_tol
    from ...drivers.paged_attention_v2_cu import _label

    def expected(run):
        found = []
        for context, kwargs, scale, partition_size in cases:
            batch = make_kernel_batch(**kwargs)
            want, bugs = kernel_expected(batch, scale), v2_bug_hints(batch, scale, partition_size)
            found += [(_label(context, s), want, output_tol(kwargs), bugs) for s in schedules or check_schedules()]
        return found
    return expected


def v2_temporaries():
    """Task 14's temporaries: each partition's max logit, exp-sum and unnormalised output."""
    from ...drivers import paged_attention_v2_cu as v2
    from ...drivers.kernel_batch import make_kernel_batch
    from .attention import _sequence_tokens

    def expected(run):
        batch = make_kernel_batch(**v2.TEMP_BATCH)
        found = [(v2._label(v2.TEMP_CONTEXT, v2.TEMP_SCHEDULE), kernel_expected(batch), v2.TOL,
                  v2_bug_hints(batch, None, v2.TEMP_P))]
        head_size = batch.q.shape[-1]
        scale = 1.0 / math.sqrt(head_size)
        for s, n in enumerate(v2.TEMP_LENS):
            k, v = (t.astype(np.float64) for t in _sequence_tokens(batch, s))
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
    from ...drivers import gpu
    from ...drivers.kernel_batch import make_kernel_batch
    from ...kernels import OUTPUT_TOL

    def expected(run):
        return [(gpu._label(c), kernel_expected(make_kernel_batch(**kw), scale), OUTPUT_TOL)
                for c, kw, scale in gpu._cases()]
    return expected
