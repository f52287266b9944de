"""The buddy allocator model: Task 12's rules over any number of slots (instructor edition only).

The utilization simulator places contiguous chunks with it by default, and the tests compare
solutions/buddy.py with it on long traces.
"""

from __future__ import annotations

import bisect


class Buddy:
    """A buddy allocator: blocks of 2**k slots, split in halves on demand, merged with their
    buddy when both are free. A size that is not a power of two is served by one arena per set
    bit (8192 + 4096 + ... ), largest first, so every arena starts at a multiple of its size."""

    def __init__(self, size: int):
        self.free_lists: dict[int, set[int]] = {}
        self.arena_base: list[int] = []
        self.arena_order: list[int] = []
        base = 0
        for k in range(size.bit_length() - 1, -1, -1):
            if size >> k & 1:
                self.free_lists.setdefault(k, set()).add(base)
                self.arena_base.append(base)
                self.arena_order.append(k)
                base += 1 << k

    @staticmethod
    def order(n: int) -> int:
        return max(int(n) - 1, 0).bit_length()  # smallest k with 2**k >= n

    def alloc(self, n: int) -> int | None:
        k = self.order(n)
        for j in sorted(o for o, addrs in self.free_lists.items() if o >= k and addrs):
            addr = min(self.free_lists[j])
            self.free_lists[j].discard(addr)
            while j > k:  # split, keeping the lower half
                j -= 1
                self.free_lists.setdefault(j, set()).add(addr + (1 << j))
            return addr
        return None

    def free(self, addr: int, n: int) -> None:
        k = self.order(n)
        top = self.arena_order[bisect.bisect_right(self.arena_base, addr) - 1]
        while k < top and (addr ^ (1 << k)) in self.free_lists.get(k, ()):
            self.free_lists[k].discard(addr ^ (1 << k))
            addr &= ~(1 << k)
            k += 1
        self.free_lists.setdefault(k, set()).add(addr)

    @property
    def free_slots(self) -> int:
        return sum(len(a) << k for k, a in self.free_lists.items())
