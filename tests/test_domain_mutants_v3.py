"""A third mutation battery: one student-like bug per domain class that no grading drew, or that
only some gradings drew, until the hidden checks learnt it (pagedlab/drivers/README.md, "Domains").

Each mutant below is right everywhere except on its class, and the class it needs a grading to
draw is named with it:

| mutant | task | the class a grading must draw to catch it |
|---|---|---|
| free stops at the first unmapped entry of an L2 table | 2 | an L2 table whose mapped entries start past offset 0, with holes |
| fork copies L2 entries only up to the first unmapped one | 3 | the same, in a forked parent |
| append wants two free blocks when the L2 table is missing | 4 | an append into a missing L2 table with exactly one free block |
| attention never casts the caches to q's dtype | 9 | float64 q with float32 caches |
| kernel softmax without the max subtracted | 10 | logits large enough to overflow exp |
| kernel dot product unrolled by 16 | 10 | a head size under a warp that is not 16 (8 or 24) |
| kernel with `__shared__ float logits[2048]` | 10 | a sequence past 2048 tokens |
| kernel warps add into `out` without atomicAdd | 10 | a global-memory race, reported by the executor |
| copy_blocks flags destinations in a 16-entry list | 13 | a block id of 16 or more |
| move_group refuses whenever any id is on both engines | 13 | a successful swap_out (onto a swap space that holds an id the GPU uses too) |

Judged as tests/test_domain_mutants.py judges: the drivers and the judge in this process, the
hidden checks under each seed and the public ones (seed-independent) once; a mutant must lose
its task under every seed and keep every other task its file serves. A last test shows each
mutant wrong on one hand-made input of its class, so the battery cannot pass for want of a bug;
the race mutant's sums come out right on the CPU executor, and only the executor's report of a
global-memory race (`cuda.checking("race")`) tells it from the reference.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

from pagedlab.drivers import record
from pagedlab.grader import judge, registry
from pagedlab.spec import manifest

ROOT = Path(__file__).resolve().parent.parent
HIDDEN = ROOT / "grading" / "hidden"
sys.path.insert(0, str(ROOT / "tests"))
from mutation import apply  # noqa: E402
from trusted_records import trusted_record  # noqa: E402

SEEDS = (1, 2, 3)
MANY_SEEDS = range(4, 14)


@dataclass(frozen=True)
class Mutant:
    task: str
    domain_class: str
    old: str
    new: str
    file: str


MM, ATTN, CU, SWAP = "memory_manager.py", "paged_attention.py", "paged_attention.cu", "swap.py"

OUTPUT_LOOP = """  for (int d = tid; d < head_size; d += NUM_THREADS) {
    float acc = 0.f;
    for (int first = 0; first < seq_len; first += block_size) {
      const float* v = v_cache + block_table[first / block_size] * block_stride
                       + kv_head * head_size + d;
      const int tokens = seq_len - first < block_size ? seq_len - first : block_size;
      for (int i = 0; i < tokens; ++i) {
        acc += logits[first + i] * v[i * token_stride];
      }
    }
    out_vec[d] = acc * inv_sum;
  }
"""

MUTANTS = [
    Mutant("task2", "L2 tables with holes (free stops at the first unmapped entry)",
           "        for l2 in range(L2_PT_SIZE):\n            if l2_table[l2] != -1:\n"
           "                drop_block(engine, l2_table[l2])\n",
           "        for l2 in range(L2_PT_SIZE):\n            if l2_table[l2] == -1:\n"
           "                break  # the mapped entries come first\n"
           "            drop_block(engine, l2_table[l2])\n", MM),
    Mutant("task3", "L2 tables with holes (fork copies up to the first unmapped entry)",
           "            block = parent_l2[l2]\n            if block != -1:\n"
           "                child_l2[l2] = block\n                engine.ref_count[block] += 1\n",
           "            block = parent_l2[l2]\n            if block == -1:\n"
           "                break  # the mapped entries come first\n"
           "            child_l2[l2] = block\n            engine.ref_count[block] += 1\n", MM),
    Mutant("task4", "an append into a missing L2 table with exactly one free block",
           "    if (new_page or copy_on_write) and engine.free_local_blocks == 0:\n",
           "    wanted = (new_page or copy_on_write) + (not l2_table)  # the L2 table takes a block too\n"
           "    if engine.free_local_blocks < wanted:\n", MM),
    Mutant("task9", "float64 q with float32 caches (computes without casting the caches)",
           "        k, v = k.to(q.dtype), v.to(q.dtype)  # [seq_len, num_kv_heads, head_size]\n", "", ATTN),
    Mutant("task10", "logits large enough to overflow exp (no max subtracted)",
           "    const float e = expf(logits[t] - row_max);\n", "    const float e = expf(logits[t]);\n", CU),
    Mutant("task10", "head sizes 8 and 24 (dot product unrolled by 16)",
           "    for (int d = 0; d < head_size; ++d) {\n      dot += q_shared[d] * k[d];\n    }\n",
           "    for (int d = 0; d < head_size; d += 16) {  // head sizes are multiples of 16\n"
           "      for (int u = 0; u < 16; ++u) dot += q_shared[d + u] * k[d + u];\n    }\n", CU),
    Mutant("task10", "sequences past 2048 tokens (a fixed logits[2048])",
           "  extern __shared__ float logits[];     // [seq_len]: scores, then exp(score - max)\n",
           "  __shared__ float logits[2048];  // 64 blocks of 32 tokens\n", CU),
    Mutant("task10", "a global-memory race (warps add into out without atomicAdd)", OUTPUT_LOOP,
           """  for (int d = tid; d < head_size; d += NUM_THREADS) out_vec[d] = 0.f;
  __syncthreads();
  // Each warp sums its share of the tokens and adds it into out.
  for (int d = lane; d < head_size; d += WARP_SIZE) {
    float acc = 0.f;
    for (int t = warp; t < seq_len; t += NUM_WARPS) {
      acc += logits[t] * v_cache[block_table[t / block_size] * block_stride
                                 + (t % block_size) * token_stride + kv_head * head_size + d];
    }
    out_vec[d] += acc * inv_sum;
  }
""", CU),
    Mutant("task13", "block ids of 16 or more (copy_blocks flags destinations in 16 entries)",
           "    sources = {s for s, _ in pairs}\n    destinations = [d for _, d in pairs]\n"
           "    if len(set(destinations)) != len(destinations) or sources & set(destinations):\n"
           "        return -1\n",
           "    is_destination = [False] * 16  # one flag per block\n"
           "    for _, d in pairs:\n        if is_destination[d]:\n            return -1\n"
           "        is_destination[d] = True\n"
           "    if any(is_destination[s] for s, _ in pairs):\n        return -1\n", SWAP),
    Mutant("task13", "a successful swap_out onto a swap space holding an id the GPU uses too",
           "    if any(s.seq_id in taken_ids for s in group):\n        return None\n",
           "    if taken_ids & {s.seq_id for s in registry(src)}:  # an id on both engines is ambiguous\n"
           "        return None\n", SWAP),
]
IDS = [f"{m.task}: {m.domain_class}" for m in MUTANTS]


@cache
def _trusted(key: str, task: str, seed: int):
    return trusted_record(registry.find(task, key), seed)


def _fails(c, impl: str, task: str, seed: int) -> bool:
    return not judge.judge(_trusted(c.key, task, seed), record.drive(c, impl, seed)).passed


def _scored(task: str, hidden: bool) -> list:
    """The checks of `task` that earn points (a feedback check costs nothing when it fails)."""
    row = manifest.task(task)
    return [c for c in registry.checks_of(task, hidden=None, hidden_from=HIDDEN)
            if c.hidden == hidden and not row.is_feedback(c.name)]


def kept(impl: str, task: str, seeds) -> list[int]:
    """The hidden seeds under which `impl` keeps `task`: no public check lost (seed 0, the same in
    every grading) and no hidden check lost under that seed."""
    hidden = _scored(task, hidden=True)
    assert hidden, f"{task} has no hidden check"
    if any(_fails(c, impl, task, 0) for c in _scored(task, hidden=False)):
        return []
    return [s for s in seeds if not any(_fails(c, impl, task, s) for c in hidden)]


def lost(impl: str, task: str, seed: int) -> list[str]:
    """The scored checks of `task` (public, and hidden under `seed`) that `impl` fails."""
    return [c.name for hidden in (False, True) for c in _scored(task, hidden)
            if _fails(c, impl, task, seed if hidden else 0)]


def _submission(tmp_path: Path, m: Mutant) -> str:
    text = apply((ROOT / "solutions" / m.file).read_text(), m.old, m.new, f"{m.task}: {m.domain_class}")
    (tmp_path / m.file).write_text(text)
    return str(tmp_path)


def _other_tasks(m: Mutant) -> list[str]:
    return [row.id for row in manifest.TABLE if m.file in row.files and row.id != m.task]


@pytest.mark.parametrize("mutant", MUTANTS, ids=IDS)
def test_a_bug_on_one_class_loses_exactly_its_task_in_every_grading(mutant, tmp_path):
    sub = _submission(tmp_path, mutant)
    survivors = kept(sub, mutant.task, SEEDS)
    assert not survivors, f"{mutant.task} kept under hidden seeds {survivors}"
    for task in _other_tasks(mutant):
        assert not lost(sub, task, SEEDS[0]), f"the bug in {mutant.task} also cost {task}"


@pytest.mark.slow
@pytest.mark.parametrize("mutant", MUTANTS, ids=IDS)
def test_a_bug_on_one_class_loses_its_task_under_ten_more_seeds(mutant, tmp_path):
    survivors = kept(_submission(tmp_path, mutant), mutant.task, MANY_SEEDS)
    assert not survivors, f"{mutant.task} kept under hidden seeds {survivors}"


def test_each_mutant_names_its_class_once():
    assert len({(m.task, m.domain_class) for m in MUTANTS}) == len(MUTANTS)
    assert {m.task for m in MUTANTS} == {"task2", "task3", "task4", "task9", "task10", "task13"}


# --- each mutant is wrong on its class (so a check that draws the class can catch it) ----------

def _mm_hole_engine(mm, task: str):
    from pagedlab.drivers import scenes
    from pagedlab.engine.pool import Pool
    from pagedlab.harness import hw3

    if task == "task4":  # one full L2 table, the next append needs a new one; one block free
        pool = Pool(17 * 64)
        engine = scenes.engine(pool, [(1, 256, list(range(16)))])
        got = mm.append_kv(engine, 1, 42)
    else:  # an L2 table whose mapped entries start at offset 2, with holes between them
        pool = Pool(32 * 64)
        engine = scenes.engine(pool, [(1, 16 * 10, {2: 5, 5: 7, 9: 3})])
        got = mm.free_sequence(engine, 1) if task == "task2" else mm.fork_sequence(engine, 1, 2) is not None
    state = hw3.state(engine)
    return got, state.free, list(state.refs)


def _attention_mixed_dtypes(pa):
    import torch

    q = torch.randn(1, 2, 8, dtype=torch.float64)
    caches = [torch.randn(2, 4, 2, 8, dtype=torch.float32) for _ in range(2)]
    return pa.paged_attention(q, *caches, torch.tensor([[0, 1]]), torch.tensor([6])).dtype


KERNEL_CASES = {  # make_kernel_batch arguments, q scale, sanitizer checks
    "logits large enough to overflow exp (no max subtracted)":
        (dict(seq_lens=[5, 40], num_heads=2, head_size=32, block_size=16, seed=3), 200.0, None),
    "head sizes 8 and 24 (dot product unrolled by 16)":
        (dict(seq_lens=[5, 40], num_heads=2, head_size=8, block_size=16, seed=3), 1.0, None),
    # Unchecked, the write past logits[2048] is undefined behaviour (it lands in another library's
    # thread-local data): it crashed the runner in hundreds of launches, but one loaded CI run
    # (four workers, 4 Dec) came out right. The sanitizer's out-of-bounds report does not vary.
    "sequences past 2048 tokens (a fixed logits[2048])":
        (dict(seq_lens=[2100], num_heads=1, head_size=16, block_size=32, seed=3), 1.0, "memcheck"),
    # Its sums come out right on the executor: only a report of the global race can show it.
    "a global-memory race (warps add into out without atomicAdd)":
        (dict(seq_lens=[40, 7], num_heads=2, head_size=32, block_size=16, seed=3), 1.0, "race"),
}


def _kernel(impl: str, m: Mutant):
    import numpy as np

    from pagedlab import cuda
    from pagedlab.drivers.kernel_batch import make_kernel_batch
    from pagedlab.kernels import decode_on_executor

    kwargs, q_scale, checks = KERNEL_CASES[m.domain_class]
    batch = make_kernel_batch(**kwargs)
    batch.q = batch.q * np.float32(q_scale)
    try:
        with cuda.checking(checks):
            out = decode_on_executor(*batch.numpy(), impl=impl)
    except Exception as exc:  # noqa: BLE001 - the mutant's failure is the observation
        return type(exc).__name__
    if checks:  # what the sanitizer reports, not float sums that differ in their last bits
        return "no report"
    if not np.isfinite(out).all():
        return "not finite"
    from pagedlab.grader.trusted.attention import kernel_expected

    return "right" if np.allclose(out, kernel_expected(batch), rtol=1e-4, atol=1e-5) else "wrong"


def _swap(sw, m: Mutant):
    from pagedlab.drivers.swap import Rig

    if m.domain_class.startswith("block ids"):
        with Rig(32, 1, seed=5) as rig:
            try:
                return sw.copy_blocks(rig.gpu, [(3, 20)])
            except Exception as exc:  # noqa: BLE001
                return type(exc).__name__
    with Rig(16, 16, seed=5) as rig:
        rig.add("gpu", 1, 20, [0, 1])
        rig.add("gpu", 2, 20, [2, 3])
        rig.add("cpu", 2, 20, [0])  # id 2 on both: sequence 1 may still swap out
        return sw.swap_out(rig.gpu, rig.cpu, 1)


def _observe(impl: str, m: Mutant):
    from pagedlab import load

    if m.file == MM:
        return _mm_hole_engine(load("memory_manager", impl=impl), m.task)
    if m.file == ATTN:
        try:
            return str(_attention_mixed_dtypes(load("paged_attention", impl=impl)))
        except Exception as exc:  # noqa: BLE001
            return type(exc).__name__
    if m.file == CU:
        return _kernel(impl, m)
    return _swap(load("swap", impl=impl), m)


@pytest.mark.parametrize("mutant", MUTANTS, ids=IDS)
def test_each_mutant_is_wrong_on_its_class(mutant, tmp_path):
    """On one hand-made input of its class the mutant and the reference differ: a check that
    draws the class can catch it (and a battery test above cannot fail for want of a bug)."""
    reference, mutated = _observe("solutions", mutant), _observe(_submission(tmp_path, mutant), mutant)
    assert reference != mutated, f"the reference and the mutant both gave {reference!r}"
