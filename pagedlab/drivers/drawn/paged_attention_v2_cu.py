"""Driver of the hidden check of Task 14 on a drawn scenario: each case is the `make_kernel_batch`
arguments (its `seed` draws the tensor values only), a scale and a partition size; the schedules
are named."""

from __future__ import annotations

from ...spec.catalog import scenario_driver
from ..paged_attention_v2_cu import drive_v2


def v2_cases(scenario) -> list:
    return [(c["context"], c["batch"], c["scale"], c["partition_size"]) for c in scenario["cases"]]


@scenario_driver
def v2(run):
    drive_v2(run, v2_cases(run.scenario), tuple(run.scenario["schedules"]), temporaries=True)
