"""An honest kernel never loses a hidden check to float32 rounding.

Task 10's hidden checks draw, in every grading, a case whose q is scaled 40-60x (logits that
overflow exp unless the max is subtracted). A float32 logit carries rounding in proportion to
its size, and on about one drawn batch in a hundred the reference kernel's output was further
than the unscaled tolerance from float64 attention (up to 3.3e-5 against 2e-5): one grading in a
hundred took the 14 points of a correct kernel (seen in `benchmarks/bench_loaded_regrade.py`:
20/34 on the tenth regrade). The judge's
tolerance for such a case scales with q's scale (`paged_attention_cu.output_tol`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pagedlab.checks import framework, judge
from pagedlab.checks.paged_attention_cu import TOL, kernel_label
from pagedlab.kernel_batch import make_kernel_batch
from pagedlab.kernels import decode_on_executor

HIDDEN = Path(__file__).resolve().parent.parent / "grading" / "hidden"
SEED = 280  # a drawn scenario whose q-scaled case the reference gets 2.4e-5 wrong (1 of 300)


def test_the_reference_kernel_keeps_the_hidden_check_where_large_logits_round_most():
    c = next(c for c in framework.checks_of("task10", hidden=True, hidden_from=HIDDEN))
    case = next(case for case in framework.scenario_data(c, SEED)["cases"] if case["batch"].get("q_scale", 1) > 1)
    schedule = "round_robin"
    expected = framework.expected_stream(c, SEED)
    want = next(o for o in expected.obs if o["w"] == kernel_label(case["context"], schedule))
    out = decode_on_executor(*make_kernel_batch(**case["batch"]).numpy(), scale=case["scale"], impl="solutions",
                             schedule=schedule)
    mine = framework.encode_array(out)
    # The case is the hard one: the unscaled tolerance would fail the reference here...
    assert not judge._compare_arrays(want["v"], mine, TOL)[0]
    # ...and the tolerance the judge was given keeps it, with room to spare.
    passed, lines = judge._compare_arrays(want["v"], mine, want["tol"])
    assert passed, lines
    error = np.abs(out.astype(np.float64) - framework.decode_array(want["v"])).max()
    assert error / np.abs(framework.decode_array(want["v"])).max() < want["tol"] / 10
