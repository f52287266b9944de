"""The continuous-batching scheduler simulation (pagedlab.scheduler): hand-traced runs and
invariants on seeded random workloads."""

from __future__ import annotations

import math

import pytest

from pagedlab.scheduler import CostModel, Request, simulate, synthetic_requests

COST = CostModel()


def _two_requests():
    # Block size 4, 4 GPU blocks; both prompts take 1 block and grow to 3 (tokens 0..9).
    return [Request(0.0, 4, 6), Request(0.0, 4, 6)]


def test_one_request_without_pressure_takes_prefill_plus_decode_steps():
    report = simulate([Request(0.0, 10, 3)], num_gpu_blocks=8, block_size=4)
    # Step 1 prefills 10 tokens (no KV read yet); steps 2 and 3 decode with 10 and 11 cached tokens.
    expected = COST.step_time(10, 0) + COST.step_time(1, 11) + COST.step_time(1, 12)
    stats = report.requests[0]
    assert report.steps == 3 and report.preemptions == 0
    assert stats.first_token == pytest.approx(COST.step_time(10, 0))
    assert stats.finish == pytest.approx(expected)
    assert report.throughput == pytest.approx(3 / expected)


def test_recompute_preempts_the_newest_and_prefills_its_tokens_again():
    report = simulate(_two_requests(), num_gpu_blocks=4, block_size=4, policy="recompute")
    a, b = report.requests
    # Step 6: A needs its third block, none is free: B (the newer) is dropped. A finishes in step
    # 6, B is prefilled again in step 7 (4 prompt + 5 generated tokens) and finishes there.
    assert [s.preempted for s in report.timeline] == [(), (), (), (), (), (1,), ()]
    assert (a.preemptions, b.preemptions) == (0, 1)
    assert report.recomputed_tokens == 8 and report.swap_bytes == 0
    assert b.finish == pytest.approx(report.timeline[-1].time) and a.finish < b.finish
    assert report.timeline[5].waiting == 1 and report.timeline[5].running == 0


def test_swap_moves_the_victims_blocks_out_and_back():
    report = simulate(_two_requests(), num_gpu_blocks=4, num_cpu_blocks=8, block_size=4, policy="swap")
    block_bytes = 4 * COST.kv_bytes_per_token
    assert [s.preempted for s in report.timeline] == [(), (), (), (), (), (1,), ()]
    assert report.swap_out_bytes == report.swap_in_bytes == 2 * block_bytes
    assert report.recomputed_tokens == 0
    assert report.timeline[5].swapped == 1 and report.timeline[5].free_cpu_blocks == 6
    assert report.timeline[6].swapped == 0 and report.timeline[6].free_cpu_blocks == 8


def test_swap_falls_back_to_recompute_when_the_swap_space_is_full():
    report = simulate(_two_requests(), num_gpu_blocks=4, num_cpu_blocks=1, block_size=4, policy="swap")
    assert report.swap_bytes == 0 and report.recomputed_tokens == 8


@pytest.mark.parametrize("policy", ["recompute", "swap"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_workloads_finish_and_keep_the_books(policy, seed):
    reqs = synthetic_requests(60, prompt_len=200, output_len=120, rate=40, seed=seed)
    report = simulate(reqs, num_gpu_blocks=300, num_cpu_blocks=2000, block_size=16, policy=policy)
    assert report.preemptions > 0, "the workload should put the cache under pressure"
    for r, stats in zip(reqs, report.requests, strict=True):
        assert r.arrival < stats.first_token <= stats.finish
    for snap in report.timeline:
        assert 0 <= snap.free_gpu_blocks <= 300 and 0 <= snap.free_cpu_blocks <= 2000
    last = report.timeline[-1]
    assert (last.running, last.swapped, last.waiting, last.free_gpu_blocks) == (0, 0, 0, 300)
    if policy == "swap":
        assert report.recomputed_tokens == 0 and report.swap_out_bytes == report.swap_in_bytes > 0
    else:
        assert report.swap_bytes == 0 and report.recomputed_tokens > 0
    assert math.isclose(report.makespan, last.time - reqs[0].arrival)


def test_pcie_bandwidth_only_costs_the_swap_policy():
    reqs = synthetic_requests(60, prompt_len=400, output_len=100, rate=40, seed=3)
    kw = dict(num_gpu_blocks=250, num_cpu_blocks=4000, block_size=16)
    fast, slow = CostModel(pcie_bandwidth=2.5e10), CostModel(pcie_bandwidth=1e9)
    assert simulate(reqs, policy="recompute", cost=fast, **kw).makespan == \
        simulate(reqs, policy="recompute", cost=slow, **kw).makespan
    assert simulate(reqs, policy="swap", cost=slow, **kw).makespan > \
        simulate(reqs, policy="swap", cost=fast, **kw).makespan


def test_more_memory_means_fewer_preemptions():
    reqs = synthetic_requests(80, prompt_len=300, output_len=150, rate=50, seed=4)
    counts = [simulate(reqs, num_gpu_blocks=n, num_cpu_blocks=4000).preemptions for n in (200, 400, 3000)]
    assert counts[0] > counts[1] > counts[2] == 0


def test_bad_arguments_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="policy"):
        simulate([Request(0, 4, 4)], num_gpu_blocks=4, policy="evict")
    with pytest.raises(ValueError, match="could never finish"):
        simulate([Request(0, 40, 30)], num_gpu_blocks=2, block_size=16)
    with pytest.raises(TypeError, match="Request"):
        simulate([(0, 4, 4)], num_gpu_blocks=4)
    with pytest.raises(ValueError, match="output_len"):
        simulate([Request(0, 4, 0)], num_gpu_blocks=4)
    with pytest.raises(TypeError, match="num_gpu_blocks"):
        simulate([Request(0, 4, 4)], num_gpu_blocks=4.0)
    with pytest.raises(ValueError, match="empty"):
        simulate([], num_gpu_blocks=4)
