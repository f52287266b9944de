"""Drivers of the hidden checks of Task 13 on drawn scenarios: engines as layouts, swap orders
and copy lists."""

from __future__ import annotations

from ...harness import hw3
from ...spec.catalog import block_counts, scenario_driver
from ..swap import RIG_BLOCKS, Rig, run_move


def engine_totals(task: str, scenario=None) -> list:
    """The drawn pools' block counts and the copy driver's rig (registry.engine_totals)."""
    return [*RIG_BLOCKS, *block_counts(scenario or {})]


@scenario_driver
def moves(run):
    """Rigs [{"gpu_blocks", "cpu_blocks", "pool_fill", "gpu", "cpu": [[id, kv_count, blocks]],
    "moves": [["swap_out" | "swap_in", id]]}]: a GPU and a CPU engine of harness-built sequences,
    then each planned move."""
    sw = run.load("swap")
    for n, sc in enumerate(run.scenario["rigs"]):
        with Rig(sc["gpu_blocks"], sc["cpu_blocks"], seed=sc["pool_fill"]) as rig:
            for seq_id, kv, blocks in sc["gpu"]:
                rig.add("gpu", seq_id, kv, blocks)
            for seq_id, kv, blocks in sc["cpu"]:
                rig.add("cpu", seq_id, kv, blocks)
            for fn, seq_id in sc["moves"]:
                run_move(rig, sw, fn, seq_id, f"(drawn engines {n}, sequence {seq_id})")


@scenario_driver
def copy(run):
    """Pair lists copied on a GPU engine of `gpu_blocks` blocks (32 unless given)."""
    sw = run.load("swap")
    with Rig(run.scenario.get("gpu_blocks", 32), 1, seed=run.scenario["pool_fill"]) as rig:
        for drawn in run.scenario["lists"]:
            pairs = [(src, dst) for src, dst in drawn]
            before = rig.gpu_pool.snapshot()
            got = sw.copy_blocks(rig.gpu, pairs)
            run.see(f"copy_blocks(gpu, {pairs})", got)
            run.see(f"pool words changed by copy_blocks(gpu, {pairs})",
                    [list(w) for w in rig.gpu_pool.diff(before).words])
            run.see(f"ref counts after copy_blocks(gpu, {pairs})", hw3.ref_counts(rig.gpu))
