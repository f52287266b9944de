"""Every class of every task's domain is drawn in every grading (pagedlab/drivers/README.md,
"Domains"), and the child grading a hidden check gets its scenario as data.

A hidden check's planner (grading/hidden/) draws its scenario in the grader from the grading's
seed and returns plain data, so what a grading covers can be read off that data without running
any student code: below, each hidden check has a classifier, written from the spec independently
of the planner (with a small model of the HW3 engine where a class depends on what a call does),
that names the classes a scenario holds. The classes wanted are the domain table's
(`pagedlab.spec.domains`, which the planners read too): under 200 seeds every scenario must hold
every class; a class only some seeds draw would give one submission different scores on a
regrade, and a class the table lists that no planner draws fails here.
"""

from __future__ import annotations

import json
import math
import shutil
from collections import Counter
from pathlib import Path

import pytest

from pagedlab.drivers import record
from pagedlab.grader import registry
from pagedlab.spec import catalog, domains, manifest
from pagedlab.spec.domains import HARD_CODED, INT_MAX, INT_MIN

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


def _id_class(v: int) -> str:
    return {0: "0", INT_MIN: "INT_MIN", INT_MAX: "INT_MAX"}.get(v) or ("negative" if v < 0 else "positive")


def _c_int(v) -> bool:
    return type(v) is int and INT_MIN <= v <= INT_MAX


def _not_c_int(v) -> str:
    """The class of a value a C int cannot hold."""
    if isinstance(v, bool):
        return "a bool"
    if isinstance(v, int):
        return "INT_MAX + 1" if v > INT_MAX else "INT_MIN - 1"
    return {str: "a string", float: "a float"}.get(type(v), "None")


def _owners(n: int) -> str:
    return "one" if n == 1 else "two" if n == 2 else "many"


def _pick(items: list, u: float):
    return items[min(int(u * len(items)), len(items) - 1)]


HARD = {v for n in HARD_CODED for v in (n - 1, n)}  # 63, 64, 255, 256, ...


class Engine:
    """A model of the HW3 engine written from §4.2 (ids, ref counts, first-fit), enough to tell
    which call of a drawn scenario succeeds and what it does: the classifiers' view of the data."""

    def __init__(self, blocks: int, built=()):
        self.refs = [0] * blocks
        self.seqs: dict = {}  # id -> {"kv": n, "map": {logical: block}}
        for s in built:
            self.seqs[s["id"]] = {"kv": s["kv"], "map": {lg: b for lg, b in s["layout"]}}
            for _, b in s["layout"]:
                self.refs[b] += 1

    @property
    def free(self) -> int:
        return self.refs.count(0)

    def first_fit(self, taken: list) -> int:
        """The lowest free block; appends to `taken` whether every block below it was in use."""
        block = self.refs.index(0)
        self.refs[block] = 1
        taken.append(block)
        return block

    def create(self, sid, length, taken):
        needed = -(-length // 16) if length > 0 else 0
        if length <= 0 or not INT_MIN <= length <= INT_MAX or sid in self.seqs or needed > 256 or needed > self.free:
            return False
        self.seqs[sid] = {"kv": length, "map": {lg: self.first_fit(taken) for lg in range(needed)}}
        return True

    def drop(self, sid) -> int:
        """Free `sid`: the most owners any of its blocks had (0 if there is no such sequence)."""
        seq = self.seqs.pop(sid, None)
        if seq is None:
            return 0
        most = max((self.refs[b] for b in seq["map"].values()), default=0)
        for b in seq["map"].values():
            self.refs[b] -= 1
        return most

    def append(self, sid) -> dict | None:
        """What an append to `sid` does: {"kv", "need", "owners", "l2_missing", "taken"}, "ok"."""
        seq = self.seqs.get(sid)
        if seq is None:
            return None
        kv = seq["kv"]
        logical = kv // 16
        what = {"kv": kv, "ok": False, "taken": [], "owners": 0,
                "l2_missing": not any(lg // 16 == logical // 16 for lg in seq["map"])}
        if logical >= 256:
            return what
        block = seq["map"].get(logical)
        what["owners"] = self.refs[block] if block is not None else 0
        what["need"] = "page" if block is None else "cow" if self.refs[block] > 1 else None
        if what["need"] and self.free == 0:
            return what
        if what["need"]:
            if block is not None:
                self.refs[block] -= 1
            seq["map"][logical] = self.first_fit(what["taken"])
        seq["kv"] += 1
        what["ok"] = True
        return what

    def past_hard_coded(self, block: int) -> bool:
        """Whether taking `block` first-fit passed every lower block: all of them in use now."""
        return block in HARD and all(self.refs[b] > 0 for b in range(block))


def task1(sc) -> set:
    found = set()
    for size in sc["sizes"]:
        blocks, rest = divmod(size, 64)
        if blocks in HARD_CODED or blocks - 1 in HARD_CODED:
            found.add(f"pool_size: {blocks} blocks")
        elif size == 0:
            found.add("pool_size: 0 bytes")
        elif blocks == 0:
            found.add("pool_size: 1-63 bytes (under one block)")
        elif size == 64:
            found.add("pool_size: 64 bytes (one block)")
        else:
            found.add("pool_size: a multiple of 64" if not rest else "pool_size: a multiple of 64 plus 1-63")
    if sc["sizes"]:
        found.add("pool_addr: the pool")
    if sc.get("null"):
        found.add("pool_addr: NULL")
    return found


def _length_class(n: int) -> str:
    fixed = {0: "0", 16: "16", 17: "17", 256: "256", 257: "257", 4096: "4096 (256 blocks: the bound)",
             4097: "4097 (one past the bound)", INT_MIN: "INT_MIN", INT_MAX: "INT_MAX"}
    return fixed.get(n) or ("negative" if n < 0 else "1-15" if n < 16 else "other")


def task2(sc) -> set:
    found = set()
    for scene in sc["scenes"]:
        engine = Engine(scene["blocks"], scene["built"])
        built = {s["id"]: s["layout"] for s in scene["built"]}
        live = list(built)
        created_as = {}  # id -> its class, for the ids created here and later freed
        for st in scene["steps"]:
            if "engine" in st:
                found.add("engine: NULL")
                continue
            sid = _pick(live, st["live"]) if st.get("live") is not None and live else st["id"]
            if st["op"] == "create" and not (_c_int(sid) and _c_int(st["length"])):
                bad = st["length"] if _c_int(sid) else sid
                found.add(f"not a C int (as seq_id and as initial_kv_len): {_not_c_int(bad)}")
                continue
            if st["op"] == "create":
                n, free_before, taken = st["length"], engine.free, []
                needed = -(-n // 16) if n > 0 else 0
                if sid in engine.seqs:
                    found.add("errors: a live id created again")
                    continue
                ok = engine.create(sid, n, taken)
                kind = _length_class(n)
                # A length that fits is drawn where there is room (accepted); one past the bound
                # where more than 256 blocks are free (refused for the bound, not for room).
                fits = 0 < needed <= 256
                if kind != "other" and (ok if fits else not kind.startswith("4097") or free_before > 256):
                    found.add(f"initial_kv_len: {kind}")
                if 0 < needed <= 256 and needed == free_before:
                    found.add("free blocks at a create: exactly the blocks needed")
                if 0 < needed <= 256 and needed == free_before + 1:
                    found.add("free blocks at a create: one fewer than needed (OOM)")
                if ok:
                    live.append(sid)
                    created_as[sid] = _id_class(sid)
                    found |= {f"first-fit block: {b}" for b in taken if b in HARD
                              and all(engine.refs[x] > 0 for x in range(b))}
            else:
                most = engine.drop(sid)
                if not most:
                    found.add("errors: an unknown id freed")
                    continue
                live.remove(sid)
                found.add(f"owners of the blocks freed: {_owners(most)}")
                if sid in created_as:
                    found.add(f"seq_id: {created_as[sid]}")
                layout = built.get(sid)
                if layout is not None:
                    found |= {f"the sequence freed: {name}" for name, ok in (
                        ("holey L2 tables", _holey(layout)), ("NULL L1 entries first", _null_l1_first(layout)),
                        ("256 blocks (16 full L2 tables)", len(layout) == 256)) if ok}
    return found


def task3(sc) -> set:
    engine = Engine(sc["blocks"], sc["built"])
    built = {s["id"]: s["layout"] for s in sc["built"]}
    ids = list(built)
    forked = set()
    found = set()
    for f in sc["forks"]:
        parent = ids[-1] if f["parent"] == "last" else f["parent"]
        if parent is None:
            parent = _pick(ids, f["pick"])
        new = _pick(ids, f["pick_new"]) if f.get("pick_new") is not None else f["new"]
        if "engine" in f:
            found.add("engine: NULL")
            continue
        if parent not in engine.seqs:
            found.add("errors: an unknown parent")
            continue
        if new == parent:
            found.add("errors: the new id is the parent's")
            continue
        if new in engine.seqs:
            found.add("errors: a new id in use")
            continue
        blocks = engine.seqs[parent]["map"]
        found |= {f"parent_id: {_id_class(parent)}", f"new_id: {_id_class(new)}",
                  f"owners of the parent's blocks: {_owners(max(engine.refs[b] for b in blocks.values()))}"}
        found |= {f"block ids: {b}" for b in blocks.values() if b in HARD}
        layout = built.get(parent)
        if parent in forked:
            found.add("parent: a fork (a fork of a fork)")
        if layout is not None:
            tables = _tables(layout)
            found |= {f"parent: {name}" for name, ok in (
                ("one block", len(layout) == 1),
                ("one full L2 table (16 blocks)", len(layout) == 16 and list(tables) == [0]),
                ("several L2 tables", 17 <= len(layout) <= 255 and 0 in tables and len(tables) > 1),
                ("256 blocks (the bound)", len(layout) == 256),
                ("NULL L1 entries first", _null_l1_first(layout) and not _holey(layout)),
                ("holey L2 tables", _holey(layout))) if ok}
        engine.seqs[new] = {"kv": engine.seqs[parent]["kv"], "map": dict(blocks)}
        for b in blocks.values():
            engine.refs[b] += 1
        ids.append(new)
        forked.add(new)
    return found


def _appends(scene, found, kind_of_values=True) -> Engine:
    engine = Engine(scene["blocks"], scene["built"])
    built = {s["id"]: s["layout"] for s in scene["built"]}
    for sid, value in scene["appends"]:
        if not _c_int(value):
            found.add(f"not a C int (as kv_data): {_not_c_int(value)}")
            continue
        free_before = engine.free
        what = engine.append(sid)
        if what is None:
            found.add("seq_id: unknown")
            continue
        kv = what["kv"]
        if kv == 4096 and not what["ok"]:
            found.add("kv_count: 4096 (the bound: refused)")
        if not what["ok"]:
            if what.get("need") and free_before == 0:
                found.add("free blocks when a block is needed: " + (
                    "none: the L2 table missing too" if what["l2_missing"] else
                    "none: a new page" if what["need"] == "page" else "none: copy-on-write"))
            continue
        found.add(f"seq_id: {_id_class(sid)}")
        if kind_of_values:
            found.add("kv_data: " + {INT_MIN: "INT_MIN", INT_MAX: "INT_MAX", 0: "0", -1: "-1"}.get(value, "other"))
        found |= {f"kv_count: {name}" for name, ok in (
            ("a multiple of 16 (a new page)", kv % 16 == 0 and what["need"] == "page"),
            ("1-15 past a multiple of 16", kv % 16 != 0),
            ("253-255 (the next record ends an L2 table's blocks)", 253 <= kv <= 255),
            ("256 (the next L2 table)", kv == 256), ("4095 (the last record)", kv == 4095)) if ok}
        if kv % 16:
            found.add(f"owners of the last block: {_owners(what['owners'])}")
        elif kv and engine.refs[engine.seqs[sid]["map"][kv // 16 - 1]] >= 2:
            found.add("owners of the last block: two, the block full (a new page: no copy)")
        if what["l2_missing"] and free_before == 1:
            found.add("free blocks when a block is needed: one: the L2 table missing (from the heap)")
        found |= {f"first-fit block: {b}" for b in what["taken"] if engine.past_hard_coded(b)}
        if sid in built and _holey(built[sid]):
            found.add("layout: holey L2 tables")
    return engine


def task4(sc) -> set:
    found = set()
    _appends({"blocks": sc["blocks"], "built": sc["built"], "appends": sc["appends"]}, found)
    # The main engine then takes appends until its pool is full (the driver stops at the first -1
    # with no free block) and a copy-on-write append with no block left.
    if len(sc["until_full"]) >= 16 * sc["blocks"]:
        found.add("free blocks when a block is needed: none: a new page")
        if sc.get("cow_when_full"):
            found.add("free blocks when a block is needed: none: copy-on-write")
    _appends(sc["one_free"], found)
    _appends(sc["big"], found)
    if "null" in sc:
        found.add("engine: NULL")
    return found


def task5(sc) -> set:
    found = {"sequences: none"} if sc["empty_blocks"] > 0 else set()
    # Each engine as {layout: how many sequences map it} (forks share a layout).
    engines = [Counter(tuple(map(tuple, s["layout"])) for s in sc["built"])]
    for e in sc.get("counts", []):
        found.add("engine: NULL")
        engines.append(Counter(tuple(map(tuple, e["bases"][i % len(e["bases"])][1])) for i in range(len(e["ids"]))))
    for owners in engines:
        n = sum(owners.values())
        if n in (1, 2) or n in HARD_CODED or n - 1 in HARD_CODED:
            found.add(f"sequences: {n}")
        for layout, count in owners.items():
            found.add(f"owners of a block: {_owners(count)}")
            found |= {f"layout: {name}" for name, ok in (
                ("NULL L1 entries first", _null_l1_first(layout)), ("holey L2 tables", _holey(layout)),
                ("256 blocks (16 full L2 tables)", len(layout) == 256)) if ok}
    return found


def _power_of_two(n: int) -> bool:
    return n & (n - 1) == 0


def task6(sc) -> set:
    found = set()
    for case in sc["cases"]:
        bs, table = case["block_size"], case["table"]
        found.add("block_size: " + ("1" if bs == 1 else "a power of two" if _power_of_two(bs) else "not a power of two"))
        found |= {f"block_table dtype: {case['table_dtype']}", f"positions dtype: {case['positions_dtype']}"}
        if case["table_dtype"] == "int32" and max(table) * bs >= 2**31:
            found.add("slots: past 2**31 from an int32 table")
        mapped = len([b for b in table if b >= 0])
        if mapped > 1024:
            found.add("block_table length: past 1024 blocks")
        if len(case["positions"]) > 1024:
            found.add("positions: past 1024 positions")
        edges = {b * bs for b in range(mapped)} | {b * bs + bs - 1 for b in range(mapped)}
        if not edges <= set(case["positions"]):
            return found  # a case without every block's first and last token
    return found | {"positions: first and last token of every block"}


def task7(sc) -> set:
    found = set()
    for case in sc["cases"]:
        blocks, bs, heads, _ = case["shape"]
        real = [s for s in case["slots"] if s >= 0]
        found.add(f"dtype: {case['dtype']}")
        if not real:
            found.add("slots: only padding")
            continue
        found |= {"num_kv_heads: " + ("one" if heads == 1 else "several"),
                  "block_size: " + ("a power of two" if _power_of_two(bs) else "not a power of two")}
        found |= {f"slots: {name}" for name, ok in (
            ("-1 (padding)", -1 in case["slots"]), ("other negatives", any(s < -1 for s in case["slots"])),
            ("0 (the first slot)", 0 in real), ("the cache's last slot", blocks * bs - 1 in real)) if ok}
        if len(real) > 1024:
            found.add("tokens: past 1024")
    return found


def task8(sc) -> set:
    found = set()
    for case in sc["cases"]:
        b = case["batch"]
        bs, lens = b["block_size"], b["seq_lens"]
        found |= {f"dtype: {b['dtype']}", f"block_table dtype: {case['table_dtype']}",
                  "block_size: " + ("1" if bs == 1 else "a power of two" if _power_of_two(bs) else "not a power of two")}
        if b.get("shared_blocks"):
            found.add("blocks: shared")
        if any(n > 1024 for n in lens):
            found.add("lengths: past 1024 tokens")
        if bs > 1:
            found |= {f"lengths: {name}" for name, ok in (
                ("1", 1 in lens), ("bs-1", bs - 1 in lens), ("bs", bs in lens), ("bs+1", bs + 1 in lens),
                ("a multiple of bs", any(n % bs == 0 and n >= 2 * bs for n in lens)),
                ("past 64 blocks", any(n > 64 * bs for n in lens))) if ok}
    return found


PUBLIC_TASK9_HEAD_SIZES = {32, 64, 80, 96}


def _heads(kv: int, heads: int) -> str:
    return "heads: " + ("MHA" if kv == heads else "MQA" if kv == 1 else "GQA")


def _logits(batch: dict, scale, q_float32: bool = True) -> str | None:
    """The logits class of a case: a one-sign class only if every |logit| >= 105 (the smallest
    dot product of its keys and query is head_size), a large one only on a float32 q."""
    q_scale, sign = batch.get("q_scale", 1), batch.get("logit_sign", 0)
    if not sign:
        return "logits: mixed signs" if q_scale == 1 else "logits: mixed signs, large" if q_float32 and q_scale >= 40 else None
    hs = batch["head_size"]
    smallest = q_scale * (1 / math.sqrt(hs) if scale is None else scale) * hs
    if q_float32 and smallest >= 105:
        return "logits: all positive, large" if sign > 0 else "logits: all negative, large"
    return None


def task9(sc) -> set:
    found = set()
    for case in sc["cases"]:
        b = case["batch"]
        q_dtype = b.get("q_dtype", b["dtype"])
        found |= {_heads(b["num_kv_heads"], b["num_heads"]), f"dtypes: q {q_dtype}, caches {b['dtype']}",
                  "scale: " + ("default" if case["scale"] is None else "custom")}
        bs, lens = b["block_size"], b["seq_lens"]
        found.add("block_size: " + ("a power of two" if _power_of_two(bs) else "not a power of two"))
        if b["head_size"] not in PUBLIC_TASK9_HEAD_SIZES:
            found.add("head_size: one no public check uses")
        if {bs, bs + 1} <= set(lens):
            found.add("lengths: at block edges (bs, bs+1)")
        if any(n > 64 * bs for n in lens):
            found.add("lengths: past 64 blocks")
        if b.get("shared_blocks"):
            found.add("blocks: shared")
        found.add(_logits(b, case["scale"], q_dtype == "torch.float32"))
    return found - {None}


FLT_MAX_EXP = math.log(3.4028234663852886e38)  # exp of a float32 above this is inf


def _overflows(batch: dict, scale) -> bool:
    """Whether some logit of the case, as the kernel computes it, overflows a float32 exp."""
    import numpy as np

    from pagedlab.drivers.kernel_batch import make_kernel_batch
    from pagedlab.grader.trusted.attention import _sequence_tokens

    kb = make_kernel_batch(**batch)
    group = batch["num_heads"] // batch["num_kv_heads"]
    scale = 1 / math.sqrt(batch["head_size"]) if scale is None else scale
    keys = (_sequence_tokens(kb, s)[0] for s in range(len(kb.seq_lens)))
    top = max(float(np.max(np.einsum("hd,nhd->hn", kb.q[s].astype(np.float64), np.repeat(k, group, axis=1)))) * scale
              for s, k in enumerate(keys))
    return top > FLT_MAX_EXP


def _kernel_common(b, scale, found) -> str | None:
    """Adds the classes every kernel case has; returns its logits class."""
    found |= {f"block_size: {b['block_size']}", _heads(b["num_kv_heads"], b["num_heads"]),
              "scale: " + ("default" if scale is None else "custom")}
    if b.get("shared_blocks"):
        found.add("blocks: shared")
    return _logits(b, scale)


def task10(sc, *, logits: bool = True) -> set:
    """`logits`: check that a scaled mixed case does overflow a float32 exp (computed: slow)."""
    found = set()
    for case in sc["cases"]:
        b, lens = case["batch"], case["batch"]["seq_lens"]
        bs, hs = b["block_size"], b["head_size"]
        klass = _kernel_common(b, case["scale"], found)
        if klass != "logits: mixed signs, large" or not logits or _overflows(b, case["scale"]):
            found.add(klass)
        found.add("head_size: " + (f"{hs} (under a warp)" if hs < 32 else "33-128" if hs <= 128
                                   else "256 (the bound)" if hs == 256 else "129-255 (above the 128 threads)"))
        found |= {f"lengths: {name}" for name, ok in (("1", 1 in lens), ("bs-1", bs - 1 in lens), ("bs+1", bs + 1 in lens),
                                                      ("127-129 (the thread count)", bool({127, 128, 129} & set(lens))),
                                                      ("past 64 blocks and 2048 tokens", any(n > 2048 and n > 64 * bs
                                                                                            for n in lens))) if ok}
    if len(set(sc["schedules"])) >= 2:
        found.add("schedules: two")
    return found - {None}


def task11(sc) -> set:
    found = set()
    for pool in sc["pools"]:
        n, bs, ops = pool["blocks"], pool["block_size"], pool["ops"]
        found.add("pool: " + ("small (5-8 blocks of 1-2 tokens: evictions, refusals)" if n < 10 and bs <= 2
                              else "larger (12-23 blocks of 3-5 tokens)" if 12 <= n <= 23 and 3 <= bs <= 5
                              else "past 256 blocks" if n > 256 else "other"))
        allocs = [op for op in ops if op[0] == "allocate"]
        if any(0 in p and any(t < 0 for t in p) for _, _, p in allocs):
            found.add("prompts: token ids 0 and negative")
        if len({tuple(p[:3]) for _, _, p in allocs if len(p) >= 3}) < len([p for _, _, p in allocs if len(p) >= 3]):
            found.add("prompts: shared prefixes")
        for i in range(len(ops) - 4):  # a whole-block prompt twice, both freed, then it plus one token
            (a1, _, p1), (a2, _, p2), (f1, _, _), (f2, _, _), (a3, _, p3) = ops[i:i + 5]
            if (a1, a2, f1, f2, a3) == ("allocate", "allocate", "free", "free", "allocate") and p1 == p2 \
                    and len(p1) % bs == 0 and p3[:-1] == p1 and len(p3) == len(p1) + 1:
                found.add("prompts: a whole-block prompt twice, freed, reused plus one token")
        if pool.get("hash") == "colliding":
            # A block whose tokens are cached under another parent (t after t), on an empty cache.
            (x, _, px), (y, _, py) = ops[0], ops[1]
            if (x, y) == ("allocate", "allocate") and len(px) > 2 * bs and py[:bs] == py[bs:2 * bs] == px[:bs]:
                found.add("hash_fn: one that collides (every block the same hash)")
        else:
            found.add("hash_fn: the default")
        found |= _room(pool)
    for tokens, bs in sc.get("hash_full_blocks", []):
        found.add("hash_full_blocks: " + ("no tokens" if not tokens else "under one block" if len(tokens) < bs
                                          else "whole blocks (two or more)" if len(tokens) % bs == 0 and len(tokens) >= 2 * bs
                                          else "whole blocks plus a partial one" if len(tokens) % bs else "one block"))
    queue = sc.get("remove")
    if queue and queue["blocks"] > 1024 and all(0 < v < queue["blocks"] - 1 for v in queue["victims"]):
        found.add("free queue: remove from the middle of a queue past 1024 blocks")
    return found


def _room(pool) -> set:
    """The room classes of an allocate: a whole-block prompt P allocated and freed (idle, cached
    hits), a filler, then P plus new tokens, with nothing else live: the free blocks are the pool
    but the filler's, and P's hits count against them."""
    n, bs, ops = pool["blocks"], pool["block_size"], pool["ops"]
    for i in range(len(ops) - 3):
        (a, ra, p), (f, rf, _), (g, _, filler), (b, _, q) = ops[i:i + 4]
        if (a, f, g, b) != ("allocate", "free", "allocate", "allocate") or ra != rf or len(p) % bs or q[:len(p)] != p:
            continue
        live = set()
        for op, rid, _ in ops[:i]:
            live = live | {rid} if op == "allocate" else live - {rid}
        if live:
            continue
        room = n - -(-len(filler) // bs)
        need = -(-len(q) // bs)  # its hits (idle) and its new blocks
        if need == room:
            return {"room at an allocate: exactly enough (idle hits counted)"}
        if need == room + 1:
            return {"room at an allocate: one block short (None)"}
    return set()


def task12(sc) -> set:
    found = {"memory: 1 slot", "trace: everything freed (a full merge)"}
    for trace in sc["traces"]:
        found |= {f"memory: {trace['total']} slots", "request: the whole memory",
                  "request: more than the largest free block (None)"}
        first = [n for op, _, n in trace["steps"][:4] if op == "alloc"]
        found |= {f"request: {name}" for name, ok in (("1", 1 in first),
                                                     ("a power of two", any(n > 1 and _power_of_two(n) for n in first)),
                                                     ("a size that rounds up", any(not _power_of_two(n) for n in first)))
                  if ok}
    return found


def _components(layouts: dict) -> list[set]:
    """The groups (ids joined by shared blocks, transitively) of {id: blocks}."""
    found: list[tuple[set, set]] = []
    for sid, blocks in layouts.items():
        ids, mine = {sid}, set(blocks)
        for group in [g for g in found if g[1] & mine]:
            found.remove(group)
            ids, mine = ids | group[0], mine | group[1]
        found.append((ids, mine))
    return [ids for ids, _ in found]


def task13_swap(sc) -> set:
    found = set()
    for rig in sc["rigs"]:
        where = {sid: "gpu" for sid, _, _ in rig["gpu"]}
        blocks = {sid: set(b) for sid, _, b in rig["gpu"]}
        order = [sid for sid, _, _ in rig["gpu"]]
        cpu_ids = {sid for sid, _, _ in rig["cpu"]}
        taken = len({b for _, _, bs in rig["cpu"] for b in bs})
        cpu_free = rig["cpu_blocks"] - taken
        moved = False
        for fn, sid in rig["moves"]:
            side = "gpu" if fn == "swap_out" else "cpu"
            if where.get(sid) != side:
                continue
            group = next(g for g in _components({s: blocks[s] for s in where if where[s] == side}) if sid in g)
            need = len(set().union(*(blocks[s] for s in group)))
            if fn == "swap_out":
                if group & cpu_ids:
                    found.add("ids on the destination: a clash (refused)")
                    continue
                if need > cpu_free:
                    if need == cpu_free + 1:
                        found.add("free blocks on the destination: one fewer (refused)")
                    continue
                if need == cpu_free:
                    found.add("free blocks on the destination: exactly the group's blocks")
                found.add(f"seq_id: {_id_class(sid)}")
                found.add("group: " + _group_kind(sid, group, blocks, order))
                cpu_free -= need
                moved = True
            else:
                cpu_free += need
            for s in group:
                where[s] = "cpu" if fn == "swap_out" else "gpu"
            if fn == "swap_in":
                order = [s for s in order if s not in group] + [s for s in order if s in group]
        if moved and 0 < taken < rig["cpu_blocks"]:
            found.add("swap space: partly taken")
    return found


def _group_kind(sid, group, blocks, order) -> str:
    if len(group) == 1:
        return "one sequence"
    if len(group) == 2:
        return "two sequences"
    if len(group) == 3:
        middle = [s for s in group if s != sid and blocks[s] & blocks[sid]]
        far = [s for s in group if s != sid and not blocks[s] & blocks[sid]]
        if len(middle) == 1 and len(far) == 1 and order.index(far[0]) < order.index(middle[0]):
            return "a chain of three (A-B-C: A and C share nothing; C listed before B)"
    return "other"


def task13_copy(sc) -> set:
    found = set()
    total = sc.get("gpu_blocks", 32)
    for pairs in sc["lists"]:
        if not pairs:
            found.add("pairs: none")
            continue
        ids = [b for p in pairs for b in p]
        bad = [b for b in ids if not 0 <= b < total]
        dests, sources = [d for _, d in pairs], [s for s, _ in pairs]
        repeated, also_source = len(set(dests)) < len(dests), bool(set(dests) & set(sources))
        if not bad and repeated and not also_source:
            found.add("pairs: a destination repeated")
        if not bad and also_source and not repeated:
            found.add("pairs: a destination that is also a source")
        if not bad and not repeated and not also_source:
            if len(set(sources)) < len(sources):
                found.add("pairs: one source to several destinations")
            found |= {f"block id: {b}" for b in ids if b in HARD}
            found |= {f"block id: {name}" for name, v in (("0", 0), ("the last block", total - 1)) if v in ids}
        if len(bad) == 1 and not repeated and not also_source:  # refused for that id alone
            b = bad[0]
            found.add("block id: " + ({-1: "-1", INT_MIN: "INT_MIN", INT_MAX: "INT_MAX", total: "total (one past the last)"}
                                      .get(b) or ("other negatives" if b < -1 else "other")))
    return found


def task14(sc) -> set:
    found = set()
    for case in sc["cases"]:
        b, p = case["batch"], case["partition_size"]
        bs, lens = b["block_size"], b["seq_lens"]
        found.add(_kernel_common(b, case["scale"], found))
        found.add("partition_size: " + ("one block" if p == bs else "2-8 blocks" if p in (2 * bs, 4 * bs, 8 * bs)
                                        else "512 (the default)" if p == 512 else "1024 (past 512)" if p == 1024
                                        else "other"))
        ks = range(1, 4)
        found |= {f"lengths: {name}" for name, ok in (
            ("1", 1 in lens), ("within one partition", any(1 < n < p for n in lens)),
            ("k*P-1", any(n == k * p - 1 for n in lens for k in ks)), ("k*P", any(n == k * p for n in lens for k in ks)),
            ("k*P+1", any(n == k * p + 1 for n in lens for k in ks)), ("past 64 blocks", any(n > 64 * bs for n in lens)))
            if ok}
    return found - {None}


CLASSIFIERS = {"task1": task1, "task2": task2, "task3": task3, "task4": task4, "task5": task5, "task6": task6,
               "task7": task7, "task8": task8, "task9": task9, "task10": task10, "task11": task11, "task12": task12,
               "task13/swap": task13_swap, "task13/copy": task13_copy, "task14": task14}
DOMAINS = {key: (fn, set(domains.domain(key).names())) for key, fn in CLASSIFIERS.items()}


def _domain(c) -> str:
    return f"{c.task}/{'copy' if 'copy_blocks' in c.name else 'swap'}" if c.task == "task13" else c.task


def _hidden_checks():
    return [pytest.param(c, id=c.key) for task in manifest.TASKS
            for c in registry.checks_of(task, hidden=True, hidden_from=HIDDEN)]


@pytest.mark.task_wide
@pytest.mark.parametrize("c", _hidden_checks())
def test_every_grading_draws_every_class_of_the_domain(c):
    """The classes come from the domain table (`pagedlab.spec.domains`): a class added there that
    a planner does not draw, or that the classifier cannot see, fails here."""
    assert c.scenario is not None, f"{c.key}: a hidden check plans its scenario in the grader"
    if _domain(c) not in DOMAINS:  # a task added since (the recipe's toy task): its row comes first
        pytest.skip(f"{c.key}: write its domain in pagedlab/spec/domains.py and its classifier here")
    classify, wanted = DOMAINS[_domain(c)]
    overflow = "logits: mixed signs, large"
    missed = {}
    for seed in SEEDS:
        # Task 10's exp overflow is computed from the batch: 20 seeds of it (the q scale is drawn).
        logits = {"logits": seed < 20} if classify is task10 else {}
        got = classify(catalog.scenario_data(c, seed), **logits)
        lacking = wanted - got
        if lacking:
            missed[seed] = sorted(lacking)
    assert not missed, (f"{c.key}: seeds whose grading misses a class (the planner does not draw it, or the "
                        f"classifier cannot see it): {dict(list(missed.items())[:5])}")
    assert overflow not in wanted or classify is not task10 or overflow in classify(catalog.scenario_data(c, 0))


@pytest.mark.task_wide
def test_every_hidden_check_of_the_domain_table_has_its_classifier():
    """Tasks 1-14: every hidden check has a domain in the table and a classifier here, and every
    domain of the table a check."""
    drawn = {_domain(c) for task in manifest.TASKS if int(task.removeprefix("task")) <= 14
             for c in registry.checks_of(task, hidden=True, hidden_from=HIDDEN)}
    assert drawn == set(DOMAINS) == {d.check for d in domains.DOMAINS}


def test_the_classifiers_see_a_missing_class():
    """The property above can fail: a planner that stops drawing a class is caught."""
    c = next(c for c in registry.checks_of("task2", hidden=True, hidden_from=HIDDEN))
    sc = catalog.scenario_data(c, 3)
    for s in sc["scenes"][0]["built"]:
        s["layout"] = [[i, b] for i, (_, b) in enumerate(s["layout"])]  # L2 tables filled from entry 0
    assert "the sequence freed: holey L2 tables" not in task2(sc)
    sc["scenes"][1]["steps"] = []  # no create takes the blocks past 64, 256, ...
    assert "first-fit block: 1024" not in task2(sc)
    kernel = next(c for c in registry.checks_of("task10", hidden=True, hidden_from=HIDDEN))
    sc = catalog.scenario_data(kernel, 3)
    sc["cases"] = [case for case in sc["cases"] if case["batch"]["head_size"] != 16]
    assert "head_size: 16 (under a warp)" not in task10(sc, logits=False)
    for case in sc["cases"]:
        case["batch"]["q_scale"] = 1
    assert not {"logits: mixed signs, large", "logits: all negative, large"} & task10(sc)


def test_the_child_is_sent_scenarios_as_data_never_a_seed():
    from pagedlab.grader.pipeline import plan_for, requests_for

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
                assert record.find_scenario_driver(request["driver"]).__module__.startswith("pagedlab.drivers.")
            else:  # a finished plan: the driver by name and its case data, no registry needed
                assert set(request) <= {"key", "function", "cases"} and request["key"] == c.key
                assert record.find_public_driver(request["function"]) is c.driver
                assert request.get("cases") == (json.loads(json.dumps(c.cases)) if c.cases is not None else None)
        assert "1234567" not in json.dumps(requests)


def test_the_child_grades_hidden_checks_without_importing_a_hidden_module(tmp_path):
    """The grader plans from grading/hidden/; the child, pointed at a folder of hidden modules that
    raise when imported, still runs every hidden check: it never imports one."""
    from pagedlab.grader.pipeline import run_task
    from pagedlab.loader import impl_dir

    trap = tmp_path / "hidden"
    trap.mkdir()
    for path in HIDDEN.glob("*.py"):
        (trap / path.name).write_text('raise RuntimeError("a hidden check module was imported in the child")\n')
    env = {**__import__("os").environ, registry.HIDDEN_DIR_ENV: str(trap)}
    outcome = run_task(manifest.task("task2"), "solutions", impl_dir("solutions"), env=env, hidden=True,
                       hidden_seed=99, hidden_from=HIDDEN)
    assert not outcome.problem, outcome.problem
    hidden = [c for c in outcome.checks if c.hidden]
    assert hidden and all(c.passed for c in outcome.checks), [(c.name, c.message) for c in outcome.checks]
    shutil.rmtree(trap)


def test_a_scenario_is_data_of_a_capped_size():
    """What the grader sends is JSON through a round trip, and a planner that draws more than the
    cap is the grader's error, not a child's problem."""
    c = catalog.Check("task1", "oversized", record.find_scenario_driver("drawn.memory_manager.init"),
                        hidden=True, scenario=lambda seed: {"sizes": [64] * (catalog.MAX_SCENARIO_BYTES // 3)})
    with pytest.raises(ValueError, match="at most"):
        catalog.scenario_data(c, 0)
    c.scenario = lambda seed: {"sizes": (64, seed)}
    assert catalog.scenario_data(c, 5) == {"sizes": [64, 5]}
