"""How fast is the HW3 memory manager on C memory, next to a plain-Python allocator?

One seeded mixed trace (prefill create, decode append bursts, fork for parallel sampling, free)
runs on a 64K-block pool (4 MiB) through:

- the reference `solutions/memory_manager.py` (or `--impl`): ctypes structs on the tracked
  C heap, checked pointers, intrusive list lookup, first-fit scans — the code students write;
- a plain-Python baseline with the same rules (lists for tables and ref counts, a dict for the
  registry, a bytearray pool, `list.index` for first-fit), measured in the same run.

Both must end with identical block tables and pool bytes (the run aborts otherwise), so the
ratio compares the same work.

    .venv/bin/python benchmarks/bench_engine.py [--ops 6000] [--blocks 65536] [--impl solutions]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pagedlab import cmem  # noqa: E402
from pagedlab.engine.pool import Pool  # noqa: E402
from pagedlab.harness import hw3  # noqa: E402
from pagedlab.loader import load  # noqa: E402


def make_trace(n_ops: int, seed: int = 0, max_live: int = 96) -> list[tuple]:
    """A seeded request mix; ids are reused only after a free."""
    rng = random.Random(seed)
    live: list[int] = []
    next_id, trace = 0, []
    while len(trace) < n_ops:
        r = rng.random()
        if not live or (r < 0.15 and len(live) < max_live):
            trace.append(("create", next_id, rng.randint(16, 1024)))
            live.append(next_id)
            next_id += 1
        elif r < 0.22 and len(live) < max_live:
            trace.append(("fork", rng.choice(live), next_id))
            live.append(next_id)
            next_id += 1
        elif r < 0.32:
            victim = live.pop(rng.randrange(len(live)))
            trace.append(("free", victim, None))
        else:
            trace.append(("append", rng.choice(live), rng.randrange(-2**31, 2**31)))
    return trace


class PythonAllocator:
    """The same HW3 rules in idiomatic Python, as the baseline."""

    def __init__(self, pool_size: int):
        self.total = pool_size // 64
        self.refs = [0] * self.total
        self.free = self.total
        self.seqs: dict[int, list] = {}          # id -> [blocks, kv_count]
        self.pool = bytearray(pool_size)

    def _take(self, start: int = 0) -> int:
        block = self.refs.index(0, start)
        self.refs[block] = 1
        self.free -= 1
        return block

    def create(self, sid, length):
        need = -(-length // 16)
        if length <= 0 or sid in self.seqs or need > 256 or need > self.free:
            return None
        blocks, start = [], 0
        for _ in range(need):
            start = self._take(start)
            blocks.append(start)
        self.seqs[sid] = [blocks, length]
        return sid

    def fork(self, parent, new):
        if parent not in self.seqs or new in self.seqs:
            return None
        blocks, kv = self.seqs[parent]
        for b in blocks:
            self.refs[b] += 1
        self.seqs[new] = [list(blocks), kv]
        return new

    def append(self, sid, value):
        seq = self.seqs.get(sid)
        if seq is None:
            return -1
        blocks, kv = seq
        logical, offset = divmod(kv, 16)
        if logical >= 256:
            return -1
        new_page = logical == len(blocks)
        cow = not new_page and self.refs[blocks[logical]] > 1
        if (new_page or cow) and self.free == 0:
            return -1
        if new_page:
            blocks.append(self._take())
        elif cow:
            old, new = blocks[logical], self._take()
            self.pool[new * 64:new * 64 + 64] = self.pool[old * 64:old * 64 + 64]
            self.refs[old] -= 1
            blocks[logical] = new
        at = blocks[logical] * 64 + offset * 4
        self.pool[at:at + 4] = (value & 0xFFFFFFFF).to_bytes(4, "little")
        seq[1] = kv + 1
        return 0

    def free_seq(self, sid):
        seq = self.seqs.pop(sid, None)
        if seq is None:
            return -1
        for b in seq[0]:
            self.refs[b] -= 1
            if self.refs[b] == 0:
                self.free += 1
        return 0


def run_engine(mm, trace, pool: Pool):
    engine = mm.llm_init(pool.addr, pool.size)
    calls = {"create": lambda a, x: mm.create_sequence(engine, a, x),
             "fork": lambda a, x: mm.fork_sequence(engine, a, x),
             "append": lambda a, x: mm.append_kv(engine, a, x),
             "free": lambda a, x: mm.free_sequence(engine, a)}
    t = time.perf_counter()
    for op, a, x in trace:
        calls[op](a, x)
    elapsed = time.perf_counter() - t
    return engine, elapsed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=6000)
    ap.add_argument("--blocks", type=int, default=65536)
    ap.add_argument("--impl", default="solutions")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    mm = load("memory_manager", args.impl)
    trace = make_trace(args.ops, args.seed)
    pool = Pool(args.blocks * hw3.BLOCK_SIZE)
    # The baseline pool starts from the same magic pattern, so CoW copies compare equal.
    base_alloc = PythonAllocator(pool.size)
    base_alloc.pool[:] = bytes(pool.bytes)
    t_base = run_baseline(base_alloc, trace)
    heap = cmem.snapshot()
    engine, t_engine = run_engine(mm, trace, pool)

    # Same work: identical registry, block tables, ref counts and pool bytes.
    state = hw3.state(engine)
    assert [s.seq_id for s in state.seqs] == list(base_alloc.seqs), "registry differs from the baseline"
    for s in state.seqs:
        blocks, kv = base_alloc.seqs[s.seq_id]
        assert s.kv_count == kv and dict(s.mapping) == dict(enumerate(blocks)), f"sequence {s.seq_id} differs"
    assert list(state.refs) == base_alloc.refs and state.free == base_alloc.free
    assert bytes(pool.bytes) == bytes(base_alloc.pool), "pool bytes differ from the baseline"
    live_blocks = state.total - state.free
    t = time.perf_counter()
    assert mm.llm_destroy(engine) == 0
    t_destroy = time.perf_counter() - t
    assert not cmem.changes_since(heap).allocated, cmem.leak_report(heap)

    counts = {op: sum(1 for o, *_ in trace if o == op) for op in ("create", "append", "fork", "free")}
    print(f"trace: {len(trace)} ops {counts} on a {args.blocks}-block pool "
          f"({args.blocks * 64 >> 20} MiB); {len(state.seqs)} sequences and {live_blocks} blocks live at the end")
    print(f"{'implementation':<34}{'seconds':>10}{'ops/s':>12}{'vs baseline':>14}")
    print(f"{'plain-Python baseline':<34}{t_base:>10.3f}{len(trace) / t_base:>12,.0f}{1.0:>13.2f}x")
    print(f"{'memory_manager (' + args.impl + ')':<34}{t_engine:>10.3f}{len(trace) / t_engine:>12,.0f}"
          f"{t_base / t_engine:>13.3f}x")
    print(f"llm_destroy of the final state: {t_destroy * 1e3:.1f} ms, 0 bytes lost; results identical to the baseline")
    return 0


def run_baseline(alloc: PythonAllocator, trace) -> float:
    calls = {"create": alloc.create, "fork": alloc.fork, "append": alloc.append,
             "free": lambda a, x: alloc.free_seq(a)}
    t = time.perf_counter()
    for op, a, x in trace:
        calls[op](a, x)
    return time.perf_counter() - t


if __name__ == "__main__":
    sys.exit(main())

