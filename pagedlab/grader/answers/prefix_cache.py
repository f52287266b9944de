"""The prefix-cache model: plain lists and a dict keyed by the exact token prefix (Task 11,
instructor edition only).

It cannot suffer from hash collisions, so it is a second opinion on solutions/prefix_cache.py:
the tests replay the checks' random streams through both.
"""

from __future__ import annotations

from ...drivers.prefix_cache import random_ops, stream_calls


class ReferenceCache:
    """Plain lists and a dict keyed by the exact token prefix: slow, obviously right."""

    def __init__(self, num_blocks, block_size):
        self.B = block_size
        self.free = list(range(num_blocks))
        self.ref = [0] * num_blocks
        self.cache: dict[tuple, int] = {}
        self.key_of: dict[int, tuple] = {}
        self.tables: dict = {}
        self.tokens: dict = {}

    def _new_block(self):
        b = self.free.pop(0)
        if b in self.key_of:
            del self.cache[self.key_of.pop(b)]
        self.ref[b] = 1
        return b

    def _cache(self, b, prefix):
        if prefix not in self.cache:
            self.cache[prefix] = b
            self.key_of[b] = prefix

    def allocate(self, rid, prompt):
        B, hits = self.B, []
        for i in range((len(prompt) - 1) // B):
            b = self.cache.get(tuple(prompt[:(i + 1) * B]))
            if b is None:
                break
            hits.append(b)
        need = -(-len(prompt) // B) - len(hits)
        if need > len(self.free) - sum(self.ref[b] == 0 for b in hits):
            return None
        for b in hits:
            if self.ref[b] == 0:
                self.free.remove(b)
            self.ref[b] += 1
        table = list(hits)
        for i in range(len(hits), len(hits) + need):
            b = self._new_block()
            if (i + 1) * B <= len(prompt):
                self._cache(b, tuple(prompt[:(i + 1) * B]))
            table.append(b)
        self.tables[rid], self.tokens[rid] = table, list(prompt)
        return len(hits) * B

    def append_token(self, rid, tok):
        toks, table = self.tokens[rid], self.tables[rid]
        if len(toks) % self.B == 0:
            if not self.free:
                return False
            table.append(self._new_block())
        toks.append(tok)
        if len(toks) % self.B == 0:
            self._cache(table[-1], tuple(toks))
        return True

    def free_request(self, rid):
        for b in reversed(self.tables.pop(rid)):
            self.ref[b] -= 1
            if self.ref[b] == 0:
                self.free.append(b)
        del self.tokens[rid]

    def state(self):
        return {"free queue (head→tail)": list(self.free), "ref counts": list(self.ref),
                "cached blocks": sorted(self.cache.values())}


def observations(seed, num_blocks=12, block_size=3):
    """What the Task 11 random-stream check records for a correct cache, as
    (call, what, value): the same stream as `pagedlab.drivers.prefix_cache.replay`, from the model."""
    model = ReferenceCache(num_blocks, block_size)
    for n, op, rid, arg, got in stream_calls(random_ops(seed), model, free="free_request"):
        call = f"op {n}: {op}(request {rid}{', ' + repr(arg) if arg is not None else ''})"
        yield call, "returned value", got
        yield call, "pool state", model.state()
        if op != "free":
            yield call, "block table", list(model.tables[rid]) if rid in model.tables else None  # a copy: appends follow
