"""Automatic prefix caching (sim/prefix_cache.py): vLLM's block pool rules on hand-checkable cases.

The step-by-step agreement with vLLM's own scheduler is tests/conformance/; these pin the rules one at a time.
"""

from types import SimpleNamespace

import numpy as np
import pytest

from simserve.errors import SimserveError
from simserve.sim.config import SimConfig
from simserve.sim.prefix_cache import PrefixCache

BS = 16


def cache(num_blocks, group, shared):
    return PrefixCache(
        num_blocks, BS, SimpleNamespace(prefix_group=np.array(group), prefix_tokens=np.array(shared))
    )


def run_request(c, rid, tokens):
    """Admit `rid` with its whole prompt (hits taken), cache what it computed; returns the hit tokens."""
    hits = c.lookup(rid, tokens)
    c.allocate_slots(rid, hits, tokens, tokens)
    return len(hits) * BS


def test_a_shared_prefix_hits_in_full_blocks_and_the_last_token_is_recomputed():
    # requests 0 and 1 share 100 tokens of stream 7: 6 full blocks (96 tokens); 2 shares a whole 64-token
    # prompt
    c = cache(40, [7, 7, 7], [100, 100, 64])
    assert run_request(c, 0, 120) == 0
    assert run_request(c, 1, 130) == 96
    # a prompt that is entirely cached still computes its last block: at most num_tokens - 1 tokens hit
    assert run_request(c, 2, 64) == 48


def test_a_block_held_by_two_requests_is_counted_once_and_freed_when_both_are_done():
    c = cache(20, [0, 0], [64, 64])
    run_request(c, 0, 64)  # 4 blocks
    assert c.free == 16
    hits = c.lookup(1, 80)
    assert len(hits) == 4 and c.blocks_to_allocate(1, 80, hits) == 1  # its hit blocks are held: only one new
    c.allocate_slots(1, hits, 80, 80)
    assert c.free == 15
    c.free_request(0)
    assert c.free == 15  # still held by request 1
    c.free_request(1)
    assert c.free == 20
    # freed but still cached: a hit takes blocks back out of the free queue, and they count as allocations
    hits = c.lookup(1, 81)
    assert len(hits) == 5 and c.blocks_to_allocate(1, 81, hits) == 5 + 1


def test_eviction_reuses_the_least_recently_freed_cached_blocks_tail_first():
    c = cache(8, [0, 1, 2], [64, 64, 64])
    run_request(c, 0, 64)  # blocks of stream 0
    c.free_request(0)
    run_request(c, 1, 64)  # takes the 4 never-used blocks first: stream 0 stays cached
    c.free_request(1)
    assert c.evictions == 0 and len(c.lookup(0, 65)) == 4 and len(c.lookup(1, 65)) == 4
    # two new blocks: the least recently freed request (0), its tail block first
    hits = c.lookup(2, 32)
    c.allocate_slots(2, hits, 32, 32)
    assert c.evictions == 2
    assert len(c.lookup(0, 65)) == 2  # stream 0 keeps its first two blocks; its tail was reused
    assert len(c.lookup(1, 65)) == 4


def test_uncached_blocks_are_reused_before_cached_ones():
    c = cache(6, [0, -1], [32, 0])
    run_request(c, 0, 40)  # 2 full cached blocks + 1 partial (uncached)
    c.free_request(0)
    c.allocate_slots(1, [], 16 * 4, 0)  # 4 blocks, nothing cached: the 3 never used, then the partial one
    assert c.evictions == 0 and len(c.lookup(0, 41)) == 2


def test_a_preempted_request_hits_its_own_blocks_when_readmitted():
    c = cache(20, [-1], [0])
    run_request(c, 0, 100)
    c.free_request(0)
    assert len(c.lookup(0, 100)) == 6


def test_two_copies_of_a_block_the_lookup_takes_the_first_cached():
    c = cache(20, [0, 0], [64, 64])
    c.allocate_slots(0, [], 64, 16)  # 0 has computed one block of the stream when 1 arrives
    hits = c.lookup(1, 64)
    assert len(hits) == 1
    c.allocate_slots(1, hits, 64, 64)  # 1 computes blocks 1..3 of the stream itself
    c.allocate_slots(0, [], 64, 64)  # and so does 0: two copies of blocks 1..3
    assert all(len(c.cached[c.block_key(0, k)]) == 2 for k in (1, 2, 3))
    first = c.cached[c.block_key(0, 1)][0]
    assert c.lookup(0, 65)[1] == first == c.held[1][1]


def test_prefix_caching_is_vllm_v1s():
    with pytest.raises(SimserveError, match="vllm-v1"):
        SimConfig(policy="sarathi", prefix_caching=True).validate()
