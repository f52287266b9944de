"""Graded checks for Part C: the CUDA kernel in `paged_attention.cu` (Task 10).

The student's kernel text runs unchanged on pagedlab's CPU executor, under several thread
schedules (a missing barrier often hides under one order and shows under another). The output
is filled with NaN before every launch and unused cache slots are NaN too, so an element the
kernel never writes, or a slot it should not read, cannot pass. The driver records every output
in full; the judge compares it with dense attention in float64 (`pagedlab.drivers.kernel_batch`),
computed in its own process. Inputs and answer are numpy: neither process imports torch.
float32 kernels must agree within 2e-5 relative error.
"""

from __future__ import annotations

import hashlib
import os

import numpy as np

from ..kernels import KERNEL_FILE, OUTPUT_TOL, decode_on_executor
from ..spec.catalog import Expected, check
from .hints import When
from .kernel_batch import make_kernel_batch

RULE = "notebook 08, Task 10 · the kernel: paged_attention_v1 equals dense attention over each sequence's tokens"
TOL = OUTPUT_TOL


SIGNED_LOGITS_SCALE = 20.0  # the tolerance factor of a case whose logits all have one sign (105-200 in size)


def output_tol(batch: dict) -> float:
    """The relative tolerance of one case's output: `TOL`, times the case's `q_scale`. A float32
    logit is rounded in proportion to its size and a softmax passes a logit error d on as an
    output error of about d, so logits scaled 40-60x need a tolerance as much wider (the reference
    reached up to 3.3e-5 against 2e-5 on about one drawn batch in a hundred); a softmax that overflows still gives
    inf or NaN, which no tolerance passes. Logits all of one sign (`logit_sign`) are 105-200 in
    size: 20 times the base tolerance (the reference stays within a tenth of that)."""
    return TOL * max(1.0, float(batch.get("q_scale", 1)), SIGNED_LOGITS_SCALE * bool(batch.get("logit_sign")))
LAUNCH_TIMEOUT = 20.0  # seconds per launch (a correct one takes well under 1 s)
TIMEOUT_ENV = "PAGEDLAB_CHECK_LAUNCH_TIMEOUT"  # overrides LAUNCH_TIMEOUT in the checks child (tests)


def launch_timeout() -> float:
    """Seconds per launch: LAUNCH_TIMEOUT, or the environment's override (which, unlike a
    patched constant, reaches the child process the checks run in)."""
    return float(os.environ.get(TIMEOUT_ENV) or LAUNCH_TIMEOUT)
SANITIZER = "race,memcheck,init"  # on for the first schedule of every case
_HUNG: dict[str, str] = {}  # kernel source hash -> timeout message: don't wait for it twice


def check_schedules() -> tuple[str, ...]:
    """The executor schedules every kernel check runs under: all of them (round-robin,
    warp 0 first, reversed, seeded random). Each launch takes a fraction of a second."""
    from .. import cuda

    return tuple(cuda.SCHEDULES)


def kernel_label(context: str, schedule: str) -> str:
    return f"kernel output ({context}, schedule {schedule})"


def untouched_stub(source: str, filename: str) -> None:
    """Raise NotImplementedError, as an untouched Python task does, when a part of the kernel is
    still the exercise's stub (its prompt, note and `return;`): the kernel returns there, and
    "every element still holds the NaN" would describe the stub, not a bug."""
    import re

    from ..assign import KERNEL_STUB_NOTE

    found = re.search(r"// YOUR CODE HERE \(([^\n]*)\)\n[ \t]*" + re.escape(KERNEL_STUB_NOTE) + r"\n[ \t]*return;",
                      source)
    if found:
        line = source[:found.start()].count("\n") + 1
        raise NotImplementedError(f"{found.group(1)} ({filename}, line {line}, still the exercise's stub: "
                                  "the kernel returns there)")


def drive_kernel(run, cases, schedules=None) -> None:
    """Launch the kernel of the run's implementation on every case under every schedule and
    record each output in full (float32); the judge compares them with float64 dense attention."""
    from .. import cuda
    from ..cuda import KernelTimeout

    untouched_stub(run.kernel_source(KERNEL_FILE), KERNEL_FILE)
    source = hashlib.sha256(run.kernel_source(KERNEL_FILE).encode()).hexdigest()
    first_schedule = (schedules or check_schedules())[0]
    for context, kwargs, scale in cases:
        batch = make_kernel_batch(**kwargs)
        args = batch.numpy()
        for schedule in schedules or check_schedules():
            label = kernel_label(context, schedule)
            if source in _HUNG:
                run.see(label, "not launched", shown=f"not launched: the kernel hung earlier ({_HUNG[source]})")
                continue
            # The sanitizer's report does not depend on the schedule: one checked launch per case
            # finds races, out-of-bounds and uninitialised reads, with both source lines.
            checking = cuda.checking(SANITIZER if schedule == first_schedule else None)
            try:
                with checking, cuda.fibers_only():  # a grade never depends on collapse.py
                    out = decode_on_executor(*args, scale=scale, impl=run.impl, schedule=schedule,
                                             timeout=launch_timeout())
            except Exception as exc:  # noqa: BLE001 - compile errors, barrier errors, crashes
                text = f"{type(exc).__name__}: {exc}" + unwritten_logit(exc, kwargs["seq_lens"])
                if isinstance(exc, KernelTimeout):
                    _HUNG[source] = text.splitlines()[0]
                run.see(label, "failed to run", shown=f"the kernel failed to run: {text}")
                continue
            run.see_array(label, out, tol=TOL, hint=HINT)


def unwritten_logit(exc, seq_lens) -> str:
    """For an unwritten `logits[t]`: t against the seq_len of the block's sequence (blockIdx.y),
    the bound the kernel should have kept to, in the notebook's terms."""
    from ..cuda import UninitializedReadError

    if not isinstance(exc, UninitializedReadError) or exc.array != "logits" or not exc.block:
        return ""
    seq, t = exc.block[1], exc.index
    n = seq_lens[seq]
    if t < n:  # a score not yet written: the sanitizer's barrier advice stands
        return ""
    return (f"\nIn this case: block ({exc.block[0]}, {seq}) is query head {exc.block[0]} of sequence {seq}, "
            f"whose seq_len is {n}: logits[t] holds a score only for t < seq_len, and the read was at "
            f"t = {t} >= seq_len = {n}. Bound the loop by t < seq_len.")


def expected_outputs(cases, schedules=None) -> Expected:
    """The trusted side: float64 dense attention for every case, once per schedule label
    (computed by the judge, `pagedlab.grader.trusted.expectations`)."""
    return Expected("kernel_outputs", (cases, schedules))


HINT = ""  # every hint of the output checks is conditional (WHEN): none under a race report or a hang
WHEN = (
    When("unwritten", "some of out still holds the NaN it was filled with: every (head, sequence) block writes "
                      "its row of head_size values"),
    When("computed_nan", "NaN computed: something never written was read: a cache slot outside the sequence "
                         "(unused slots hold NaN) or shared memory read before a __syncthreads()"),
)


def _batch(lens, **kwargs):
    return {"seq_lens": list(lens), **kwargs}


HEAD_SIZES = [(f"2 heads, head_size {hs}, block_size 16", _batch([1, 15, 16, 17], num_heads=2, head_size=hs,
                                                                 block_size=16, seed=100 + i), None)
              for i, hs in enumerate((32, 64, 80, 96, 112, 128, 256))]
GQA = [(f"{h} query heads over {kv} kv heads, head_size {hs}",
        _batch([37, 150], num_heads=h, num_kv_heads=kv, head_size=hs, block_size=16, seed=110 + h), None)
       for h, kv, hs in ((8, 2, 64), (12, 4, 32), (16, 1, 128))]
BLOCK_SIZES = [(f"block_size {bs}, 4 query heads over 2 kv heads",
                _batch([bs - 1, bs, bs + 1, 511], num_heads=4, num_kv_heads=2, head_size=64, block_size=bs,
                       seed=120 + bs), None) for bs in (8, 16, 32)]
LONG = [("lengths 2048 and 1, head_size 256, block_size 16",
         _batch([2048, 1], num_heads=2, num_kv_heads=1, head_size=256, block_size=16, seed=130), None)]
SHARED = [("first 3 blocks shared with sequence 0",
           _batch([80, 96, 70, 33], num_heads=4, num_kv_heads=4, head_size=64, block_size=16, shared_blocks=3,
                  seed=140), None),
          ("scale 0.05", _batch([50, 200], num_heads=4, num_kv_heads=2, head_size=96, block_size=16, seed=141), 0.05)]


def _register(name: str, cases) -> None:
    check("task10", name, rule=RULE, hint=HINT, when=WHEN, expected=expected_outputs(cases), cases=cases)(drive_kernel)


_register("MHA, head sizes 32 to 256, lengths 1, bs-1, bs, bs+1", HEAD_SIZES)
_register("grouped-query attention: 8/2, 12/4, 16/1 heads", GQA)
_register("block sizes 8, 16, 32 with lengths bs-1, bs, bs+1 and 511", BLOCK_SIZES)
_register("a 2048-token sequence with head_size 256, next to a 1-token one", LONG)
_register("physical blocks shared between sequences (after a fork) and a custom scale", SHARED)


def refresh() -> None:
    """Task 10 on a real GPU, when CuPy can launch kernels there (or PAGEDLAB_GRADE_GPU=1): asked
    again each time the grader lists the checks (the child runs the grader's plan, whatever its
    own machine says)."""
    from ..spec import catalog
    from . import gpu

    if gpu.wanted():
        gpu.register()
    else:
        catalog.unregister("task10", gpu.NAME)


# ---------------------------------------------------------------------------------------------
# Feedback only (the manifest's `feedback`): how the work is spread over the threads
# ---------------------------------------------------------------------------------------------
SPREAD_CHECK = "how the work is spread over the threads of each warp (feedback only)"
R_SPREAD = ("notebook 08, Task 10 · the kernel: the 128 threads of a block share the work (tokens for the "
            "logits, dimensions for the output), so each warp-level load serves many lanes at once")
MIN_LANES = 8.0  # of 32: the reference averages close to 32; a kernel one thread runs serially, 1


def _spread(profile) -> tuple[float, int, int]:
    """(active lanes per warp-level global load, lane accesses, requests) of one launch's profile."""
    loads = [r for r in profile.rows if r.space == "global" and r.access == "load"]
    lanes, requests = sum(r.lanes for r in loads), sum(r.requests for r in loads)
    return (lanes / requests if requests else 0.0), lanes, requests


@check("task10", SPREAD_CHECK, rule=R_SPREAD)
def _work_spread(run):
    """A kernel whose thread 0 computes everything gives the right numbers, so the output checks
    pass it; on a GPU it runs one lane of 128. The executor's access profile counts, per
    warp-level load, how many lanes took part: that is shown, and a serial kernel fails here
    (as feedback: the check earns and costs nothing)."""
    from .. import cuda
    from .. import kernels as K
    from .record import expect

    untouched_stub(run.kernel_source(KERNEL_FILE), KERNEL_FILE)
    source = hashlib.sha256(run.kernel_source(KERNEL_FILE).encode()).hexdigest()
    if source in _HUNG:  # a hang costs its timeout once per task, not once more here
        expect(False, "global loads: lanes of a warp active per warp-level request", rule=R_SPREAD,
               actual=f"not launched: the kernel hung earlier ({_HUNG[source]})")
    batch = make_kernel_batch([200, 37], num_heads=4, num_kv_heads=2, head_size=64, block_size=16, seed=1010)
    arrays = batch.numpy()
    launch = K.validate(*arrays, scale=None, max_dynamic_shared=cuda.MAX_DYNAMIC_SHARED_MEMORY)
    out = np.full(arrays[0].shape, K.UNWRITTEN_BITS, dtype=np.uint32).view(np.float32)
    kernel = K._kernel("cpu", run.kernel_source(KERNEL_FILE))
    profile = kernel.profile(launch.grid, (K.NUM_THREADS,), (out, *arrays, *launch.scalars),
                             shared_mem=launch.shared_mem, timeout=launch_timeout())
    lanes_per_load, lanes, requests = _spread(profile)
    expect(lanes_per_load >= MIN_LANES, "global loads: lanes of a warp active per warp-level request",
           rule=R_SPREAD, expected=f"at least {MIN_LANES:g} of 32 on average (the reference: close to 32)",
           actual=f"{lanes_per_load:.1f} of 32 ({lanes} lane loads in {requests} warp-level requests): "
                  "most loads are made by a few lanes while the others wait. Give thread tid the tokens "
                  "t = tid, tid + NUM_THREADS, ... and the dimensions d = tid, tid + NUM_THREADS, ...",
           hint="a GPU runs the 32 lanes of a warp together: what one lane does alone takes as long as 32 lanes' work")
