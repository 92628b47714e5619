"""Automatic prefix caching as vLLM 0.33.0 does it: full blocks keyed by their prefix (the key standing in for
vLLM's chained block hash: no token ids, nothing hashed), ref counts, an LRU free queue.

The paged KV cache of one replica with vLLM V1's prefix caching on (`BlockPool` + `FullAttentionManager` of
`vllm/v1/core/`, one full-attention KV group), reduced to what scheduling sees. Physical blocks are kept, not
just a count, because which cached block is reused next decides later cache hits:

- A block is identified by its key (`block_key`, below: the one definition every consumer uses — this cache,
  SGLang's radix cache, the prefix-aware router, `simserve trace stats`): vLLM chains a block's hash over its
  parent's, so block k of two requests match exactly when their first k + 1 blocks hold the same tokens.
  simserve's requests carry no token ids; a request's tokens are instead a few runs of *labels*
  (`shared_runs`), then its own stream. Either it names the stream its tokens come from
  (`Requests.prefix_group`) and how many of its tokens lie on it (`Requests.prefix_tokens`): a conversation's
  turns share the conversation's stream, requests that share a system prompt the prompt's stream for its
  length. Or it carries a trace's chained block ids (`Requests.hash_ids`, Mooncake's `hash_ids`: one id per
  HASH_BLOCK_TOKENS-token block, naming that block together with everything before it), which express a tree
  of prefixes (A = [1, 2, 3], B = [1, 2, 5], C = [1, 2, 5, 6]) that one stream per request cannot. Block k is
  keyed (label of the run its last token lies in, k) while the whole block lies on shared tokens, and by the
  request's own stream after (its own blocks still hit when a preempted request is readmitted).
- Only full blocks are cached, when the tokens that fill them are scheduled (`allocate_slots` →
  `cache_blocks`, so a request admitted later in the same step already hits them). A hit is the longest
  run of cached blocks from the start, at most `num_tokens - 1` tokens (the last token is always computed:
  its logits give the next token).
- Freed blocks enter the free queue in reverse order (a request's tail is reused first); cached blocks go to
  its end (least recently used reused first), uncached ones to its front. A cached block keeps its key
  while free: a hit takes it back out of the queue; reusing it for a new allocation evicts the key.
- Two blocks may hold the same key (vLLM does not deduplicate: a request admitted while another was still
  computing the shared prefix computes its own copy); a lookup takes the earliest cached.

`free` counts every block in the free queue, cached or not, as vLLM's `get_num_free_blocks` does; a block
shared by several running requests is held once (ref count), so KV usage counts it once.
"""

from __future__ import annotations

from array import array

from simserve.workload.formats import HASH_BLOCK_TOKENS

_GROUP_BITS = 32  # a key is label * 2**32 + block index: max_model_len / block_size < 2**32
# Labels: a stream is its group number (0 .. 2**31 - 1, trace.py's bound), a chained block id is CHAIN_LABEL +
# id (ids too are < 2**31), a request's own stream is -(rid + 1). So no two kinds of label collide. Keys are
# compared for equality only (as vLLM's block hashes are); a chain key needs 64 bits unsigned, Python ints
# hold it.
CHAIN_LABEL = 1 << 31


def shared_runs(reqs, rid: int) -> list[tuple[int, int]]:
    """The request's shared tokens as runs of (label, end token), in order, each from the previous end; its
    own stream follows the last. Two requests' token t are the same exactly when they lie in runs of the same
    label (a stream's tokens, or a chained block id, which names everything before it too)."""
    offsets = getattr(reqs, "hash_offsets", None)
    if offsets is not None and offsets[rid + 1] > offsets[rid]:
        lo, hi = int(offsets[rid]), int(offsets[rid + 1])
        covered = min(int(reqs.prompt[rid]), (hi - lo) * HASH_BLOCK_TOKENS)
        ids = reqs.hash_ids
        return [
            (CHAIN_LABEL + int(ids[lo + m]), min((m + 1) * HASH_BLOCK_TOKENS, covered))
            for m in range(-(-covered // HASH_BLOCK_TOKENS))
        ]
    g = int(reqs.prefix_group[rid])
    return [(g, int(reqs.prefix_tokens[rid]))] if g >= 0 else []


def block_runs(reqs, rid: int, block_size: int) -> list[tuple[int, int]]:
    """`shared_runs` in whole blocks of block_size tokens: (label, end block), empty runs dropped. A block
    belongs to the run its last token lies in (a chained id names all before it), so engine block j of a
    Mooncake trace lies within Mooncake block j * block_size // 512 when block_size divides 512."""
    runs, last = [], 0
    for label, end in shared_runs(reqs, rid):
        end //= block_size
        if end > last:
            runs.append((label, end))
            last = end
    return runs


def block_key(reqs, rid: int, block_size: int, k: int) -> int:
    """The key of the request's block k (block_size tokens): (label, k) of the run holding it (`block_runs`),
    else of the request's own stream. The one place a block's identity is decided."""
    end = (k + 1) * block_size  # NOTE: the direct arithmetic of block_runs, per block: this is the hot path
    offsets = getattr(reqs, "hash_offsets", None)
    if offsets is not None and offsets[rid + 1] > offsets[rid]:
        lo, hi = int(offsets[rid]), int(offsets[rid + 1])
        if end <= min(int(reqs.prompt[rid]), (hi - lo) * HASH_BLOCK_TOKENS):
            label = CHAIN_LABEL + int(reqs.hash_ids[lo + (end - 1) // HASH_BLOCK_TOKENS])
            return (label << _GROUP_BITS) | k
    else:
        g = int(reqs.prefix_group[rid])
        if g >= 0 and end <= reqs.prefix_tokens[rid]:
            return (g << _GROUP_BITS) | k
    return -(((rid + 1) << _GROUP_BITS) | k)  # the request's own stream


def block_keys(reqs, rid: int, block_size: int, n_blocks: int) -> list[int]:
    """The keys of the request's first n_blocks blocks (what a prefix-aware router scores replicas by):
    block_key for each, worked out from its runs at once (tests/test_prefix_identity.py holds them equal)."""
    keys: list[int] = []
    start = 0
    for label, end in block_runs(reqs, rid, block_size):
        end = min(end, n_blocks)
        base = label << _GROUP_BITS  # labels are >= 0 and k < 2**32: label << 32 | k is base + k, a range
        keys.extend(range(base + start, base + end))
        start = max(start, end)
    own = (rid + 1) << _GROUP_BITS
    keys.extend(range(-(own + start), -(own + n_blocks), -1))  # -(own | k) for k in start .. n_blocks - 1
    return keys


class PrefixCache:
    """vLLM's BlockPool with prefix caching for one replica (the watermark is vLLM V1's default, 0).

    Compiled (prefix_cache.pxd, as routers.py is): the SimPy reference calls it as Python, the compiled core
    without a Python call. Ref counts and the free queue are int arrays: the queue is a doubly linked list
    over `_next` / `_prev` (block ids; the sentinel `num_blocks` links its back to its front), as vLLM's
    FreeKVCacheBlockQueue is, and `free` counts it."""

    def __init__(self, num_blocks: int, block_size: int, reqs):
        if num_blocks < 1:
            raise ValueError(f"a KV cache needs at least one block, got {num_blocks}")
        self.num_blocks = num_blocks
        self.watermark = 0
        self.block_size = block_size
        self.reqs = reqs  # the requests' identity (prefix groups and tokens, chained block ids): block_key
        # --kv-offload-gb: the replica's CPU tier (sim/kv_offload.py), which sees every allocation
        self.tier = None
        self._keys: dict[int, list[int]] = {}  # request -> its blocks' keys so far, while it is served
        self._ref = array("q", bytes(8 * num_blocks))
        self.key: list[int | None] = [None] * num_blocks
        # the free queue, front first: the next block a new allocation takes (vLLM starts it in id order)
        self._next = array("q", range(1, num_blocks + 2))
        self._prev = array("q", range(-1, num_blocks))
        self._next[num_blocks] = 0
        self._prev[0] = num_blocks
        self.free = num_blocks
        self.cached: dict[int, list[int]] = {}  # key -> blocks holding it, earliest cached first
        self.held: dict[int, list[int]] = {}  # request -> its blocks, in token order
        self.num_cached: dict[int, int] = {}  # request -> how many of its blocks are cached already
        # vLLM's PrefixCacheStats, summed over the run: tokens looked up and tokens hit at admission, first
        # admissions and readmissions after preemption apart (vLLM reports them apart as well)
        self.queries = self.hits = self.preempted_queries = self.preempted_hits = 0
        self.evictions = 0  # cached blocks reused for new allocations (their keys dropped)

    # -- the count interface the schedulers share with kvcache.BlockManager ----------------------------
    @property
    def used(self) -> int:
        return self.num_blocks - self.free

    def can_allocate(self, blocks: int) -> bool:
        return self.free - blocks >= 0

    @property
    def ref(self) -> list[int]:
        """Each block's ref count."""
        return list(self._ref)

    @property
    def queue(self) -> list[int]:
        """The free queue, front first."""
        out, b = [], self._next[self.num_blocks]
        while b != self.num_blocks:
            out.append(b)
            b = self._next[b]
        return out

    # -- the free queue: a doubly linked list over block ids, the sentinel num_blocks at both ends ---------
    def _unlink(self, b: int) -> None:
        nxt, prv = self._next, self._prev
        nxt[prv[b]] = nxt[b]
        prv[nxt[b]] = prv[b]
        self.free -= 1

    def _link_after(self, at: int, b: int) -> None:
        nxt, prv = self._next, self._prev
        nxt[b] = nxt[at]
        prv[b] = at
        prv[nxt[at]] = b
        nxt[at] = b
        self.free += 1

    # -- keys ---------------------------------------------------------------------------------------
    def block_key(self, rid: int, k: int):
        """`block_key`, from the request's keys worked out once (`keys`)."""
        keys = self._keys.get(rid)
        if keys is not None and k < len(keys):
            return keys[k]
        return self.keys(rid, k + 1)[k]

    def keys(self, rid: int, n: int) -> list[int]:
        """The request's keys (`block_key`) of at least its first n blocks: its shared blocks' worked out at
        once on first use (a 100k-token Mooncake prompt is 6k blocks, looked up and cached one by one), its
        own stream's as far as asked; dropped when the request's blocks are freed."""
        keys = self._keys.get(rid)
        if keys is None:
            runs = block_runs(self.reqs, rid, self.block_size)
            # NOTE: no negative index: compiled without wraparound (setup.py)
            keys = self._keys[rid] = block_keys(
                self.reqs, rid, self.block_size, runs[len(runs) - 1][1] if runs else 0
            )
        if n > len(keys):  # past its shared blocks: the request's own stream, -(own | k) (block_keys)
            own = (rid + 1) << _GROUP_BITS
            keys.extend(range(-(own + len(keys)), -(own + n), -1))
        return keys

    # -- admission ------------------------------------------------------------------------------------
    def lookup(self, rid: int, num_tokens: int) -> list[int]:
        """The cached blocks of the longest hit for a request of num_tokens tokens (vLLM's
        `find_longest_cache_hit` with max_length = num_tokens - 1)."""
        n = (num_tokens - 1) // self.block_size
        cached = self.cached
        out: list[int] = []
        if not cached or n <= 0:
            return out
        keys = self.keys(rid, n)
        for k in range(n):
            blocks = cached.get(keys[k])
            if not blocks:
                break
            out.append(blocks[0])
        return out

    def blocks_to_allocate(self, rid: int, num_tokens: int, hits) -> int:
        """Free blocks that holding num_tokens tokens takes (`get_num_blocks_to_allocate`): new blocks past
        what it holds or hits, plus the hit blocks that sit in the free queue (touching takes them out)."""
        held = self.held.get(rid)
        need = -(-num_tokens // self.block_size) - (len(held) if held is not None else 0) - len(hits)
        n = max(need, 0)
        for b in hits:
            if self._ref[b] == 0:
                n += 1
        return n

    def record(self, rid_preempted: bool, num_tokens: int, hit_tokens: int) -> None:
        if rid_preempted:
            self.preempted_queries += num_tokens
            self.preempted_hits += hit_tokens
        else:
            self.queries += num_tokens
            self.hits += hit_tokens
            if self.tier is not None:  # the connector's queries: what the local hit left
                self.tier.queries += num_tokens - hit_tokens

    def allocate_slots(self, rid: int, hits, num_tokens: int, cache_tokens: int) -> int:
        """Take the hit blocks (first allocation only), blocks up to num_tokens tokens, and cache the full
        blocks of the first cache_tokens tokens; returns how many blocks the request holds now."""
        ref = self._ref
        held = self.held.get(rid)
        if held is None:
            held = self.held[rid] = []
            for b in hits:  # BlockPool.touch
                if ref[b] == 0:
                    self._unlink(b)
                ref[b] += 1
            held.extend(hits)
            self.num_cached[rid] = len(hits)
        new = -(-num_tokens // self.block_size) - len(held)
        if new > 0:
            bkey, front = self.key, self.num_blocks
            for _ in range(new):  # BlockPool.get_new_blocks: the front of the free queue, evicting its key
                b = self._next[front]
                self._unlink(b)
                key = bkey[b]
                if key is not None:
                    bkey[b] = None
                    holders = self.cached[key]
                    holders.remove(b)
                    if not holders:
                        del self.cached[key]
                    self.evictions += 1
                ref[b] = 1
                held.append(b)
        self._cache_full_blocks(rid, held, cache_tokens // self.block_size)
        if self.tier is not None:  # the connector offers the step's newly full blocks to the CPU tier
            self.tier.scheduled(rid, cache_tokens)
        return len(held)

    def _cache_full_blocks(self, rid: int, held: list[int], full: int) -> None:
        done = self.num_cached[rid]
        if full <= done:
            return
        keys, bkey, cached = self.keys(rid, full), self.key, self.cached
        for k in range(done, full):
            b = held[k]
            if bkey[b] is not None:
                continue  # already cached (a hit block)
            key = bkey[b] = keys[k]
            holders = cached.get(key)
            if holders is None:
                cached[key] = [b]
            else:
                holders.append(b)
        self.num_cached[rid] = full

    def free_request(self, rid: int) -> None:
        """Release a finished or preempted request's blocks, tail first (`KVCacheManager.free`): uncached ones
        to the front of the free queue (the list's first block ending up first), cached ones to its back."""
        held = self.held.pop(rid, None)
        self._keys.pop(rid, None)
        self.num_cached.pop(rid, None)
        if held is None:
            return
        ref, bkey, end = self._ref, self.key, self.num_blocks
        at = end  # prepend_n: each freed uncached block after the one freed before it
        for i in range(len(held) - 1, -1, -1):
            b = held[i]
            ref[b] -= 1
            if ref[b] == 0:
                if bkey[b] is None:
                    self._link_after(at, b)
                    at = b
                else:
                    self._link_after(self._prev[end], b)  # append_n: to the back


def prefix_reuse(reqs, block_size: int) -> tuple[int, int]:
    """(prompt blocks an infinite prefix cache would hit, whole prompt blocks), requests taken in id order,
    each leaving its KV (prompt and output, up to its last computed token) cached for good: what a trace
    offers prefix caching at best (`simserve trace stats`). A hit is a run of cached blocks from the start."""
    seen: dict[int, int] = {}  # label -> blocks of it cached so far (the end of its run)
    hits = total = 0
    for rid in range(len(reqs.prompt)):
        prompt = int(reqs.prompt[rid])
        total += prompt // block_size
        runs = block_runs(reqs, rid, block_size)
        start = 0
        for label, end in runs:
            got = min(end, seen.get(label, 0), prompt // block_size)
            if got <= start:
                break
            hits += got - start
            if got < end:
                break
            start = end
        done = (prompt + int(reqs.output[rid]) - 1) // block_size  # the last token's KV is never computed
        for label, end in runs:
            seen[label] = max(seen.get(label, 0), min(end, done))
    return hits, total
