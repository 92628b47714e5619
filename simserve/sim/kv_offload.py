"""A CPU KV tier as vLLM 0.33.0's native CPU offloading keeps it (`--kv-offloading-size N`): blocks stored to
host memory as they are computed, found again after the GPU prefix-cache hit, and loaded back over PCIe.

vLLM turns `--kv-offloading-size N --kv-offloading-backend native` into the OffloadingConnector with
`cpu_bytes_to_use = N * 2**30` (vllm/config/vllm.py `_post_init_kv_transfer_config`); N is GiB summed over the
TP ranks (vllm/config/cache.py `kv_offloading_size`). This module is the scheduler side of that connector
(vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py) and of its manager
(vllm/v1/kv_offload/cpu/manager.py `CPUOffloadingManager`, policy `lru`: cpu/policies/lru.py), reduced to what
scheduling sees, written once and driven by both the SimPy reference (sim/vllm_v1.py) and the compiled core
(sim/core/vllm_v1.py), which share the replica's PrefixCache object and so this tier:

- Capacity: `num_chunks = cpu_bytes_to_use // round_up(kv_bytes_per_block * world_size, PAGESIZE)`
  (cpu/spec.py `CPUOffloadingSpec.__init__`), one block per chunk (`blocks_per_chunk` default 1).
- Stores (`_build_store_jobs`): every step, each scheduled request offers the blocks that became full up to
  its computed + scheduled tokens, prompt tokens only (`offload_prompt_only` defaults to True), from where it
  last stopped; a lookup restarts that at block 0 (the GPU prefix hit is offered too: a resident key is a
  reuse, an absent one is stored again), a CPU load restarts it after the loaded blocks. Stores happen on
  block completion, not on GPU eviction. `prepare_store` evicts least-recently-used chunks, never one offered
  in the same call; when too few are evictable the whole offer is dropped (an allocation failure).
- LRU order (`LRUCachePolicy`): a chunk's rank is (its request's rank, -position) when stored or reused,
  so a request's tail goes before its head; when a request finishes, every key it stored or reused gets a
  fresh rank, tail first (`on_request_finished`).
- Lookup (`get_num_new_matched_tokens`, first admissions only): consecutive resident blocks after the GPU hit,
  up to the whole prompt (`max_hit_size_tokens = num_tokens`); a hit shorter than one block is none; a hit on
  a block another request is loading defers the request (`_chunks_being_loaded`).
- Async load (the default; `sync_load_budget_bytes` 0): the request gets its blocks (the whole sequence must
  fit, less what in-flight loads still need: `_inflight_prefill_reserved_blocks`), leaves the waiting queue
  without computing (WAITING_FOR_REMOTE_KVS), its loaded chunks pinned; the copy runs on its own CUDA stream
  (cpu/gpu_worker.py: overlapping the step's compute), `blocks x kv_bytes_per_block / pcie_gbps` per GPU, each
  GPU over its own link. At the first step that starts after the copy is done the request is back at the front
  of the queue (`kv_holding_waiting` is drained first) with its loaded tokens computed (a whole-prompt hit
  recomputes its last token) and its blocks cached on the GPU then (`delay_cache_blocks`).

Approximated (docs/traffic.md § KV offloading): a store is readable at once (vLLM: HIT_PENDING until the D2H
copy of the step completes); a loaded request that does not fit stops admission (vLLM: the same, `break`);
stores cost no GPU time (D2H on its own stream); when nothing else can run, the step that takes the loaded
request starts when its copy ends (vLLM polls with empty steps until it does); only loads count against
reservations.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict

_PAGESIZE = 4096  # SharedOffloadRegion.BLOCK_SIZE_ALIGNMENT = mmap.PAGESIZE (x86-64 Linux)
# A rank (request rank, -position) is one int, request rank * 2**32 - position (positions are block indices,
# < 2**32: the pair's order), and a heap entry one int too, rank * 2**66 + key + 2**64 (keys are > -2**63 and
# < 2**65, prefix_cache's CHAIN_LABEL keys): (rank, key)'s order, compared as ints, not as nested tuples.
_POS_BITS = 32
_KEY_BITS = 66
_KEY_OFF = 1 << 64
_KEY_MASK = (1 << _KEY_BITS) - 1


def tier_blocks(gib: float, kv_bytes_per_block_per_gpu: int, world_size: int) -> int:
    """CPUOffloadingSpec: chunks of one block each that `--kv-offloading-size gib` holds."""
    per_block = kv_bytes_per_block_per_gpu * world_size
    aligned = -(-per_block // _PAGESIZE) * _PAGESIZE
    return int(gib * (1 << 30)) // aligned if gib > 0 else 0


class CpuTier:
    """One replica's CPU tier: vLLM's CPUOffloadingManager (LRU) and the connector's per-request state.

    Compiled (kv_offload.pxd, as prefix_cache.py is): the SimPy reference calls it as Python, the compiled
    core and PrefixCache without a Python call."""

    def __init__(self, num_blocks: int, block_s: float, block_size: int, block_key, prompt, keys_of=None):
        self.capacity = num_blocks
        self.block_s = block_s  # seconds to load one block over PCIe (per GPU, its shard)
        self.block_size = block_size
        self._key = block_key  # PrefixCache.block_key(rid, k)
        self._keys_of = keys_of  # PrefixCache.keys(rid, n): the same keys, n at once (the hot path)
        self._keys: dict[int, list[int]] = {}  # request -> its block keys so far (a key never changes)
        self._prompt = prompt  # per request: prompt tokens (offload_prompt_only)
        # the policy: resident keys, their ranks, the evictable ones in a lazy min-heap (LRUCachePolicy) of
        # (rank, key) packed into ints (_KEY_BITS); an entry whose key is pinned or ranked afresh is stale
        self.rank: dict[int, int] = {}
        self.pinned: dict[int, int] = {}  # key -> loads reading it (ref_cnt > 0: not evictable)
        self._heap: list[int] = []
        self._next_rank = 0
        self._req_rank: dict[int, int] = {}
        self._seen: dict[int, dict[int, int]] = {}  # request -> keys it stored or reused -> position
        self.next_stored: dict[int, int] = {}  # request -> next block it offers
        # loads in flight, in the order they started: request -> [ready time, tokens loaded, keys, reserved]
        self.loading: OrderedDict[int, list] = OrderedDict()
        self.loaded: dict[int, int] = {}  # request -> tokens loaded, back in waiting, not yet admitted
        self.being_loaded: dict[int, int] = {}  # key -> loads in flight that carry it
        self.reserved = 0  # blocks the loads in flight still need for their whole sequence
        self.stall = 0.0
        self._stall_at = -1.0
        # counters: tokens looked up in the tier and found (first admissions), blocks loaded and stored
        self.queries = self.hits = self.loads = self.blocks_loaded = 0
        self.stores = self.evictions = self.store_failures = 0
        self.load_s = 0.0

    # -- the policy (LRUCachePolicy) -------------------------------------------------------------------
    def _request_rank(self, rid: int) -> int:
        r = self._req_rank.get(rid)
        if r is None:
            self._next_rank += 1
            r = self._req_rank[rid] = self._next_rank
        return r

    def _access(self, rid: int, keys) -> None:
        """_record_request_cache_access → on_request_access: keys new to the request are remembered, and the
        resident ones take (its rank, -position) when that is more recent than theirs."""
        seen = self._seen.get(rid)
        if seen is None:
            seen = self._seen[rid] = {}
        r = -1  # the request's rank, taken at its first access, resident keys or not
        rank, pinned, heap = self.rank, self.pinned, self._heap
        for key, pos in keys:
            if key in seen:
                continue
            if r < 0:
                r = self._request_rank(rid) << _POS_BITS
            seen[key] = pos
            old = rank.get(key)
            if old is not None and old < r - pos:
                rank[key] = r - pos
                if key not in pinned:
                    heapq.heappush(heap, ((r - pos) << _KEY_BITS) | (key + _KEY_OFF))

    def _evict(self, n: int, protected) -> list[int] | None:
        """LRUCachePolicy.evict: the n least recent evictable keys, skipping protected; None (no change) if
        fewer than n."""
        heap, rank, pinned, pop = self._heap, self.rank, self.pinned, heapq.heappop
        chosen, deferred, last = [], [], -1
        while heap and len(chosen) < n:
            entry = pop(heap)
            if entry == last:
                continue  # a second entry of a key just chosen (equal entries pop one after another)
            key = (entry & _KEY_MASK) - _KEY_OFF
            if rank.get(key) != entry >> _KEY_BITS or key in pinned:
                continue  # stale
            if key in protected:
                deferred.append(entry)
                continue
            chosen.append(key)
            last = entry
        if len(chosen) < n:
            for key in chosen:
                heapq.heappush(heap, (rank[key] << _KEY_BITS) | (key + _KEY_OFF))
            for entry in deferred:
                heapq.heappush(heap, entry)
            return None
        for entry in deferred:
            heapq.heappush(heap, entry)
        for key in chosen:
            del rank[key]
        if len(heap) > 64 + 2 * (len(rank) - len(pinned)):  # drop stale entries (order is by rank: unchanged)
            self._rebuild()
        return chosen

    def _rebuild(self) -> None:
        """The heap afresh: one entry per evictable key."""
        pinned = self.pinned
        self._heap = [(r << _KEY_BITS) | (k + _KEY_OFF) for k, r in self.rank.items() if k not in pinned]
        heapq.heapify(self._heap)

    def store(self, rid: int, keys: list[tuple[int, int]]) -> None:
        """CPUOffloadingManager.prepare_store (+ complete_store at once) of (key, position) pairs."""
        rank = self.rank
        new = [(k, p) for k, p in keys if k not in rank]
        # every key offered, stored before or not (vLLM records them before allocating)
        self._access(rid, keys)
        if not new:
            return
        need = len(new) - (self.capacity - len(rank))
        if need > 0:
            if need > len(rank) - len(self.pinned):
                self.store_failures += 1
                return
            gone = self._evict(need, {k for k, _ in keys})
            if gone is None:
                self.store_failures += 1
                return
            self.evictions += len(gone)
        r = self._request_rank(rid) << _POS_BITS
        for key, pos in new:
            rank[key] = r - pos
        self._update_heap([key for key, _ in new])
        self.stores += len(new)

    def finished(self, rid: int) -> None:
        """on_request_finished: the request's keys, head to tail, ranked afresh tail first."""
        seen = self._seen.pop(rid, None)
        self._req_rank.pop(rid, None)
        self.next_stored.pop(rid, None)
        self._keys.pop(rid, None)
        if not seen:
            return
        rank, pinned, nxt, moved = self.rank, self.pinned, self._next_rank, []
        pos = list(seen.values())  # usually seen head to tail already: then the tail first is its reverse
        order = reversed(list(seen)) if pos == sorted(pos) else sorted(seen, key=seen.get, reverse=True)
        for key in order:
            if key in rank:
                nxt += 1
                rank[key] = nxt << _POS_BITS
                if key not in pinned:
                    moved.append(key)
        self._next_rank = nxt
        self._update_heap(moved)

    def _update_heap(self, moved: list[int]) -> None:
        """LRUCachePolicy._update_heap: many ranks changed, rebuild the heap; few, push them (stale entries
        are skipped when popped)."""
        if len(moved) >= max(64, (len(self.rank) - len(self.pinned)) // 4):
            self._rebuild()
        else:
            heap, rank, push = self._heap, self.rank, heapq.heappush
            for key in moved:
                push(heap, (rank[key] << _KEY_BITS) | (key + _KEY_OFF))

    # -- the connector's scheduler side ------------------------------------------------------------------
    def scheduled(self, rid: int, tokens: int) -> None:
        """_build_store_jobs for a request scheduled up to `tokens` tokens: offer its newly full prompt
        blocks."""
        start = self.next_stored.get(rid, 0)
        end = min(tokens, int(self._prompt[rid])) // self.block_size
        if end > start:
            self.next_stored[rid] = end
            keys = self.keys(rid, end)
            self.store(rid, list(zip(keys[start:end], range(start, end), strict=True)))

    def lookup(self, rid: int, gpu_blocks: int, num_tokens: int) -> int:
        """get_num_new_matched_tokens: resident blocks right after the GPU hit (-1: defer the request)."""
        self.next_stored[rid] = 0
        rank = self.rank
        end = num_tokens // self.block_size
        keys = self.keys(rid, end)
        n = gpu_blocks
        while n < end and keys[n] in rank:
            n += 1
        if self.being_loaded:
            for k in range(gpu_blocks, n):
                if keys[k] in self.being_loaded:
                    return -1
        return n - gpu_blocks

    def keys(self, rid: int, blocks: int) -> list[int]:
        """The request's first `blocks` block keys (PrefixCache.block_key), computed once each."""
        keys = self._keys.get(rid)
        if keys is None:
            keys = self._keys[rid] = []
        if blocks > len(keys):
            if self._keys_of is not None:
                keys.extend(self._keys_of(rid, blocks)[len(keys) : blocks])
            else:
                keys.extend([self._key(rid, k) for k in range(len(keys), blocks)])
        return keys

    def _start(self, rid: int, now: float, gpu_blocks: int, blocks: int, num_tokens: int, rest: int) -> None:
        """update_state_after_alloc: pin the blocks, start the copy; `rest`: blocks its sequence still
        needs."""
        own = self.keys(rid, gpu_blocks + blocks)
        keys = [(own[k], k) for k in range(gpu_blocks, gpu_blocks + blocks)]
        for key, _ in keys:
            self.pinned[key] = self.pinned.get(key, 0) + 1
            self.being_loaded[key] = self.being_loaded.get(key, 0) + 1
        self._access(rid, keys)
        self.next_stored[rid] = gpu_blocks + blocks
        d = blocks * self.block_s
        tokens = min((gpu_blocks + blocks) * self.block_size, num_tokens - 1)
        self.loading[rid] = [now + d, tokens, [k for k, _ in keys], rest]
        self.reserved += rest
        self.loads += 1
        self.blocks_loaded += blocks
        self.load_s += d

    def _complete(self, rid: int) -> None:
        ready, tokens, keys, rest = self.loading.pop(rid)
        for key in keys:  # complete_load: unpinned, evictable again at its rank
            c = self.pinned[key] - 1
            if c:
                self.pinned[key] = c
            else:
                del self.pinned[key]
                heapq.heappush(self._heap, (self.rank[key] << _KEY_BITS) | (key + _KEY_OFF))
            c = self.being_loaded[key] - 1
            if c:
                self.being_loaded[key] = c
            else:
                del self.being_loaded[key]
        self.reserved -= rest
        self.loaded[rid] = tokens

    def ready(self, now: float) -> list[int]:
        """Loads done by `now` (the step starts after their copy ended), in the order they started."""
        done = [rid for rid, s in self.loading.items() if s[0] <= now]
        for rid in done:
            self._complete(rid)
        return done

    def force(self, now: float) -> list[int]:
        """Nothing else can run: the earliest load is awaited; the step that takes it starts when it ends."""
        rid, ready = -1, 0.0
        for q, s in self.loading.items():  # the earliest to end; of equal ends, the first started
            if rid < 0 or s[0] < ready:
                rid, ready = q, s[0]
        self.stall = ready - now
        self._stall_at = now
        self._complete(rid)
        return [rid]

    def take_stall(self, now: float) -> float:
        s = self.stall if self._stall_at == now else 0.0
        self.stall = 0.0
        self._stall_at = -1.0
        return s

    # -- the scheduler's waiting path with the connector (both vllm_v1.py twins call these) ------------------
    def start_load(
        self,
        cache,
        rid: int,
        want: int,
        hits: list,
        max_model_len: int,
        full_isl: bool,
        preempted: bool,
        now: float,
    ) -> int:
        """After the GPU hit `hits` of the waiting head: the blocks it now holds when an async load from the
        CPU tier started (the caller takes it out of waiting), 0 when the tier has nothing for it, -1 when its
        blocks do not fit (admission stops), -2 when a block it needs is being loaded (it is skipped this
        step)."""
        bs = self.block_size
        g = len(hits)
        m = self.lookup(rid, g, want)
        if m <= 0:
            return 2 * m  # -2: deferred (vLLM skips it this step), 0: nothing in the tier
        whole = min(want, max_model_len)
        need = cache.blocks_to_allocate(rid, whole if full_isl else (g + m) * bs, hits)
        if need + self.reserved > cache.free:
            # allocate_slots(full_sequence_must_fit, reserved_blocks=_inflight_prefill_reserved_blocks())
            return -1
        cache.record(preempted, want, g * bs)  # record_prefix_cache_stats: the local hit, at this admission
        if not preempted:
            self.hits += min(m * bs, want - g * bs)
        self._start(rid, now, g, m, want, max(-(-whole // bs) - g - m, 0))
        return cache.allocate_slots(rid, hits, (g + m) * bs, g * bs)  # delay_cache_blocks: cached once loaded

    def promote(self, waiting, now: float, force: bool) -> None:
        """_handle_blocked_waiting_request: finished loads go to the front of waiting, in the order they
        started (kv_holding_waiting is drained first); `force`: nothing else ran, the earliest load is
        awaited."""
        done = self.force(now) if force else self.ready(now)
        for rid in reversed(done):
            waiting.appendleft(rid)

    def summary(self) -> dict:
        return dict(
            cpu_blocks=self.capacity,
            cpu_queries=self.queries,
            cpu_hits=self.hits,
            loads=self.loads,
            blocks_loaded=self.blocks_loaded,
            tokens_loaded=self.blocks_loaded * self.block_size,
            load_s=self.load_s,
            stores=self.stores,
            evictions=self.evictions,
            store_failures=self.store_failures,
        )


def attach(cache, cfg, reqs):
    """Give a replica's PrefixCache its CPU tier when the config asks for one
    (SimConfig.kv_offload_blocks)."""
    if cfg.kv_offload_blocks:
        # NOTE: the class looked up by name when called (compiled, `CpuTier` is bound when built): a test may
        # substitute a recording tier (tests/conformance/test_kv_offload_conformance.py)
        tier = globals()["CpuTier"]
        cache.tier = tier(
            cfg.kv_offload_blocks,
            cfg.kv_offload_block_s,
            cfg.block_size,
            cache.block_key,
            reqs.prompt,
            cache.keys,
        )
    return cache
