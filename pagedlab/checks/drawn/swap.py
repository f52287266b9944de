"""Drivers of the hidden checks of Task 13 on drawn scenarios: engines as layouts, swap orders
and copy lists."""

from __future__ import annotations

from ...harness import hw3
from ..framework import block_counts, scenario_driver
from ..swap import RIG_BLOCKS, Rig, run_move


def engine_totals(task: str, scenario=None) -> list:
    """The drawn pools' block counts and the copy driver's rig (framework.engine_totals)."""
    return [*RIG_BLOCKS, *block_counts(scenario or {})]


@scenario_driver
def moves(run):
    """A GPU engine of harness-built sequences, a CPU engine whose sequence clashes with a GPU id,
    then swap_out of each planned sequence and swap_in of each back."""
    sw = run.load("swap")
    sc = run.scenario
    with Rig(sc["gpu_blocks"], sc["cpu_blocks"], seed=sc["pool_fill"]) as rig:
        for seq_id, kv, blocks in sc["gpu"]:
            rig.add("gpu", seq_id, kv, blocks)
        for seq_id, kv, blocks in sc["cpu"]:
            rig.add("cpu", seq_id, kv, blocks)
        for seq_id in sc["order"]:
            run_move(rig, sw, "swap_out", seq_id, f"(drawn engine, sequence {seq_id})")
        for seq_id in sc["order"]:
            run_move(rig, sw, "swap_in", seq_id, f"(drawn engine, sequence {seq_id} back)")


@scenario_driver
def copy(run):
    sw = run.load("swap")
    with Rig(32, 1, seed=run.scenario["pool_fill"]) as rig:
        for drawn in run.scenario["lists"]:
            pairs = [(src, dst) for src, dst in drawn]
            before = rig.gpu_pool.snapshot()
            got = sw.copy_blocks(rig.gpu, pairs)
            run.see(f"copy_blocks(gpu, {pairs})", got)
            run.see(f"pool words changed by copy_blocks(gpu, {pairs})",
                    [list(w) for w in rig.gpu_pool.diff(before).words])
            run.see(f"ref counts after copy_blocks(gpu, {pairs})", hw3.ref_counts(rig.gpu))
