"""Driver of the hidden check of Task 11 on a drawn scenario: request streams as op lists."""

from __future__ import annotations

from ..framework import scenario_driver, see
from ..prefix_cache import _state as cache_state
from ..prefix_cache import stream_calls


@scenario_driver
def stream(run):
    """Pools [{"blocks", "block_size", "ops": [[op, request, tokens or token]]}]."""
    m = run.load("prefix_cache")
    for n_pool, pool in enumerate(run.scenario["pools"]):
        num_blocks, block_size = pool["blocks"], pool["block_size"]
        mgr = m.PrefixCacheManager(num_blocks, block_size)
        ops = [tuple(op) for op in pool["ops"]]
        for n, op, rid, _arg, got in stream_calls(ops, mgr):
            where = f"pool {n_pool} ({num_blocks} blocks of {block_size}), op {n}"
            see(f"{where}: {op}(request {rid}) returned", got)
            see(f"{where}: pool state", cache_state(mgr))
