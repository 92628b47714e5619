"""A request's prefix identity (sim/prefix_cache.py: shared_runs, block_runs, block_key): streams, and a
trace's chained block ids (Mooncake's hash_ids), which express a tree of prefixes one stream per request
cannot."""

from types import SimpleNamespace

import numpy as np
import pytest

from simserve.sim.prefix_cache import CHAIN_LABEL, PrefixCache, block_key, block_keys, block_runs
from simserve.sim.radix_cache import RadixCache
from simserve.sim.request import Requests
from simserve.workload.trace import take_rows

S = 512  # Mooncake's block


def _chains(rows, prompts):
    """Requests whose identity is chained block ids, one list per request."""
    r = Requests(np.array(prompts), np.full(len(prompts), 4), np.zeros(len(prompts)))
    r.hash_offsets = np.concatenate([[0], np.cumsum([len(x) for x in rows])]).astype(np.int64)
    r.hash_ids = np.array([i for x in rows for i in x], dtype=np.int64)
    return r


# A = [1, 2, 3], B = [1, 2, 5], C = [1, 2, 5, 6]: all full 512-token blocks
TREE = _chains([[1, 2, 3], [1, 2, 5], [1, 2, 5, 6]], [3 * S, 3 * S, 4 * S])


def test_a_tree_of_prefixes_shares_exactly_the_common_blocks():
    a, b, c = (block_keys(TREE, rid, 16, TREE.prompt[rid] // 16) for rid in range(3))

    def common(x, y):  # how many leading keys two requests share
        return next((k for k, (p, q) in enumerate(zip(x, y, strict=False)) if p != q), min(len(x), len(y)))

    assert common(a, b) == 2 * S // 16  # [1, 2]: 64 vLLM blocks
    assert common(b, c) == 3 * S // 16  # [1, 2, 5]: 96
    assert common(a, c) == 2 * S // 16
    # vLLM block j lies within Mooncake block j * 16 // 512, and is keyed by that block's id
    assert block_key(TREE, 2, 16, 80) == ((CHAIN_LABEL + 5) << 32) | 80  # 80 * 16 // 512 = 2: id 5
    assert block_key(TREE, 2, 16, 100) == ((CHAIN_LABEL + 6) << 32) | 100


def test_block_key_is_block_runs_block_by_block_for_any_block_size():
    rng = np.random.default_rng(3)
    rows = [list(rng.integers(0, 4, rng.integers(0, 5))) for _ in range(30)]
    prompts = [
        max(1, len(x) * S - int(rng.integers(0, 600))) if x else int(rng.integers(1, 3000)) for x in rows
    ]
    r = _chains(rows, prompts)
    r.prefix_group[:] = np.where(np.array([len(x) for x in rows]) == 0, rng.integers(-1, 3, 30), -1)
    r.prefix_tokens[:] = rng.integers(0, 3000, 30)
    for bs in (1, 10, 16, 24, 512, 700):
        for rid in range(30):
            runs = block_runs(r, rid, bs)
            for k in range(-(-int(r.prompt[rid]) // bs) + 2):
                label = next((lab for lab, end in runs if k < end), -(rid + 1))
                expect = (label << 32) | k if label >= 0 else -(((rid + 1) << 32) | k)
                assert block_key(r, rid, bs, k) == expect, (bs, rid, k)
            n = -(-int(r.prompt[rid]) // bs) + 2
            assert block_keys(r, rid, bs, n) == [block_key(r, rid, bs, k) for k in range(n)]
            cache = PrefixCache(10, bs, r)  # its per-request memo of them too
            assert [cache.block_key(rid, k) for k in range(n)] == block_keys(r, rid, bs, n)


def test_a_partial_last_block_is_shared_only_in_whole_engine_blocks_and_then_the_request_is_its_own():
    r = _chains([[7, 8], [7, 8]], [S + 100, S + 100])  # the same 612 tokens (block 8 holds 100 of them)
    assert block_runs(r, 0, 16) == [(CHAIN_LABEL + 7, 32), (CHAIN_LABEL + 8, 38)]  # 612 // 16 = 38
    assert block_key(r, 0, 16, 38) != block_key(r, 1, 16, 38)  # the 4 tokens past block 38: their own


def test_streams_keep_their_keys():
    """A stream request's keys are what they always were (golden files and digests rest on them)."""
    r = SimpleNamespace(prefix_group=np.array([3, -1]), prefix_tokens=np.array([40, 40]))
    assert block_keys(r, 0, 16, 3) == [(3 << 32) | 0, (3 << 32) | 1, -((1 << 32) | 2)]
    assert block_keys(r, 1, 16, 1) == [-((2 << 32) | 0)]


def _vllm_hits(reqs, order):
    cache = PrefixCache(1000, 16, reqs)
    hits = []
    for rid in order:
        n = int(reqs.prompt[rid])
        found = cache.lookup(rid, n)
        hits.append(len(found) * 16)
        cache.allocate_slots(rid, found, n, n)
        cache.free_request(rid)
    return hits


@pytest.mark.parametrize("page", [1, 16])
def test_vllms_block_pool_and_sglangs_radix_tree_hit_the_same_tree(page):
    assert _vllm_hits(TREE, [0, 1, 2]) == [0, 2 * S, 3 * S]
    cache = RadixCache(10000, page, TREE)
    got = []
    for rid in range(3):
        n = int(TREE.prompt[rid])
        pages, node = cache.match(rid, n)
        got.append(pages * page)
        cache.admit(rid, pages, node, n, False)
        cache.allocate(-(-n // page) - pages)
        TREE.blocks[rid] = -(-n // page)
        TREE.computed[rid] = n
        cache.finish(rid)
        TREE.blocks[rid] = 0
    assert got == [0, 2 * S, 3 * S]


def test_the_waiting_queue_check_matches_chained_prefixes():
    """lpm's in-batch check: C shares [1, 2] (1024 tokens) with A queued before it; alone, nothing."""
    cache = RadixCache(100, 1, TREE)
    queued: dict = {}
    assert not cache.waiting_deprioritized(0, 3 * S, queued, 32)
    assert cache.waiting_deprioritized(2, 4 * S, queued, 32)
    assert not cache.waiting_deprioritized(2, 4 * S, {}, 32)
    assert cache.waiting_deprioritized(1, 3 * S, queued, 2 * S) and not cache.waiting_deprioritized(
        1, 3 * S, queued, 2 * S + 1
    )


def test_rows_of_a_csr_array_are_taken_in_any_order_with_repeats():
    offsets, ids = np.array([0, 2, 2, 5]), np.array([1, 2, 3, 4, 5])
    new_offsets, new_ids = take_rows(offsets, ids, np.array([2, 0, 2, 1]))
    assert new_offsets.tolist() == [0, 3, 5, 8, 8] and new_ids.tolist() == [3, 4, 5, 1, 2, 3, 4, 5]
