"""How many blocks do fork and copy-on-write save? Parallel sampling and beam search.

Both decoding methods run several sequences that start from one prompt:

- **parallel sampling** (n samples): the prompt is computed once and forked n - 1 times; every
  sample then generates its own continuation and finishes on its own;
- **beam search** (width k): after every step only the k best candidates survive, and several
  of them may extend the same parent. A surviving beam *forks* its parent; a parent that no
  candidate extends is freed. Beams therefore share a long common history.

`BlockSpace` is a small block-level model of the Part A engine: block tables, reference counts,
fork (share every block, ref + 1) and append with copy-on-write (a write into a block that is
shared first copies it). The savings below count the physical blocks it really allocates,
against what the same sequences would hold without sharing (each its own copy of every block).

The beam-search *dynamics* (which beams survive) come from a model, not from a language model:
each new beam extends its own predecessor with probability ``1 - reshuffle`` and a uniformly
chosen beam otherwise. More reshuffling means beams descend from fewer parents and share more.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from .simulator import ALPACA, MAX_LEN, Workload, sample_requests


class BlockSpace:
    """Block tables over an unbounded pool of reference-counted blocks (first-fit reuse)."""

    def __init__(self, block_size: int = 16):
        if not isinstance(block_size, int) or block_size < 1:
            raise ValueError(f"block_size must be a positive int, got {block_size!r}")
        self.block_size = block_size
        self.ref: list[int] = []
        self.tables: dict[int, list[int]] = {}
        self.lengths: dict[int, int] = {}
        self.used_blocks = 0  # blocks with ref > 0
        self.copies = 0  # copy-on-write copies made
        self._next_seq = 0
        self._free: list[int] = []  # min-heap of block ids with ref == 0

    def _new_block(self) -> int:
        if self._free:  # first fit, as in HW3: the lowest free block id
            b = heapq.heappop(self._free)
        else:
            b = len(self.ref)
            self.ref.append(0)
        self.ref[b] = 1
        self.used_blocks += 1
        return b

    def _drop(self, b: int) -> None:
        self.ref[b] -= 1
        if self.ref[b] == 0:
            self.used_blocks -= 1
            heapq.heappush(self._free, b)

    def new_sequence(self, num_tokens: int) -> int:
        """A sequence whose first `num_tokens` (its prompt) are already written."""
        seq, self._next_seq = self._next_seq, self._next_seq + 1
        self.tables[seq], self.lengths[seq] = [], 0
        for _ in range(num_tokens):
            self.append(seq)
        return seq

    def fork(self, parent: int) -> int:
        """A child that shares every block of `parent` (no copy until someone writes)."""
        seq, self._next_seq = self._next_seq, self._next_seq + 1
        self.tables[seq] = list(self.tables[parent])
        self.lengths[seq] = self.lengths[parent]
        for b in self.tables[seq]:
            self.ref[b] += 1
        return seq

    def append(self, seq: int) -> None:
        """Write one token: a new block at a block boundary, a private copy if the block is shared."""
        table, n = self.tables[seq], self.lengths[seq]
        if n % self.block_size == 0:
            table.append(self._new_block())
        elif self.ref[table[-1]] > 1:  # copy-on-write
            self._drop(table[-1])
            table[-1] = self._new_block()
            self.copies += 1
        self.lengths[seq] = n + 1

    def free(self, seq: int) -> None:
        for b in self.tables.pop(seq):
            self._drop(b)
        del self.lengths[seq]

    def unshared_blocks(self) -> int:
        """Blocks the live sequences would hold if nothing were shared."""
        B = self.block_size
        return sum(-(-n // B) for n in self.lengths.values())


@dataclass
class Savings:
    """Blocks x steps with sharing and without, summed over every request and decode step."""

    method: str
    width: int
    block_size: int
    shared_block_steps: int
    unshared_block_steps: int
    copies: int

    @property
    def saving(self) -> float:
        return 1 - self.shared_block_steps / self.unshared_block_steps


def _parallel_sampling(space: BlockSpace, prompt: int, outputs) -> tuple[int, int]:
    root = space.new_sequence(prompt)
    live = {root: int(outputs[0])}
    for o in outputs[1:]:
        live[space.fork(root)] = int(o)
    shared = unshared = 0
    while live:
        for seq in list(live):
            space.append(seq)
            live[seq] -= 1
        shared += space.used_blocks
        unshared += space.unshared_blocks()
        for seq in [s for s, left in live.items() if left == 0]:
            space.free(seq)
            del live[seq]
    return shared, unshared


def _beam_search(space: BlockSpace, prompt: int, output: int, width: int, reshuffle: float,
                 rng) -> tuple[int, int]:
    beams = [space.new_sequence(prompt)]
    beams += [space.fork(beams[0]) for _ in range(width - 1)]
    shared = unshared = 0
    for _ in range(output):
        stay = rng.random(width) >= reshuffle
        parents = np.where(stay, np.arange(width), rng.integers(0, width, width))
        claimed: set[int] = set()
        new_beams = []
        for p in parents:  # the first candidate from a parent continues it, the others fork it
            p = int(p)
            if p in claimed:
                new_beams.append(space.fork(beams[p]))
            else:
                claimed.add(p)
                new_beams.append(beams[p])
        for p in set(range(width)) - claimed:  # no candidate extends this beam: drop it
            space.free(beams[p])
        beams = new_beams
        for seq in beams:
            space.append(seq)
        shared += space.used_blocks
        unshared += space.unshared_blocks()
    for seq in beams:
        space.free(seq)
    return shared, unshared


def measure(method: str, width: int, workload: Workload = ALPACA, *, num_requests: int = 200,
            block_size: int = 16, seed: int = 0, reshuffle: float = 0.5,
            max_len: int = MAX_LEN) -> Savings:
    """Replay `num_requests` requests of `workload` with n parallel samples / beam width k."""
    if method not in ("parallel", "beam"):
        raise ValueError(f"method must be 'parallel' or 'beam', got {method!r}")
    if not isinstance(width, int) or width < 1:
        raise ValueError(f"width must be a positive int, got {width!r}")
    if not 0 <= reshuffle <= 1:
        raise ValueError(f"reshuffle must be a probability in [0, 1], got {reshuffle}")
    prompts, outputs = sample_requests(workload, num_requests * width, seed=seed, max_len=max_len)
    prompts = prompts[::width]
    outputs = outputs.reshape(num_requests, width)
    rng = np.random.default_rng(seed)
    space = BlockSpace(block_size)
    shared = unshared = 0
    for p, outs in zip(prompts, outputs, strict=True):
        outs = np.minimum(outs, max_len - p)  # each sample still fits the context
        if method == "parallel":
            s, u = _parallel_sampling(space, int(p), outs)
        else:
            s, u = _beam_search(space, int(p), int(outs[0]), width, reshuffle, rng)
        shared, unshared = shared + s, unshared + u
    if space.used_blocks:
        raise AssertionError("blocks leaked")  # every sequence was freed
    return Savings(method, width, block_size, shared, unshared, space.copies)
