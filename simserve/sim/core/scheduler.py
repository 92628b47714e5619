"""The replica's loop (replica.Replica.schedule and .stage): the policy dispatch (`_policy`), the scheduler
loop that runs stage 0, micro-batches handed down the pipeline stages and their completion.
"""

from __future__ import annotations

import cython

if cython.compiled:
    from cython.cimports.simserve.sim.core.rep import Rep
    from cython.cimports.simserve.sim.core.sglang import CoreSGLang
else:
    from .rep import Rep
    from .sglang import CoreSGLang

from .consts import (
    DONE,
    INV_SCHEDULED_TWICE,
    NORMAL,
    P_CHUNKED,
    P_FCFS,
    P_ORCA,
    P_SARATHI,
    P_SGLANG,
    P_V1,
    P_VLLM,
    ROLE_DECODE,
)

# NOTE: returned for "no prefills / no chunks" on the hot path instead of a fresh list; never mutated
_NONE: list = []


@cython.cclass
class CoreScheduler(CoreSGLang):
    """replica.Replica: the policy dispatch, the scheduler loop and the pipeline stages."""

    # -- policies (policies.py, adaptive_budgets.py, vllm_v1.py) ------------------------------------------
    @cython.cfunc
    def _policy(self, rep: Rep, now: cython.double) -> cython.bint:
        """Form the batch into b_prefills [(id, chunk)] and b_decodes [id]; False when it would be empty."""
        pol: cython.int = self.policy
        prefills: list
        decodes: list
        more: list
        if pol == P_SARATHI:
            decodes = self._schedule_decodes(rep)
            prefills = self._partial_prefills(rep, len(decodes))
            more = self._admit_chunked(rep, now, self.b_tokens)
            if more:
                prefills = prefills + more if prefills else more
        elif pol == P_FCFS:
            if self._num_running(rep):
                prefills, decodes = _NONE, self._paused_decodes(rep)
            else:
                prefills, decodes = self._admit_whole(rep, now, False), _NONE
        elif pol == P_ORCA:
            decodes = self._paused_decodes(rep)
            prefills = self._admit_whole(rep, now, False)
        elif pol == P_VLLM:
            prefills = self._admit_whole(rep, now, True)
            decodes = _NONE if prefills else self._schedule_decodes(rep)
        elif pol == P_CHUNKED:
            prefills, decodes = self._chunked(rep, now)
        elif pol == P_V1:
            prefills, decodes = self._vllm_v1(rep, now)
        elif pol == P_SGLANG:
            prefills, decodes = self._sglang(rep, now)
        else:
            decodes = self._schedule_decodes(rep)
            prefills = self._fill_chunks(rep, now, len(decodes), decodes)
        self.b_prefills = prefills
        self.b_decodes = decodes
        return len(prefills) > 0 or len(decodes) > 0

    # -- the scheduler loop, which runs stage 0 (replica.Replica.schedule) ------------------------------
    @cython.cfunc
    def _sched_resume(self, rep: Rep) -> cython.void:
        if rep.busy0:  # its stage-0 timeout ended
            rep.busy0 = False
            if self.pp == 1:
                self._complete(rep, rep.prefills0, rep.decodes0)
            else:
                self._hand_over(rep, 1, rep.stage0)
            rep.idle_mark[0] = self._inflight_time(rep, self.now)
        self._sched_loop(rep)

    @cython.cfunc
    def _sched_loop(self, rep: Rep) -> cython.void:
        """The scheduler loop's body after a micro-batch's completion: route, form the next batch, start
        it."""
        now: cython.double
        formed: cython.bint
        while True:
            now = self.now
            if self.role == ROLE_DECODE:  # its "arrivals": prefilled requests given KV blocks, then the link
                self.owner.admit_incoming(self, rep, now)
            else:
                self._route_due(now)
            formed = False
            if rep.in_flight < self.pp:
                formed = self._policy(rep, now)
            if not formed:
                if (
                    rep.in_flight == 0
                    and not (len(rep.prefilling) + len(rep.decoding) + rep.held)
                    and rep.waiting
                ):
                    self._drop_unfittable(rep)
                    continue
                rep.sched_waits = True
                return
            self._start_micro_batch(rep, self.b_prefills, self.b_decodes, now)
            return

    @cython.cfunc
    def _count_batch(self, rep: Rep, prefills: list, dec: list) -> tuple:
        """A batch about to run: the scheduled-twice check and Replica._count_work; (chunks, prefixes of the
        chunks, the decodes' summed context, prefill tokens) for the timer. _start_micro_batch's and each
        attention-DP rank's (_lockstep_rank)."""
        rid: cython.longlong
        chunk: cython.longlong
        c: cython.longlong
        p: cython.longlong
        kv_sum: cython.longlong = 0
        draft_keys: cython.longlong = 0
        num_prefill: cython.longlong = 0
        s: cython.Py_ssize_t
        chunks: list = _NONE  # (new lists at the first prefill chunk: a batch of verifications has none)
        prefixes: list = _NONE
        self.batch_no += 1
        self.b_verify = 0
        self.b_verifies = 0
        for rid, chunk in prefills:
            if self.stamp[rid] == self.batch_no or self.inflight[rid]:
                self.error = INV_SCHEDULED_TWICE
            self.stamp[rid] = self.batch_no
            c = self.computed[rid]
            if self.spec_k and c >= self.target[rid]:  # a verification: one decode read and chunk - 1 drafts
                kv_sum += c + chunk  # (Replica._split_verifies)
                draft_keys += (chunk - 1) * c + chunk * (chunk - 1) // 2
                self.b_verify += chunk
                self.b_verifies += 1
                continue
            if chunks is _NONE:
                chunks = []
                prefixes = []
            chunks.append(chunk)
            prefixes.append(c)
        for rid in dec:
            if self.stamp[rid] == self.batch_no or self.inflight[rid]:
                self.error = INV_SCHEDULED_TWICE
            self.stamp[rid] = self.batch_no
            kv_sum += self.computed[rid] + 1
        # Replica._count_work
        for s in range(len(chunks)):
            c = chunks[s]
            p = prefixes[s]
            num_prefill += c
            rep.w_prefill_pairs += c * p + c * (c + 1) // 2
            rep.w_prefill_kv += p + c
        rep.w_tokens += num_prefill + len(dec) + self.b_verify
        rep.w_decode_kv += kv_sum + draft_keys
        rep.w_micro_batches += 1
        return chunks, prefixes, kv_sum, num_prefill

    @cython.cfunc
    def _start_micro_batch(self, rep: Rep, prefills: list, dec: list, now: cython.double) -> cython.void:
        rid: cython.longlong
        kv_sum: cython.longlong
        num_prefill: cython.longlong
        d: cython.double
        nd: cython.longlong
        drafts: cython.longlong
        chunks: list
        prefixes: list
        chunks, prefixes, kv_sum, num_prefill = self._count_batch(rep, prefills, dec)
        nd = len(dec) + self.b_verifies  # the timer's decode reads, and the tokens that share them
        drafts = self.b_verify - self.b_verifies
        rep.bubble[0] += self._inflight_time(rep, now) - rep.idle_mark[0]
        if self.pp > 1:
            for rid in dec:
                self.inflight[rid] = 1
            for rid, _chunk in prefills:
                self.inflight[rid] = 1
        kv_used: cython.longlong = rep.num_blocks - rep.free
        if self.pp == 1:
            d = self.timer.time(chunks, prefixes, nd, kv_sum, drafts, 0)
            # Replica.schedule: awaiting a CPU-tier load
            if rep.cache is not None and rep.cache.tier is not None:
                d += rep.cache.tier.take_stall(now)
            if self.spec_k:
                d = self._with_draft(d, prefills, dec)
            rep.prefills0 = prefills
            rep.decodes0 = dec
        else:
            durations: list = [
                self.timer.time(chunks, prefixes, nd, kv_sum, drafts, s) for s in range(self.pp)
            ]
            # as at PP 1 (the CLI refuses the tier with PP)
            if rep.cache is not None and rep.cache.tier is not None:
                durations[0] += rep.cache.tier.take_stall(now)
            d = durations[0]
            rep.stage0 = (prefills, dec, durations, num_prefill, kv_used)
        rep.busy0 = True
        if not rep.in_flight:
            rep.busy_since = now
        rep.in_flight += 1
        self._row(
            rep, 0, now, now + d, num_prefill, len(dec) + self.b_verifies, len(prefills) + len(dec), kv_used
        )
        self._schedule(now + d, NORMAL, rep.index * self.pp)

    @cython.cfunc
    def _with_draft(self, d: cython.double, prefills: list, dec: list) -> cython.double:
        """Replica._with_draft: the step plus its drafter's passes and CPU (speculative decoding)."""
        rid: cython.longlong
        chunk: cython.longlong
        b: cython.longlong = len(dec)
        kv: cython.longlong = 0
        for rid in dec:
            kv += self.computed[rid] + 1
        for rid, chunk in prefills:
            if self.computed[rid] + chunk >= self.target[rid]:
                b += 1
                kv += self.computed[rid] + chunk
        if not b:
            return d
        if self.spec_fraction:
            d = d + self.spec_fraction * (
                d + (self.spec_passes - 1) * self.timer.time(_NONE, _NONE, b, kv, 0, 0)
            )
        return d + self.spec_cpu_s * b

    # -- stages 1..PP-1 (Replica.stage) -------------------------------------------------------------------
    @cython.cfunc
    def _stage_resume(self, rep: Rep, s: cython.int) -> cython.void:
        mb: tuple
        now: cython.double
        d: cython.double
        mb = rep.current[s]
        if mb is not None:  # its timeout ended
            rep.current[s] = None
            if s + 1 < self.pp:
                self._hand_over(rep, s + 1, mb)
            else:
                self._complete(rep, mb[0], mb[1])
                self._notify(rep)
            rep.idle_mark[s] = self._inflight_time(rep, self.now)
        q = rep.queues[s]
        if not q:
            rep.stage_waits[s] = True
            return
        mb = q.popleft()
        now = self.now
        d = mb[2][s]
        rep.bubble[s] += self._inflight_time(rep, now) - rep.idle_mark[s]
        nd: cython.longlong = len(mb[1])
        self._row(rep, s, now, now + d, mb[3], nd, len(mb[0]) + nd, mb[4])
        rep.current[s] = mb
        self._schedule(now + d, NORMAL, rep.index * self.pp + s)

    @cython.cfunc
    def _hand_over(self, rep: Rep, s: cython.int, mb: tuple) -> cython.void:
        rep.queues[s].append(mb)
        if rep.stage_waits[s]:
            rep.stage_waits[s] = False
            self._schedule(self.now, NORMAL, rep.index * self.pp + s)

    @cython.cfunc
    def _complete(self, rep: Rep, prefills: list, dec: list) -> cython.void:
        rid: cython.longlong
        chunk: cython.longlong
        now: cython.double = self.now
        rep.in_flight -= 1
        if not rep.in_flight:
            rep.inflight_acc += now - rep.busy_since
        if self.pp > 1:
            for rid in dec:
                self.inflight[rid] = 0
            for rid, _chunk in prefills:
                self.inflight[rid] = 0
            if rep.stale:  # drop the work of requests preempted while this micro-batch was in flight
                dropped = rep.stale.intersection(dec + [rid for rid, chunk in prefills])
                if dropped:
                    rep.stale -= dropped
                    dec = [rid for rid in dec if rid not in dropped]
                    prefills = [(rid, chunk) for rid, chunk in prefills if rid not in dropped]
        sampled: list = _NONE
        if self.api is not None:  # what goes to the API servers: every decode, and the prefills that sampled
            sampled = list(dec)
        if self.pp == 1:  # `dec` may be rep.decoding itself (_paused_decodes): the decodes first, then the
            # prefills whose last chunk moves them into it (the reference's order the other way round gives
            # the same state: the two sets of requests are disjoint and the histogram's counts are integers)
            if dec:
                self._complete_decodes(rep, dec, now)
            for rid, chunk in prefills:
                if self._complete_chunk(rep, rid, chunk, now) and self.api is not None:
                    sampled.append(rid)
                # (speculation runs at PP 1) its pair is not reused
                if self.spec_k and self.status[rid] == DONE:
                    self.v_pairs[rid] = None
        else:
            for rid, chunk in prefills:
                if self._complete_chunk(rep, rid, chunk, now) and self.api is not None:
                    sampled.append(rid)
            if dec:
                self._complete_decodes(rep, dec, now)
        if self.api is not None and sampled:
            self._api_output(sampled)
