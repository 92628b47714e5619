"""Routers: which replica an arriving request goes to, written once for the SimPy reference and the compiled
core.

A `Router` sees a small read-only view of each replica (`observe`: requests outstanding, requests waiting, KV
blocks in use and in all) and the request, and answers a replica's index (`pick`). `cluster.Cluster._pick`
(the reference) and `core/routing.py`'s `_pick` (the compiled core) fill the same view from their own state
and call the same object, so a decision is made by one piece of code whichever model runs. This file is plain
Python; `routers.pxd` types it, and setup.py compiles it beside the core, which calls it without a Python
call.

- `rr`: round robin.
- `lor`: the fewest outstanding requests (routed, not finished); ties to the lowest index.
- `kv`: llm-d's `kv-cache-utilization-scorer` alone with its `max-score-picker`: score 1 − KV usage (the
  engine's `kv_cache_usage_perc`: blocks in use / blocks), the highest wins, ties drawn at random.
- `prefix-aware`: llm-d's default scheduling profile (`pkg/epp/config/loader/defaults.go`,
  `loadDefaultConfig`): queue-scorer × 2 + kv-cache-utilization-scorer × 2 + prefix-cache-scorer × 3, each
  score clamped to [0, 1] and summed in that order (`scheduling/scheduler_profile.go`, `runScorerPlugins`),
  max-score picker. The prefix score is the approximate producer's (`dataproducer/approximateprefix`): the
  prompt cut into blocks of the engine's block size (at most 256, the last one partial; none under one block),
  the number of leading blocks an LRU index of block → replicas holds for each replica (`matchLongestPrefix`:
  counting stops at the first block no replica holds), over the number of blocks; after the pick the request's
  blocks are added to the chosen replica's LRU, whose capacity is its KV blocks (`PreRequest`, `indexer.Add`,
  autoTune's `CacheNumBlocks`). The index is fed by routing decisions only, never by the engines' caches, so
  the router routes by it whether or not the replicas cache prefixes (as llm-d's approximate mode does).

Differences from llm-d, all deliberate: the view is the replica's state at the moment of routing (llm-d reads
metrics its data layer scraped a little earlier); the index is updated at once (llm-d adds in a goroutine);
ties are drawn from a seeded generator (`TIE_SEED`), not a time-seeded one, so a run repeats. Block keys come
from `prefix_cache.block_keys`, the same keys vLLM's prefix cache model matches on (no token text is hashed).
docs/traffic.md ("Routers") cites the code at the commit read.
"""

from __future__ import annotations

import random
from collections import OrderedDict

import numpy as np

from simserve.sim.config import DEFAULT_ROUTER_WEIGHTS as DEFAULT_WEIGHTS
from simserve.sim.config import ROUTER_NAMES
from simserve.sim.prefix_cache import block_keys

RR, LOR, KV, PREFIX = 0, 1, 2, 3  # ROUTER_NAMES' order
# approximateprefix/types.go: defaultMaxPrefixBlocks (blocks of a prompt the index looks at)
MAX_PREFIX_BLOCKS = 256
TIE_SEED = 0  # the tie-break generator's seed (llm-d: picker.PickerRand, seeded from the clock)


class Router:
    """One router over `num` replicas (attention DP: deployments) of `capacity` KV blocks each."""

    def __init__(self, name: str, num: int, reqs, block_size: int, capacity: int, weights=DEFAULT_WEIGHTS):
        self.kind = ROUTER_NAMES.index(name)
        self.num = num
        self.needs_view = self.kind != RR
        self.rr = 0
        self.reqs = reqs
        self.block_size = block_size
        self.capacity = capacity
        self.w_queue, self.w_kv, self.w_prefix = (float(w) for w in weights)
        self.rng = random.Random(TIE_SEED)
        self.outstanding = np.zeros(num, dtype=np.int64)
        self.waiting = np.zeros(num, dtype=np.int64)
        self.kv_used = np.zeros(num, dtype=np.int64)
        self.kv_total = np.ones(num, dtype=np.int64)
        self.score = np.zeros(num, dtype=np.float64)
        self.match = np.zeros(num, dtype=np.int64)
        # llm-d's approximate index (indexer.go): block key -> replicas (hashToPods), per replica an LRU
        # (podToLRU)
        self.pods: dict = {}
        self.lru: list = [OrderedDict() for _ in range(num)]
        # The replicas it may pick, in index order: all of them, or the autoscaler's active ones (set_serving)
        self.serving = np.arange(num, dtype=np.int64)
        self.num_serving = num

    def set_serving(self, indices) -> None:
        """Pick only among these replicas from now on (sim/autoscale.py: those serving, in index order)."""
        for k, i in enumerate(indices):
            self.serving[k] = i
        self.num_serving = len(indices)

    def observe(self, i, outstanding, waiting, kv_used, kv_total) -> None:
        """Replica i's state now (the caller fills every replica before `pick` when `needs_view`)."""
        self.outstanding[i] = outstanding
        self.waiting[i] = waiting
        self.kv_used[i] = kv_used
        self.kv_total[i] = kv_total

    def pick(self, rid):
        """The replica request `rid` goes to."""
        if self.kind == RR:
            i = self.serving[self.rr % self.num_serving]
            self.rr += 1
            return i
        if self.kind == LOR:
            best = self.serving[0]
            for k in range(1, self.num_serving):
                i = self.serving[k]
                if self.outstanding[i] < self.outstanding[best]:
                    best = i
            return best
        if self.kind == KV:
            for k in range(self.num_serving):
                i = self.serving[k]
                self.score[i] = _clamp(1.0 - self.kv_used[i] / self.kv_total[i])
            return self._best()
        return self._prefix_pick(rid)

    def _prefix_pick(self, rid):
        keys = self._hashes(rid)
        total = len(keys)
        for i in range(self.num):
            self.match[i] = 0
        for key in keys:  # matchLongestPrefix: greedy from the first block
            holders = self.pods.get(key)
            if not holders:
                break
            for i in holders:
                self.match[i] += 1
        low = high = self.waiting[self.serving[0]]
        for k in range(1, self.num_serving):
            i = self.serving[k]
            low = min(low, self.waiting[i])
            high = max(high, self.waiting[i])
        for k in range(self.num_serving):
            i = self.serving[k]
            queue = 1.0 if high == low else (high - self.waiting[i]) / (high - low)  # queuedepth/queue.go
            kv = 1.0 - self.kv_used[i] / self.kv_total[i]  # kvcacheutilization
            prefix = self.match[i] / total if total else 0.0  # scorer/prefix/plugin.go
            s = 0.0
            s += _clamp(queue) * self.w_queue
            s += _clamp(kv) * self.w_kv
            s += _clamp(prefix) * self.w_prefix
            self.score[i] = s
        best = self._best()
        self._remember(keys, best)
        return best

    def _best(self):
        """max-score-picker: the highest score; ties uniformly at random (its shuffle, then a stable sort)."""
        top = self.score[self.serving[0]]
        count = 1
        for j in range(1, self.num_serving):
            i = self.serving[j]
            if self.score[i] > top:
                top = self.score[i]
                count = 1
            elif self.score[i] == top:
                count += 1
        if count == 1:
            for j in range(self.num_serving):
                i = self.serving[j]
                if self.score[i] == top:
                    return i
        k = self.rng.randrange(count)
        for j in range(self.num_serving):
            i = self.serving[j]
            if self.score[i] == top:
                if k == 0:
                    return i
                k -= 1
        return self.serving[0]

    def _hashes(self, rid):
        """hashPrompt: no blocks under one block; at most MAX_PREFIX_BLOCKS, the last maybe partial."""
        prompt = int(self.reqs.prompt[rid])
        if prompt < self.block_size:
            return []
        blocks = -(-min(prompt, MAX_PREFIX_BLOCKS * self.block_size) // self.block_size)
        return block_keys(self.reqs, rid, self.block_size, blocks)

    def _remember(self, keys, pod) -> None:
        """indexer.Add: the keys into the replica's LRU (a hit moves to the front; past capacity the oldest is
        evicted, dropping the replica from that key), then the replica under every key."""
        lru = self.lru[pod]
        for key in keys:
            if key in lru:
                lru.move_to_end(key)
                continue
            lru[key] = None
            if len(lru) > self.capacity:
                old = lru.popitem(last=False)[0]
                holders = self.pods.get(old)
                if holders is not None:
                    holders.discard(pod)
                    if not holders:
                        del self.pods[old]
        for key in keys:
            holders = self.pods.get(key)
            if holders is None:
                self.pods[key] = {pod}
            else:
                holders.add(pod)


def _clamp(x):
    """scheduler_profile.go: enforceScoreRange."""
    if x < 0.0:
        return 0.0
    if x > 1.0:
        return 1.0
    return x


def make(cfg, reqs, num_blocks: int, name: str | None = None, replicas: int | None = None) -> Router:
    """The run's router (`name`, default cfg.router) over its replicas of `num_blocks` KV blocks each, or with
    attention DP over its deployments (each D ranks: D times the blocks)."""
    d = cfg.dp_attention
    num = (cfg.num_replicas if replicas is None else replicas) // d
    return Router(name or cfg.router, num, reqs, cfg.block_size, num_blocks * d, cfg.router_weights)
