"""Admission of the paper's policies (policies.py, adaptive_budgets.py): fcfs, orca, vllm (prefill-first),
sarathi, chunked, and the adaptive ones (slo-aware, pressure, equal-cost: adaptive_budgets.fill_chunks and the
three sizes).
"""

from __future__ import annotations

import cython

if cython.compiled:
    from cython.cimports.simserve.sim.core.rep import Rep
    from cython.cimports.simserve.sim.core.transitions import CoreTransitions
else:
    from .rep import Rep
    from .transitions import CoreTransitions

from .consts import P_EQUAL, P_PRESSURE, P_SLO, PROGRESS_FLOOR

# NOTE: returned for "no prefills / no chunks" on the hot path instead of a fresh list; never mutated
_NONE: list = []


@cython.cclass
class CorePaperPolicies(CoreTransitions):
    """The paper's policies: whole and chunked admission, adaptive_budgets.fill_chunks and its sizes."""

    @cython.cfunc
    def _chunked(self, rep: Rep, now: cython.double) -> tuple:
        tried: cython.bint = rep.turn_prefill
        prefills: list
        if tried:
            prefills = self._prefills_only(rep, now)
            if prefills:
                rep.turn_prefill = False
                return prefills, _NONE
        decodes: list = self._schedule_decodes(rep)
        rep.turn_prefill = True
        if decodes or tried:
            return _NONE, decodes
        prefills = self._prefills_only(rep, now)
        rep.turn_prefill = not prefills
        return prefills, _NONE

    @cython.cfunc
    def _prefills_only(self, rep: Rep, now: cython.double) -> list:
        prefills: list = self._partial_prefills(rep, 0)
        return prefills or self._admit_chunked(rep, now, self.b_tokens)

    @cython.cfunc
    def _partial_prefills(self, rep: Rep, tokens: cython.longlong) -> list:
        """Next chunks of admitted prompts, FCFS, while the budget lasts; b_tokens: the tokens after them."""
        rid: cython.longlong
        n: cython.longlong
        out: list = _NONE
        for rid in rep.prefilling:
            if self.pp > 1 and self.inflight[rid]:
                continue
            n = min(self.target[rid] - self.computed[rid], self.budget - tokens)
            if n <= 0:
                continue
            if out is _NONE:
                out = []
            out.append((rid, n))
            tokens += n
        self.b_tokens = tokens
        return out

    @cython.cfunc
    def _admit_chunked(self, rep: Rep, now: cython.double, tokens: cython.longlong) -> list:
        rid: cython.longlong
        n: cython.longlong
        self._drop_too_long(rep)
        if not rep.waiting:
            return _NONE
        out: list = []
        while rep.waiting:
            rid = rep.waiting[0]
            if not self._head_admissible(rep, rid):
                break
            n = min(self._num_tokens(rid), self.budget - tokens)
            if n <= 0:
                break
            self._admit_head(rep, now, -1)
            out.append((rid, n))
            tokens += n
            self._drop_too_long(rep)
        return out

    @cython.cfunc
    def _admit_whole(self, rep: Rep, now: cython.double, limited: cython.bint) -> list:
        rid: cython.longlong
        n: cython.longlong
        tokens: cython.longlong = 0
        self._drop_too_long(rep)
        if not rep.waiting:
            return _NONE
        out: list = []
        while rep.waiting:
            rid = rep.waiting[0]
            n = self._num_tokens(rid)
            if not self._head_admissible(rep, rid) or (limited and tokens + n > self.budget):
                break
            self._admit_head(rep, now, -1)
            out.append((rid, n))
            tokens += n
            self._drop_too_long(rep)
        return out

    # -- the adaptive policies (adaptive_budgets.fill_chunks and the three sizes) -------------------------
    @cython.cfunc
    def _fill_chunks(self, rep: Rep, now: cython.double, tokens: cython.longlong, decodes: list) -> list:
        rid: cython.longlong
        prefix: cython.longlong
        n: cython.longlong
        nd: cython.longlong = len(decodes)
        kv_sum: cython.longlong = 0
        budget: cython.longlong = self.budget
        out: list = []
        chunks: list = []  # the timer's view of the prefills so far
        prefixes: list = []
        for rid in decodes:
            kv_sum += self.computed[rid] + 1
        if self.policy == P_PRESSURE:
            budget = self._pressure_budget(rep, now)
        for rid in rep.prefilling:
            if self.pp > 1 and self.inflight[rid]:
                continue
            prefix = self.computed[rid]
            n = self._size(chunks, prefixes, tokens, prefix, self.target[rid] - prefix, nd, kv_sum, budget)
            if n > 0:
                out.append((rid, n))
                chunks.append(n)
                prefixes.append(prefix)
                tokens += n
        self._drop_too_long(rep)
        while rep.waiting:
            rid = rep.waiting[0]
            if not self._head_admissible(rep, rid):
                break
            n = self._size(chunks, prefixes, tokens, 0, self._num_tokens(rid), nd, kv_sum, budget)
            if n <= 0:
                break
            self._admit_head(rep, now, -1)
            out.append((rid, n))
            chunks.append(n)
            prefixes.append(0)
            tokens += n
            self._drop_too_long(rep)
        return out

    @cython.cfunc
    def _fits(
        self,
        chunks: list,
        prefixes: list,
        c: cython.longlong,
        prefix: cython.longlong,
        nd: cython.longlong,
        kv_sum: cython.longlong,
    ) -> cython.bint:
        """The size functions' `fits(c)`: slo-aware over every stage, equal-cost on stage 0 alone."""
        if self.policy == P_EQUAL:
            return self.timer.time([c], [prefix], 0, 0, 0, 0) <= self.equal_limit
        return self.timer.through(chunks + [c], prefixes + [prefix], nd, kv_sum) <= self.tbt_target

    @cython.cfunc
    def _largest_fitting(
        self,
        chunks: list,
        prefixes: list,
        hi: cython.longlong,
        prefix: cython.longlong,
        nd: cython.longlong,
        kv_sum: cython.longlong,
    ) -> cython.longlong:
        lo: cython.longlong
        mid: cython.longlong
        if hi <= 0 or self._fits(chunks, prefixes, hi, prefix, nd, kv_sum):
            return max(hi, 0)
        lo = 0
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self._fits(chunks, prefixes, mid, prefix, nd, kv_sum):
                lo = mid
            else:
                hi = mid
        return lo

    @cython.cfunc
    def _size(
        self,
        chunks: list,
        prefixes: list,
        tokens: cython.longlong,
        prefix: cython.longlong,
        want: cython.longlong,
        nd: cython.longlong,
        kv_sum: cython.longlong,
        budget: cython.longlong,
    ) -> cython.longlong:
        n: cython.longlong
        hi: cython.longlong
        floor: cython.longlong
        if self.policy == P_PRESSURE:
            floor = self.pressure_floor
            n = min(want, budget - tokens)
            while (
                n > 0
                and tokens + n > floor
                and self.timer.through(chunks + [n], prefixes + [prefix], nd, kv_sum) > self.tbt_target
            ):
                n = max(n // 2, floor - tokens)
            return n
        hi = min(want, self.budget - tokens)
        n = self._largest_fitting(chunks, prefixes, hi, prefix, nd, kv_sum)
        if self.policy == P_SLO:
            if n == 0 and not chunks and not nd:
                n = min(want, PROGRESS_FLOOR)
        elif n == 0 and not chunks and not tokens:  # equal-cost
            n = min(hi, 1)
        return n

    @cython.cfunc
    def _pressure_budget(self, rep: Rep, now: cython.double) -> cython.longlong:
        if not rep.waiting:
            return self.pressure_floor
        if now - self.arrived[rep.waiting[0]] > self.sched_delay_slo / 2:
            return self.budget
        return min(self.budget, self.pressure_floor * (1 + len(rep.waiting)))
