"""A buddy allocator: the contiguous baseline that paging is compared with (notebook 09).

Before PagedAttention, a server (Orca, FasterTransformer) gave every request one *contiguous*
chunk of KV memory. The chunks have to be placed somewhere in one address space, and the
classic way to do that quickly is a buddy allocator (Knowlton 1965; the Linux page allocator
still is one):

- memory is ``2**max_order`` slots; every block has a size ``2**k`` (its *order* k) and starts
  at a multiple of its size;
- ``alloc(n)`` rounds n up to a power of two, takes the smallest free block that is big
  enough and splits it in halves until it has the right size; the upper halves go back to the
  free lists;
- ``free(offset)`` gives the block back and merges it with its **buddy** (the other half of the
  block it was split from) for as long as the buddy is free too.

The buddy of the block of order k at ``offset`` is at ``offset ^ (1 << k)``: flipping bit k
moves a lower half up and an upper half down, and nothing else. That one XOR is why the scheme
is fast, and the price is the rounding: a 33-slot request holds 64 slots (internal
fragmentation), and free blocks that are not buddies never merge (external fragmentation).

Ties are broken by address: among free blocks of one order the lowest offset is used, so a
sequence of calls always gives the same offsets.
"""

from __future__ import annotations


def order_of_size(size: int) -> int:
    """k such that size == 2**k (size must be a power of two)."""
    return size.bit_length() - 1


class BuddyAllocator:
    """Blocks of 2**k slots over [0, total_slots), split on demand and merged when free."""

    def __init__(self, total_slots: int):
        if not isinstance(total_slots, int) or isinstance(total_slots, bool):
            raise TypeError(f"total_slots must be an int, got {type(total_slots).__name__}")
        if total_slots < 1 or total_slots & (total_slots - 1):
            raise ValueError(f"total_slots must be a positive power of two, got {total_slots}")
        self.total_slots = total_slots
        self.max_order = order_of_size(total_slots)
        # free_lists[k]: offsets of the free blocks of order k (2**k slots each).
        self.free_lists: list[set[int]] = [set() for _ in range(self.max_order + 1)]
        self.free_lists[self.max_order].add(0)
        # offset -> order of every allocated block: free() needs the size, the caller gives none.
        self.allocated: dict[int, int] = {}

    def alloc(self, n: int) -> int | None:
        """Offset of a new block of at least n slots, or None if no free block is big enough."""
        if not isinstance(n, int) or isinstance(n, bool):
            raise TypeError(f"n must be an int number of slots, got {type(n).__name__}")
        if not 1 <= n <= self.total_slots:
            raise ValueError(f"n must be between 1 and total_slots={self.total_slots}, got {n}")
        ### BEGIN SOLUTION Task 12: BuddyAllocator.alloc (round up, find, split)
        order = (n - 1).bit_length()  # the smallest k with 2**k >= n
        k = order
        while k <= self.max_order and not self.free_lists[k]:
            k += 1
        if k > self.max_order:
            return None
        offset = min(self.free_lists[k])  # lowest address first: deterministic
        self.free_lists[k].remove(offset)
        while k > order:  # split: keep the lower half, the upper half becomes a free block
            k -= 1
            self.free_lists[k].add(offset + (1 << k))
        self.allocated[offset] = order
        return offset
        ### END SOLUTION

    def free(self, offset: int) -> None:
        """Give back the block that `alloc` returned at `offset`, merging it with free buddies."""
        if offset not in self.allocated:
            raise ValueError(f"offset {offset!r} is not the start of an allocated block "
                             f"(a double free, or an offset alloc never returned)")
        ### BEGIN SOLUTION Task 12: BuddyAllocator.free (merge with the XOR buddy)
        order = self.allocated.pop(offset)
        while order < self.max_order:
            buddy = offset ^ (1 << order)
            if buddy not in self.free_lists[order]:
                break  # the buddy is in use (whole or in part): no merge
            self.free_lists[order].remove(buddy)
            offset &= ~(1 << order)  # the merged block starts at the lower of the two
            order += 1
        self.free_lists[order].add(offset)
        ### END SOLUTION

    # -------------------------------------------------------------- inspection (given)

    def free_blocks(self) -> list[tuple[int, int]]:
        """(offset, size) of every free block, by offset."""
        return sorted((offset, 1 << k) for k, offsets in enumerate(self.free_lists) for offset in offsets)

    def allocated_blocks(self) -> list[tuple[int, int]]:
        """(offset, size) of every allocated block, by offset."""
        return sorted((offset, 1 << k) for offset, k in self.allocated.items())

    @property
    def free_slots(self) -> int:
        return sum(size for _, size in self.free_blocks())

    def largest_free(self) -> int:
        """Size of the largest free block: the longest request that can still be placed."""
        return max((size for _, size in self.free_blocks()), default=0)

    def __repr__(self) -> str:
        return (f"BuddyAllocator({self.total_slots}, free={self.free_blocks()}, "
                f"allocated={self.allocated_blocks()})")
