"""SGLang 0.5.23's radix cache (`mem_cache/radix_cache.py`), in pages of `--page-size`, for the `sglang`
policy.

A radix tree over token pages: every node holds a run of pages, its children start with different pages. What
SGLang does with it, reduced to what scheduling sees:

- **Identity.** As for vLLM's prefix cache (prefix_cache.py, `block_runs`, the one definition): simserve's
  requests have no token ids; a request's pages are a few runs of labels (a prefix group's stream, or a
  trace's chained block ids), then its own stream. Two requests' pages at the same depth match exactly when
  their labels there are equal, so a node's pages are a few runs of (label, depth range) instead of token ids.
- **Matching** (`match_prefix`): the longest cached run of pages from the root, at most `num_tokens - 1`
  tokens (`Req._compute_max_prefix_len`), page-aligned down. A match ending inside a node splits it there.
  Every node on the path gets the call's access time (the LRU clock).
- **Inserting** (`UnifiedRadixCache.checkpoint_into_tree`, from `checkpoint_kv_cache` and
  `release_kv_cache(checkpoint=True)`): a chunked request's computed pages after each chunk, a prefilled
  request's when its prompt is done, a finished request's when it finishes (its KV up to its last computed
  token, page-aligned down). Pages the tree already held are the request's duplicates: they are freed; new
  ones move to the tree. Then its prompt alone is inserted again, which splits the path at the prompt's last
  whole page and touches the prompt's nodes after the output's. The request then locks the node its pages end
  at. (SGLang 0.5.23's server runs `UnifiedRadixCache` over its Rust tree core; this follows the Python twin,
  mem_cache/unified_cache/unified_tree_core.py, which gave the same schedule where both were run.)
- **Locking**: a node locked by a running request is protected; an unlocked one is evictable. SGLang's
  admission sees `available + evictable` as free (`PrefillBudget._available_and_evictable`), and so does
  `free`.
- **Eviction** (`evict`, `evict_for`): where SGLang calls `evict_from_tree_cache` (the sglang policy says
  where), the least recently accessed unlocked leaves go first, whole nodes at a time, until enough tokens are
  free; a parent left childless and unlocked joins the candidates.
- **Refresh** (`touch`, `SchedulePolicy._touch_waiting_prefixes`): a waiting request's prefix matched and
  touched, as a match does.
  NOTE: SGLang keeps its leaves in a set and breaks ties of access time by set order (object ids); simserve
  breaks them by node creation order, so runs are deterministic.
- **Retraction** (`release_kv_cache(checkpoint=False)`): the request's own pages are freed and its lock
  released; nothing is inserted (its prefix from the tree stays cached).

Per request the tree-owned (protected) pages are `protected[rid]`; the rest of `reqs.blocks[rid]` are its own.
"""

from __future__ import annotations

import heapq
import itertools

from simserve.sim.prefix_cache import block_runs, shared_runs

_NO_END = 1 << 62  # a request's own stream runs past any depth


class _Node:
    __slots__ = ("id", "parent", "children", "start", "end", "runs", "lock_ref", "last_access")

    def __init__(self, nid: int, parent, start: int, end: int, runs: list[tuple[int, int]], last_access: int):
        self.id, self.parent, self.start, self.end, self.runs = nid, parent, start, end, runs
        self.children: dict[int, _Node] = {}  # first page's stream -> child
        self.lock_ref = 0
        self.last_access = last_access

    def __len__(self) -> int:
        return self.end - self.start

    def stream_at(self, depth: int) -> int:
        for stream, end in self.runs:
            if depth < end:
                return stream
        raise IndexError(depth)


class RadixCache:
    """SGLang's RadixCache and token pool for one replica, in pages; `free` is available + evictable."""

    def __init__(self, num_pages: int, page_size: int, reqs):
        if num_pages < 1:
            raise ValueError(f"a KV pool needs at least one page, got {num_pages}")
        self.num_blocks = num_pages
        self.page = page_size
        self.reqs = reqs
        self.available = num_pages  # the allocator's free pages
        self.evictable = 0  # tree pages no running request locks
        self.protected = 0  # tree pages some running request locks
        self._ids = itertools.count()
        self._clock = itertools.count(1)
        self.root = _Node(next(self._ids), None, 0, 0, [], 0)
        self.root.lock_ref = 1  # never evicted (SGLang: root_node.lock_ref = 1)
        self.leaves: set[_Node] = set()  # evictable leaves
        self.lock: dict[int, _Node] = {}  # request -> the node it locks
        self._identity: dict[int, list[tuple[int, int]]] = {}  # request -> its label runs (_label_runs)
        self.protected_pages: dict[int, int] = {}  # request -> its pages the tree owns
        # prefix-cache counters, as summary.json reports vLLM's: tokens looked up and hit at admission
        self.queries = self.hits = self.preempted_queries = self.preempted_hits = 0
        self.evictions = 0  # pages evicted

    # -- the count interface the sglang scheduler uses --------------------------------------------------
    @property
    def free(self) -> int:
        return self.available + self.evictable

    @property
    def used(self) -> int:
        return self.num_blocks - self.free

    def can_allocate(self, pages: int) -> bool:
        return pages <= self.free

    def allocate(self, pages: int) -> None:
        if pages > self.available:
            self.evict(pages - self.available)
        if pages > self.available:
            raise RuntimeError(f"allocating {pages} pages with {self.available} free")
        self.available -= pages

    def evict_for(self, tokens: int) -> None:
        """`evict_from_tree_cache` / `evict_to_free_tokens`: evict until `tokens` are free (the allocator
        counts tokens, so the shortfall is page-ceiled)."""
        short = tokens - self.available * self.page
        if short > 0:
            self.evict(-(-short // self.page))

    def release(self, pages: int) -> None:
        self.available += pages

    # -- identity -------------------------------------------------------------------------------------
    def _label_runs(self, rid: int) -> list[tuple[int, int]]:
        """(label, end page) runs of a request's pages (prefix_cache.block_runs), its own stream last."""
        runs = self._identity.get(rid)
        if runs is None:  # a request's identity never changes: worked out once
            runs = self._identity[rid] = [*block_runs(self.reqs, rid, self.page), (-(rid + 1), _NO_END)]
        return runs

    def _runs(self, rid: int, start: int, end: int) -> list[tuple[int, int]]:
        return _clip(self._label_runs(rid), start, end)

    def _match_in(self, node: _Node, rid: int, depth: int, limit: int) -> int:
        """How many of node's pages from `depth` on (below `limit`) are the request's."""
        mine = self._label_runs(rid)
        i = 0
        x = depth
        for stream, end in node.runs:
            if end <= x:
                continue
            seg = min(end, limit)
            while x < seg:
                while mine[i][1] <= x:
                    i += 1
                label, mine_end = mine[i]
                if label != stream:
                    return x - depth
                x = min(mine_end, seg)
            if x >= limit:
                break
        return x - depth

    def _first_stream(self, rid: int, depth: int) -> int:
        for label, end in self._label_runs(rid):
            if depth < end:
                return label
        raise IndexError(depth)

    def _split(self, child: _Node, at: int) -> _Node:
        """`_split_node`: a new node for child's pages before depth `at`, child keeps the rest."""
        upper = _Node(
            next(self._ids),
            child.parent,
            child.start,
            at,
            _clip(child.runs, child.start, at),
            child.last_access,
        )
        upper.lock_ref = child.lock_ref
        child.parent.children[child.stream_at(child.start)] = upper
        child.runs = _clip(child.runs, at, child.end)
        child.start = at
        child.parent = upper
        upper.children[child.stream_at(at)] = child
        return upper

    def _walk(self, rid: int, pages: int, now: int) -> tuple[int, _Node]:
        node, d = self.root, 0
        node.last_access = now
        while d < pages:
            child = node.children.get(self._first_stream(rid, d))
            if child is None:
                break
            child.last_access = now
            k = self._match_in(child, rid, d, pages)
            if k < len(child):
                node = self._split(child, d + k)
                d += k
                break
            node, d = child, child.end
        return d, node

    # -- SGLang's operations ---------------------------------------------------------------------------
    def match(self, rid: int, num_tokens: int) -> tuple[int, _Node]:
        """`match_prefix` for a request of num_tokens tokens: (cached pages, the node they end at)."""
        return self._walk(rid, max(num_tokens - 1, 0) // self.page, next(self._clock))

    def touch(self, rid: int, num_tokens: int) -> None:
        """`touch_prefix` (a waiting request's refresh): `match_prefix` over all its tokens, page-aligned down
        — the same walk, splits and access times — its result unused."""
        self._walk(rid, num_tokens // self.page, next(self._clock))

    def insert(self, rid: int, pages: int) -> int:
        """`insert` of the request's first `pages` pages; returns how many the tree already held."""
        now = next(self._clock)
        d, node = self._walk(rid, pages, now)
        if d < pages:  # the walk ended where the request's pages leave the tree: the rest is a new leaf
            new = _Node(next(self._ids), node, d, pages, self._runs(rid, d, pages), now)
            node.children[self._first_stream(rid, d)] = new
            self.evictable += len(new)
            self._leaf_status(node)
            self._leaf_status(new)
        return d

    def unlocked_pages(self, node: _Node) -> int:
        """Pages on the path to `node` that no request locks (evictable until it locks them)."""
        pages = 0
        while node is not self.root and node.lock_ref == 0:  # a locked node's ancestors are locked too
            pages += len(node)
            node = node.parent
        return pages

    def inc_lock(self, node: _Node) -> None:
        while node is not self.root:
            if node.lock_ref == 0:
                self.evictable -= len(node)
                self.protected += len(node)
            node.lock_ref += 1
            self._leaf_status(node)
            node = node.parent

    def dec_lock(self, node: _Node) -> None:
        while node is not self.root:
            if node.lock_ref == 1:
                self.evictable += len(node)
                self.protected -= len(node)
            node.lock_ref -= 1
            self._leaf_status(node)
            node = node.parent

    def evict(self, pages: int) -> None:
        heap = [(n.last_access, n.id, n) for n in self.leaves]
        heapq.heapify(heap)
        evicted = 0
        while evicted < pages and heap:
            _, _, x = heapq.heappop(heap)
            self.available += len(x)
            evicted += len(x)
            self.evictions += len(x)
            parent = x.parent
            del parent.children[x.stream_at(x.start)]
            self.evictable -= len(x)
            self.leaves.discard(x)
            self._leaf_status(parent)
            if not parent.children and parent.lock_ref == 0:
                heapq.heappush(heap, (parent.last_access, parent.id, parent))

    def _leaf_status(self, node: _Node) -> None:
        if node.lock_ref > 0 or node.children:
            self.leaves.discard(node)
        else:
            self.leaves.add(node)

    def waiting_deprioritized(
        self, rid: int, num_tokens: int, queued: dict[int, int], threshold: int
    ) -> bool:
        """lpm's in-batch check (`SchedulePolicy._compute_prefix_matches`): whether the request shares at
        least `threshold` of its num_tokens tokens with a waiting request checked before it (SGLang's
        waiting-queue radix tree, here `queued`: label -> the most tokens of it a checked request had); if
        not, it joins."""
        runs = shared_runs(self.reqs, rid)
        if not runs:
            return False
        matched = 0
        for label, end in runs:
            end = min(end, num_tokens)
            have = queued.get(label, 0)
            if have < end:
                matched = max(matched, have)
                break
            matched = end
            if end >= num_tokens:
                break
        if matched >= threshold:
            return True
        start = 0
        for label, end in runs:
            if start >= num_tokens:
                break
            queued[label] = max(queued.get(label, 0), min(end, num_tokens))
            start = end
        return False

    # -- a request's life -------------------------------------------------------------------------------
    def admit(self, rid: int, pages: int, node: _Node | None, num_tokens: int, readmitted: bool) -> None:
        """A request admitted with `pages` cached pages ending at `node` (from `match`): it locks them. None:
        a chunked request continuing (it holds its lock already)."""
        if node is None:
            return
        self.inc_lock(node)
        self.lock[rid] = node
        self.protected_pages[rid] = pages
        hit = pages * self.page
        if readmitted:
            self.preempted_queries += num_tokens
            self.preempted_hits += hit
        else:
            self.queries += num_tokens
            self.hits += hit

    def checkpoint(self, rid: int, computed: int) -> None:
        """`UnifiedRadixCache.checkpoint_into_tree`: publish the request's computed pages (its duplicates are
        freed), then insert its prompt alone again, which splits the path at the prompt's last whole page ("so
        eviction can drop the output KV without the prompt") and makes the prompt's nodes the more recently
        used; the request then locks the node its pages end at instead of the one it held. Every call walks
        and touches the path, even one that adds no page."""
        pages = computed // self.page
        if pages == 0:
            return
        held = self.protected_pages[rid]
        already = self.insert(rid, pages)
        if already > held:  # the tree had these pages from another request: free this request's copies
            self.available += already - held
        prompt = int(self.reqs.prompt[rid]) // self.page
        if 0 < prompt < pages:
            self._walk(rid, prompt, next(self._clock))
        node = self._find(rid, pages)
        self.dec_lock(self.lock[rid])
        self.inc_lock(node)
        self.lock[rid] = node
        self.protected_pages[rid] = pages

    def _find(self, rid: int, pages: int) -> _Node:
        """The node the request's first `pages` pages end at (they are in the tree, ending at a node)."""
        node, d = self.root, 0
        while d < pages:
            node = node.children[self._first_stream(rid, d)]
            d = node.end
        return node

    def finish(self, rid: int) -> None:
        """`release_kv_cache(checkpoint=True)`: insert, free the rest of its own pages, unlock."""
        self.checkpoint(rid, int(self.reqs.computed[rid]))
        self._drop(rid)

    def retract(self, rid: int) -> None:
        """`release_kv_cache(checkpoint=False)`: free its own pages, unlock; the tree keeps its prefix."""
        self._drop(rid)

    def _drop(self, rid: int) -> None:
        held = self.protected_pages.pop(rid, 0)
        self.available += int(self.reqs.blocks[rid]) - held
        node = self.lock.pop(rid, None)
        if node is not None:
            self.dec_lock(node)


def _clip(runs: list[tuple[int, int]], start: int, end: int) -> list[tuple[int, int]]:
    """The runs covering pages [start, end) (runs hold (stream, end depth), each from the previous end)."""
    out = []
    for stream, e in runs:
        if e <= start:
            continue
        out.append((stream, min(e, end)))
        if e >= end:
            break
    return out
