"""Sharing savings (parallel sampling, beam search) counted on a fork + copy-on-write block model,
cross-checked block for block against the Part A engine (solutions/memory_manager.py)."""

from __future__ import annotations

import numpy as np
import pytest

from pagedlab import sharing as H
from pagedlab import simulator as S
from pagedlab.engine.pool import Pool
from pagedlab.hw3 import BLOCK_SIZE, KV_PER_BLOCK
from pagedlab.loader import load


def test_fork_shares_and_append_copies_on_write():
    space = H.BlockSpace(4)
    a = space.new_sequence(6)  # blocks 0 (full) and 1 (2 of 4 tokens)
    b = space.fork(a)
    assert space.tables[b] == [0, 1] and space.ref[:2] == [2, 2] and space.used_blocks == 2
    space.append(b)  # writes into shared block 1: copy first
    assert space.tables[b] == [0, 2] and space.tables[a] == [0, 1] and space.copies == 1
    space.append(b)  # block 2 is private now: no copy
    space.append(b)  # boundary: a new block
    assert space.tables[b] == [0, 2, 3] and space.copies == 1
    assert space.unshared_blocks() == 2 + 3 and space.used_blocks == 4
    space.free(a)
    space.free(b)
    assert space.used_blocks == 0 and not any(space.ref)


class EngineSpace:
    """The same interface as BlockSpace, backed by the student-style HW3 engine."""

    def __init__(self, mm, num_blocks):
        self.mm, self.pool = mm, Pool(num_blocks * BLOCK_SIZE)
        self.engine = mm.llm_init(self.pool.addr, self.pool.size)
        self.block_size, self.lengths, self.next_id = KV_PER_BLOCK, {}, 0

    def new_sequence(self, n):
        sid, self.next_id = self.next_id, self.next_id + 1
        assert self.mm.create_sequence(self.engine, sid, n) is not None
        self.lengths[sid] = n
        return sid

    def fork(self, parent):
        sid, self.next_id = self.next_id, self.next_id + 1
        assert self.mm.fork_sequence(self.engine, parent, sid) is not None
        self.lengths[sid] = self.lengths[parent]
        return sid

    def append(self, sid):
        assert self.mm.append_kv(self.engine, sid, 7) == 0
        self.lengths[sid] += 1

    def free(self, sid):
        assert self.mm.free_sequence(self.engine, sid) == 0
        del self.lengths[sid]

    @property
    def used_blocks(self):
        return self.engine.total_local_blocks - self.engine.free_local_blocks

    def unshared_blocks(self):
        return sum(-(-n // KV_PER_BLOCK) for n in self.lengths.values())


@pytest.mark.parametrize("method", ["parallel", "beam"])
def test_block_model_counts_what_the_engine_allocates(method):
    mm = load("memory_manager", "solutions")
    prompts, outputs = S.sample_requests(S.ALPACA, 12, seed=4)
    for p, o in zip(prompts[:4], outputs.reshape(4, 3), strict=True):
        ours, theirs = H.BlockSpace(KV_PER_BLOCK), EngineSpace(mm, 512)
        if method == "parallel":
            got = H._parallel_sampling(ours, int(p), o), H._parallel_sampling(theirs, int(p), o)
        else:
            got = tuple(H._beam_search(s, int(p), int(o[0]), 3, 0.5, np.random.default_rng(1))
                        for s in (ours, theirs))
        assert got[0] == got[1]
        assert theirs.used_blocks == 0
        assert mm.llm_destroy(theirs.engine) == 0


def test_savings_grow_with_width_and_beam_search_saves_more():
    par = [H.measure("parallel", n, S.ALPACA, num_requests=80).saving for n in (2, 4, 6)]
    beam = [H.measure("beam", k, S.ALPACA, num_requests=80).saving for k in (2, 4, 6)]
    assert par == sorted(par) and beam == sorted(beam)
    assert 0 < par[0] and max(par) < min(beam) < 1


def test_one_sequence_saves_nothing():
    for method in ("parallel", "beam"):
        r = H.measure(method, 1, S.ALPACA, num_requests=20)
        assert r.saving == 0 and r.copies == 0


def test_parallel_sampling_saving_is_the_shared_prompt():
    """With equal outputs and a prompt of whole blocks, n samples share exactly the prompt."""
    space = H.BlockSpace(4)
    shared, unshared = H._parallel_sampling(space, 8, np.array([4, 4]))
    # After each of the 4 steps: 2 prompt blocks shared + 1 block per sample; unshared: 2 x 3.
    assert (shared, unshared) == (4 * 4, 4 * 6)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="method"):
        H.measure("greedy", 2)
    with pytest.raises(ValueError, match="width"):
        H.measure("beam", 0)
    with pytest.raises(ValueError, match="reshuffle"):
        H.measure("beam", 2, reshuffle=2)
    with pytest.raises(ValueError, match="block_size"):
        H.BlockSpace(0)
