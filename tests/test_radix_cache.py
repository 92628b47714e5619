"""SGLang's radix cache (sim/radix_cache.py) and its use by the `sglang` policy (sim/sglang.py)."""

from collections import deque

import numpy as np
import pytest

from simserve.sim import SimConfig, simulate
from simserve.sim.radix_cache import RadixCache
from simserve.sim.request import Requests
from simserve.sim.sglang_admission import sort_by_longest_prefix
from simserve.sim.testing import LinearTimer
from simserve.workload import load_trace


def _reqs(prompts, groups, shared):
    r = Requests(np.array(prompts), np.full(len(prompts), 4), np.zeros(len(prompts)))
    r.prefix_group[:] = groups
    r.prefix_tokens[:] = shared
    return r


def _finish(cache, r, rid, tokens):
    """Admit rid with whatever it hits, compute `tokens`, finish it (its KV goes into the tree)."""
    pages, node = cache.match(rid, int(r.prompt[rid]))
    cache.admit(rid, pages, node, int(r.prompt[rid]), False)
    new = -(-tokens // cache.page) - pages
    cache.allocate(new)
    r.blocks[rid] = pages + new
    r.computed[rid] = tokens
    cache.finish(rid)
    r.blocks[rid] = 0


@pytest.mark.parametrize("page, hit", [(1, 100), (16, 96)])
def test_a_shared_prefix_hits_token_by_token_or_in_whole_pages(page, hit):
    r = _reqs([120, 150], [0, 0], [100, 100])  # both start with the same 100 tokens, then their own
    cache = RadixCache(1000, page, r)
    _finish(cache, r, 0, 123)
    pages, _ = cache.match(1, 150)
    assert pages * page == hit
    # nothing is held by a running request: everything cached is evictable, so admission sees it all as free
    assert cache.free == 1000 and cache.evictable == 123 // page


def test_the_last_token_is_always_computed():
    r = _reqs([50, 80], [3, 3], [80, 80])  # a conversation: round 2 carries round 1 whole
    cache = RadixCache(1000, 1, r)
    _finish(cache, r, 0, 80)
    assert cache.match(1, 80)[0] == 79  # Req._compute_max_prefix_len: input_len - 1


def test_lru_eviction_takes_unlocked_leaves_least_recently_used_first():
    r = _reqs([40, 40, 40, 60], [0, 1, 2, 1], [40, 40, 40, 60])
    cache = RadixCache(130, 1, r)
    for rid in (0, 1, 2):
        _finish(cache, r, rid, 40)  # three cached conversations, 120 pages, all evictable
    pages, node = cache.match(3, 60)  # conversation 1 again: its 40 pages are used now, and locked
    assert pages == 40
    cache.admit(3, pages, node, 60, False)
    assert cache.evictable == 80 and cache.protected == 40 and cache.free == 90
    cache.allocate(30)  # 10 free: 20 must be evicted, and conversation 0 is the least recently used
    assert cache.match(0, 41)[0] == 0 and cache.match(2, 41)[0] == 40 and cache.match(3, 61)[0] == 40
    assert cache.evictions == 40  # whole nodes: all of conversation 0's leaf
    with pytest.raises(RuntimeError):
        # the locked conversation is never evicted: not enough even after evicting the rest
        cache.allocate(100)


def test_a_match_inside_a_node_splits_it_and_eviction_then_drops_only_the_tail():
    r = _reqs([100, 30, 30], [0, 0, -1], [100, 30, 0])
    cache = RadixCache(200, 1, r)
    _finish(cache, r, 0, 100)
    pages, node = cache.match(1, 30)  # the first 29 tokens of the 100: the node is split at 29
    assert pages == 29
    cache.admit(1, pages, node, 30, False)
    cache.allocate(100 + 1)  # 100 free + 1 more: the unlocked tail (71 pages) goes, the locked head stays
    assert cache.evictable == 0 and cache.protected == 29 and cache.available == 70
    cache.finish(1)  # computed 0: nothing new to publish; its lock goes, the head becomes evictable
    assert cache.evictable == 29


def _random_run(prefix_caching, policy="fcfs", page=1, ignore_eos=False):
    rng = np.random.default_rng(7)
    n = 300
    p, o = rng.integers(20, 900, n), rng.integers(2, 200, n)
    arrived = np.cumsum(rng.exponential(0.05, n))
    cfg = SimConfig(
        policy="sglang",
        prefix_caching=prefix_caching,
        schedule_policy=policy,
        page_size=page,
        ignore_eos=ignore_eos,
    )  # without ignore_eos the estimate runs short: it retracts
    return simulate(p, o, arrived, LinearTimer(0.004, 2e-5, 1e-7), 300, cfg.validate())


@pytest.mark.parametrize("page", [1, 4])
def test_with_nothing_shared_the_radix_cache_changes_no_decision(page):
    """SGLang counts cached but unlocked KV as free, so on a workload that shares no prefix the radix cache
    changes nothing: the same batches, preemptions (retractions) included, on a pool tight enough to
    retract."""
    off, on = _random_run(False, page=page), _random_run(True, page=page)
    assert off.replicas[0].state.preemptions > 0
    for name in ("scheduled", "first_token", "completed", "preemptions"):
        assert np.array_equal(getattr(off.reqs, name), getattr(on.reqs, name), equal_nan=True)
    # first admissions; a retracted request may find its own prompt
    assert on.replicas[0].state.radix.hits == 0
    # nothing retracted, nothing matches: lpm keeps the queue's order
    fcfs, lpm = _random_run(True, page=page, ignore_eos=True), _random_run(True, "lpm", page, ignore_eos=True)
    assert fcfs.replicas[0].state.preemptions == 0
    assert np.array_equal(lpm.reqs.completed, fcfs.reqs.completed, equal_nan=True)


def test_sglang_reuses_the_conversation_so_far():
    t = load_trace("sharegpt-multiturn").head(300)
    arrived = (t.arrived_at - t.arrived_at[0]) / 20
    runs = {}
    for on in (False, True):
        cfg = SimConfig(policy="sglang", max_model_len=8192, prefix_caching=on).validate()
        runs[on] = simulate(
            t.prompt_tokens,
            t.output_tokens,
            arrived,
            LinearTimer(0.005, 2e-5, 1e-8),
            3000,
            cfg,
            prefix=(t.prefix_group, t.prefix_tokens),
        )
    cache = runs[True].replicas[0].state.radix
    assert cache.hits > 0.5 * cache.queries  # most of a follow-up's prompt is the conversation so far
    on, off = runs[True].reqs, runs[False].reqs
    assert np.nanmedian(on.first_token - on.arrived) < np.nanmedian(off.first_token - off.arrived)
    assert cache.available + cache.evictable == cache.num_blocks  # everything released at the end


class _Rep:
    def __init__(self, r, cache, waiting):
        self.reqs, self.radix, self.block_size, self.waiting = r, cache, cache.page, deque(waiting)

    def num_tokens(self, rid):
        return int(self.reqs.prompt[rid] + self.reqs.generated[rid])


def test_lpm_orders_by_cached_prefix_and_defers_a_second_request_on_an_uncached_prefix():
    # 0: cached 200-token conversation; 1 and 2 share an uncached 100-token prefix (2 waits for 1 to compute
    # it); 3 shares nothing; 4 continues conversation 0 by a longer prompt
    r = _reqs([201, 150, 150, 80, 260, 60], [0, 1, 1, -1, 0, 1], [201, 100, 100, 0, 260, 100])
    cache = RadixCache(2000, 1, r)
    _finish(cache, r, 0, 201)
    rep = _Rep(r, cache, [1, 2, 3, 4])
    sort_by_longest_prefix(rep)
    # longest match first, ties in queue order, the deferred one last
    assert list(rep.waiting) == [4, 1, 3, 2]
