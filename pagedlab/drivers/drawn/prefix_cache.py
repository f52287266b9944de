"""Driver of the hidden check of Task 11 on a drawn scenario: request streams as op lists, token
lists to hash, and a free queue to remove from."""

from __future__ import annotations

from ...spec.catalog import scenario_driver
from ..prefix_cache import MAX_REMOVE_READS, RULE, remove_reads, stream_calls
from ..prefix_cache import _state as cache_state
from ..record import see


def colliding_hash(parent: int, tokens) -> int:
    """Every block the same hash: lookups must verify the tokens (and the parent)."""
    return 42


@scenario_driver
def stream(run):
    """Pools [{"blocks", "block_size", "ops": [[op, request, tokens or token]], "hash": "colliding"
    (optional)}], then "hash_full_blocks": [[tokens, block_size]], then "remove": {"blocks",
    "victims"} (a free queue and the blocks removed from it)."""
    m = run.load("prefix_cache")
    for n_pool, pool in enumerate(run.scenario["pools"]):
        num_blocks, block_size = pool["blocks"], pool["block_size"]
        kwargs = {"hash_fn": colliding_hash} if pool.get("hash") == "colliding" else {}
        mgr = m.PrefixCacheManager(num_blocks, block_size, **kwargs)
        ops = [tuple(op) for op in pool["ops"]]
        for n, op, rid, _arg, got in stream_calls(ops, mgr):
            where = f"pool {n_pool} ({num_blocks} blocks of {block_size}), op {n}"
            see(f"{where}: {op}(request {rid}) returned", got)
            see(f"{where}: pool state", cache_state(mgr))
    for tokens, block_size in run.scenario.get("hash_full_blocks", []):
        see(f"hash_full_blocks({len(tokens)} tokens, block_size {block_size})",
            [int(h) for h in m.hash_full_blocks(tokens, block_size)],
            rule=f"{RULE}: one hash per full block, each chained to its parent's hash; none for a partial block")
    if "remove" in run.scenario:
        queue = run.scenario["remove"]
        worst, left = remove_reads(m, queue["blocks"], queue["victims"])
        see(f"remove() from a queue of {queue['blocks']} blocks reads at most {MAX_REMOVE_READS} links", worst <= MAX_REMOVE_READS,
            rule=f"{RULE}: unlink through the block's own prev_free/next_free, no search (O(1))")
        see(f"len(queue) after {len(queue['victims'])} removals", left)
