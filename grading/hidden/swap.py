"""Hidden checks for Task 13 (instructor only): engines, forked groups and swap spaces drawn from
`run.seed`; the judge compares with the reference solution run on the same seed."""

from __future__ import annotations

from pagedlab.checks.framework import check
from pagedlab.checks.swap import R_COPY, Rig, run_move
from pagedlab.harness import hw3

RULE = "the same rules as the public checks, on engines drawn at grading time"


def _random_group_engine(rig, rng):
    """Sequences with scattered blocks on the GPU; about a third share a random subset of an
    earlier one's blocks (forks after copy-on-write), which also makes chains of siblings."""
    free = list(range(rig.gpu.total_local_blocks))
    rng.shuffle(free)
    layouts = {}
    for seq_id in range(1, rng.randint(4, 9)):
        if layouts and rng.random() < 0.35:
            parent = layouts[rng.choice(sorted(layouts))]
            shared = rng.sample(parent, rng.randint(1, min(3, len(parent))))
            own = [free.pop() for _ in range(rng.randint(0, 2)) if free]
            blocks = shared + own
        else:
            blocks = [free.pop() for _ in range(min(len(free), rng.randint(1, 20)))]
        if not blocks:
            break
        layouts[seq_id] = blocks
        rig.add("gpu", seq_id, 16 * (len(blocks) - 1) + rng.randint(1, 16), blocks)
    return layouts, free


@check("task13", "swap out and back in on engines drawn at grading time", rule=RULE, hidden=True)
def swap_random(run):
    rng = run.rng
    sw = run.load("swap")
    with Rig(rng.randint(48, 96), rng.randint(8, 64), seed=run.seed) as rig:
        layouts, _ = _random_group_engine(rig, rng)
        taken = rng.sample(range(rig.cpu.total_local_blocks), rng.randint(1, rig.cpu.total_local_blocks // 3))
        # Always a CPU sequence under an id the GPU uses too: that sequence cannot swap out.
        clash = rng.choice(sorted(layouts))
        rig.add("cpu", clash, 16 * len(taken), taken)
        order = [s for s in sorted(layouts) if s != clash]
        rng.shuffle(order)
        order.insert(rng.randrange(3), clash)
        for seq_id in order[:3]:
            run_move(rig, sw, "swap_out", seq_id, f"(drawn engine, sequence {seq_id})")
        for seq_id in order[:3]:
            run_move(rig, sw, "swap_in", seq_id, f"(drawn engine, sequence {seq_id} back)")


@check("task13", "copy_blocks on pair lists drawn at grading time", rule=R_COPY, hidden=True)
def copy_random(run):
    rng = run.rng
    sw = run.load("swap")
    with Rig(32, 1, seed=run.seed) as rig:
        for _ in range(6):
            blocks = rng.sample(range(32), 8)
            pairs = [(blocks[i], blocks[4 + i]) for i in range(rng.randint(0, 4))]
            if rng.random() < 0.4 and pairs:  # a broken list: destination repeated or also a source
                pairs.append((pairs[0][0], pairs[0][1]) if rng.random() < 0.5 else (blocks[7], pairs[0][0]))
            before = rig.gpu_pool.snapshot()
            got = sw.copy_blocks(rig.gpu, pairs)
            run.see(f"copy_blocks(gpu, {pairs})", got)
            run.see(f"pool words changed by copy_blocks(gpu, {pairs})",
                    [list(w) for w in rig.gpu_pool.diff(before).words])
            run.see(f"ref counts after copy_blocks(gpu, {pairs})", hw3.ref_counts(rig.gpu))
