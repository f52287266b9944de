"""Every class of every task's domain is drawn in every grading (pagedlab/checks/README.md,
"Domains"), and the child grading a hidden check gets its scenario as data.

A hidden check's planner (grading/hidden/) draws its scenario in the grader from the grading's
seed and returns plain data, so what a grading covers can be read off that data without running
any student code: below, each hidden check has a classifier, written from the domain table and
independently of the planner, that names the classes a scenario holds. Under 200 seeds every
scenario must hold every class; a class only some seeds draw would give one submission different
scores on a regrade.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from pagedlab import manifest
from pagedlab.checks import framework

ROOT = Path(__file__).resolve().parent.parent
HIDDEN = ROOT / "grading" / "hidden"
SEEDS = range(200)


def _tables(layout) -> dict:
    """{L1 slot: sorted L2 offsets mapped} of a [[logical, block]] layout."""
    found: dict = {}
    for logical, _ in layout:
        found.setdefault(logical // 16, []).append(logical % 16)
    return {l1: sorted(offsets) for l1, offsets in found.items()}


def _holey(layout) -> bool:
    """Every L2 table starts past offset 0 and has an unmapped entry between two mapped ones."""
    tables = _tables(layout)
    return bool(tables) and all(o[0] > 0 and any(b - a > 1 for a, b in zip(o, o[1:])) for o in tables.values())


def _null_l1_first(layout) -> bool:
    return min(logical for logical, _ in layout) >= 16


def _length_class(n: int) -> str:
    fixed = {0: "0", 16: "16", 17: "17", 256: "256", 257: "257", 4096: "4096", 4097: "4097"}
    return fixed.get(n) or ("negative" if n < 0 else "1-15" if n < 16 else "other")


def task1(sc) -> set:
    found = set()
    for size in sc["sizes"]:
        blocks, rest = divmod(size, 64)
        found.add("0 bytes" if size == 0 else "under one block" if blocks == 0 else "one block" if size == 64
                  else "a multiple of 64" if not rest else "a multiple plus a remainder")
        if blocks > 256:
            found.add("more than 256 blocks")
    return found


def task2(sc) -> set:
    built = {s["id"]: s for s in sc["built"]}
    found = set()
    creates = [(i, -(-st["length"] // 16)) for i, st in enumerate(sc["steps"]) if st["op"] == "create"
               and "again" not in st and st["length"] > 0]
    lengths = [st.get("length") for st in sc["steps"]]
    if all(n in lengths for n in (16, 17, 256, 257)):
        # Even if nothing were freed, the pool has room for them and every create before them.
        last = max(lengths.index(n) for n in (16, 17, 256, 257))
        taken = sum(len(s["layout"]) for s in sc["built"])
        if taken + sum(b for i, b in creates if i <= last and b <= sc["blocks"]) <= sc["blocks"]:
            found.add("creates at the L2 table's edges with room in the pool")
    if any(sc["blocks"] < b <= 256 for _, b in creates):
        found.add("a create of more blocks than the pool has (OOM)")
    for st in sc["steps"]:
        if st["op"] == "create":
            found.add("a live id created again" if "again" in st else f"length {_length_class(st['length'])}")
        elif "live" not in st:
            found.add("a sequence with holey L2 tables freed" if st["id"] in built and _holey(built[st["id"]]["layout"])
                      else "an unknown id freed")
    return found


def task3(sc) -> set:
    built = {s["id"]: s["layout"] for s in sc["built"]}
    forked = {f["parent"] for f in sc["forks"]}
    found = set()
    for sid, layout in built.items():
        if sid not in forked:
            continue
        tables = _tables(layout)
        if len(layout) == 1:
            found.add("a one-block parent")
        if len(layout) == 16 and list(tables) == [0]:
            found.add("a parent of one full L2 table")
        if len(layout) > 16 and 0 in tables:
            found.add("a parent of several L2 tables")
        if _null_l1_first(layout) and all(o == list(range(len(o))) for o in tables.values()):
            found.add("a parent with NULL L1 entries first")
        if _holey(layout):
            found.add("a parent with holey L2 tables")
    for f in sc["forks"]:
        if f["parent"] == "last":
            found.add("a fork of a fork")
        elif isinstance(f["parent"], int) and f["parent"] not in built:
            found.add("an unknown parent")
        if f.get("pick_new") is not None:
            found.add("a new id in use")
    return found


def task4(sc) -> set:
    built = {s["id"]: s for s in sc["built"]}
    planned = [sid for sid, _ in sc["appends"]]
    found = set()
    for sid, s in built.items():
        if sid not in planned:
            continue
        twins = [t for t in sc["built"] if t["layout"] == s["layout"] and t["id"] != sid]
        if s["kv"] % 16 and twins:
            found.add("a partly full shared last block (copy-on-write)")
        if s["kv"] % 16 == 0 and not twins:
            found.add("an exactly full last block")
        if 1 <= 256 - s["kv"] <= 3:
            found.add("1-3 short of 256 tokens")
        if _holey(s["layout"]):
            found.add("holey L2 tables")
    if any(sid not in built for sid in planned):
        found.add("an unknown id")
    values = {v for _, v in sc["appends"]}
    if {-2**31, 2**31 - 1} <= values:
        found.add("int32 extremes")
    if len(sc["until_full"]) >= 16 * sc["blocks"]:
        found.add("appends until the pool is full")
    one = sc["one_free"]
    first = next(s for s in one["built"] if s["id"] == one["appends"][0][0])
    if sum(len(s["layout"]) for s in one["built"]) == one["blocks"] - 1 and first["kv"] % 256 == 0:
        found.add("an append into a missing L2 table with one free block")
    return found


def task5(sc) -> set:
    found = {"an engine with no sequence"} if sc["empty_blocks"] > 0 else set()
    layouts = [s["layout"] for s in sc["built"]]
    if any(_null_l1_first(layout) for layout in layouts):
        found.add("NULL L1 entries")
    if any(_holey(layout) for layout in layouts):
        found.add("holey L2 tables")
    if any(layouts.count(layout) > 1 for layout in layouts):
        found.add("forks sharing blocks")
    return found


def _power_of_two(n: int) -> bool:
    return n & (n - 1) == 0


def task6(sc) -> set:
    found = set()
    for case in sc["cases"]:
        bs, table = case["block_size"], case["table"]
        found.add("block size 1" if bs == 1 else "a power of two" if _power_of_two(bs) else "not a power of two")
        found |= {f"{case['table_dtype']} table", f"{case['positions_dtype']} positions"}
        if case["table_dtype"] == "int32" and max(table) * bs >= 2**31:
            found.add("slots past 2**31 from an int32 table")
        mapped = len([b for b in table if b >= 0])
        edges = {b * bs for b in range(mapped)} | {b * bs + bs - 1 for b in range(mapped)}
        if not edges <= set(case["positions"]):
            return found  # a case without every block's first and last token
    return found | {"first and last token of every block"}


def task7(sc) -> set:
    found = set()
    for case in sc["cases"]:
        blocks, bs, heads, _ = case["shape"]
        real = [s for s in case["slots"] if s >= 0]
        found.add(case["dtype"])
        if not real:
            found.add("a batch of padding only")
            continue
        found |= {"one kv head" if heads == 1 else "several kv heads",
                  "a power-of-two block size" if _power_of_two(bs) else "a block size not a power of two"}
        if -1 in case["slots"] and any(s < -1 for s in case["slots"]):
            found.add("padding -1 and other negatives")
        if {0, blocks * bs - 1} <= set(real):
            found.add("slot 0 and the last slot")
    return found


def task8(sc) -> set:
    found = set()
    for case in sc["cases"]:
        b = case["batch"]
        bs, lens = b["block_size"], b["seq_lens"]
        found |= {b["dtype"], f"{case['table_dtype']} table",
                  "block size 1" if bs == 1 else "a power of two" if _power_of_two(bs) else "not a power of two"}
        if b.get("shared_blocks"):
            found.add("shared blocks")
        classes = {"1": 1 in lens, "bs-1": bs - 1 in lens or bs == 1, "bs": bs in lens, "bs+1": bs + 1 in lens,
                   "a multiple of bs": any(n % bs == 0 and n >= 2 * bs for n in lens),
                   "past 64 blocks": any(n > 64 * bs for n in lens)}
        found |= {f"lengths {name} (block size {'1' if bs == 1 else 'other'})" for name, ok in classes.items() if ok}
    return found


PUBLIC_TASK9_HEAD_SIZES = {32, 64, 80, 96}


def _heads(kv: int, heads: int) -> str:
    return "MHA" if kv == heads else "MQA" if kv == 1 else "GQA"


def task9(sc) -> set:
    found = set()
    for case in sc["cases"]:
        b = case["batch"]
        q_dtype = b.get("q_dtype", b["dtype"])
        found |= {_heads(b["num_kv_heads"], b["num_heads"]), f"q {q_dtype}, caches {b['dtype']}",
                  "default scale" if case["scale"] is None else "custom scale"}
        bs, lens = b["block_size"], b["seq_lens"]
        found.add("a power-of-two block size" if _power_of_two(bs) else "a block size not a power of two")
        if b["head_size"] not in PUBLIC_TASK9_HEAD_SIZES:
            found.add("a head size no public check uses")
        if {bs, bs + 1} <= set(lens):
            found.add("lengths at block edges")
        if any(n > 64 * bs for n in lens):
            found.add("past 64 blocks")
        if b.get("shared_blocks"):
            found.add("shared blocks")
        if q_dtype == "torch.float32" and b.get("q_scale", 1) >= 60:
            found.add("float32 logits that overflow exp")
    return found


FLT_MAX_EXP = math.log(3.4028234663852886e38)  # exp of a float32 above this is inf


def _overflows(batch: dict, scale) -> bool:
    """Whether some logit of the case, as the kernel computes it, overflows a float32 exp."""
    import numpy as np

    from pagedlab.kernel_batch import make_kernel_batch
    from pagedlab.trusted.attention import _sequence_tokens

    kb = make_kernel_batch(**batch)
    group = batch["num_heads"] // batch["num_kv_heads"]
    scale = 1 / math.sqrt(batch["head_size"]) if scale is None else scale
    keys = (_sequence_tokens(kb, s)[0] for s in range(len(kb.seq_lens)))
    top = max(float(np.max(np.einsum("hd,nhd->hn", kb.q[s].astype(np.float64), np.repeat(k, group, axis=1)))) * scale
              for s, k in enumerate(keys))
    return top > FLT_MAX_EXP


def _kernel_common(b, scale, found) -> None:
    bs, lens = b["block_size"], b["seq_lens"]
    found |= {f"block size {bs}", _heads(b["num_kv_heads"], b["num_heads"])}
    found.add("default scale" if scale is None else "custom scale")
    if b.get("shared_blocks"):
        found.add("shared blocks")
    if any(n > 64 * bs for n in lens):
        found.add("past 64 blocks")


def task10(sc, *, logits: bool = True) -> set:
    found = set()
    for case in sc["cases"]:
        b, lens = case["batch"], case["batch"]["seq_lens"]
        bs, hs = b["block_size"], b["head_size"]
        _kernel_common(b, case["scale"], found)
        found.add(f"head size {hs} (under a warp)" if hs < 32 else "head size 33-128" if hs <= 128 else "head size above 128")
        found |= {name for name, ok in (("length 1", 1 in lens), ("length bs-1", bs - 1 in lens),
                                        ("length bs+1", bs + 1 in lens),
                                        ("length 127-129", bool({127, 128, 129} & set(lens)))) if ok}
        if any(n > 2048 and n > 64 * bs for n in lens):
            found.add("past 64 blocks and 2048 tokens")
        if logits and b.get("q_scale", 1) > 1 and _overflows(b, case["scale"]):
            found.add("logits that overflow exp")
    if len(set(sc["schedules"])) >= 2:
        found.add("two schedules")
    return found


def task11(sc) -> set:
    found = set()
    for pool in sc["pools"]:
        found.add("a small pool of blocks of 1-2" if pool["blocks"] < 10 and pool["block_size"] <= 2
                  else "a larger pool of blocks of 3-5" if 3 <= pool["block_size"] <= 5 else "other")
        (a1, r1, p1), (a2, _, p2), (f1, _, _), (f2, _, _), (a3, _, p3), _ = pool["ops"][:6]
        if (a1, a2, f1, f2, a3) == ("allocate", "allocate", "free", "free", "allocate") and p1 == p2 \
                and len(p1) % pool["block_size"] == 0 and p3[:-1] == p1 and len(p3) == len(p1) + 1:
            found.add("a whole-block prompt twice, freed, reused plus one token")
        if len({tuple(op[2][:3]) for op in pool["ops"] if op[0] == "allocate" and len(op[2]) >= 3}) < \
                len([op for op in pool["ops"] if op[0] == "allocate" and len(op[2]) >= 3]):
            found.add("shared prefixes")
    return found


def task12(sc) -> set:
    found = {"a one-slot memory", "the whole memory, then a request that cannot fit", "everything freed"}
    first = [n for op, _, n in sc["steps"][:4] if op == "alloc"]
    found |= {name for name, ok in (("a request of 1", 1 in first),
                                    ("a power of two", any(n > 1 and _power_of_two(n) for n in first)),
                                    ("a size that rounds up", any(not _power_of_two(n) for n in first))) if ok}
    return found


def _groups(layouts: dict) -> list[set]:
    """Union-find over shared blocks: the sequence groups."""
    parent = {s: s for s in layouts}

    def root(s):
        while parent[s] != s:
            s = parent[s]
        return s

    owner = {}
    for s, blocks in layouts.items():
        for b in blocks:
            if b in owner:
                parent[root(s)] = root(owner[b])
            owner[b] = s
    found: dict = {}
    for s in layouts:
        found.setdefault(root(s), set()).add(s)
    return list(found.values())


def task13_swap(sc) -> set:
    layouts = {s: blocks for s, _, blocks in sc["gpu"]}
    groups = _groups(layouts)
    found = set()
    (clash, _, taken), = sc["cpu"]
    if clash in layouts and clash in sc["order"]:
        found.add("a CPU id that clashes with a GPU id, swapped")
    if 0 < len(taken) < sc["cpu_blocks"]:
        found.add("partly taken swap space")
    clash_group = next(g for g in groups if clash in g)
    first = next((s for s in sc["order"] if s not in clash_group), None)
    if first is not None:
        need = len({b for s in next(g for g in groups if first in g) for b in layouts[s]})
        group = next(g for g in groups if first in g)
        if need <= sc["cpu_blocks"] - len(taken):
            found.add("a swap_out that fits")
            if len(group) > 1:
                found.add("a forked group (sharing blocks) swapped out")
    return found


def task13_copy(sc) -> set:
    found = set()
    for pairs in sc["lists"]:
        dests = [d for _, d in pairs]
        repeated, also_source = len(set(dests)) < len(dests), bool(set(dests) & {s for s, _ in pairs})
        if repeated:
            found.add("a destination repeated")
        if also_source:
            found.add("a destination that is also a source")
        if pairs and not repeated and not also_source and any(b >= 16 for p in pairs for b in p):
            found.add("a valid copy with a block id >= 16")
    return found


def task14(sc) -> set:
    found = set()
    for case in sc["cases"]:
        b, p = case["batch"], case["partition_size"]
        bs, lens = b["block_size"], b["seq_lens"]
        _kernel_common(b, case["scale"], found)
        found.add("partitions of one block" if p == bs else "partitions of 2-8 blocks" if p in (2 * bs, 4 * bs, 8 * bs)
                  else "the default 512" if p == 512 else "other")
        if 1 in lens:
            found.add("length 1")
        if any(n == k * p for n in lens for k in range(1, 4)) and any(n == k * p + 1 for n in lens for k in range(1, 4)):
            found.add("lengths k*P and k*P+1")
    return found


DOMAINS = {  # check key -> (classifier, the classes every grading must hold)
    "task1": (task1, {"0 bytes", "under one block", "one block", "a multiple of 64", "a multiple plus a remainder",
                      "more than 256 blocks"}),
    "task2": (task2, {f"length {c}" for c in ("0", "negative", "1-15", "16", "17", "256", "257", "4096", "4097")}
              | {"a live id created again", "an unknown id freed", "a sequence with holey L2 tables freed",
                 "creates at the L2 table's edges with room in the pool", "a create of more blocks than the pool has (OOM)"}),
    "task3": (task3, {"a one-block parent", "a parent of one full L2 table", "a parent of several L2 tables",
                      "a parent with NULL L1 entries first", "a parent with holey L2 tables", "a fork of a fork",
                      "an unknown parent", "a new id in use"}),
    "task4": (task4, {"a partly full shared last block (copy-on-write)", "an exactly full last block",
                      "1-3 short of 256 tokens", "holey L2 tables", "an unknown id", "int32 extremes",
                      "appends until the pool is full", "an append into a missing L2 table with one free block"}),
    "task5": (task5, {"an engine with no sequence", "NULL L1 entries", "holey L2 tables", "forks sharing blocks"}),
    "task6": (task6, {"block size 1", "a power of two", "not a power of two", "int32 table", "int64 table",
                      "int32 positions", "int64 positions", "slots past 2**31 from an int32 table",
                      "first and last token of every block"}),
    "task7": (task7, {"float32", "float64", "one kv head", "several kv heads", "a power-of-two block size",
                      "a block size not a power of two", "padding -1 and other negatives", "slot 0 and the last slot",
                      "a batch of padding only"}),
    "task8": (task8, {"torch.float32", "torch.float64", "int32 table", "int64 table", "block size 1", "a power of two",
                      "not a power of two", "shared blocks"}
              | {f"lengths {n} (block size {k})" for n in ("1", "bs-1", "bs", "bs+1", "a multiple of bs", "past 64 blocks")
                 for k in ("1", "other")}),
    "task9": (task9, {"MHA", "GQA", "MQA", "default scale", "custom scale", "a power-of-two block size",
                      "a block size not a power of two", "a head size no public check uses", "lengths at block edges",
                      "past 64 blocks", "shared blocks", "float32 logits that overflow exp"}
              | {f"q torch.{a}, caches torch.{b}" for a in ("float32", "float64") for b in ("float32", "float64")}),
    "task10": (task10, {"block size 8", "block size 16", "block size 32", "MHA", "GQA", "MQA",
                        "head size 8 (under a warp)", "head size 16 (under a warp)", "head size 24 (under a warp)",
                        "head size 33-128", "head size above 128", "length 1", "length bs-1", "length bs+1",
                        "length 127-129", "past 64 blocks", "past 64 blocks and 2048 tokens", "shared blocks",
                        "default scale", "custom scale", "two schedules", "logits that overflow exp"}),
    "task11": (task11, {"a small pool of blocks of 1-2", "a larger pool of blocks of 3-5",
                        "a whole-block prompt twice, freed, reused plus one token", "shared prefixes"}),
    "task12": (task12, {"a one-slot memory", "the whole memory, then a request that cannot fit", "everything freed",
                        "a request of 1", "a power of two", "a size that rounds up"}),
    "task13/swap": (task13_swap, {"a forked group (sharing blocks) swapped out", "a CPU id that clashes with a GPU id, swapped",
                                  "partly taken swap space", "a swap_out that fits"}),
    "task13/copy": (task13_copy, {"a destination repeated", "a destination that is also a source",
                                  "a valid copy with a block id >= 16"}),
    "task14": (task14, {"block size 8", "block size 16", "block size 32", "MHA", "GQA", "MQA", "default scale",
                        "custom scale", "partitions of one block", "partitions of 2-8 blocks", "the default 512",
                        "length 1", "lengths k*P and k*P+1", "past 64 blocks"}),
}


def _domain(c) -> str:
    return f"{c.task}/{'copy' if 'copy_blocks' in c.name else 'swap'}" if c.task == "task13" else c.task


def _hidden_checks():
    return [pytest.param(c, id=c.key) for task in manifest.TASKS
            for c in framework.checks_of(task, hidden=True, hidden_from=HIDDEN)]


@pytest.mark.task_wide
@pytest.mark.parametrize("c", _hidden_checks())
def test_every_grading_draws_every_class_of_the_domain(c):
    assert c.scenario is not None, f"{c.key}: a hidden check plans its scenario in the grader"
    if _domain(c) not in DOMAINS:  # a task added since (the recipe's toy task): its row comes first
        pytest.skip(f"{c.key}: write its domain's row in the README and its classifier here")
    classify, wanted = DOMAINS[_domain(c)]
    missed = {}
    for seed in SEEDS:
        # Task 10's exp overflow is computed from the batch: 20 seeds of it (the q scale is drawn).
        logits = {"logits": seed < 20} if classify is task10 else {}
        got = classify(framework.scenario_data(c, seed), **logits)
        lacking = wanted - got - ({"logits that overflow exp"} if logits and not logits["logits"] else set())
        if lacking:
            missed[seed] = sorted(lacking)
    assert not missed, f"{c.key}: seeds whose grading misses a class: {dict(list(missed.items())[:5])}"


@pytest.mark.task_wide
def test_every_hidden_check_of_the_domain_table_has_its_classifier():
    """Tasks 1-14 (the README's domain table): every hidden check has a classifier, and every
    classifier a check."""
    drawn = {_domain(c) for task in manifest.TASKS if int(task.removeprefix("task")) <= 14
             for c in framework.checks_of(task, hidden=True, hidden_from=HIDDEN)}
    assert drawn == set(DOMAINS)


def test_the_classifiers_see_a_missing_class():
    """The property above can fail: a planner that stops drawing a class is caught."""
    c = next(c for c in framework.checks_of("task2", hidden=True, hidden_from=HIDDEN))
    sc = framework.scenario_data(c, 3)
    for s in sc["built"]:
        s["layout"] = [[i, b] for i, (_, b) in enumerate(s["layout"])]  # L2 tables filled from entry 0
    assert "a sequence with holey L2 tables freed" not in task2(sc)
    kernel = next(c for c in framework.checks_of("task10", hidden=True, hidden_from=HIDDEN))
    sc = framework.scenario_data(kernel, 3)
    sc["cases"] = [case for case in sc["cases"] if case["batch"]["head_size"] != 16]
    assert "head size 16 (under a warp)" not in task10(sc, logits=False)
    for case in sc["cases"]:
        case["batch"]["q_scale"] = 1
    assert "logits that overflow exp" not in task10(sc)


def test_the_child_is_sent_scenarios_as_data_never_a_seed():
    from pagedlab.sandbox.runner import plan_for, requests_for

    for task in ("task1", "task2", "task10", "task13"):
        checks, plan = plan_for(manifest.task(task), hidden=True, hidden_seed=1234567, hidden_from=HIDDEN)
        requests = requests_for(checks, plan)
        for c, request in zip(checks, requests, strict=True):
            assert "seed" not in request
            # the bytes of the empty engines its scenes start from: none for Task 1 (its answer)
            # nor for a task that builds no engine
            assert bool(request.pop("engines")) == (task in ("task2", "task13"))
            if c.hidden:
                assert set(request) == {"key", "driver", "scenario"}
                assert framework.find_scenario_driver(request["driver"]).__module__.startswith("pagedlab.checks.")
            else:
                assert request == {"key": c.key}
        assert "1234567" not in json.dumps(requests)


def test_the_child_grades_hidden_checks_without_importing_a_hidden_module(tmp_path):
    """The grader plans from grading/hidden/; the child, pointed at a folder of hidden modules that
    raise when imported, still runs every hidden check: it never imports one."""
    from pagedlab.loader import impl_dir
    from pagedlab.sandbox.runner import run_task

    trap = tmp_path / "hidden"
    trap.mkdir()
    for path in HIDDEN.glob("*.py"):
        (trap / path.name).write_text('raise RuntimeError("a hidden check module was imported in the child")\n')
    env = {**__import__("os").environ, framework.HIDDEN_DIR_ENV: str(trap)}
    outcome = run_task(manifest.task("task2"), "solutions", impl_dir("solutions"), env=env, hidden=True,
                       hidden_seed=99, hidden_from=HIDDEN)
    assert not outcome.problem, outcome.problem
    hidden = [c for c in outcome.checks if c.hidden]
    assert hidden and all(c.passed for c in outcome.checks), [(c.name, c.message) for c in outcome.checks]
    shutil.rmtree(trap)


def test_a_scenario_is_data_of_a_capped_size():
    """What the grader sends is JSON through a round trip, and a planner that draws more than the
    cap is the grader's error, not a child's problem."""
    c = framework.Check("task1", "oversized", framework.find_scenario_driver("drawn.memory_manager.init"),
                        hidden=True, scenario=lambda seed: {"sizes": [64] * (framework.MAX_SCENARIO_BYTES // 3)})
    with pytest.raises(ValueError, match="at most"):
        framework.scenario_data(c, 0)
    c.scenario = lambda seed: {"sizes": (64, seed)}
    assert framework.scenario_data(c, 5) == {"sizes": [64, 5]}
