"""How much KV memory holds real tokens? Contiguous reservation against paging.

The simulator replays a stream of requests through a serving loop with a fixed KV budget of
`memory_tokens` slots and iteration-level scheduling (every running request generates one
token per step, finished requests leave, waiting ones are admitted first come, first served):

- **contiguous** policies reserve one chunk per request at admission, placed on a real address
  space by a buddy allocator (the paper's Orca baselines use one) or first-fit, so holes between
  chunks are real external fragmentation:
  ``"max"`` reserves `max_len` slots, ``"pow2"`` the prompt plus the output length rounded up to
  a power of two, ``"oracle"`` exactly its final length (it knows the output length in
  advance); the buddy allocator then rounds every chunk up to a power of two;
- **paging** (``"paged"``) allocates `block_size`-token blocks on demand. When the next step
  would need more blocks than exist, the most recently admitted request is preempted (its
  blocks are freed and it re-queues at the front to be recomputed, as vLLM does), and new
  requests are admitted only while a watermark of free blocks remains.

At every step each slot of KV memory is in exactly one state:

- *token*: holds the K/V of a real token;
- *reservation*: reserved for a token the request will generate later;
- *internal fragmentation*: reserved but never used (chunk beyond the final length, or the
  unfilled tail of a request's last block);
- *external fragmentation*: not reserved by anyone (holes, and space a waiting request could
  not use).

The shares are averaged over the steps during which requests were waiting (the server is
saturated; once the queue is empty utilisation falls for reasons that have nothing to do with
the allocator). If nothing ever waits, they are averaged over the whole run instead.

Why it is fast: the loop only visits *events* (completions, admissions, preemptions), never
individual decode steps. Between two events nothing but token counts changes, and they grow by
one per step, so a request's contribution over any span of steps has a closed form (an
arithmetic series for tokens, a sum of ceilings for paged blocks). The paged loop finds the
step where memory runs out by bisection over a vectorised numpy block count. Per-request
totals are summed with numpy at the end.
"""

from __future__ import annotations

import bisect
import heapq
from collections import deque
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

POLICIES = ("max", "pow2", "oracle", "paged")
CONTIGUOUS = ("max", "pow2", "oracle")

# OPT-13B (the model behind the vLLM paper's Figure 2): 2 (K, V) x 40 layers x 5120 x 2 bytes.
OPT13B_KV_BYTES_PER_TOKEN = 2 * 40 * 5120 * 2  # 819,200 B = 800 KiB
# A 12 GiB KV budget (an assumption: roughly what a 40 GB A100 has left after OPT-13B's 26 GB of
# weights and working memory) holds this many tokens:
DEFAULT_MEMORY_TOKENS = 12 * 2**30 // OPT13B_KV_BYTES_PER_TOKEN  # 15,728
MAX_LEN = 2048  # OPT's context length


# ------------------------------------------------------------------------------ workloads


@dataclass(frozen=True)
class Workload:
    """A request-length distribution: log-normal prompts and outputs with given means and CVs.

    The means are the ones the vLLM paper reports for its datasets (Kwon et al., SOSP 2023,
    §6.1); the shapes (log-normal, coefficient of variation) are assumptions of this course.
    """

    name: str
    prompt_mean: float
    output_mean: float
    prompt_cv: float
    output_cv: float


SHAREGPT = Workload("ShareGPT-like", 161.31, 337.99, prompt_cv=1.5, output_cv=1.1)
ALPACA = Workload("Alpaca-like", 19.31, 58.45, prompt_cv=0.8, output_cv=0.9)


def _lognormal(rng, mean_mu, cv, n):
    sigma = np.sqrt(np.log1p(cv * cv))
    return rng.lognormal(mean_mu, sigma, n)


def _draw(workload: Workload, mus, n, rng, max_len):
    """Draw n (prompt, output) pairs, redrawing pairs longer than max_len (vLLM's benchmark
    drops such requests instead of truncating them)."""
    prompts = np.empty(0, np.int64)
    outputs = np.empty(0, np.int64)
    while prompts.size < n:
        k = int((n - prompts.size) * 1.2) + 16
        p = np.maximum(1, np.rint(_lognormal(rng, mus[0], workload.prompt_cv, k))).astype(np.int64)
        o = np.maximum(1, np.rint(_lognormal(rng, mus[1], workload.output_cv, k))).astype(np.int64)
        keep = p + o <= max_len
        prompts, outputs = np.concatenate([prompts, p[keep]]), np.concatenate([outputs, o[keep]])
    return prompts[:n], outputs[:n]


@lru_cache(maxsize=16)
def _calibrated_mus(workload: Workload, max_len: int) -> tuple[float, float]:
    """Log-space locations such that the means *after* rounding and dropping over-long
    requests match the workload's means (fixed-point iteration on a fixed-seed sample)."""
    mus = []
    for mean, cv in ((workload.prompt_mean, workload.prompt_cv), (workload.output_mean, workload.output_cv)):
        mus.append(np.log(mean) - 0.5 * np.log1p(cv * cv))
    mus = np.array(mus)
    target = np.array([workload.prompt_mean, workload.output_mean])
    for _ in range(6):
        p, o = _draw(workload, mus, 200_000, np.random.default_rng(12345), max_len)
        mus = mus + np.log(target / np.array([p.mean(), o.mean()]))
    return float(mus[0]), float(mus[1])


def sample_requests(workload: Workload, n: int, *, seed: int = 0,
                    max_len: int = MAX_LEN) -> tuple[np.ndarray, np.ndarray]:
    """Synthetic (prompt_lens, output_lens), int64 arrays of length n, with p + o <= max_len."""
    if not isinstance(workload, Workload):
        raise TypeError(f"workload must be a Workload (e.g. SHAREGPT, ALPACA), got {type(workload).__name__}")
    if not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    if max_len < 2:
        raise ValueError(f"max_len must be at least 2 (one prompt and one output token), got {max_len}")
    mus = _calibrated_mus(workload, int(max_len))
    return _draw(workload, mus, int(n), np.random.default_rng(seed), max_len)


# ------------------------------------------------------------------------------ results


@dataclass
class Result:
    """What one simulated run measured. Shares are fractions of memory x steps (they sum to 1)."""

    policy: str
    block_size: int | None
    memory_tokens: int
    num_requests: int
    window_steps: int  # steps with requests waiting (the averaging window), else total_steps
    total_steps: int  # steps until the last request finished
    token_share: float
    reservation_share: float
    internal_share: float
    external_share: float
    mean_running: float  # requests served concurrently, averaged over the window
    max_running: int
    preemptions: int
    # One row per uninterrupted run of a request (a preempted request has several):
    seg_start: np.ndarray = field(repr=False, default=None)
    seg_end: np.ndarray = field(repr=False, default=None)
    seg_prompt: np.ndarray = field(repr=False, default=None)  # tokens stored before its first step
    seg_final: np.ndarray = field(repr=False, default=None)  # the request's final length
    seg_chunk: np.ndarray = field(repr=False, default=None)  # contiguous reservation (0 when paged)

    @property
    def label(self) -> str:
        return f"paged (block {self.block_size})" if self.policy == "paged" else f"contiguous {self.policy}"

    def timeline(self, points: int = 200) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(steps, tokens stored, slots reserved) sampled at `points` steps over the whole run."""
        steps = np.linspace(0, max(self.total_steps - 1, 0), points).astype(np.int64)
        tokens, held = np.zeros(points, np.int64), np.zeros(points, np.int64)
        for j, t in enumerate(steps):  # one vectorised pass over the segments per sample
            live = (self.seg_start <= t) & (t < self.seg_end)
            n = self.seg_prompt[live] + (t - self.seg_start[live]) + 1
            tokens[j] = n.sum()
            if self.policy == "paged":
                held[j] = (-(-n // self.block_size) * self.block_size).sum()
            else:
                held[j] = self.seg_chunk[live].sum()
        return steps, tokens, held


def _ceil_sum(n, B):
    """sum(ceil(m / B) for m in 1..n), elementwise for an integer array n >= 0."""
    q, r = np.divmod(n, B)
    return B * q * (q + 1) // 2 + r * (q + 1)


def _account(policy, B, M, segs, window, total_steps, n_requests, preemptions) -> Result:
    window = window or total_steps  # nothing ever waited: average over the whole run
    s, e, p, final, chunk = (np.asarray(c, dtype=np.int64) for c in zip(*segs, strict=True)) if segs else \
        (np.zeros(0, np.int64),) * 5
    k = np.clip(np.minimum(e, window) - s, 0, None)  # steps of each segment inside the window
    tokens = (k * (p + 1) + k * (k - 1) // 2).sum()
    if policy == "paged":
        held = B * (_ceil_sum(p + k, B) - _ceil_sum(p, B)).sum()
        reserved_future = 0
    else:
        held = (chunk * k).sum()
        reserved_future = (final * k).sum() - tokens
    capacity = M * window
    if capacity == 0:
        shares = (0.0, 0.0, 0.0, 0.0)
    else:
        shares = (tokens / capacity, reserved_future / capacity,
                  (held - tokens - reserved_future) / capacity, (capacity - held) / capacity)
    # Concurrency: how many segments are live, per step, inside the window.
    if window:
        delta = np.zeros(window + 1, np.int64)
        np.add.at(delta, np.minimum(s, window), 1)
        np.add.at(delta, np.minimum(e, window), -1)
        running = np.cumsum(delta)[:window]
        mean_running, max_running = float(running.mean()), int(running.max())
    else:
        mean_running, max_running = 0.0, 0
    return Result(policy, B if policy == "paged" else None, M, n_requests, int(window), int(total_steps),
                  *(float(x) for x in shares), mean_running, max_running, preemptions,
                  s, e, p, final, chunk)


# ------------------------------------------------------------------------------ contiguous


ALLOCATORS = ("buddy", "first-fit")


class FirstFit:
    """A contiguous address space [0, size) with first-fit allocation and coalescing frees."""

    def __init__(self, size: int):
        self.starts = [0]  # sorted hole starts
        self.sizes = [size]

    def alloc(self, n: int) -> int | None:
        for i, hole in enumerate(self.sizes):
            if hole >= n:
                addr = self.starts[i]
                if hole == n:
                    del self.starts[i], self.sizes[i]
                else:
                    self.starts[i] += n
                    self.sizes[i] -= n
                return addr
        return None

    def free(self, addr: int, n: int) -> None:
        i = bisect.bisect_left(self.starts, addr)
        if i > 0 and self.starts[i - 1] + self.sizes[i - 1] == addr:  # merge with the hole before
            i -= 1
            self.sizes[i] += n
        else:
            self.starts.insert(i, addr)
            self.sizes.insert(i, n)
        if i + 1 < len(self.starts) and self.starts[i] + self.sizes[i] == self.starts[i + 1]:
            self.sizes[i] += self.sizes.pop(i + 1)
            del self.starts[i + 1]

    @property
    def free_slots(self) -> int:
        return sum(self.sizes)


def pow2_order(n: int) -> int:
    """The smallest k with 2**k >= n: a buddy allocator holds a chunk of n slots in 2**k."""
    return max(int(n) - 1, 0).bit_length()


class Arenas:
    """A buddy allocator class with Task 12's interface (`cls(total_slots)` for a power of two,
    `alloc(n)`, `free(offset)`, `free_blocks()`) stretched over a memory that is not a power of
    two: one allocator per set bit of the size (8192 + 4096 + ...), largest first, so every arena
    starts at a multiple of its size. A request takes the smallest free block that fits in any
    arena, the lowest address first, as one allocator over the whole memory would."""

    def __init__(self, size: int, buddy_class):
        self.bases: list[int] = []
        self.sizes: list[int] = []
        self.arenas: list = []
        base = 0
        for k in range(int(size).bit_length() - 1, -1, -1):
            if size >> k & 1:
                self.bases.append(base)
                self.sizes.append(1 << k)
                self.arenas.append(buddy_class(1 << k))
                base += 1 << k

    def alloc(self, n: int) -> int | None:
        need = 1 << pow2_order(n)
        # (block size, address, arena): the smallest block that fits, then the lowest address.
        fits = [(size, self.bases[i] + offset, i) for i in range(len(self.arenas)) if self.sizes[i] >= need
                for offset, size in self.arenas[i].free_blocks() if size >= need]
        if not fits:
            return None
        _, _, i = min(fits)
        offset = self.arenas[i].alloc(int(n))
        return None if offset is None else self.bases[i] + offset

    def free(self, addr: int, n: int) -> None:
        i = bisect.bisect_right(self.bases, addr) - 1
        self.arenas[i].free(addr - self.bases[i])

    @property
    def free_slots(self) -> int:
        return sum(arena.free_slots for arena in self.arenas)


def _reference_buddy():
    try:  # the instructor edition's model; the student edition has none (it is Task 12)
        from .grader.answers.buddy import Buddy
    except ImportError:
        raise ValueError(
            'allocator="buddy" is the instructor edition\'s buddy allocator, which this edition does not '
            'have: the buddy allocator is Task 12. Pass yours: allocator=pagedlab.load("buddy").BuddyAllocator'
        ) from None
    return Buddy


def _space(allocator, size: int):
    """The contiguous address space for `allocator`: "first-fit", "buddy" (the instructor
    edition's model) or a buddy allocator class with Task 12's interface."""
    if allocator == "first-fit":
        return FirstFit(size)
    if allocator == "buddy":
        return _reference_buddy()(size)
    return Arenas(size, allocator)


def _is_buddy(allocator) -> bool:
    return allocator != "first-fit"


def _chunks(policy, prompts, outputs, max_len):
    """Slots each request asks for: the maximum length, prompt + the output length rounded up
    to a power of two (over-reserving the output by less than 2x), or exactly what it needs."""
    if policy == "max":
        return np.full_like(prompts, max_len)
    if policy == "pow2":
        return np.minimum(prompts + (1 << np.ceil(np.log2(outputs)).astype(np.int64)), max_len)
    return prompts + outputs


def _run_contiguous(policy, prompts, outputs, M, max_len, allocator):
    final = prompts + outputs
    chunk = _chunks(policy, prompts, outputs, max_len)
    space = _space(allocator, M)
    if _is_buddy(allocator):  # what a chunk really occupies: its size rounded up to a power of 2
        chunk = np.left_shift(1, np.array([pow2_order(c) for c in chunk], dtype=np.int64))
    queue = deque(range(len(prompts)))
    running: list = []  # heap of (end step, request, address)
    segs, now, last_admission = [], 0, 0
    while queue or running:
        while queue:  # first come, first served: the head waits, nobody overtakes it
            i = queue[0]
            addr = space.alloc(int(chunk[i]))
            if addr is None:
                break
            queue.popleft()
            end = now + int(outputs[i])
            heapq.heappush(running, (end, i, addr))
            segs.append((now, end, int(prompts[i]), int(final[i]), int(chunk[i])))
            last_admission = now
        now = running[0][0]
        while running and running[0][0] == now:
            _, i, addr = heapq.heappop(running)
            space.free(addr, int(chunk[i]))
    return segs, last_admission, now, 0


# ------------------------------------------------------------------------------ paged


def _run_paged(prompts, outputs, M, B, watermark):
    num_blocks = M // B
    usable = num_blocks - int(np.ceil(watermark * num_blocks))
    final = prompts + outputs
    cur_prompt = prompts.copy()  # tokens to (re)compute at admission; grows when preempted
    remaining = outputs.copy()
    queue = deque(range(len(prompts)))
    # Running requests in admission order; request r holds run_a[r] + t tokens at step t.
    run_id: list[int] = []
    run_a: list[int] = []
    run_s: list[int] = []
    run_end: list[int] = []
    segs, now, last_admission, preemptions = [], 0, 0, 0

    def blocks_at(t):
        return int((-(-(np.array(run_a, dtype=np.int64) + t) // B)).sum()) if run_a else 0

    while queue or run_id:
        used = blocks_at(now)
        while queue:
            i = queue[0]
            need = -(-(int(cur_prompt[i]) + 1) // B)
            if run_id and used + need > usable:  # keep a watermark of free blocks, as vLLM does
                break
            queue.popleft()
            run_id.append(i)
            run_a.append(int(cur_prompt[i]) + 1 - now)
            run_s.append(now)
            run_end.append(now + int(remaining[i]))
            used += need
            last_admission = now
        next_end = min(run_end)
        if blocks_at(next_end - 1) <= num_blocks:  # everyone fits until the next completion
            now = next_end
            for j in reversed([j for j, x in enumerate(run_end) if x == now]):
                i = run_id.pop(j)
                segs.append((run_s.pop(j), run_end.pop(j), int(cur_prompt[i]), int(final[i]), 0))
                run_a.pop(j)
            continue
        lo, hi = now, next_end - 1  # blocks fit at step lo, not at step hi
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if blocks_at(mid) <= num_blocks:
                lo = mid
            else:
                hi = mid
        now = hi
        while blocks_at(now) > num_blocks:  # preempt the latest admitted: recompute it later
            i, s = run_id.pop(), run_s.pop()
            run_a.pop()
            run_end.pop()
            segs.append((s, now, int(cur_prompt[i]), int(final[i]), 0))
            cur_prompt[i] += now - s
            remaining[i] -= now - s
            queue.appendleft(i)
            preemptions += 1
    return segs, last_admission, now, preemptions


# ------------------------------------------------------------------------------ entry point


def simulate(prompt_lens, output_lens, policy: str = "paged", *, block_size: int = 16,
             memory_tokens: int = DEFAULT_MEMORY_TOKENS, max_len: int = MAX_LEN,
             watermark: float = 0.01, allocator="first-fit") -> Result:
    """Replay the requests (all waiting at step 0, served first come first served) under
    `policy` with `memory_tokens` KV slots; return the time-averaged memory breakdown.

    `allocator` places the contiguous policies' chunks: "first-fit" (the default: it needs no
    task, so notebook 01 runs in every edition), a buddy allocator class with Task 12's interface
    (notebook 09 passes the student's `BuddyAllocator`), or "buddy", the instructor edition's own
    model (the student edition has none: it is Task 12)."""
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
    prompts = np.asarray(prompt_lens, dtype=np.int64)
    outputs = np.asarray(output_lens, dtype=np.int64)
    if prompts.ndim != 1 or prompts.shape != outputs.shape or prompts.size == 0:
        raise ValueError(f"prompt_lens and output_lens must be non-empty 1-D arrays of one length, "
                         f"got shapes {prompts.shape} and {outputs.shape}")
    if prompts.min() < 1 or outputs.min() < 1:
        raise ValueError("every request needs at least one prompt token and one output token")
    if (prompts + outputs).max() > max_len:
        raise ValueError(f"a request is longer than max_len={max_len} tokens (prompt + output)")
    if not isinstance(block_size, (int, np.integer)) or block_size < 1:
        raise ValueError(f"block_size must be a positive int, got {block_size!r}")
    if allocator not in ALLOCATORS and not isinstance(allocator, type):
        raise ValueError(f"allocator must be one of {ALLOCATORS} or a buddy allocator class "
                         f"(pagedlab.load('buddy').BuddyAllocator), got {allocator!r}")
    if not 0 <= watermark < 0.5:
        raise ValueError(f"watermark must be a fraction in [0, 0.5), got {watermark}")
    if memory_tokens < max_len or (policy == "paged" and (memory_tokens // block_size) * (1 - watermark) * block_size < max_len):
        raise ValueError(f"memory_tokens={memory_tokens} cannot hold even one request of max_len={max_len}")
    if policy == "paged":
        segs, window, steps, preemptions = _run_paged(prompts, outputs, memory_tokens, int(block_size), watermark)
        M = (memory_tokens // block_size) * block_size
    else:
        segs, window, steps, preemptions = _run_contiguous(policy, prompts, outputs, memory_tokens, max_len, allocator)
        M = memory_tokens
    return _account(policy, int(block_size), M, segs, window, steps, len(prompts), preemptions)


def simulate_stepwise(prompt_lens, output_lens, policy: str = "paged", *, block_size: int = 16,
                      memory_tokens: int = DEFAULT_MEMORY_TOKENS, max_len: int = MAX_LEN,
                      watermark: float = 0.01, allocator="first-fit") -> dict:
    """The same rules as `simulate`, one decode step at a time: slow, obviously right.

    Returns the shares, window, steps, preemptions and mean concurrency as a dict.
    """
    prompts = np.asarray(prompt_lens, dtype=np.int64)
    outputs = np.asarray(output_lens, dtype=np.int64)
    B = int(block_size)
    paged = policy == "paged"
    if paged:
        num_blocks = memory_tokens // B
        usable = num_blocks - int(np.ceil(watermark * num_blocks))
        M = num_blocks * B
    else:
        M = memory_tokens
        space = _space(allocator, M)
        want = _chunks(policy, prompts, outputs, max_len)
    final = prompts + outputs
    queue = deque(range(len(prompts)))
    stored = {}  # request -> tokens held before this step's token (running requests only)
    left = {}  # request -> tokens still to generate
    order: list[int] = []  # running requests in admission order
    addr_of = {}
    per_step, t, last_admission, preemptions = [], 0, 0, 0
    pending = {i: int(prompts[i]) for i in range(len(prompts))}  # tokens to (re)compute
    todo = {i: int(outputs[i]) for i in range(len(prompts))}
    while queue or order:
        used = sum(-(-(stored[i] + 1) // B) for i in order) if paged else 0
        while queue:
            i = queue[0]
            if paged:
                need = -(-(pending[i] + 1) // B)
                if order and used + need > usable:
                    break
                used += need
            else:
                addr = space.alloc(int(want[i]))
                if addr is None:
                    break
                addr_of[i] = addr
            queue.popleft()
            order.append(i)
            stored[i], left[i] = pending[i], todo[i]
            last_admission = t
        if paged:
            while sum(-(-(stored[i] + 1) // B) for i in order) > num_blocks:
                i = order.pop()
                pending[i], todo[i] = stored[i], left[i]
                queue.appendleft(i)
                preemptions += 1
        tokens = sum(stored[i] + 1 for i in order)
        if paged:
            held, future = sum(-(-(stored[i] + 1) // B) * B for i in order), 0
        else:
            size = (lambda c: 1 << pow2_order(c)) if _is_buddy(allocator) else int
            held = sum(size(int(want[i])) for i in order)
            future = sum(int(final[i]) for i in order) - tokens
        per_step.append((tokens, future, held, len(order)))
        for i in list(order):  # every running request generates one token
            stored[i] += 1
            left[i] -= 1
            if left[i] == 0:
                order.remove(i)
                if not paged:
                    space.free(addr_of.pop(i), int(want[i]))
        t += 1
    w = np.array(per_step[:last_admission or t], dtype=np.float64).reshape(-1, 4)
    cap = M * len(w)
    if cap == 0:
        shares = (0.0, 0.0, 0.0, 0.0)
    else:
        tok, fut, held = w[:, 0].sum(), w[:, 1].sum(), w[:, 2].sum()
        shares = (tok / cap, fut / cap, (held - tok - fut) / cap, (cap - held) / cap)
    return {"token_share": shares[0], "reservation_share": shares[1], "internal_share": shares[2],
            "external_share": shares[3], "window_steps": last_admission or t, "total_steps": t,
            "preemptions": preemptions, "mean_running": float(w[:, 3].mean()) if len(w) else 0.0}
