"""Driver of the hidden check of Task 10 on a drawn scenario: each case is the `make_kernel_batch`
arguments (its `seed` draws the tensor values only) and a scale; the schedules are named."""

from __future__ import annotations

from ...spec.catalog import scenario_driver
from ..paged_attention_cu import drive_kernel


def kernel_cases(scenario) -> list:
    return [(c["context"], c["batch"], c["scale"]) for c in scenario["cases"]]


@scenario_driver
def kernel(run):
    drive_kernel(run, kernel_cases(run.scenario), tuple(run.scenario["schedules"]))
