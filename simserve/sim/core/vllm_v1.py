"""vLLM V1's scheduler (vllm_v1.vllm_v1_batch and its design note): running requests first, preemption of the
newest, then waiting requests, with automatic prefix caching (`_admit_cached`, `_release_finished`).
"""

from __future__ import annotations

import cython

if cython.compiled:
    from cython.cimports.simserve.sim.core.paper_policies import CorePaperPolicies
    from cython.cimports.simserve.sim.core.rep import Rep
    from cython.cimports.simserve.sim.kv_offload import CpuTier
    from cython.cimports.simserve.sim.prefix_cache import PrefixCache
else:
    from simserve.sim.kv_offload import CpuTier
    from simserve.sim.prefix_cache import PrefixCache

    from .paper_policies import CorePaperPolicies
    from .rep import Rep


@cython.cclass
class CoreVllmV1(CorePaperPolicies):
    """vLLM V1's scheduler (vllm_v1.vllm_v1_batch), prefix caching included."""

    # -- vllm-v1 (vllm_v1.vllm_v1_batch: its design note) ------------------------------------------------
    @cython.cfunc
    def _vllm_v1(self, rep: Rep, now: cython.double) -> tuple:
        rid: cython.longlong
        victim: cython.longlong
        n: cython.longlong
        want: cython.longlong
        whole: cython.longlong
        need: cython.longlong
        computed: cython.longlong
        target: cython.longlong
        is_prefill: cython.bint
        ran: cython.bint
        prefill_ran: cython.bint = False
        first: cython.longlong
        pad: cython.longlong
        preempted: cython.bint = False
        budget: cython.longlong = self.budget
        eligible: cython.longlong = len(rep.running) + len(rep.waiting)
        thr: cython.longlong = self.long_threshold if eligible > 1 else 0
        bs: cython.longlong = self.block_size
        i: cython.Py_ssize_t = 0
        running: list = rep.running
        prefills: list = []
        decodes: list = []
        cache: PrefixCache = rep.cache
        if cache is not None and rep.finished:
            self._release_finished(rep)
        if thr and self.long_adaptive:
            thr = max(thr, self.budget // eligible)
        while i < len(running) and budget > 0:
            rid = running[i]
            if self.pp > 1 and self.inflight[rid]:
                i += 1
                continue
            computed = self.computed[rid]
            target = self.target[rid]
            is_prefill = computed < target
            if self.spec_k:  # vllm_v1.vllm_v1_batch: a decode verifies its drafts, lookahead slots
                n = self._spec_tokens(
                    target - computed if is_prefill else 1 + self.spec[rid], computed, budget, thr
                )
                need = self._spec_need(rid, computed, n)
            else:
                n = target - computed if is_prefill else 1
                n = min(n, thr if thr else budget, budget)
                need = -(-(computed + n) // bs) - self.blocks[rid]
            while rep.free < need:
                victim = running[len(running) - 1]
                self._preempt(rep, victim)
                preempted = True
                if victim == rid:
                    break
            if i >= len(running):
                break
            if cache is None:
                self._allocate(rep, need)
                self.blocks[rid] += need
            else:
                want = min(computed + n, self._num_tokens(rid))
                # NOTE: a call that takes no block (its blocks hold computed + n tokens: need <= 0, as blocks
                # is its block count) and caches none (the full blocks of its first `want` tokens are cached)
                # changes nothing: skipped, as _v1_grow skips it (most decodes of a step; attention DP runs
                # every step here)
                if need > 0 or want // bs > cache.num_cached[rid]:
                    self.blocks[rid] = cache.allocate_slots(rid, (), computed + n, want)
                    rep.free = cache.free
            if is_prefill:
                prefills.append((rid, n))
                prefill_ran = True
            elif n > 1:  # a verification, as a chunk over its KV
                self.spec_sched[rid] = n - 1
                prefills.append(self._verify_pair(rid, n))
            else:
                decodes.append(rid)
            if self.spec_k:
                self.spec[rid] = 0
            budget -= n
            i += 1
        if preempted:
            if not prefills and not decodes and not running:
                return self._vllm_v1(rep, now)
            return prefills, decodes
        ran = len(prefills) > 0 or len(decodes) > 0
        self._drop_too_long(rep)
        # vllm_v1: CPU-tier loads done
        if cache is not None and cache.tier is not None and cache.tier.loading:
            cache.tier.promote(rep.waiting, now, False)
        skipped: list = []
        while rep.waiting and budget > 0 and len(running) < self.max_batch:
            rid = rep.waiting[0]
            if self.pp > 1 and self.inflight[rid]:
                break
            want = self._num_tokens(rid)
            if cache is not None:
                n = self._admit_cached(rep, rid, want, thr, budget, now)
                if n < 0:  # vllm_v1: -1 loading from the CPU tier (it left waiting), -2 skipped this step
                    if n == -2:
                        skipped.append(rep.waiting.popleft())
                    self._drop_too_long(rep)
                    continue
                if not n:
                    break
            elif self.spec_k:  # vllm_v1._spec_admission
                n = want
                if want == 1 and ran and not prefill_ran and 1 + self.spec_k + 1 <= self.max_model_len:
                    if 1 + self.spec_k > budget:
                        break
                    n = 1 + self.spec_k
                n = min(n, thr if thr else budget, budget)
                pad = n - want if n > want else 0
                whole = -(-want // bs)
                first = -(-max(n, min(n + self.spec_lookahead, self.max_model_len)) // bs)
                if not self._can_allocate(rep, whole if self.full_isl else first) or not self._can_allocate(
                    rep, first
                ):
                    break
                if whole > rep.num_blocks - rep.watermark:
                    break
                self._admit_head(rep, now, first)
                self.spec_sched[rid] = -pad
            else:
                n = min(want, thr if thr else budget, budget)
                whole = -(-want // bs)
                if not self._can_allocate(rep, whole if self.full_isl else -(-n // bs)):
                    break
                if whole > rep.num_blocks - rep.watermark:
                    break  # never fits even alone (vllm_v1._NEVER_FITS)
                self._admit_head(rep, now, -(-n // bs))
            prefills.append((rid, n))
            budget -= n
            self._drop_too_long(rep)
        for rid in reversed(skipped):
            rep.waiting.appendleft(rid)
        if (
            not prefills
            and not decodes
            and cache is not None
            and cache.tier is not None
            and cache.tier.loading
        ):
            # vllm_v1: nothing else to run, await the earliest load
            cache.tier.promote(rep.waiting, now, True)
            return self._vllm_v1(rep, now)
        return prefills, decodes

    # -- speculative decoding: a running request's tokens and blocks (the scheduler's step and the
    # verification stretch's, stretch._verify_stretch), and its verification as the batch lists it
    @cython.cfunc
    @cython.exceptval(check=False)  # NOTE: arithmetic only; no Python error to check for
    def _spec_tokens(
        self, want: cython.longlong, computed: cython.longlong, budget: cython.longlong, thr: cython.longlong
    ) -> cython.longlong:
        """vllm_v1.vllm_v1_batch: the tokens a running request is scheduled -- `want` (the rest of its prompt,
        or 1 + its drafts) within the long-prefill threshold and the budget, below the model length."""
        n: cython.longlong = min(want, thr if thr else budget, budget)
        return min(n, max(self.max_model_len - computed - 1, 1))

    @cython.cfunc
    @cython.exceptval(check=False)  # NOTE: arithmetic only (block_size > 0); no Python error to check for
    def _spec_need(
        self, rid: cython.longlong, computed: cython.longlong, n: cython.longlong
    ) -> cython.longlong:
        """vllm_v1.vllm_v1_batch: the blocks request rid adds for computed + n tokens and the drafter's
        lookahead slots (0 when it holds them)."""
        slots: cython.longlong = max(
            computed + n, min(computed + n + self.spec_lookahead, self.max_model_len)
        )
        # NOTE: most steps: the division (Python's //) skipped
        if slots <= self.blocks[rid] * self.block_size:
            return 0
        return -(-slots // self.block_size) - self.blocks[rid]

    @cython.cfunc
    def _verify_pair(self, rid: cython.longlong, n: cython.longlong) -> tuple:
        """(rid, n), a verification of n tokens as the batch lists it: the request's pair of its last step
        when n is the same (K + 1, mostly), not a new tuple and id object per request per step (tuples are
        immutable: the batches that hold the pair share it); _complete drops a finished request's."""
        pair: tuple = self.v_pairs[rid]
        m: cython.longlong
        if pair is not None:
            m = pair[1]
            if m == n:
                return pair
        pair = (rid, n)
        self.v_pairs[rid] = pair
        return pair

    @cython.cfunc
    def _admit_cached(
        self,
        rep: Rep,
        rid: cython.longlong,
        want: cython.longlong,
        thr: cython.longlong,
        budget: cython.longlong,
        now: cython.double,
    ) -> cython.longlong:
        """vllm_v1._admit_cached: the waiting head with its longest cached prefix, or 0 when it does not
        fit."""
        cache: PrefixCache = rep.cache
        tier: CpuTier = cache.tier
        loading: cython.longlong
        if tier is not None and rid in tier.loaded:
            return self._admit_loaded(rep, rid, want, thr, budget, now)
        hits: list = cache.lookup(rid, want)
        if tier is not None:  # vllm_v1._admit_cached: a load from the CPU tier
            loading = tier.start_load(
                cache, rid, want, hits, self.max_model_len, self.full_isl, self.req_preemptions[rid] > 0, now
            )
            if loading < 0:
                return 0 if loading == -1 else -2
            if loading:
                rep.waiting.popleft()
                self.blocks[rid] = loading
                rep.free = cache.free
                return -1
        hit: cython.longlong = len(hits) * self.block_size
        n: cython.longlong = min(want - hit, thr if thr else budget, budget)
        free: cython.longlong = cache.free
        if self.full_isl and cache.blocks_to_allocate(rid, min(want, self.max_model_len), hits) > free:
            return 0
        if not self.full_isl and -(-min(want, self.max_model_len) // self.block_size) > cache.num_blocks:
            return 0  # never fits even alone (vllm_v1._NEVER_FITS)
        if cache.blocks_to_allocate(rid, hit + n, hits) > free:
            return 0
        cache.record(self.req_preemptions[rid] > 0, want, hit)
        blocks: cython.longlong = cache.allocate_slots(rid, hits, hit + n, min(hit + n, want))
        rep.free = cache.free
        self._admit_head(rep, now, blocks)
        self.computed[rid] = hit
        self.cached_tokens[rid] = hit
        return n

    @cython.cfunc
    def _admit_loaded(
        self,
        rep: Rep,
        rid: cython.longlong,
        want: cython.longlong,
        thr: cython.longlong,
        budget: cython.longlong,
        now: cython.double,
    ) -> cython.longlong:
        """vllm_v1._admit_loaded: a request back from its CPU-tier load, or 0 when the rest does not fit."""
        cache: PrefixCache = rep.cache
        computed: cython.longlong = cache.tier.loaded[rid]
        n: cython.longlong = min(want - computed, thr if thr else budget, budget)
        whole: cython.longlong = min(want, self.max_model_len) if self.full_isl else computed + n
        if cache.blocks_to_allocate(rid, whole, ()) > cache.free:
            return 0
        del cache.tier.loaded[rid]
        blocks: cython.longlong = cache.allocate_slots(rid, (), computed + n, min(computed + n, want))
        rep.free = cache.free
        self._admit_head(rep, now, blocks)
        self.computed[rid] = computed
        self.cached_tokens[rid] = computed
        return n

    @cython.cfunc
    def _release_finished(self, rep: Rep) -> cython.void:
        """ReplicaState.release_finished: finished requests' blocks back, in admission order."""
        rid: cython.longlong
        if len(rep.finished) > 1:
            rep.finished.sort(key=rep.admit_seq.__getitem__)
        for rid in rep.finished:
            if rep.cache.tier is not None:  # the connector's request_finished
                rep.cache.tier.finished(rid)
            rep.cache.free_request(rid)
            del rep.admit_seq[rid]
        rep.finished.clear()
        rep.free = rep.cache.free
