"""Attention-DP lockstep (lockstep.py: DpGroup, padded_tokens): each group of ranks is one process with one
event slot, as the reference's DpGroup is; a rank's scheduling is the replica's own code.
"""

from __future__ import annotations

import cython
import numpy as np

if cython.compiled:
    from cython.cimports.simserve.sim.core.rep import Rep
    from cython.cimports.simserve.sim.core.stretch import CoreStretch
    from cython.cimports.simserve.sim.core.timer import Timer
else:
    from .rep import Rep
    from .stretch import CoreStretch
    from .timer import Timer

from .consts import INV_TIME_BACKWARDS, NORMAL, P_SGLANG


@cython.cclass
class CoreLockstep(CoreStretch):
    """Attention-DP lockstep: a group's ranks stepped together (lockstep.DpGroup)."""

    # -- attention-DP lockstep (sim/lockstep.py: DpGroup, pick_rank, padded_tokens) --------------------------
    # Each run of `dp` consecutive replicas is one deployment's ranks; one process per group steps them
    # together: a step is the slowest rank's own time plus the experts over all ranks' tokens, an idle rank
    # runs a dummy batch, and the ranks with work finish the step together. Everything here runs only when dp
    # > 1; the rest of the core (policies, completions, routing up to the rank, the watchdog) is the same code
    # as without.
    def _lockstep_init(self, p: dict) -> None:
        """The groups of lockstep.build, their router's rule and vLLM's CUDA-graph sizes
        (DpGroup.__init__)."""
        sizes = tuple(p.get("cudagraph_sizes") or ())
        self.dp = p.get("dp", 1)
        self.num_groups = len(self.reps) // self.dp
        self.ls_sizes = np.array(sizes or (0,), dtype=np.int64)
        self.ls_num_sizes = len(sizes)
        self.ls_in_turn = self.policy == P_SGLANG  # SGLang's DataParallelController.round_robin_scheduler
        self.g_waits = np.zeros(max(self.num_groups, 1), dtype=np.uint8)
        self.g_busy = np.zeros(max(self.num_groups, 1), dtype=np.uint8)
        self.g_next = np.zeros(max(self.num_groups, 1), dtype=np.int64)
        if self.dp > 1:
            self.stretch_ok = False  # a rank's iterations are its group's steps: no single-replica stretch

    @cython.cfunc
    def _lockstep_resume(self, g: cython.int) -> cython.void:
        """DpGroup.step_loop resumes: after its step's timeout every rank in the step completes its batch, in
        rank order (Replica._complete); then (or after a notify) it routes what is due and forms the next."""
        i: cython.Py_ssize_t
        rep: Rep
        if self.g_busy[g]:
            self.g_busy[g] = 0
            for i in range(g * self.dp, g * self.dp + self.dp):
                rep = self.reps[i]
                if rep.busy0:
                    rep.busy0 = False
                    self._complete(rep, rep.prefills0, rep.decodes0)
        self._lockstep_loop(g)

    @cython.cfunc
    def _lockstep_loop(self, g: cython.int) -> cython.void:
        """The top of DpGroup.step_loop: route, each rank's scheduler decision (DpGroup._batch), then the step
        (_lockstep_start), or wait for a notify when no rank has anything to run."""
        i: cython.Py_ssize_t
        rep: Rep
        now: cython.double = self.now
        formed: cython.bint = False
        self._route_due(now)
        for i in range(g * self.dp, g * self.dp + self.dp):
            rep = self.reps[i]
            rep.busy0 = self._lockstep_batch(rep, now)
            if rep.busy0:
                rep.prefills0 = self.b_prefills
                rep.decodes0 = self.b_decodes
                formed = True
        if not formed:
            self.g_waits[g] = 1
            return
        self._lockstep_start(g, now)

    @cython.cfunc
    def _lockstep_batch(self, rep: Rep, now: cython.double) -> cython.bint:
        """DpGroup._batch: the rank's policy, dropping a head request that can never start (nothing resident
        and still not admitted), as Replica.schedule does, but without routing again in between."""
        while True:
            if self._policy(rep, now):
                return True
            if self._num_running(rep) or not rep.waiting:
                return False
            self._drop_unfittable(rep)

    @cython.cfunc
    @cython.locals(
        i=cython.Py_ssize_t,
        k=cython.Py_ssize_t,
        most=cython.longlong,
        total=cython.longlong,
        pad=cython.longlong,
        nd=cython.longlong,
        kv_used=cython.longlong,
        own=cython.double,
        slowest=cython.double,
        step=cython.double,
        end=cython.double,
    )
    def _lockstep_start(self, g: cython.int, now: cython.double) -> cython.void:
        """The step of DpGroup.step_loop: each rank's own time (an idle rank's dummy batch: one token), all at
        the padded size when vLLM pads the ranks to the largest (lockstep.padded_tokens), the step = the
        slowest rank + the experts over all ranks' tokens; the ranks with work start it and end it
        together."""
        rep: Rep
        timer: Timer = self.timer
        first: cython.Py_ssize_t = g * self.dp
        most = 0
        total = 0
        for i in range(first, first + self.dp):
            rep = self.reps[i]
            if rep.busy0:
                self._lockstep_rank(rep)
            else:
                rep.ls_tokens = 1
            total += rep.ls_tokens
            if rep.ls_tokens > most:
                most = rep.ls_tokens
        pad = 0  # padded_tokens: the largest rank's count padded to a captured size, unless past the largest
        if self.ls_num_sizes and most <= self.ls_sizes[self.ls_num_sizes - 1]:
            k = 0
            while self.ls_sizes[k] < most:  # vllm_worker.padded's bisect_left
                k += 1
            pad = self.ls_sizes[k]
        slowest = 0.0
        for i in range(first, first + self.dp):
            rep = self.reps[i]
            if rep.busy0:
                own = timer.own_time(
                    rep.ls_tokens,
                    rep.ls_base,
                    len(rep.prefills0),
                    len(rep.prefills0) + len(rep.decodes0),
                    pad,
                )
            else:
                own = timer.dummy_time(pad)
            if i == first or own > slowest:  # max(owns): the first of equal ones
                slowest = own
        step = slowest + timer.experts_time(pad * self.dp if pad else total)
        if not step >= 0:
            self.error = INV_TIME_BACKWARDS
        end = now + step
        for i in range(first, first + self.dp):
            rep = self.reps[i]
            if rep.busy0:  # Replica._start_flight, then the iteration row
                if not rep.in_flight:
                    rep.busy_since = now
                rep.in_flight += 1
                nd = len(rep.decodes0)
                kv_used = rep.num_blocks - rep.free
                self._row(rep, 0, now, end, rep.ls_prefill, nd, len(rep.prefills0) + nd, kv_used)
        self.g_busy[g] = 1
        self._schedule(end, NORMAL, g)

    @cython.cfunc
    def _lockstep_rank(self, rep: Rep) -> cython.void:
        """A rank's batch in the step: _count_batch (the scheduled-twice check, Replica._count_work), then its
        token count and Timer.own_base (ls_*); at PP 1 and without the bubble (a rank has none)."""
        kv_sum: cython.longlong
        num_prefill: cython.longlong
        nd: cython.longlong = len(rep.decodes0)
        chunks: list
        prefixes: list
        chunks, prefixes, kv_sum, num_prefill = self._count_batch(rep, rep.prefills0, rep.decodes0)
        rep.ls_tokens = num_prefill + nd
        rep.ls_prefill = num_prefill
        rep.ls_base = self.timer.own_base(chunks, prefixes, nd, kv_sum)
