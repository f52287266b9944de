"""Each task's domain, written from the contract (COURSE_SPEC.md §4.2, §5, §6, §7b; §9 "Each
task's domain is the contract's").

A domain is the inputs the contract allows, split into **classes**: every legal range of an
argument (an `int` id is any C int, 0 and negatives included), every size bound the spec sets (at
the bound and one past it), every value class a rule tells apart (one owner, two, many; logits of
mixed signs, all positive, all negative) and the sizes an implementation could hard-code (at and
past 64, 256, 512 and 1024). A bug is usually wrong on one class only, so:

- every hidden grading draws **every** class (`grading/hidden/`, the planners, read their classes
  here: a class a planner has no way to draw is a KeyError in the grader, not a silent gap);
- the seed draws only the values inside a class (`Klass.draw`): a boundary is one value, drawn
  with certainty, so a regrade gives the same score;
- `tests/test_hidden_domains.py` classifies 200 seeds of every hidden scenario, reading the
  class names from this table: a class no grading draws fails CI.

Where the spec is silent about a range, the C type's range is the domain (`INT_MIN..INT_MAX`).
Standard library only: the grader's planners and the tests both import this; it imports neither.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

INT_MIN, INT_MAX = -2**31, 2**31 - 1
# Sizes an implementation could hard-code (a table of 64 sequences, a scan of 256 blocks, a
# `__shared__ float[512]`, a buddy of at most 1024 slots): every domain with a size has a class
# at each and one just past it.
HARD_CODED = (64, 256, 512, 1024)
# Bounds the spec sets (§4.1, §4.2, §6.1, §6.2).
MAX_LOGICAL_BLOCKS = 256  # blocks per sequence: 16 L2 tables of 16
MAX_RECORDS = MAX_LOGICAL_BLOCKS * 16  # 4096 records per sequence
MAX_HEAD_SIZE = 256  # the kernel's shared q buffer (§6.2: head_size <= 256)


@dataclass(frozen=True)
class Klass:
    """One class of an axis. `ranges` are the values a planner draws for it, by name: a fixed
    int (a boundary: drawn with certainty), an inclusive (lo, hi) range, or a list to choose from."""

    name: str
    ranges: tuple = ()
    what: str = ""

    def draw(self, rng, key: str = "value"):
        """The value of range `key`, drawn with `rng` (a `random.Random`)."""
        spec = dict(self.ranges)[key]
        if isinstance(spec, int):
            return spec
        if isinstance(spec, list):
            return rng.choice(spec)
        lo, hi = spec
        return rng.randint(lo, hi)

    def draws(self, rng) -> dict:
        return {key: self.draw(rng, key) for key, _ in self.ranges}

    @property
    def boundary(self) -> bool:
        return bool(self.ranges) and all(isinstance(spec, int) for _, spec in self.ranges)


def K(name: str, what: str = "", **ranges) -> Klass:
    return Klass(name, tuple(ranges.items()), what)


@dataclass(frozen=True)
class Axis:
    """An argument, a size or a property of the scenario, with the contract's legal range."""

    name: str
    legal: str
    classes: tuple

    def __getitem__(self, name: str) -> Klass:
        for k in self.classes:
            if k.name == name:
                return k
        raise KeyError(f"axis {self.name!r} has no class {name!r}")

    def __iter__(self):
        return iter(self.classes)


@dataclass(frozen=True)
class Domain:
    check: str  # the hidden check(s) it covers: a task id, or "task13/swap" for one of a task's checks
    contract: str  # where the spec states it
    axes: tuple = field(default_factory=tuple)

    def axis(self, name: str) -> Axis:
        for a in self.axes:
            if a.name == name:
                return a
        raise KeyError(f"{self.check} has no axis {name!r}")

    def names(self) -> frozenset:
        """Every class, as "axis: class" (what the domain test looks for in every scenario)."""
        return frozenset(f"{a.name}: {k.name}" for a in self.axes for k in a.classes)


def at_and_past(sizes=HARD_CODED, *, index: bool = False) -> tuple:
    """A class at each size and one just past it. `index`: the sizes are counts, the classes the
    0-based index at the end of each (63, the last of 64) and the first past it (64)."""
    found = []
    for n in sizes:
        first = n - 1 if index else n
        found += [K(str(first), value=first), K(str(first + 1), value=first + 1)]
    return tuple(found)


C_INT_IDS = (
    K("0", value=0), K("negative", value=(INT_MIN + 1, -1)), K("INT_MIN", value=INT_MIN), K("INT_MAX", value=INT_MAX),
    K("positive", value=(1, INT_MAX - 1)),
)
# What a C int parameter cannot receive (Python would pass it along): None / -1, nothing changed.
NOT_C_INTS = (K("INT_MAX + 1", value=INT_MAX + 1), K("INT_MIN - 1", value=INT_MIN - 1), K("a string", value=["7"]),
              K("a float", value=[2.5]), K("a bool", value=[True]), K("None", value=[None]))
OWNERS = (K("one", value=1), K("two", value=2), K("many", value=(3, 5)))
NULL_ENGINE = ("engine", "an LLMEngine, or None (NULL): None / -1 before anything else", (K("NULL"),))
FIRST_FIT = ("first-fit block", "any block of the pool; the pool may hold more blocks than any table an "
             "implementation could size by hand", at_and_past(index=True))
LOGITS = ("logits", "any float32 the inputs give; a softmax subtracts the row's max", (
    K("mixed signs"),
    K("mixed signs, large", "q scaled: the largest exp overflows a float32 unless the max is subtracted",
      q_scale=(40, 60)),
    K("all positive, large", "every logit at least 105: every exp overflows unless the max is subtracted",
      min_logit=(105, 120)),
    K("all negative, large", "every logit at most -105: every exp underflows to 0 unless the max is subtracted",
      min_logit=(105, 120)),
))


def logits_kwargs(klass: Klass, rng, head_size: int, scale: float | None) -> dict:
    """The batch arguments (`make_kernel_batch`, the checks' `build_batch`) of a LOGITS class:
    `q_scale`, and for the one-sign classes `logit_sign`, with q scaled so that every logit is
    at least the drawn size (every key and query element is at least 1 there: a dot product is
    at least head_size)."""
    if klass.name == "mixed signs":
        return {}
    if klass.name == "mixed signs, large":
        return {"q_scale": klass.draw(rng, "q_scale")}
    scale = 1 / head_size ** 0.5 if scale is None else scale
    sign = 1 if klass.name.startswith("all positive") else -1
    return {"q_scale": math.ceil(1000 * klass.draw(rng, "min_logit") / (scale * head_size)) / 1000, "logit_sign": sign}


def logits_context(batch: dict) -> str:
    """How a case's logits were drawn, for its label (", q scaled by 7.5, logits all negative")."""
    sign = {1: "all positive", -1: "all negative"}.get(batch.get("logit_sign", 0), "")
    scaled = f"q scaled by {batch['q_scale']}" if batch.get("q_scale", 1) != 1 else ""
    return "".join(f", {part}" for part in (scaled, sign and f"logits {sign}") if part)


def axis(name: str, legal: str, classes) -> Axis:
    return Axis(name, legal, tuple(classes))


def _pool_sizes():
    found = [K("0 bytes", blocks=0, rest=0), K("1-63 bytes (under one block)", blocks=0, rest=(1, 63)),
             K("64 bytes (one block)", blocks=1, rest=0), K("a multiple of 64", blocks=(2, 63), rest=0),
             K("a multiple of 64 plus 1-63", blocks=(1, 63), rest=(1, 63))]
    for n in HARD_CODED:
        found += [K(f"{n} blocks", blocks=n, rest=(0, 63)), K(f"{n + 1} blocks", blocks=n + 1, rest=(0, 63))]
    return found


def _sequence_counts():
    found = [K("none"), K("1", value=1), K("2", value=2)]
    for n in HARD_CODED:
        found += [K(str(n), value=n), K(str(n + 1), value=n + 1)]
    return found


DOMAINS = (
    Domain("task1", "§4.2 llm_init", (
        axis("pool_addr", "the pool's address, or NULL (None/0)", [K("NULL"), K("the pool")]),
        axis("pool_size", "any size (size_t); total = pool_size // 64", _pool_sizes()),
    )),
    Domain("task2", "§4.2 create_sequence, free_sequence; first-fit", (
        axis(*NULL_ENGINE),
        axis("seq_id", "any C int (INT_MIN..INT_MAX): created, then freed", C_INT_IDS),
        axis("initial_kv_len", "any C int; None unless 0 < len and ceil(len / 16) <= 256 and <= free blocks", [
            K("INT_MIN", value=INT_MIN), K("negative", value=(INT_MIN + 1, -1)), K("0", value=0),
            K("1-15", value=(1, 15)), K("16", value=16), K("17", value=17), K("256", value=256), K("257", value=257),
            K("4096 (256 blocks: the bound)", value=MAX_RECORDS), K("4097 (one past the bound)", value=MAX_RECORDS + 1),
            K("INT_MAX", value=INT_MAX)]),
        axis("free blocks at a create", "ceil(len / 16) <= free_local_blocks", [
            K("exactly the blocks needed"), K("one fewer than needed (OOM)")]),
        axis(*FIRST_FIT),
        axis("owners of the blocks freed", "ref counts 1.. (forks share blocks): a block is free when its last owner goes",
             OWNERS),
        axis("the sequence freed", "any layout the engine can hold", [
            K("holey L2 tables"), K("NULL L1 entries first"), K("256 blocks (16 full L2 tables)")]),
        axis("errors", "a live id is never created twice; freeing an unknown id is -1", [
            K("a live id created again"), K("an unknown id freed")]),
        axis("not a C int (as seq_id and as initial_kv_len)", "bad input: None, nothing changed", NOT_C_INTS),
    )),
    Domain("task3", "§4.2 fork_sequence", (
        axis(*NULL_ENGINE),
        axis("parent_id", "any C int", C_INT_IDS),
        axis("new_id", "any C int", C_INT_IDS),
        axis("parent", "any sequence the engine holds", [
            K("one block"), K("one full L2 table (16 blocks)"), K("several L2 tables", value=(17, 255)),
            K("256 blocks (the bound)"), K("NULL L1 entries first"), K("holey L2 tables"), K("a fork (a fork of a fork)")]),
        axis("owners of the parent's blocks", "ref counts before the fork: 1, 2 or more", OWNERS),
        axis("block ids", "any block of the pool", at_and_past(index=True)),
        axis("errors", "None unless the parent exists and the new id is unused", [
            K("an unknown parent"), K("a new id in use"), K("the new id is the parent's")]),
    )),
    Domain("task4", "§4.2 append_kv", (
        axis(*NULL_ENGINE),
        axis("seq_id", "any C int; -1 for an unknown one", [*C_INT_IDS, K("unknown")]),
        axis("kv_data", "any C int, stored as int32", [
            K("INT_MIN", value=INT_MIN), K("INT_MAX", value=INT_MAX), K("0", value=0), K("-1", value=-1),
            K("other", value=(INT_MIN + 1, INT_MAX - 1))]),
        axis("kv_count", "0..4096 records; -1 at 4096 (logical >= 256)", [
            K("a multiple of 16 (a new page)"), K("1-15 past a multiple of 16"),
            K("253-255 (the next record ends an L2 table's blocks)", value=(253, 255)),
            K("256 (the next L2 table)", value=256),
            K("4095 (the last record)", value=MAX_RECORDS - 1), K("4096 (the bound: refused)", value=MAX_RECORDS)]),
        axis("owners of the last block", "a block with ref > 1 is copied before the write",
             [*OWNERS, K("two, the block full (a new page: no copy)")]),
        axis("free blocks when a block is needed", "-1 with nothing changed when none is free", [
            K("none: a new page"), K("none: copy-on-write"), K("none: the L2 table missing too"),
            K("one: the L2 table missing (from the heap)")]),
        axis(*FIRST_FIT),
        axis("layout", "any layout the engine can hold", [K("holey L2 tables")]),
        axis("not a C int (as kv_data)", "bad input: -1, nothing changed", NOT_C_INTS),
    )),
    Domain("task5", "§4.2 llm_destroy", (
        axis("engine", "an LLMEngine, or None: -1", [K("NULL")]),
        axis("sequences", "any number; every one is freed", _sequence_counts()),
        axis("layout", "any layout the engine can hold", [
            K("NULL L1 entries first"), K("holey L2 tables"), K("256 blocks (16 full L2 tables)")]),
        axis("owners of a block", "ref counts 1.. (forks)", OWNERS),
    )),
    Domain("task6", "§5 slot mapping", (
        axis("block_size", "any positive int (16 by default)", [
            K("1", value=1), K("a power of two", value=[2, 4, 8, 16, 32, 64, 128]),
            K("not a power of two", value=[3, 5, 6, 7, 12, 20, 24, 48, 100])]),
        axis("block_table dtype", "int32 or int64", [K("int32"), K("int64")]),
        axis("positions dtype", "int32 or int64", [K("int32"), K("int64")]),
        axis("slots", "int64: block * block_size may pass 2**31 from an int32 table", [K("past 2**31 from an int32 table")]),
        axis("positions", "any token of a mapped block, in any order", [
            K("first and last token of every block"), K("past 1024 positions", value=(1025, 1100))]),
        axis("block_table length", "any number of blocks", [K("past 1024 blocks", value=(1025, 1100))]),
    )),
    Domain("task7", "§5 write K/V", (
        axis("dtype", "float32 or float64", [K("float32"), K("float64")]),
        axis("num_kv_heads", "1 or more", [K("one"), K("several", value=(2, 4))]),
        axis("block_size", "any positive int", [K("a power of two"), K("not a power of two")]),
        axis("slots", "a slot of the cache, or negative (padding, skipped)", [
            K("-1 (padding)"), K("other negatives"), K("0 (the first slot)"), K("the cache's last slot"),
            K("only padding")]),
        axis("tokens", "any number", [K("past 1024", value=(1025, 1100))]),
    )),
    Domain("task8", "§5 gather", (
        axis("dtype", "float32 or float64", [K("torch.float32"), K("torch.float64")]),
        axis("block_table dtype", "int32 or int64", [K("int32"), K("int64")]),
        axis("block_size", "any positive int", [K("1"), K("a power of two"), K("not a power of two")]),
        axis("lengths", "1.. tokens", [
            K("1"), K("bs-1"), K("bs"), K("bs+1"), K("a multiple of bs"), K("past 64 blocks"),
            K("past 1024 tokens")]),
        axis("blocks", "a block may be shared by several sequences (forks)", [K("shared")]),
    )),
    Domain("task9", "§5 paged attention", (
        axis("heads", "num_heads a multiple of num_kv_heads", [K("MHA"), K("GQA"), K("MQA")]),
        axis("scale", "default 1/sqrt(head_size), or given", [K("default"), K("custom")]),
        axis("dtypes", "q and the caches float32 or float64 each; computed in q's dtype", [
            K(f"q torch.{a}, caches torch.{b}") for a in ("float32", "float64") for b in ("float32", "float64")]),
        axis("block_size", "any positive int", [K("a power of two"), K("not a power of two")]),
        axis("head_size", "any positive int", [K("one no public check uses")]),
        axis("lengths", "1.. tokens", [K("at block edges (bs, bs+1)"), K("past 64 blocks")]),
        axis("blocks", "shared by forks", [K("shared")]),
        axis(LOGITS[0], LOGITS[1], LOGITS[2]),
    )),
    Domain("task10", "§6.1-6.2 the v1 kernel", (
        axis("block_size", "8, 16 or 32", [K("8", value=8), K("16", value=16), K("32", value=32)]),
        axis("heads", "num_heads a multiple of num_kv_heads", [K("MHA"), K("GQA"), K("MQA")]),
        axis("head_size", "1..256 (the kernel's q buffer)", [
            K("8 (under a warp)", value=8), K("16 (under a warp)", value=16), K("24 (under a warp)", value=24),
            K("33-128", value=[48, 80, 112]), K("129-255 (above the 128 threads)", value=[144, 192, 240]),
            K("256 (the bound)", value=MAX_HEAD_SIZE)]),
        axis("lengths", "1..max_blocks_per_seq * block_size, within the shared-memory limit", [
            K("1"), K("bs-1"), K("bs+1"), K("127-129 (the thread count)"), K("past 64 blocks and 2048 tokens")]),
        axis("blocks", "shared by forks", [K("shared")]),
        axis("scale", "default or given", [K("default"), K("custom")]),
        axis("schedules", "any order of the threads", [K("two")]),
        axis(LOGITS[0], LOGITS[1], LOGITS[2]),
    )),
    Domain("task11", "§7 prefix caching", (
        axis("pool", "any number of blocks of any size", [
            K("small (5-8 blocks of 1-2 tokens: evictions, refusals)"), K("larger (12-23 blocks of 3-5 tokens)"),
            K("past 256 blocks", value=(257, 300))]),
        axis("hash_full_blocks", "any token list: a chained hash per full block, none for a partial one", [
            K("no tokens"), K("under one block"), K("whole blocks (two or more)"), K("whole blocks plus a partial one")]),
        axis("prompts", "any token ids", [
            K("a whole-block prompt twice, freed, reused plus one token"), K("shared prefixes"),
            K("token ids 0 and negative")]),
        axis("hash_fn", "any function of (parent hash, tokens): a lookup verifies the tokens", [
            K("the default"), K("one that collides (every block the same hash)")]),
        axis("room at an allocate", "new blocks plus idle cached hits <= free blocks", [
            K("exactly enough (idle hits counted)"), K("one block short (None)")]),
        axis("free queue", "remove() unlinks in O(1)", [
            K("remove from the middle of a queue past 1024 blocks", value=(1025, 2000))]),
    )),
    Domain("task12", "§7 the buddy allocator", (
        axis("memory", "2**k slots, k >= 0: 1, and at and past each hard-coded size", [
            K("1 slot", value=1), *(K(f"{n} slots", value=n) for n in (64, 128, 256, 512, 1024, 2048))]),
        axis("request", "1..total slots", [
            K("1"), K("a power of two"), K("a size that rounds up"), K("the whole memory"),
            K("more than the largest free block (None)")]),
        axis("trace", "any order of allocs and frees", [K("everything freed (a full merge)")]),
    )),
    Domain("task13/swap", "§7b swap", (
        axis("seq_id", "any C int", C_INT_IDS),
        axis("group", "the sequences sharing blocks with it, transitively", [
            K("one sequence"), K("two sequences"),
            K("a chain of three (A-B-C: A and C share nothing; C listed before B)")]),
        axis("free blocks on the destination", "the group's distinct blocks <= free blocks", [
            K("exactly the group's blocks"), K("one fewer (refused)")]),
        axis("ids on the destination", "a member's id already there: refused", [K("a clash (refused)")]),
        axis("swap space", "partly taken", [K("partly taken")]),
    )),
    Domain("task13/copy", "§7b copy_blocks", (
        axis("block id", "[0, total_local_blocks): anything else is -1 with nothing copied", [
            K("0", value=0), K("the last block"), K("-1", value=-1), K("other negatives", value=(INT_MIN + 1, -2)),
            K("INT_MIN", value=INT_MIN), K("total (one past the last)"), K("INT_MAX", value=INT_MAX),
            *at_and_past(index=True)]),
        axis("pairs", "(src, dst) lists; a destination once, never also a source", [
            K("none"), K("one source to several destinations"), K("a destination repeated"),
            K("a destination that is also a source")]),
    )),
    Domain("task14", "§7b the v2 kernel", (
        axis("block_size", "8, 16 or 32", [K("8", value=8), K("16", value=16), K("32", value=32)]),
        axis("heads", "num_heads a multiple of num_kv_heads", [K("MHA"), K("GQA"), K("MQA")]),
        axis("scale", "default or given", [K("default"), K("custom")]),
        axis("blocks", "shared by forks", [K("shared")]),
        axis("partition_size", "a positive multiple of block_size within the shared-memory limit", [
            K("one block"), K("2-8 blocks"), K("512 (the default)"), K("1024 (past 512)")]),
        axis("lengths", "1.. tokens", [
            K("1"), K("within one partition"), K("k*P-1"), K("k*P"), K("k*P+1"), K("past 64 blocks")]),
        axis(LOGITS[0], LOGITS[1], LOGITS[2]),
    )),
)

BY_CHECK = {d.check: d for d in DOMAINS}


def domain(check: str) -> Domain:
    return BY_CHECK[check]
