"""The swap model (pagedlab/grader/answers/swap.py, instructor edition only) and the reference
solution are two independent readings of Task 13's rules: on drawn engines they move the same
groups to the same blocks, and refuse the same swaps."""

from __future__ import annotations

import random

from pagedlab.drivers.swap import Rig, summary
from pagedlab.grader.answers.swap import expected_move
from pagedlab.harness import hw3
from pagedlab.loader import load


def _draw_engine(rig: Rig, rng: random.Random) -> None:
    """Sequences with scattered blocks; some share a few blocks of an earlier one (forks)."""
    free = list(range(rig.gpu.total_local_blocks))
    rng.shuffle(free)
    layouts: dict[int, list[int]] = {}
    for seq_id in range(1, 8):
        if layouts and rng.random() < 0.4:
            parent = layouts[rng.choice(sorted(layouts))]
            blocks = rng.sample(parent, rng.randint(1, min(3, len(parent))))
            blocks += [free.pop() for _ in range(rng.randint(0, 2))]
        else:
            blocks = [free.pop() for _ in range(rng.randint(1, 8))]
        layouts[seq_id] = blocks
        rig.add("gpu", seq_id, 16 * (len(blocks) - 1) + rng.randint(1, 16), blocks)


def test_the_solution_moves_and_refuses_as_the_model_says():
    swap = load("swap", "solutions")
    moved = refused = 0
    for seed in range(8):
        rng = random.Random(seed)
        with Rig(64, rng.randint(6, 40), seed=seed) as rig:
            _draw_engine(rig, rng)
            calls = [("swap_out", s) for s in rng.sample(range(1, 9), 4)] + [("swap_in", s) for s in range(1, 9)]
            for fn, seq_id in calls:
                src, dst = (rig.gpu, rig.cpu) if fn == "swap_out" else (rig.cpu, rig.gpu)
                want = expected_move(hw3.state(src), hw3.state(dst), seq_id)
                got = getattr(swap, fn)(src, dst, seq_id)
                where = f"seed {seed}: {fn}({seq_id})"
                if want is None:
                    assert got is None, where
                    refused += 1
                    continue
                assert [tuple(pair) for pair in got] == want.pairs, where
                assert summary(hw3.state(src)) == want.src, where
                assert summary(hw3.state(dst)) == want.dst, where
                moved += 1
    assert moved >= 10 and refused >= 10, (moved, refused)  # both paths are compared
