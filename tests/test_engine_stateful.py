"""Model-based test: random create / fork / append / free on the reference memory manager,
checked after every step against a plain-Python model of the same rules (first-fit, ref counts,
copy-on-write, check-before-allocate) down to every word of the pool."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from pagedlab import block_tables, cmem
from pagedlab.engine.pool import Pool
from pagedlab.harness import hw3
from pagedlab.loader import load

NUM_BLOCKS = 10          # small, so OOM and CoW happen often
IDS = st.integers(0, 6)
EVENTS = {"cow": 0, "oom_cow": 0, "oom_page": 0}   # what the runs exercised, checked at the end


class Model:
    """The HW3 rules in plain Python: lists for tables, a numpy copy of the pool."""

    def __init__(self, pool: Pool):
        self.refs = [0] * NUM_BLOCKS
        self.seqs: dict[int, dict] = {}          # insertion order == list order
        self.words = pool.bytes.view("<u4").copy()
        self.events = EVENTS

    @property
    def free(self) -> int:
        return self.refs.count(0)

    def take(self) -> int:
        block = self.refs.index(0)
        self.refs[block] = 1
        return block

    def create(self, sid, length) -> bool:
        needed = -(-length // 16)
        if length <= 0 or sid in self.seqs or needed > 256 or needed > self.free:
            return False
        self.seqs[sid] = {"blocks": [self.take() for _ in range(needed)], "kv": length}
        return True

    def fork(self, parent, new) -> bool:
        if parent not in self.seqs or new in self.seqs:
            return False
        blocks = list(self.seqs[parent]["blocks"])
        for b in blocks:
            self.refs[b] += 1
        self.seqs[new] = {"blocks": blocks, "kv": self.seqs[parent]["kv"]}
        return True

    def append(self, sid, value) -> bool:
        if sid not in self.seqs:
            return False
        seq = self.seqs[sid]
        logical, offset = divmod(seq["kv"], 16)
        if logical >= 256:
            return False
        new_page = logical == len(seq["blocks"])
        cow = not new_page and self.refs[seq["blocks"][logical]] > 1
        if (new_page or cow) and self.free == 0:
            self.events["oom_cow" if cow else "oom_page"] += 1
            return False
        if new_page:
            seq["blocks"].append(self.take())
        elif cow:
            old, new = seq["blocks"][logical], self.take()
            self.words[new * 16:(new + 1) * 16] = self.words[old * 16:(old + 1) * 16]
            self.refs[old] -= 1
            self.events["cow"] += 1
            seq["blocks"][logical] = new
        self.words[seq["blocks"][logical] * 16 + offset] = value & 0xFFFFFFFF
        seq["kv"] += 1
        return True

    def free_seq(self, sid) -> bool:
        seq = self.seqs.pop(sid, None)
        if seq is None:
            return False
        for b in seq["blocks"]:
            self.refs[b] -= 1
        return True


class EngineMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.mm = load("memory_manager", "solutions")
        self.pool = Pool(NUM_BLOCKS * hw3.BLOCK_SIZE)
        self.heap_at_start = cmem.snapshot()
        self.engine = self.mm.llm_init(self.pool.addr, self.pool.size)
        self.model = Model(self.pool)
        self.written: dict[int, dict[int, int]] = {}

    def _call(self, ok: bool, call, failed_value):
        """Run `call`; a call the model rejects must leave the heap untouched."""
        heap = cmem.snapshot()
        got = call()
        if ok:
            assert got is not failed_value and got != failed_value
        else:
            assert got == failed_value or got is failed_value
            assert not cmem.changes_since(heap), "a rejected call used the heap"
        return got

    @rule(sid=IDS, length=st.integers(-2, 100))
    def create(self, sid, length):
        ok = self.model.create(sid, length)
        self._call(ok, lambda: self.mm.create_sequence(self.engine, sid, length), None)
        if ok:
            self.written[sid] = {}

    @rule(parent=IDS, new=IDS)
    def fork(self, parent, new):
        ok = self.model.fork(parent, new)
        self._call(ok, lambda: self.mm.fork_sequence(self.engine, parent, new), None)
        if ok:
            self.written[new] = dict(self.written[parent])

    @precondition(lambda self: self.model.seqs and len(self.model.seqs) < 7)
    @rule(data=st.data())
    def fork_existing(self, data):
        parent = data.draw(st.sampled_from(sorted(self.model.seqs)))
        new = data.draw(st.sampled_from(sorted(set(range(7)) - set(self.model.seqs))))
        self.fork(parent, new)

    @precondition(lambda self: self.model.seqs)
    @rule(data=st.data(), value=st.integers(-2**31, 2**31 - 1), repeat=st.integers(1, 20))
    def append_existing(self, data, value, repeat):
        self.append(data.draw(st.sampled_from(sorted(self.model.seqs))), value, repeat)

    @rule(sid=IDS, value=st.integers(-2**31, 2**31 - 1), repeat=st.integers(1, 20))
    def append(self, sid, value, repeat):
        for k in range(repeat):
            v = (value + k + 2**31) % 2**32 - 2**31      # distinct int32 records
            pos = self.model.seqs[sid]["kv"] if sid in self.model.seqs else None
            ok = self.model.append(sid, v)
            self._call(ok, lambda v=v: self.mm.append_kv(self.engine, sid, v), -1)
            if ok:
                self.written[sid][pos] = v

    @precondition(lambda self: self.model.seqs)
    @rule(data=st.data())
    def free_existing(self, data):
        sid = data.draw(st.sampled_from(sorted(self.model.seqs)))
        self.model.free_seq(sid)
        assert self.mm.free_sequence(self.engine, sid) == 0
        del self.written[sid]

    @rule(sid=IDS)
    def free_any(self, sid):
        ok = self.model.free_seq(sid)
        self._call(ok, lambda: self.mm.free_sequence(self.engine, sid), -1)
        self.written.pop(sid, None)

    @invariant()
    def matches_model(self):
        state = hw3.state(self.engine)
        assert list(state.refs) == self.model.refs
        assert state.free == self.model.free == state.refs.count(0)
        assert [s.seq_id for s in state.seqs] == list(self.model.seqs)
        for s in state.seqs:
            want = self.model.seqs[s.seq_id]
            assert s.kv_count == want["kv"]
            assert dict(s.mapping) == dict(enumerate(want["blocks"]))
        users = [0] * NUM_BLOCKS
        for s in state.seqs:
            for _, b in s.mapping:
                users[b] += 1
        assert users == list(state.refs)
        assert np.array_equal(self.pool.bytes.view("<u4"), self.model.words)
        assert self.pool.guard_intact()

    @invariant()
    def appended_values_read_back(self):
        if not self.model.seqs:
            return
        ids = list(self.model.seqs)
        rows = block_tables.block_table_rows(self.engine, ids)
        words = self.pool.bytes.view("<i4")
        for row, sid in zip(rows, ids, strict=True):
            for pos, value in self.written[sid].items():
                assert words[row[pos // 16] * 16 + pos % 16] == value

    def teardown(self):
        assert self.mm.llm_destroy(self.engine) == 0
        assert not cmem.changes_since(self.heap_at_start).allocated, cmem.leak_report(self.heap_at_start)


EngineMachine.TestCase.settings = settings(
    max_examples=120, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow], derandomize=True, database=None,
)


def test_engine_matches_model_and_runs_exercise_cow_and_oom():
    """Thousands of random steps; the counts prove CoW and both OOM paths were really hit."""
    EVENTS.update(cow=0, oom_cow=0, oom_page=0)
    EngineMachine.TestCase().runTest()
    print(EVENTS)
    assert EVENTS["cow"] > 50 and EVENTS["oom_cow"] > 5 and EVENTS["oom_page"] > 5, EVENTS
