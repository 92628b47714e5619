"""Decode stretches: consecutive decode-only iterations of one replica run in one go while nothing else is due
(no SimPy counterpart: the reference runs them one event at a time; the same floats in the same order).
"""

from __future__ import annotations

import cython

if cython.compiled:
    from cython.cimports.simserve.sim.core.blockstart import block_start
    from cython.cimports.simserve.sim.core.rep import Rep
    from cython.cimports.simserve.sim.core.scheduler import CoreScheduler
else:
    from .blockstart import block_start
    from .rep import Rep
    from .scheduler import CoreScheduler

from .consts import INV_SCHEDULED_TWICE, NORMAL, P_SGLANG, P_V1

# NOTE: returned for "no prefills / no chunks" on the hot path instead of a fresh list; never mutated
_NONE: list = []


@cython.cclass
class CoreStretch(CoreScheduler):
    """Decode stretches: a replica's decode-only iterations while no other event is due."""

    # -- decode stretches: consecutive decode-only iterations of one replica, nothing else due ------------
    @cython.cfunc
    @cython.locals(
        slot=cython.int,
        i=cython.int,
        k=cython.Py_ssize_t,
        nd=cython.Py_ssize_t,
        rid=cython.longlong,
        left=cython.longlong,
        limit=cython.double,
        t=cython.double,
        now=cython.double,
        n_need=cython.longlong,
        kv_sum=cython.longlong,
        d=cython.double,
    )
    def _decode_stretch(self, rep: Rep) -> cython.void:
        """Run the replica's next decode-only iterations here, one after the other, while each is surely the
        next event of the whole simulation and changes nothing but its own requests: the same steps as
        run() -> _sched_resume -> _complete -> _policy -> _start_micro_batch, in the same order and with
        the same float operations, over the batch's ids in a C array instead of a Python list.

        It starts after _sched_resume started a decode-only batch (PP = 1, nothing waiting or prefilling,
        the batch is rep.decoding itself) and stops, leaving that replica's event pending for run(), before
        an iteration that ends at or after another pending event or the next arrival (ties go to the other
        event: it was scheduled earlier), before the completion of a batch in which a request finishes, or
        when the next batch's KV growth would not fit (the scheduler loop then forms it: preemption)."""
        ids: cython.longlong[:] = self.ids
        slot = rep.index  # PP = 1: the replica's scheduler loop is its only slot
        pol: cython.int = self.policy
        if self.spec_k:  # vllm-v1 with speculative decoding: its steps are verifications
            self._verify_stretch(rep)
            return
        if not rep.busy0 or rep.prefills0 or rep.prefilling or rep.waiting:
            return
        dec: list = rep.decodes0
        if not dec:
            return
        if pol == P_V1:  # its batch is a new list: every running request must be in it, as a decode
            if not self._v1_stretchable(rep, dec):
                return
        elif pol == P_SGLANG:  # a copy of rep.decoding (Scheduler.update_running_batch); the radix cache's
            # pages are its own allocator's: not stretched
            if rep.radix is not None or dec != rep.sg_running:
                return
        elif dec is not rep.decoding or rep.cache is not None:
            return
        limit = self._stretch_limit(slot)
        # completions before the first one that finishes a request (its bookkeeping is the loop's)
        nd = len(dec)
        left = self.output[dec[0]] - self.generated[dec[0]]
        for k in range(nd):
            rid = dec[k]
            ids[k] = rid
            if self.output[rid] - self.generated[rid] < left:
                left = self.output[rid] - self.generated[rid]
        left -= 1
        while left > 0:
            t = self.ev_time[slot]
            if not t < limit or t < self.now:  # another event first, or time going backwards (run() says so)
                return
            # run(): this event is the smallest key
            self.ev_on[slot] = 0
            self.now = t
            now = t
            left -= 1
            # _sched_resume: the batch ended; _complete at PP = 1 with decodes only
            rep.busy0 = False
            rep.in_flight -= 1
            if not rep.in_flight:
                rep.inflight_acc += now - rep.busy_since
            self._complete_ids(nd, now)
            # nothing else is due (the limit): ApiServers.output's advance has no work
            if self.api is not None:
                self._api_step(ids, nd, now)
            rep.idle_mark[0] = self._inflight_time(rep, now)
            # _sched_loop: nothing to route (the next arrival is after now); the policy's batch is
            # rep.decoding with its KV growth (_schedule_decodes), when that fits without preemption
            n_need = 0
            if self.stretch_grow:  # NOTE: first: the sarathi-like policies' hot path pays no extra test
                for k in range(nd):
                    rid = ids[k]
                    if block_start(self.computed[rid], self.block_mask, self.block_size):
                        n_need += 1
                        self.blocks[rid] += 1
                if not rep.free - n_need >= 1:
                    for k in range(nd):
                        rid = ids[k]
                        if block_start(self.computed[rid], self.block_mask, self.block_size):
                            self.blocks[rid] -= 1
                    self._sched_loop(rep)
                    return
                self._allocate(rep, n_need)
            elif pol == P_V1:
                if not self._v1_grow(rep, nd):
                    self._sched_loop(rep)  # a preemption (or anything unusual): the policy's own step
                    return
            elif pol == P_SGLANG and not self._sg_stretch_step(rep, nd):
                self._sched_loop(rep)  # a retraction: the policy's own step
                return
            # _start_micro_batch with no prefills
            self.batch_no += 1
            kv_sum = 0
            for k in range(nd):
                rid = ids[k]
                if self.stamp[rid] == self.batch_no or self.inflight[rid]:
                    self.error = INV_SCHEDULED_TWICE
                self.stamp[rid] = self.batch_no
                kv_sum += self.computed[rid] + 1
            rep.w_tokens += nd
            rep.w_decode_kv += kv_sum
            d = self.timer.decode_time(nd, kv_sum, 0, 0)
            rep.prefills0 = _NONE
            self._stretch_start(rep, slot, now, d, nd)
            if self.error:
                return

    @cython.cfunc
    @cython.locals(kv_used=cython.longlong)
    def _stretch_start(
        self, rep: Rep, slot: cython.int, now: cython.double, d: cython.double, nd: cython.Py_ssize_t
    ) -> cython.void:
        """_start_micro_batch's part after the step's time, for a stretched step of nd requests (no prefill
        tokens): its counters, the pipeline bubble, the row and the step's end (the bubble and KV use do not
        depend on d, so computing them after it changes no value)."""
        rep.w_micro_batches += 1
        rep.bubble[0] += self._inflight_time(rep, now) - rep.idle_mark[0]
        kv_used = rep.num_blocks - rep.free
        rep.busy0 = True
        if not rep.in_flight:
            rep.busy_since = now
        rep.in_flight += 1
        self._row(rep, 0, now, now + d, 0, nd, nd, kv_used)
        self._schedule(now + d, NORMAL, slot)

    @cython.cfunc
    @cython.locals(i=cython.int, limit=cython.double)
    def _stretch_limit(self, slot: cython.int) -> cython.double:
        """Every other pending event and the next arrival (or routing, or API send): a stretched iteration
        must end strictly before them all."""
        limit = float("inf")
        for i in range(self.num_slots):
            if i != slot and self.ev_on[i] and self.ev_time[i] < limit:
                limit = self.ev_time[i]
        if self.heap_route:
            if self.due and self.due[0][0] < limit:
                limit = self.due[0][0]
            if self.api is not None and self.api_next < limit:
                limit = self.api_next
        elif self.next < self.released and self.arrived[self.next] < limit:
            limit = self.arrived[self.next]
        return limit

    # -- verification stretches: speculative decoding's steps when every running request verifies its drafts
    # ---
    @cython.cfunc
    @cython.locals(
        k=cython.Py_ssize_t,
        nd=cython.Py_ssize_t,
        rid=cython.longlong,
        s=cython.longlong,
        a=cython.longlong,
        n=cython.longlong,
        c=cython.longlong,
        need=cython.longlong,
        n_need=cython.longlong,
        budget=cython.longlong,
        thr=cython.longlong,
        kv_sum=cython.longlong,
        draft_keys=cython.longlong,
        verify=cython.longlong,
        limit=cython.double,
        t=cython.double,
        now=cython.double,
        d=cython.double,
        uniform=cython.bint,
        same=cython.bint,
    )
    def _verify_stretch(self, rep: Rep) -> cython.void:
        """_decode_stretch for speculative decoding (vllm-v1, PP = 1, no prefix caching): the replica's next
        steps, one after the other, while each is surely the next event of the simulation and is the same
        batch again -- every running request verifying its drafts, none finishing (its acceptance is drawn
        before the run: spec_draws), no preemption -- with the same float operations in the same order as
        run() -> _sched_resume -> _complete -> _vllm_v1 -> _start_micro_batch (and _with_draft), so the
        results are the reference's bit for bit. It stops as _decode_stretch does, and where the scheduler's
        own step is needed (a request would finish, a chunk would differ from K + 1 or stop being a
        verification, the budget would not reach every request, the lookahead blocks would not fit)."""
        ids: cython.longlong[:] = self.ids
        slot: cython.int = rep.index
        pre: list = rep.prefills0
        nd = len(pre)
        if not rep.busy0 or rep.decodes0 or rep.prefilling or rep.waiting or rep.cache is not None:
            return
        if not nd or nd != len(rep.running):
            return
        # the batch: every running request, in admission order, a verification of K + 1 tokens (uniform: the
        # list rep.prefills0 then stays the batch's; otherwise it is rebuilt when the step is the same)
        uniform = True
        for k in range(nd):
            rid = pre[k][0]
            if rid != rep.running[k] or self.spec_sched[rid] < 1 or self.computed[rid] < self.target[rid]:
                return
            if self.spec_sched[rid] != self.spec_k:
                uniform = False
            ids[k] = rid
        limit = self._stretch_limit(slot)
        while True:
            t = self.ev_time[slot]
            if not t < limit or t < self.now:  # another event first, or time going backwards (run() says so)
                return
            for k in range(nd):  # _complete_verify's outcome, from the pre-drawn acceptance: nobody finishes
                rid = ids[k]
                s = self.spec_sched[rid]
                a = self.spec_draws[self.spec_off[rid] + self.spec_steps[rid]]
                if a > s:
                    a = s
                if self.generated[rid] + 1 + a >= self.output[rid]:
                    return
            # run(): this event is the smallest key
            self.ev_on[slot] = 0
            self.now = t
            now = t
            # _sched_resume -> _complete at PP = 1: verifications only (each samples: all go to the API
            # servers)
            rep.busy0 = False
            rep.in_flight -= 1
            if not rep.in_flight:
                rep.inflight_acc += now - rep.busy_since
            self._complete_verify_ids(nd, now)
            # nothing else is due (the limit): ApiServers.output's advance has no work
            if self.api is not None:
                self._api_step(ids, nd, now)
            rep.idle_mark[0] = self._inflight_time(rep, now)
            # _sched_loop: nothing to route; _vllm_v1's running loop, first checked to give the same batch
            thr = self.long_threshold if nd > 1 else 0
            if thr and self.long_adaptive:
                thr = max(thr, self.budget // nd)
            budget = self.budget
            n_need = 0
            same = True
            for k in range(nd):
                rid = ids[k]
                c = self.computed[rid]
                if budget <= 0:
                    self._sched_loop(rep)  # the budget does not reach every request: the policy's own step
                    return
                n = self._spec_tokens(1 + self.spec[rid], c, budget, thr)
                if n < 2:
                    self._sched_loop(rep)  # a plain decode: the policy's own step
                    return
                if n != self.spec_k + 1:
                    same = False
                n_need += self._spec_need(rid, c, n)
                budget -= n
            if n_need > rep.free:
                self._sched_loop(rep)  # a preemption: the policy's own step
                return
            budget = self.budget
            kv_sum = 0
            draft_keys = 0
            verify = 0
            self.batch_no += 1
            # the same loop, applied (_vllm_v1, then _count_batch and _with_draft's sums): its tokens and
            # blocks again (the pass above changes nothing, so that the policy's own step can take over)
            for k in range(nd):
                rid = ids[k]
                c = self.computed[rid]
                n = self._spec_tokens(1 + self.spec[rid], c, budget, thr)
                need = self._spec_need(rid, c, n)
                self._allocate(rep, need)
                self.blocks[rid] += need
                self.spec_sched[rid] = n - 1
                self.spec[rid] = 0
                budget -= n
                if self.stamp[rid] == self.batch_no or self.inflight[rid]:
                    self.error = INV_SCHEDULED_TWICE
                self.stamp[rid] = self.batch_no
                kv_sum += c + n  # one decode read, n - 1 drafts beside it (_count_batch)
                draft_keys += (n - 1) * c + n * (n - 1) // 2
                verify += n
            if not (same and uniform):  # a chunk differs from K + 1: the batch's list holds the chunks
                pre = [self._verify_pair(ids[k], self.spec_sched[ids[k]] + 1) for k in range(nd)]
                rep.prefills0 = pre
            uniform = same
            # _start_micro_batch (_count_batch's counters, then the step's time with its drafter's)
            self.b_verify = verify
            self.b_verifies = nd
            rep.w_tokens += verify
            rep.w_decode_kv += kv_sum + draft_keys
            d = self.timer.verify_times(nd, kv_sum, verify - nd, 0)
            if self.spec_fraction:  # _with_draft: every verification ends its request's prompt (c + n keys)
                d = d + self.spec_fraction * (d + (self.spec_passes - 1) * self.timer.undrafted)
            d = d + self.spec_cpu_s * nd
            self._stretch_start(rep, slot, now, d, nd)
            if self.error:
                return

    @cython.cfunc
    @cython.exceptval(check=False)  # NOTE: array arithmetic only; no Python error to check for
    @cython.locals(
        k=cython.Py_ssize_t,
        rid=cython.longlong,
        s=cython.longlong,
        a=cython.longlong,
        g=cython.longlong,
        same=cython.bint,
        t0=cython.double,
        last=cython.double,
        gap=cython.double,
    )
    def _complete_verify_ids(self, nd: cython.Py_ssize_t, now: cython.double) -> cython.void:
        """_complete_verify over self.ids[:nd], none of which finishes or pads (_verify_stretch made sure):
        the same stores without a call, its Rep and branches per request, and the gaps counted at once
        when all are the same (as _complete_ids: every request sampled its last token at the last step)."""
        same = True
        t0 = self.last_token[self.ids[0]]
        for k in range(nd):
            rid = self.ids[k]
            s = self.spec_sched[rid]
            self.spec_sched[rid] = 0
            a = self.spec_draws[self.spec_off[rid] + self.spec_steps[rid]]
            if a > s:
                a = s
            self.spec_steps[rid] += 1
            self.computed[rid] += 1 + a  # its chunk, s + 1 tokens, less the s - a rejected
            g = self.generated[rid] + 1 + a
            if g > self.output[rid]:
                g = self.output[rid]
            self.generated[rid] = g
            last = self.last_token[rid]
            if last != t0:
                same = False
            gap = now - last
            self.gaps[k] = gap
            if gap > self.tbt_max[rid]:
                self.tbt_max[rid] = gap
            self.last_token[rid] = now
            self.spec[rid] = self.spec_k
        if same:
            self._hist_add(now - t0, nd)
        else:
            for k in range(nd):
                self._hist_add(self.gaps[k], 1.0)

    @cython.cfunc
    @cython.locals(k=cython.Py_ssize_t, rid=cython.longlong, c=cython.longlong, bs=cython.longlong)
    def _v1_stretchable(self, rep: Rep, dec: list) -> cython.bint:
        """Is _vllm_v1's next step, after this decode-only batch, surely the same batch with only its blocks
        grown? Every running request is in it as a decode (so none was left out by the token budget), in
        decode state (computed + 1 == its tokens: the step schedules one token each), and, with prefix
        caching, its blocks and cached-block count are those of its last allocate_slots (which _v1_grow's
        skipping of no-op calls relies on)."""
        bs = self.block_size
        if len(dec) != len(rep.running) or len(dec) > self.budget or rep.finished:
            return False
        if rep.cache is not None and rep.cache.tier is not None and rep.cache.tier.loading:
            return False  # a CPU-tier load in flight: a later step takes the request back (kv_offload.py)
        for k in range(len(dec)):
            rid = dec[k]
            if rid != rep.running[k]:
                return False
            c = self.computed[rid]
            if c < self.target[rid] or c + 1 != self._num_tokens(rid):
                return False
            if rep.cache is not None and (
                self.blocks[rid] != -(-(c + 1) // bs) or rep.cache.num_cached.get(rid, -1) != (c + 1) // bs
            ):
                return False
        return True

    @cython.cfunc
    @cython.locals(
        k=cython.Py_ssize_t,
        rid=cython.longlong,
        c=cython.longlong,
        need=cython.longlong,
        n_need=cython.longlong,
        bs=cython.longlong,
    )
    def _v1_grow(self, rep: Rep, nd: cython.Py_ssize_t) -> cython.bint:
        """_vllm_v1's running loop for a batch of decodes only (one token each, admission order): each
        request's blocks for computed + 1 tokens, and with prefix caching the blocks that became full are
        cached (PrefixCache.allocate_slots). False, changing nothing, when the growth would preempt (the
        step's `while rep.free < need`: with needs of 0 or 1 that is their sum exceeding the free blocks)."""
        bs = self.block_size
        n_need = 0
        for k in range(nd):
            rid = self.ids[k]
            need = -(-(self.computed[rid] + 1) // bs) - self.blocks[rid]
            if need < 0 or need > 1:
                return False
            n_need += need
        if n_need > rep.free:
            return False
        if rep.cache is None:
            if n_need:
                for k in range(nd):
                    rid = self.ids[k]
                    self.blocks[rid] = -(-(self.computed[rid] + 1) // bs)
                self._allocate(rep, n_need)
            return True
        for k in range(nd):  # in admission order: the order the free queue hands out and caches blocks
            rid = self.ids[k]
            c = self.computed[rid]
            # NOTE: a call that would take no block and cache none (the request's blocks hold c + 1 tokens
            # already and no block became full) changes nothing: skipped (_v1_stretchable checked the counts)
            if -(-(c + 1) // bs) != self.blocks[rid] or (c + 1) % bs == 0:
                self.blocks[rid] = rep.cache.allocate_slots(rid, (), c + 1, min(c + 1, self._num_tokens(rid)))
        rep.free = rep.cache.free
        return True

    @cython.cfunc
    @cython.locals(k=cython.Py_ssize_t, rid=cython.longlong, need=cython.longlong)
    def _sg_stretch_step(self, rep: Rep, nd: cython.Py_ssize_t) -> cython.bint:
        """_sglang's step for a running batch of decodes only, nothing waiting or prefilling: the last batch
        was this decode batch (nothing to merge) and none of its requests finished (nothing to filter), so
        _sg_choose chooses nothing and changes nothing; then _sg_decode: when the pages fit,
        new_token_ratio decays one step and the pages grow. False, changing nothing, when they do not fit
        (retraction is the policy's own step) or when the running batch is not that batch."""
        if rep.sg_last is not None or len(rep.sg_running) != nd:
            return False
        need = 0
        for k in range(nd):
            if block_start(self.computed[self.ids[k]], self.block_mask, self.block_size):
                need += 1
        if need > rep.free:
            return False
        rep.sg_ratio = max(rep.sg_ratio - self.sg_decay, self.sg_min)  # NewTokenRatioTracker.decay_step
        if need:  # _sg_grow
            for k in range(nd):
                rid = self.ids[k]
                if block_start(self.computed[rid], self.block_mask, self.block_size):
                    self.blocks[rid] += 1
            self._allocate(rep, need)
        return True

    @cython.cfunc
    @cython.exceptval(check=False)  # NOTE: arithmetic only; no Python error to check for
    @cython.locals(
        k=cython.Py_ssize_t,
        rid=cython.longlong,
        t0=cython.double,
        last=cython.double,
        gap=cython.double,
        same=cython.bint,
    )
    def _complete_ids(self, nd: cython.Py_ssize_t, now: cython.double) -> cython.void:
        """_complete_decodes over self.ids[:nd], none of which finishes (_decode_stretch made sure)."""
        same = True
        t0 = self.last_token[self.ids[0]]
        for k in range(nd):
            rid = self.ids[k]
            last = self.last_token[rid]
            if last != t0:
                same = False
            gap = now - last
            self.gaps[k] = gap
            self.computed[rid] += 1
            self.generated[rid] += 1
            self.last_token[rid] = now
            if gap > self.tbt_max[rid]:
                self.tbt_max[rid] = gap
        if same:
            self._hist_add(now - t0, nd)
        else:
            for k in range(nd):
                self._hist_add(self.gaps[k], 1.0)
