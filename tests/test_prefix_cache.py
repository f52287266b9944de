"""The reference prefix cache (solutions/prefix_cache.py) and the Task 11 check harness."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pagedlab.graded as checks
from pagedlab.drivers import prefix_cache as pc
from pagedlab.loader import load

m = load("prefix_cache", "solutions")


def test_hash_is_deterministic_and_chained():
    # Tuples and lists of the same tokens hash alike; the chain makes equal blocks differ.
    assert m.hash_block_tokens(m.ROOT_HASH, (1, 2, 3, 4)) == m.hash_block_tokens(0, [1, 2, 3, 4])
    a = m.hash_full_blocks(list(range(12)), 4)
    b = m.hash_full_blocks(list(range(12)) + [99], 4)
    assert a == b and len(a) == 3 and len(set(a)) == 3
    assert m.hash_full_blocks([5] * 8, 4)[0] != m.hash_full_blocks([5] * 8, 4)[1]


def test_hash_value_is_stable_across_processes():
    import subprocess
    import sys

    code = ("from pagedlab.loader import load; m = load('prefix_cache', 'solutions'); "
            "print(m.hash_block_tokens(0, (1, 2, 3, 4)))")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": str(seed)}).stdout for seed in (1, 2)}
    assert len(outs) == 1


def test_random_streams_exercise_hits_evictions_and_refusals():
    """The random-stream check is only worth something if its streams hit every path."""
    hits = evictions = refusals = 0
    for seed in (1, 2, 3):
        mgr = m.PrefixCacheManager(12, 3)
        original_allocate = mgr.pool.allocate

        def counting_allocate(mgr=mgr, original_allocate=original_allocate):
            nonlocal evictions
            head = mgr.pool.free_queue.head.next_free
            evictions += head.block_hash is not None
            return original_allocate()

        mgr.pool.allocate = counting_allocate
        admitted = set()
        for op, rid, arg in pc.random_ops(seed):
            if op == "allocate":
                got = mgr.allocate(rid, arg)
                refusals += got is None
                hits += bool(got)
                if got is not None:
                    admitted.add(rid)
            elif rid in admitted:
                if op == "append":
                    mgr.append_token(rid, arg)
                else:
                    mgr.free(rid)
                    admitted.discard(rid)
    assert hits >= 10 and evictions >= 10 and refusals >= 3, (hits, evictions, refusals)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), num_blocks=st.integers(4, 20), block_size=st.integers(1, 5))
def test_solution_matches_reference_model(seed, num_blocks, block_size):
    from pagedlab.grader.answers.prefix_cache import observations

    got = list(pc.replay(m, seed, num_blocks, block_size))
    want = list(observations(seed, num_blocks, block_size))
    for mine, model in zip(got, want):
        assert mine == model, mine[:2]
    assert len(got) == len(want)


def test_free_queue_links_mirror_each_other():
    mgr = m.PrefixCacheManager(8, 2)
    mgr.allocate("a", [1, 2, 3, 4, 5])
    q = mgr.pool.free_queue
    forward = q.block_ids()
    backward, node = [], q.tail.prev_free
    while node is not q.head:
        backward.append(node.block_id)
        node = node.prev_free
    assert forward == backward[::-1] == [3, 4, 5, 6, 7]
    # free count = blocks with ref 0, as in HW3
    assert len(q) == sum(b.ref_cnt == 0 for b in mgr.pool.blocks)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="num_blocks"):
        m.PrefixCacheManager(0, 4)
    with pytest.raises(ValueError, match="block_size"):
        m.BlockPool(4, 0)
    mgr = m.PrefixCacheManager(4, 4)
    with pytest.raises(ValueError, match="at least one token"):
        mgr.allocate("a", [])
    mgr.allocate("a", [1])
    with pytest.raises(ValueError, match="already"):
        mgr.allocate("a", [1])
    with pytest.raises(KeyError, match="unknown request"):
        mgr.free("zzz")
    with pytest.raises(ValueError, match="not in the free queue"):
        mgr.pool.free_queue.remove(mgr.pool.blocks[0])  # in use, so not linked


def test_decode_runs_out_of_blocks_without_changing_anything():
    mgr = m.PrefixCacheManager(2, 2)
    mgr.allocate("a", [1, 2, 3])
    assert mgr.append_token("a", 4) is True
    assert mgr.append_token("a", 5) is False
    assert mgr.token_ids["a"] == [1, 2, 3, 4] and mgr.block_ids("a") == [0, 1]


def test_hit_rate_counts_prompt_tokens():
    mgr = m.PrefixCacheManager(16, 4)
    mgr.allocate("a", list(range(9)))
    mgr.allocate("b", list(range(9)))
    assert mgr.hit_rate == pytest.approx(8 / 18)


def test_all_task11_checks_pass_on_solutions_and_fail_on_exercises():
    assert all(r.passed for r in checks.results("task11", "solutions"))
    assert not any(r.passed for r in checks.results("task11", "exercises"))


def test_notebook_walkthrough_is_the_graded_one(capsys, monkeypatch):
    """Notebook 09 traces the walkthrough by hand; it must be the sequence the check grades."""
    import json

    import pagedlab.graded
    from pagedlab.loader import ENV_VAR, ROOT

    nb = json.loads((ROOT / "notebooks" / "09_prefix_caching_and_utilization.ipynb").read_text())
    source = next("".join(c["source"]) for c in nb["cells"]
                  if c["cell_type"] == "code" and "SYS = list(range(100, 112))" in "".join(c["source"]))
    # The cell opens with its require (Task 11): it must pass on the solutions it then traces.
    monkeypatch.setenv(ENV_VAR, "solutions")
    scope = {"pc": m, "pagedlab": pagedlab}
    exec(source, scope)  # noqa: S102 - our own notebook cell
    queues = [queue for _label, _refs, _cached, queue in scope["trace"]]
    assert queues == [want_queue for _l, _r, want_queue, _t, _c in pc.WALKTHROUGH]
    assert [label for label, *_ in scope["trace"]][:2] == [w[0] for w in pc.WALKTHROUGH][:2]
