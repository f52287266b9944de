"""A continuous-batching scheduler under memory pressure: preempt by recompute or by swap.

This is the control loop notebook 10 studies, reduced to what decides memory: block counts.
Each step (an iteration of the model over the whole batch) every running sequence produces one
token, new requests join the batch as soon as their prompt fits (continuous batching), and the
order is first come, first served. When a running sequence needs a new block for the token it
is about to write and none is free, the scheduler preempts the *newest* running sequence (the
one that arrived last: it has waited least, so FCFS loses least), repeating until the block is
there or the sequence has preempted itself. That is the policy of vLLM's v0 scheduler (seed 003
walks through `_schedule_running`, `_swap_out`, `_preempt_by_recompute`):

- ``"recompute"``: the victim's blocks are dropped and it goes back to the *front* of the waiting
  queue; when it is admitted again its prompt and every token generated so far are prefilled
  again ("recomputed tokens");
- ``"swap"``: the victim's blocks are copied to CPU blocks (swap space) and it waits in the
  swapped queue; swapped sequences come back (swap in) before any new request is admitted. If
  the swap space is full, the victim is recomputed instead, as vLLM does.

Order inside a step is the one seed 003 walks through (vLLM v0's scheduler in its chunked-prefill
mode, here without chunking): running sequences first (they may preempt), then swap-ins (only in
a step without preemption), then new prefills, then the model runs. New prefills wait while
anything is swapped out (vLLM v0's default scheduler has that rule too) or was preempted in this
step: a newcomer must not take the blocks an older, preempted sequence is waiting for. vLLM's
default (non-chunked) mode differs in one way: a step that can admit prompts runs them alone
and decodes nothing. No watermark is kept. Swaps are issued before the model runs and are not
overlapped with it.

Time is modelled, not measured (`CostModel`): a step costs a fixed overhead plus the larger of
its memory time (read the weights once, plus the KV cache of every running sequence) and its
compute time (2 x parameters FLOPs per processed token), plus its swap traffic over PCIe at one
copy per block. Every default is an assumption stated in `CostModel`, for a Llama-3-8B-sized
model in fp16 on one H100-class GPU; change them and the conclusions move, which is the point.
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass, field

__all__ = ["Request", "CostModel", "Report", "RequestStats", "Snapshot", "simulate", "synthetic_requests",
           "POLICIES"]

POLICIES = ("recompute", "swap")


@dataclass(frozen=True)
class Request:
    """One request: arrives at `arrival` seconds, `prompt_len` tokens in, `output_len` tokens out."""

    arrival: float
    prompt_len: int
    output_len: int


@dataclass(frozen=True)
class CostModel:
    """How long a step takes. Defaults: an 8B-parameter model in fp16 on one H100-class GPU.

    kv_bytes_per_token: 32 layers x 8 kv heads x 128 dims x 2 (K and V) x 2 bytes = 128 KiB
        (Llama-3-8B uses grouped-query attention; 32 kv heads would give 512 KiB).
    weight_bytes: 8e9 parameters x 2 bytes, read once per step.
    flops_per_token: 2 x parameters (one multiply-add per weight per token; attention ignored).
    hbm_bandwidth: 3.35e12 B/s (H100 SXM datasheet figure).
    compute: 4e14 FLOP/s, i.e. ~40% of the H100's ~989 TFLOP/s dense fp16: a realistic share.
    pcie_bandwidth: 2.5e10 B/s per direction, what PCIe 4.0 x16 (32 GB/s raw) delivers in practice.
    copy_latency: 1e-5 s per block copied, because a swap issues one copy per block (as vLLM's
        `swap_blocks` loops over block pairs), so small blocks waste the link.
    step_overhead: 2e-3 s of scheduling and kernel launches per step.
    """

    kv_bytes_per_token: int = 32 * 8 * 128 * 2 * 2
    weight_bytes: float = 16e9
    flops_per_token: float = 16e9
    hbm_bandwidth: float = 3.35e12
    compute: float = 4e14
    pcie_bandwidth: float = 2.5e10
    copy_latency: float = 1e-5
    step_overhead: float = 2e-3

    def step_time(self, processed_tokens: int, kv_tokens_read: int) -> float:
        """Model time of one step that processes `processed_tokens` and reads that much KV."""
        memory = (self.weight_bytes + kv_tokens_read * self.kv_bytes_per_token) / self.hbm_bandwidth
        compute = processed_tokens * self.flops_per_token / self.compute
        return self.step_overhead + max(memory, compute)

    def swap_time(self, blocks: int, block_size: int) -> float:
        """PCIe time to copy `blocks` KV blocks one way."""
        return blocks * (block_size * self.kv_bytes_per_token / self.pcie_bandwidth + self.copy_latency)


@dataclass
class RequestStats:
    """What happened to one request (times in model seconds)."""

    arrival: float
    prompt_len: int
    output_len: int
    first_token: float = math.nan
    finish: float = math.nan
    preemptions: int = 0

    @property
    def latency(self) -> float:
        """End-to-end latency: arrival to last token."""
        return self.finish - self.arrival

    @property
    def normalized_latency(self) -> float:
        """Latency per output token (the vLLM paper's serving metric)."""
        return self.latency / self.output_len


@dataclass(frozen=True)
class Snapshot:
    """The scheduler's queues and free memory right after one step."""

    time: float
    running: int
    swapped: int
    waiting: int        # arrived and not running (new or preempted by recompute)
    free_gpu_blocks: int
    free_cpu_blocks: int
    preempted: tuple    # request indices preempted in this step


@dataclass
class Report:
    policy: str
    requests: list               # RequestStats, in input order
    timeline: list = field(default_factory=list)  # Snapshot per step
    steps: int = 0
    swap_out_bytes: int = 0
    swap_in_bytes: int = 0
    recomputed_tokens: int = 0
    preemptions: int = 0
    makespan: float = 0.0        # first arrival to last finish

    @property
    def swap_bytes(self) -> int:
        return self.swap_out_bytes + self.swap_in_bytes

    @property
    def throughput(self) -> float:
        """Output tokens per second of model time."""
        return sum(r.output_len for r in self.requests) / self.makespan if self.makespan else 0.0

    @property
    def mean_latency(self) -> float:
        return sum(r.latency for r in self.requests) / len(self.requests)

    @property
    def mean_normalized_latency(self) -> float:
        return sum(r.normalized_latency for r in self.requests) / len(self.requests)

    def summary(self) -> dict:
        return {
            "policy": self.policy, "requests": len(self.requests), "steps": self.steps,
            "makespan_s": round(self.makespan, 3), "throughput_tok_s": round(self.throughput, 1),
            "mean_latency_s": round(self.mean_latency, 3),
            "mean_normalized_latency_ms": round(1e3 * self.mean_normalized_latency, 2),
            "preemptions": self.preemptions, "recomputed_tokens": self.recomputed_tokens,
            "swap_bytes": self.swap_bytes,
        }


class _Seq:
    __slots__ = ("index", "req", "generated", "cached", "blocks", "cpu_blocks", "status", "stats")

    def __init__(self, index: int, req: Request, stats: RequestStats):
        self.index, self.req, self.stats = index, req, stats
        self.generated = 0   # output tokens produced so far
        self.cached = 0      # tokens whose K/V are in the cache
        self.blocks = 0      # GPU blocks held
        self.cpu_blocks = 0  # CPU blocks held while swapped out
        self.status = "future"

    def blocks_for(self, tokens: int, block_size: int) -> int:
        return -(-tokens // block_size)


def _check_int(name, value, low):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < low:
        raise ValueError(f"{name} must be at least {low}, got {value}")


def simulate(requests, *, num_gpu_blocks: int, num_cpu_blocks: int = 0, block_size: int = 16,
             policy: str = "recompute", cost: CostModel | None = None, max_num_seqs: int = 256,
             max_batched_tokens: int = 8192) -> Report:
    """Serve `requests` (a list of `Request`) and report what happened, step by step.

    `num_gpu_blocks` KV blocks of `block_size` tokens hold the running sequences;
    `num_cpu_blocks` is the swap space (used by ``policy="swap"`` only). A step admits new
    prompts while their blocks fit, at most `max_num_seqs` run at once, and the prompts a step
    prefills add up to at most `max_batched_tokens` (one longer prompt may still run alone).
    Raises ValueError for a request that could never fit in the GPU blocks on its own.
    """
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
    for name, value, low in (("num_gpu_blocks", num_gpu_blocks, 1), ("num_cpu_blocks", num_cpu_blocks, 0),
                             ("block_size", block_size, 1), ("max_num_seqs", max_num_seqs, 1),
                             ("max_batched_tokens", max_batched_tokens, 1)):
        _check_int(name, value, low)
    cost = cost or CostModel()
    requests = list(requests)
    if not requests:
        raise ValueError("requests is empty: nothing to simulate")
    for i, r in enumerate(requests):
        if not isinstance(r, Request):
            raise TypeError(f"requests[{i}] must be a pagedlab.scheduler.Request, got {type(r).__name__}")
        if r.prompt_len < 1 or r.output_len < 1 or not r.arrival >= 0:
            raise ValueError(f"requests[{i}] = {r}: prompt_len and output_len must be >= 1, arrival >= 0")
        # The last token written is number prompt_len + output_len - 1.
        need = -(-(r.prompt_len + r.output_len - 1) // block_size)
        if need > num_gpu_blocks:
            raise ValueError(f"requests[{i}] needs {need} blocks of {block_size} tokens at its longest, "
                             f"more than num_gpu_blocks = {num_gpu_blocks}: it could never finish")

    seqs = [_Seq(i, r, RequestStats(r.arrival, r.prompt_len, r.output_len)) for i, r in enumerate(requests)]
    arrivals = deque(sorted(seqs, key=lambda s: (s.req.arrival, s.index)))
    report = Report(policy, [s.stats for s in seqs])
    block_bytes = block_size * cost.kv_bytes_per_token
    waiting: deque[_Seq] = deque()
    running: list[_Seq] = []   # FCFS: oldest arrival first
    swapped: list[_Seq] = []
    free_gpu, free_cpu = num_gpu_blocks, num_cpu_blocks
    now = arrivals[0].req.arrival
    start = now
    done = 0

    def order(s: _Seq):
        return (s.req.arrival, s.index)

    preempted: list[int] = []  # request indices preempted in the current step
    swap_blocks = 0            # blocks copied over PCIe in the current step

    def preempt(victim: _Seq) -> None:
        nonlocal free_gpu, free_cpu, swap_blocks
        running.remove(victim)
        free_gpu += victim.blocks
        victim.stats.preemptions += 1
        report.preemptions += 1
        preempted.append(victim.index)
        if policy == "swap" and victim.blocks <= free_cpu:
            free_cpu -= victim.blocks
            victim.cpu_blocks, victim.status = victim.blocks, "swapped"
            swap_blocks += victim.blocks
            report.swap_out_bytes += victim.blocks * block_bytes
            swapped.append(victim)
            swapped.sort(key=order)
        else:  # recompute (or swap space full): drop the KV, back to the front of the queue
            victim.cached, victim.status = 0, "waiting"
            waiting.appendleft(victim)
        victim.blocks = 0

    while done < len(seqs):
        while arrivals and arrivals[0].req.arrival <= now:
            s = arrivals.popleft()
            s.status = "waiting"
            waiting.append(s)
        if not running and not swapped and not waiting:
            now = arrivals[0].req.arrival
            continue

        preempted.clear()
        swap_blocks = 0

        # 1. Running sequences, oldest first, each get room for the token they write this step.
        decoding: list[_Seq] = []
        for s in list(running):
            if s.status != "running":
                continue  # preempted earlier in this loop
            need = s.blocks_for(s.cached + 1, block_size) - s.blocks
            while need > free_gpu and s.status == "running":
                preempt(running[-1])  # the newest running sequence, possibly s itself
            if s.status == "running":
                free_gpu -= need
                s.blocks += need
                decoding.append(s)

        # 2. Swap in (FCFS) when nothing was preempted in this step.
        if not preempted:
            while swapped and len(running) < max_num_seqs:
                s = swapped[0]
                need = s.blocks_for(s.cached + 1, block_size)
                if need > free_gpu:
                    break
                swapped.pop(0)
                free_cpu += s.cpu_blocks
                swap_blocks += s.cpu_blocks
                report.swap_in_bytes += s.cpu_blocks * block_bytes
                s.cpu_blocks, s.blocks, s.status = 0, need, "running"
                free_gpu -= need
                running.append(s)
                running.sort(key=order)
                decoding.append(s)

        # 3. Prefill waiting requests (FCFS) when nothing is swapped out or was preempted.
        prefilling: list[_Seq] = []
        budget = max_batched_tokens
        if not preempted and not swapped:
            while waiting and len(running) < max_num_seqs:
                s = waiting[0]
                tokens = s.req.prompt_len + s.generated  # a recompute prefills its output too
                need = s.blocks_for(tokens, block_size)
                if need > free_gpu or (tokens > budget and prefilling):
                    break
                waiting.popleft()
                budget -= tokens
                if s.generated:
                    report.recomputed_tokens += tokens - 1  # all but the last token had K/V before
                free_gpu -= need
                s.blocks, s.status = need, "running"
                running.append(s)
                running.sort(key=order)
                prefilling.append(s)

        # 4. The model runs: one token per decoding sequence, a whole prompt per prefill.
        processed = len(decoding) + sum(s.req.prompt_len + s.generated for s in prefilling)
        kv_read = sum(s.cached + 1 for s in decoding)
        if not decoding and not prefilling:
            # Everything preempted itself this step; only the swap traffic costs time.
            dt = cost.swap_time(swap_blocks, block_size)
        else:
            dt = cost.step_time(processed, kv_read) + cost.swap_time(swap_blocks, block_size)
        now += dt
        for s in decoding:
            s.cached += 1
        for s in prefilling:
            s.cached = s.req.prompt_len + s.generated
        for s in decoding + prefilling:
            s.generated += 1
            if s.generated == 1:
                s.stats.first_token = now
            if s.generated == s.req.output_len:
                s.status = "finished"
                s.stats.finish = now
                running.remove(s)
                free_gpu += s.blocks
                s.blocks = 0
                done += 1
        report.steps += 1
        report.timeline.append(Snapshot(now, len(running), len(swapped), len(waiting), free_gpu, free_cpu,
                                        tuple(preempted)))
    report.makespan = now - start
    return report


def synthetic_requests(n: int, *, prompt_len: int, output_len: int, rate: float, seed: int = 0,
                       spread: float = 0.5) -> list[Request]:
    """`n` requests arriving as a Poisson process of `rate` per second, lengths uniform in
    ``mean * (1 +- spread)`` (at least 1 token). Fixed `seed`, so a figure can be reproduced."""
    _check_int("n", n, 1)
    if not rate > 0:
        raise ValueError(f"rate must be positive (requests per second), got {rate}")
    if not 0 <= spread < 1:
        raise ValueError(f"spread must be in [0, 1), got {spread}")
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(n):
        t += rng.expovariate(rate)
        p = max(1, round(prompt_len * rng.uniform(1 - spread, 1 + spread)))
        o = max(1, round(output_len * rng.uniform(1 - spread, 1 + spread)))
        out.append(Request(t, p, o))
    return out
