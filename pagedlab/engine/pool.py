"""The harness's memory pool: raw bytes the engine manages but never owns.

Like the HW3 autograder, the pool is pre-filled with a magic pattern, so any byte the engine
writes shows. The pattern is different for every 4-byte word (`magic_word(block, word)`), so a
copy-on-write copy from the wrong block, or of the wrong length, is visible too. Guard zones of
`GUARD_BYTES` before and after the pool catch writes that land just outside it.
"""

from __future__ import annotations

import ctypes
import weakref
from dataclasses import dataclass

import numpy as np

from ..student.hw3 import BLOCK_SIZE, KV_PER_BLOCK
from . import carena

MAGIC_TAG = 0x5A000000
GUARD_BYTES = 256
GUARD_BYTE = 0xFE


def magic_word(block: int, word: int) -> int:
    """The int32 the harness puts in word `word` (0..15) of block `block` before a run."""
    return MAGIC_TAG | ((block * KV_PER_BLOCK + word) & 0xFFFFFF)


@dataclass(frozen=True)
class PoolDiff:
    """Which words of the pool changed between two snapshots."""

    words: tuple          # ((block, word, before, after), ...) in address order
    guard_damaged: bool = False

    @property
    def blocks(self) -> list[int]:
        return sorted({b for b, *_ in self.words})

    def __bool__(self) -> bool:
        return bool(self.words) or self.guard_damaged

    def __str__(self) -> str:
        if not self:
            return "pool unchanged"
        shown = [f"block {b} word {w}: {x:#010x} -> {y:#010x}" for b, w, x, y in self.words[:8]]
        more = f" (+{len(self.words) - 8} more)" if len(self.words) > 8 else ""
        guard = ["bytes OUTSIDE the pool were written (guard zone damaged)"] if self.guard_damaged else []
        return "; ".join(guard + shown) + more


class Pool:
    """`size` bytes of raw memory at `addr`, pre-filled with the magic pattern."""

    def __init__(self, size: int):
        if isinstance(size, bool) or not isinstance(size, int):
            raise TypeError(f"pool size must be an int number of bytes, not {type(size).__name__}")
        if size < 0:
            raise ValueError(f"pool size must be >= 0, got {size}")
        self.size = size
        arena = carena.current()
        if arena is None:
            self._raw = (ctypes.c_ubyte * (size + 2 * GUARD_BYTES))()
        else:  # the C track's library runs in a runner: the pool must be memory it shares
            where = arena.alloc(size + 2 * GUARD_BYTES)
            if not where:
                raise MemoryError(f"no room for a {size}-byte pool in the C track's shared arena")
            self._raw = (ctypes.c_ubyte * (size + 2 * GUARD_BYTES)).from_address(where)
            weakref.finalize(self._raw, arena.free, where)  # numpy views keep _raw alive
        self.addr = ctypes.addressof(self._raw) + GUARD_BYTES
        self._all = np.ctypeslib.as_array(self._raw)
        self.reset()

    @property
    def num_blocks(self) -> int:
        return self.size // BLOCK_SIZE

    @property
    def bytes(self) -> np.ndarray:
        """The pool as a writable uint8 array view (no copy)."""
        return self._all[GUARD_BYTES:GUARD_BYTES + self.size]

    def reset(self) -> None:
        """Refill with the magic pattern and the guards."""
        self._all[:] = GUARD_BYTE
        n_words = self.size // 4
        words = MAGIC_TAG | (np.arange(n_words, dtype=np.uint32) & 0xFFFFFF)
        self.bytes[: n_words * 4] = words.astype("<u4").view(np.uint8)
        self.bytes[n_words * 4:] = 0xA5

    def words(self, block: int) -> list[int]:
        """The 16 int32 words of `block`."""
        if not 0 <= block < self.num_blocks:
            raise ValueError(f"block {block} is outside the pool (0..{self.num_blocks - 1})")
        raw = self.bytes[block * BLOCK_SIZE:(block + 1) * BLOCK_SIZE]
        return [int(x) for x in raw.view("<i4")]

    def read_int32(self, block: int, word: int) -> int:
        if not 0 <= word < KV_PER_BLOCK:
            raise ValueError(f"word must be in 0..{KV_PER_BLOCK - 1}, got {word}")
        return self.words(block)[word]

    def snapshot(self) -> np.ndarray:
        """A copy of the pool and its guards, for `diff`."""
        return self._all.copy()

    def guard_intact(self) -> bool:
        return bool((self._all[:GUARD_BYTES] == GUARD_BYTE).all() and (self._all[GUARD_BYTES + self.size:] == GUARD_BYTE).all())

    def diff(self, before: np.ndarray, after: np.ndarray | None = None) -> PoolDiff:
        """What changed from `before` to `after` (default: now), word by word."""
        after = self._all if after is None else after
        guard = bool((before[:GUARD_BYTES] != after[:GUARD_BYTES]).any()
                     or (before[GUARD_BYTES + self.size:] != after[GUARD_BYTES + self.size:]).any())
        n = (self.size // 4) * 4
        b = before[GUARD_BYTES:GUARD_BYTES + n].view("<u4")
        a = after[GUARD_BYTES:GUARD_BYTES + n].view("<u4")
        changed = np.flatnonzero(a != b)
        words = tuple((int(i) // KV_PER_BLOCK, int(i) % KV_PER_BLOCK, int(b[i]), int(a[i])) for i in changed)
        return PoolDiff(words, guard)
