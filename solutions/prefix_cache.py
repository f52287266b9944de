"""Prefix caching in the style of vLLM v1: block hashes, a hash -> block cache, an LRU free queue.

Two requests that start with the same tokens (a system prompt, a few-shot preamble) would
compute the same keys and values for that prefix. With prefix caching the second request
finds the first one's *full* blocks through their hashes and shares them (reference counts),
so its prefill skips those tokens.

Three ideas make it work:

1. **Chained block hashes.** A full block's hash covers its own tokens *and* its parent's
   hash, so one hash names the whole prefix up to the end of that block. Two blocks with the
   same tokens at different places in different prompts get different hashes.
2. **Freed blocks keep their contents.** A block whose reference count drops to 0 goes to the
   tail of the free queue but stays in the cache. It is evicted *lazily*: only when the
   allocator pops it from the head to reuse its memory for something else.
3. **The free queue is an intrusive doubly linked list** (like Linux ``list.h`` or vLLM v1's
   ``FreeKVCacheBlockQueue``): each block carries its own ``prev_free`` / ``next_free``
   pointers and two sentinel blocks mark the ends. A cache hit on a free block unlinks it from
   the middle of the queue in O(1) -- no search, no Python ``list.remove``.

The head of the queue is the least recently used block (evicted first); freed blocks go to
the tail. A request's blocks are freed *tail first*, so the end of a prefix chain sits closer
to the head than its beginning and is evicted first: the beginning of a prompt is the part
other requests are most likely to share.

The hash is SHA-256 over ``repr((parent_hash, tokens))``, cut to 64 bits: deterministic across
runs and machines (unlike ``hash()`` of a ``str``, which Python salts per process), so the
walkthrough in notebook 09 prints the same numbers every time. A 64-bit hash can still
collide, which is why a lookup compares the stored tokens before it trusts a hit.
"""

from __future__ import annotations

import hashlib
from typing import Callable, Iterator, Sequence

ROOT_HASH = 0  # the "parent hash" of a prompt's first block
HashFn = Callable[[int, tuple], int]


def hash_block_tokens(parent_hash: int, token_ids: Sequence[int]) -> int:
    """The hash of one full block: its parent's hash chained with its own tokens."""
    data = repr((int(parent_hash), tuple(int(t) for t in token_ids))).encode()
    return int.from_bytes(hashlib.sha256(data).digest()[:8], "big")


def hash_full_blocks(token_ids: Sequence[int], block_size: int,
                     hash_fn: HashFn = hash_block_tokens) -> list[int]:
    """Chained hashes of every *full* block of `token_ids` (a partial last block has none)."""
    ### BEGIN SOLUTION Task 11: hash_full_blocks (chained hashes)
    hashes = []
    parent = ROOT_HASH
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        parent = hash_fn(parent, tuple(token_ids[start:start + block_size]))
        hashes.append(parent)
    return hashes
    ### END SOLUTION


class KVCacheBlock:
    """One physical KV block. The free-queue links live *inside* the block (intrusive list)."""

    __slots__ = ("block_id", "ref_cnt", "block_hash", "parent_hash", "token_ids",
                 "prev_free", "next_free")

    def __init__(self, block_id: int):
        self.block_id = block_id
        self.ref_cnt = 0
        # Set while the block is in the prefix cache: its hash and what that hash stands for.
        self.block_hash: int | None = None
        self.parent_hash: int | None = None
        self.token_ids: tuple | None = None
        self.prev_free: KVCacheBlock | None = None
        self.next_free: KVCacheBlock | None = None

    def __repr__(self) -> str:
        cached = f", hash={self.block_hash:016x}" if self.block_hash is not None else ""
        return f"KVCacheBlock({self.block_id}, ref={self.ref_cnt}{cached})"


class FreeBlockQueue:
    """Free blocks in LRU order: head.next_free is evicted first, tail.prev_free was freed last.

    Two sentinel blocks (ids -1 and -2) are always present, so linking and unlinking never test
    for an empty list or an end: every real block has a real ``prev_free`` and ``next_free``.
    """

    def __init__(self, blocks: Sequence[KVCacheBlock] = ()):
        self.head = KVCacheBlock(-1)
        self.tail = KVCacheBlock(-2)
        self.head.next_free = self.tail
        self.tail.prev_free = self.head
        self.num_free_blocks = 0
        for block in blocks:
            self.append(block)

    def append(self, block: KVCacheBlock) -> None:
        """Link `block` at the tail (most recently freed)."""
        ### BEGIN SOLUTION Task 11: FreeBlockQueue.append
        last = self.tail.prev_free
        block.prev_free, block.next_free = last, self.tail
        last.next_free = block
        self.tail.prev_free = block
        self.num_free_blocks += 1
        ### END SOLUTION

    def remove(self, block: KVCacheBlock) -> None:
        """Unlink `block` from wherever it is, in O(1)."""
        ### BEGIN SOLUTION Task 11: FreeBlockQueue.remove
        if block.prev_free is None or block.next_free is None:
            raise ValueError(f"block {block.block_id} is not in the free queue")
        block.prev_free.next_free = block.next_free
        block.next_free.prev_free = block.prev_free
        block.prev_free = block.next_free = None
        self.num_free_blocks -= 1
        ### END SOLUTION

    def popleft(self) -> KVCacheBlock:
        """Unlink and return the least recently used block."""
        ### BEGIN SOLUTION Task 11: FreeBlockQueue.popleft
        first = self.head.next_free
        if first is self.tail:
            raise MemoryError("no free KV block")
        self.remove(first)
        return first
        ### END SOLUTION

    def __len__(self) -> int:
        return self.num_free_blocks

    def __iter__(self) -> Iterator[KVCacheBlock]:
        node = self.head.next_free
        while node is not self.tail:
            yield node
            node = node.next_free

    def block_ids(self) -> list[int]:
        """Free block ids from the head (evicted first) to the tail."""
        return [block.block_id for block in self]


class BlockPool:
    """Every physical block, the free queue and the prefix cache (hash -> block)."""

    def __init__(self, num_blocks: int, block_size: int = 16, hash_fn: HashFn = hash_block_tokens):
        if not isinstance(num_blocks, int) or num_blocks < 1:
            raise ValueError(f"num_blocks must be a positive int, got {num_blocks!r}")
        if not isinstance(block_size, int) or block_size < 1:
            raise ValueError(f"block_size must be a positive int, got {block_size!r}")
        self.block_size = block_size
        self.hash_fn = hash_fn
        self.blocks = [KVCacheBlock(i) for i in range(num_blocks)]
        self.free_queue = FreeBlockQueue(self.blocks)
        self.cached: dict[int, KVCacheBlock] = {}

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_queue)

    def lookup(self, parent_hash: int, token_ids: Sequence[int]) -> KVCacheBlock | None:
        """The cached block holding `token_ids` after the prefix `parent_hash`, or None.

        A hash match alone is not enough: the block must hold exactly these tokens after
        exactly this parent, otherwise a collision would hand a request someone else's KV.
        """
        ### BEGIN SOLUTION Task 11: BlockPool.lookup (verify the tokens)
        token_ids = tuple(token_ids)
        block = self.cached.get(self.hash_fn(parent_hash, token_ids))
        if block is None or block.token_ids != token_ids or block.parent_hash != parent_hash:
            return None
        return block
        ### END SOLUTION

    def cache_block(self, block: KVCacheBlock, parent_hash: int, token_ids: Sequence[int]) -> int:
        """Put a full block in the cache; returns its hash (the parent hash of the next block).

        If another block already holds the same prefix, the cache keeps that one and `block`
        stays uncached: one entry per hash, and the hash chain only depends on the tokens.
        """
        token_ids = tuple(token_ids)
        block_hash = self.hash_fn(parent_hash, token_ids)
        if block_hash not in self.cached:
            block.block_hash, block.parent_hash, block.token_ids = block_hash, parent_hash, token_ids
            self.cached[block_hash] = block
        return block_hash

    def touch(self, block: KVCacheBlock) -> None:
        """A request starts using `block` (a cache hit): take it off the free queue if idle."""
        ### BEGIN SOLUTION Task 11: BlockPool.touch
        if block.ref_cnt == 0:
            self.free_queue.remove(block)
        block.ref_cnt += 1
        ### END SOLUTION

    def allocate(self) -> KVCacheBlock:
        """A fresh block for new tokens: the LRU free block, evicted from the cache if needed."""
        ### BEGIN SOLUTION Task 11: BlockPool.allocate (lazy eviction)
        block = self.free_queue.popleft()
        if block.block_hash is not None:
            if self.cached.get(block.block_hash) is block:
                del self.cached[block.block_hash]
            block.block_hash = block.parent_hash = block.token_ids = None
        block.ref_cnt = 1
        return block
        ### END SOLUTION

    def free(self, blocks: Sequence[KVCacheBlock]) -> None:
        """Drop one reference to each of a request's `blocks`, last block first.

        Blocks that reach 0 go to the tail of the free queue *with their cache entry*, so a
        later request can still hit them. Freeing tail first puts a chain's last block ahead of
        its first block in the queue: the end of a prefix is evicted before its beginning.
        """
        ### BEGIN SOLUTION Task 11: BlockPool.free (tail first)
        for block in reversed(blocks):
            if block.ref_cnt <= 0:
                raise ValueError(f"block {block.block_id} freed more often than it was used")
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                self.free_queue.append(block)
        ### END SOLUTION


class PrefixCacheManager:
    """Per-request block tables on top of a `BlockPool`: what the scheduler talks to."""

    def __init__(self, num_blocks: int, block_size: int = 16, hash_fn: HashFn = hash_block_tokens):
        self.pool = BlockPool(num_blocks, block_size, hash_fn)
        self.block_size = block_size
        self.block_tables: dict[object, list[KVCacheBlock]] = {}
        self.token_ids: dict[object, list[int]] = {}
        self.num_queried_tokens = 0  # prompt tokens asked for, over all requests
        self.num_hit_tokens = 0  # of those, served from the cache

    def allocate(self, request_id, prompt: Sequence[int]) -> int | None:
        """Give a new request blocks for its prompt, reusing the longest cached prefix.

        Returns how many prompt tokens were found in the cache, or None (changing nothing)
        when the pool cannot hold the request. At most ``len(prompt) - 1`` tokens can hit: the
        model still has to run the last prompt token to produce the first output token.
        """
        if request_id in self.block_tables:
            raise ValueError(f"request {request_id!r} already has blocks")
        prompt = [int(t) for t in prompt]
        if not prompt:
            raise ValueError("a prompt needs at least one token")
        pool, size = self.pool, self.block_size
        # Leave two names for the lines after the fence: `table`, the request's blocks in order
        # (cache hits first, then new blocks), and `num_hit_tokens`. Return None before
        # changing anything if the pool cannot hold the request.
        ### BEGIN SOLUTION Task 11: PrefixCacheManager.allocate (longest cached prefix)
        hits: list[KVCacheBlock] = []
        parent = ROOT_HASH
        for i in range((len(prompt) - 1) // size):
            block = pool.lookup(parent, prompt[i * size:(i + 1) * size])
            if block is None:
                break
            hits.append(block)
            parent = block.block_hash
        num_new = -(-len(prompt) // size) - len(hits)
        idle_hits = sum(1 for block in hits if block.ref_cnt == 0)
        if num_new > pool.num_free_blocks - idle_hits:
            return None  # check before allocating: nothing changed
        for block in hits:
            pool.touch(block)
        table = list(hits)
        for i in range(len(hits), len(hits) + num_new):
            block = pool.allocate()
            chunk = prompt[i * size:(i + 1) * size]
            if len(chunk) == size:
                parent = pool.cache_block(block, parent, chunk)
            table.append(block)
        num_hit_tokens = len(hits) * size
        ### END SOLUTION
        self.block_tables[request_id] = table
        self.token_ids[request_id] = prompt
        self.num_queried_tokens += len(prompt)
        self.num_hit_tokens += num_hit_tokens
        return num_hit_tokens

    def append_token(self, request_id, token_id: int) -> bool:
        """Decode: add one generated token. False (nothing changed) when no block is free."""
        table, tokens = self._request(request_id), self.token_ids[request_id]
        size = self.block_size
        if len(tokens) % size == 0:  # the last block is full: the token needs a new one
            if self.pool.num_free_blocks == 0:
                return False
            table.append(self.pool.allocate())
        tokens.append(int(token_id))
        if len(tokens) % size == 0:  # the token filled its block: the block can be shared now
            n = len(tokens) // size
            parent = ROOT_HASH if n == 1 else self._hash_of_block(request_id, n - 2)
            self.pool.cache_block(table[n - 1], parent, tokens[-size:])
        return True

    def free(self, request_id) -> None:
        """The request finished: release its blocks (tail first; cached ones stay cached)."""
        table = self._request(request_id)
        self.pool.free(table)
        del self.block_tables[request_id]
        del self.token_ids[request_id]

    def block_ids(self, request_id) -> list[int]:
        return [block.block_id for block in self._request(request_id)]

    @property
    def hit_rate(self) -> float:
        """Share of prompt tokens served from the cache so far."""
        return self.num_hit_tokens / self.num_queried_tokens if self.num_queried_tokens else 0.0

    def _request(self, request_id) -> list[KVCacheBlock]:
        try:
            return self.block_tables[request_id]
        except KeyError:
            raise KeyError(f"unknown request {request_id!r}") from None

    def _hash_of_block(self, request_id, index: int) -> int:
        """Hash of full block `index` of a request, recomputed from its tokens (cheap, exact)."""
        tokens, size = self.token_ids[request_id], self.block_size
        return hash_full_blocks(tokens[:(index + 1) * size], size, self.pool.hash_fn)[-1]
