"""Automatic prefix caching as vLLM 0.33.0 does it: full blocks keyed by their prefix (the key standing in for
vLLM's chained block hash: no token ids, nothing hashed), ref counts, an LRU free queue.

The paged KV cache of one replica with vLLM V1's prefix caching on (`BlockPool` + `FullAttentionManager` of
`vllm/v1/core/`, one full-attention KV group), reduced to what scheduling sees. Physical blocks are kept, not
just a count, because which cached block is reused next decides later cache hits:

- A block is identified by its key: vLLM chains a block's hash over its parent's, so block k of two
  requests match exactly when their first k + 1 blocks hold the same tokens. simserve's requests carry no
  token ids; a request instead names the stream its tokens come from (`Requests.prefix_group`) and how many
  of its tokens lie on it (`Requests.prefix_tokens`): block k is the group's block k while the whole block
  lies within those tokens, and the request's own block k after (its own blocks still hit when a preempted
  request is readmitted). A conversation's turns share the conversation's stream; requests of a synthetic
  workload that share a system prompt share the prompt's stream for its length.
- Only full blocks are cached, when the tokens that fill them are scheduled (`allocate_slots` →
  `cache_blocks`, so a request admitted later in the same step already hits them). A hit is the longest
  run of cached blocks from the start, at most `num_tokens - 1` tokens (the last token is always computed:
  its logits give the next token).
- Freed blocks enter the free queue in reverse order (a request's tail is reused first); cached blocks go to
  its end (least recently used reused first), uncached ones to its front. A cached block keeps its key
  while free: a hit takes it back out of the queue; reusing it for a new allocation evicts the key.
- Two blocks may hold the same key (vLLM does not deduplicate: a request admitted while another was still
  computing the shared prefix computes its own copy); a lookup takes the earliest cached.

`block_keys(reqs, rid, num_tokens, block_size)` lists the keys of a request's blocks in order, as `block_key`
gives them: what a prefix-aware router (sim/routers.py) indexes, so a router and the cache match on the same keys.

`free` counts every block in the free queue, cached or not, as vLLM's `get_num_free_blocks` does; a block
shared by several running requests is held once (ref count), so KV usage counts it once.
"""

from __future__ import annotations

from collections import OrderedDict

_GROUP_BITS = 32  # a key is stream * 2**32 + block index: max_model_len / block_size < 2**32


def block_keys(reqs, rid: int, num_tokens: int, block_size: int) -> list[int]:
    """The keys of the blocks holding request `rid`'s first `num_tokens` tokens, in order (the last block may be
    partial): block k is its stream's block k while the whole block lies on the stream (`reqs.prefix_group`,
    `reqs.prefix_tokens`), the request's own after, as `PrefixCache.block_key` keys them."""
    g, shared = int(reqs.prefix_group[rid]), int(reqs.prefix_tokens[rid])
    own = (rid + 1) << _GROUP_BITS
    return [
        (g << _GROUP_BITS) | k if g >= 0 and (k + 1) * block_size <= shared else -(own | k)
        for k in range(-(-num_tokens // block_size))
    ]


class PrefixCache:
    """vLLM's BlockPool with prefix caching for one replica (the watermark is vLLM V1's default, 0)."""

    def __init__(self, num_blocks: int, block_size: int, group, shared_tokens):
        if num_blocks < 1:
            raise ValueError(f"a KV cache needs at least one block, got {num_blocks}")
        self.num_blocks = num_blocks
        self.watermark = 0
        self.block_size = block_size
        self._group = group  # per request: the stream it shares (-1: none)
        self._shared = shared_tokens  # per request: how many of its tokens lie on that stream
        self.ref = [0] * num_blocks
        self.key: list[int | None] = [None] * num_blocks
        # the free queue, front first: the next block a new allocation takes (vLLM starts it in id order)
        self.queue: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self.cached: dict[int, list[int]] = {}  # key -> blocks holding it, earliest cached first
        self.held: dict[int, list[int]] = {}  # request -> its blocks, in token order
        self.num_cached: dict[int, int] = {}  # request -> how many of its blocks are cached already
        # vLLM's PrefixCacheStats, summed over the run: tokens looked up and tokens hit at admission, first
        # admissions and readmissions after preemption apart (vLLM reports them apart as well)
        self.queries = self.hits = self.preempted_queries = self.preempted_hits = 0
        self.evictions = 0  # cached blocks reused for new allocations (their keys dropped)

    # -- the count interface the schedulers share with kvcache.BlockManager ----------------------------
    @property
    def free(self) -> int:
        return len(self.queue)

    @property
    def used(self) -> int:
        return self.num_blocks - len(self.queue)

    def can_allocate(self, blocks: int) -> bool:
        return len(self.queue) - blocks >= 0

    # -- keys ---------------------------------------------------------------------------------------
    def block_key(self, rid: int, k: int) -> int:
        g = int(self._group[rid])
        if g >= 0 and (k + 1) * self.block_size <= self._shared[rid]:
            return (g << _GROUP_BITS) | k
        return -(((rid + 1) << _GROUP_BITS) | k)  # the request's own stream

    # -- admission ------------------------------------------------------------------------------------
    def lookup(self, rid: int, num_tokens: int) -> list[int]:
        """The cached blocks of the longest hit for a request of num_tokens tokens (vLLM's
        `find_longest_cache_hit` with max_length = num_tokens - 1)."""
        out = []
        for k in range((num_tokens - 1) // self.block_size):
            blocks = self.cached.get(self.block_key(rid, k))
            if not blocks:
                break
            out.append(blocks[0])
        return out

    def blocks_to_allocate(self, rid: int, num_tokens: int, hits: list[int]) -> int:
        """Free blocks that holding num_tokens tokens takes (`get_num_blocks_to_allocate`): new blocks past
        what it holds or hits, plus the hit blocks that sit in the free queue (touching takes them out)."""
        need = -(-num_tokens // self.block_size) - len(self.held.get(rid, ())) - len(hits)
        return max(need, 0) + sum(1 for b in hits if self.ref[b] == 0)

    def record(self, rid_preempted: bool, num_tokens: int, hit_tokens: int) -> None:
        if rid_preempted:
            self.preempted_queries += num_tokens
            self.preempted_hits += hit_tokens
        else:
            self.queries += num_tokens
            self.hits += hit_tokens

    def allocate_slots(self, rid: int, hits: list[int], num_tokens: int, cache_tokens: int) -> int:
        """Take the hit blocks (first allocation only), blocks up to num_tokens tokens, and cache the full
        blocks of the first cache_tokens tokens; returns how many blocks the request holds now."""
        held = self.held.get(rid)
        if held is None:
            held = self.held[rid] = []
            for b in hits:  # BlockPool.touch
                if self.ref[b] == 0:
                    del self.queue[b]
                self.ref[b] += 1
            held.extend(hits)
            self.num_cached[rid] = len(hits)
        new = -(-num_tokens // self.block_size) - len(held)
        for _ in range(new):  # BlockPool.get_new_blocks: the front of the free queue, evicting its key
            b, _none = self.queue.popitem(last=False)
            key = self.key[b]
            if key is not None:
                self.key[b] = None
                holders = self.cached[key]
                holders.remove(b)
                if not holders:
                    del self.cached[key]
                self.evictions += 1
            self.ref[b] = 1
            held.append(b)
        self._cache_full_blocks(rid, held, cache_tokens // self.block_size)
        return len(held)

    def _cache_full_blocks(self, rid: int, held: list[int], full: int) -> None:
        done = self.num_cached[rid]
        for k in range(done, full):
            b = held[k]
            if self.key[b] is not None:
                continue  # already cached (a hit block)
            key = self.block_key(rid, k)
            self.key[b] = key
            self.cached.setdefault(key, []).append(b)
        if full > done:
            self.num_cached[rid] = full

    def free_request(self, rid: int) -> None:
        """Release a finished or preempted request's blocks, tail first (`KVCacheManager.free`)."""
        held = self.held.pop(rid, [])
        self.num_cached.pop(rid, None)
        first, last = [], []
        for b in reversed(held):
            self.ref[b] -= 1
            if self.ref[b] == 0:
                (first if self.key[b] is None else last).append(b)
        for b in reversed(first):  # prepend_n: the list's first block ends up at the front
            self.queue[b] = None
            self.queue.move_to_end(b, last=False)
        for b in last:  # append_n
            self.queue[b] = None
