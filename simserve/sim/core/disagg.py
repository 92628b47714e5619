"""Disaggregated serving on the core (disagg.DisaggCluster): a prefill pool and a decode pool, each a Core of
its own, and the KV transfers between them over one link; driven by disagg_core.py.
"""

from __future__ import annotations

import heapq
from collections import deque

import cython
import numpy as np

if cython.compiled:
    from cython.cimports.simserve.sim.core.driver import Core
    from cython.cimports.simserve.sim.core.rep import Rep, _insort
else:
    from .driver import Core
    from .rep import Rep, _insort

from .consts import (
    CHECK,
    DONE,
    FAILED,
    FINISHED,
    IGNORED,
    INV_TIME_BACKWARDS,
    NORMAL,
    P_V1,
    RUNNING,
    SLOT_ARRIVALS,
    URGENT,
)

# the DisaggCore's own event slots, after both pools' (each pool's arrivals, watchdog and finished slots are
# there too; only the prefill pool's arrivals is used)
D_WATCHDOG = 0
D_FINISHED = 1
D_INIT = 2  # the oldest transfer process not yet started (SimPy's Initialize event: URGENT, now)
D_TRANSFER = 3  # the transfer that ends first

# decode routers (disagg.ROUTERS["decode"])
DR_RR = 0
DR_LOR = 1
DR_KV = 2
DECODE_ROUTERS = {"rr": DR_RR, "lor": DR_LOR, "kv": DR_KV}


@cython.cclass
class DisaggCore:
    """A disaggregated run (disagg.DisaggCluster): a prefill pool and a decode pool, each a Core of its own
    (its replicas, timer, policy and request arrays), and the KV transfers between them over one link.

    One event loop for all of it, in SimPy's order: both pools' event slots are slices of one set of arrays
    (so one scan finds the next event), and one event counter serves everything. A pool's Core schedules with
    its own `eid` and writes iteration rows with its own `num_rows`, so whichever object runs holds the true
    counter and row count: `_lend` hands them to a pool before running its code, `_take` takes them back after
    (and a pool's hook into this class takes them first and lends them back last). The rows of both pools go
    to one buffer, so the iteration log keeps the reference's order.

    A transfer is one SimPy process in the reference: its start (an URGENT event), its timeout, its end (an
    event nobody waits on, which still takes an id). Starts wait in a FIFO queue, timeouts in a heap; the head
    of each is one event slot."""

    def __init__(self, pre: Core, dec: Core, transfers: dict, link: dict, decode_router: str):
        pre_slots: cython.int = pre.num_slots
        dec_slots: cython.int = dec.num_slots
        i: cython.int
        self.pre, self.dec = pre, dec
        pre.owner = self
        dec.owner = self
        self.n = pre.n
        self.num_prefill = len(pre.reps)
        self.dec_off = pre_slots
        self.own = pre_slots + dec_slots
        self.num_slots = self.own + 4
        times = np.zeros(self.num_slots)
        prios = np.zeros(self.num_slots, dtype=np.intc)
        eids = np.zeros(self.num_slots, dtype=np.int64)
        on = np.zeros(self.num_slots, dtype=np.uint8)
        self.ev_time, self.ev_prio, self.ev_eid, self.ev_on = times, prios, eids, on
        pre.ev_time, pre.ev_prio, pre.ev_eid, pre.ev_on = (
            times[:pre_slots],
            prios[:pre_slots],
            eids[:pre_slots],
            on[:pre_slots],
        )
        dec.ev_time, dec.ev_prio, dec.ev_eid, dec.ev_on = (
            times[pre_slots : self.own],
            prios[pre_slots : self.own],
            eids[pre_slots : self.own],
            on[pre_slots : self.own],
        )
        # one iteration-row buffer for both pools (the count travels with the event counter)
        dec._row_ints_obj, dec._row_floats_obj = pre._row_ints_obj, pre._row_floats_obj
        dec.row_ints, dec.row_floats = pre.row_ints, pre.row_floats
        dec.log = pre.log
        self.now = 0.0
        self.num_rows = 0
        self.error = 0
        self.num_done = 0
        self.num_ignored = 0
        self.finished = False
        self.watchdog_started = False
        self.check_period = pre.check_period
        self.watch_always = True  # until configure_watch()
        self.watch_overload = True
        self.cap = float("inf")
        self.sched_delay_slo = pre.sched_delay_slo
        self.overload_wait = pre.overload_wait
        self.w_late = self.w_ptr = self.w_oldest = 0
        self.bytes_per_s = link["gbps"] * 1e9
        self.latency = link["latency_s"]
        self.kv_token_bytes = link["kv_token_bytes"]
        self.link_free_at = 0.0
        self.active_transfers = 0
        self.inits = deque()
        self.ends = []
        self.t_prefilled, self.t_queued = transfers["prefilled"], transfers["queued"]
        self.t_start, self.t_end = transfers["start"], transfers["end"]
        self.t_nbytes, self.t_prefill_replica = transfers["nbytes"], transfers["prefill_replica"]
        self.router = DECODE_ROUTERS[decode_router]
        self.rr = 0
        self.incoming = [deque() for _ in dec.reps]
        # SimPy starts the processes as DisaggCluster creates them, each with an URGENT event at time 0: every
        # prefill replica's scheduler and stages, every decode replica's, the arrivals, the watchdog.
        on[:] = 0
        self.eid = 0
        for i in range(self.num_prefill * pre.pp):
            self._at(0.0, URGENT, i)
        for i in range(self.num_prefill * dec.pp, dec.slot0):
            self._at(0.0, URGENT, self.dec_off + i)
        self._at(0.0, URGENT, pre.slot0 + SLOT_ARRIVALS)
        self._at(0.0, URGENT, self.own + D_WATCHDOG)

    @cython.cfunc
    @cython.exceptval(check=False)
    def _at(self, t: cython.double, priority: cython.int, slot: cython.int) -> cython.void:
        self.ev_time[slot] = t
        self.ev_prio[slot] = priority
        self.ev_eid[slot] = self.eid
        self.ev_on[slot] = 1
        self.eid += 1

    @cython.cfunc
    @cython.exceptval(check=False)
    def _lend(self, core: Core) -> cython.void:
        """`core` runs next: it holds the event counter and the row count."""
        core.eid = self.eid
        core.num_rows = self.num_rows

    @cython.cfunc
    @cython.exceptval(check=False)
    def _take(self, core: Core) -> cython.void:
        self.eid = core.eid
        self.num_rows = core.num_rows

    # -- the event loop -----------------------------------------------------------------------------------
    @cython.ccall
    @cython.locals(i=cython.int, best=cython.int, t=cython.double, k=cython.int, rep=Rep, pre=Core, dec=Core)
    def run(self) -> cython.int:
        """Core.run for the whole disaggregated run: CHECK at every watchdog check, FINISHED, or FAILED."""
        pre = self.pre
        dec = self.dec
        while True:
            best = -1
            for i in range(self.num_slots):
                if self.ev_on[i] and (
                    best < 0
                    or self.ev_time[i] < self.ev_time[best]
                    or (
                        self.ev_time[i] == self.ev_time[best]
                        and (
                            self.ev_prio[i] < self.ev_prio[best]
                            or (self.ev_prio[i] == self.ev_prio[best] and self.ev_eid[i] < self.ev_eid[best])
                        )
                    )
                ):
                    best = i
            if best < 0:
                self.flush_rows()
                return FINISHED
            t = self.ev_time[best]
            self.ev_on[best] = 0
            if t < self.now:
                self.error = INV_TIME_BACKWARDS
                self.flush_rows()
                return FAILED
            self.now = t
            pre.now = t
            dec.now = t
            if best < self.dec_off:
                self._lend(pre)
                if best < pre.slot0:
                    rep = pre.reps[best // pre.pp]
                    if best % pre.pp == 0:
                        pre._sched_resume(rep)
                    else:
                        pre._stage_resume(rep, best % pre.pp)
                else:  # the prefill pool's arrivals are the run's
                    pre._arrivals()
                self._take(pre)
            elif best < self.own:
                k = best - self.dec_off
                rep = dec.reps[k // dec.pp - self.num_prefill]
                self._lend(dec)
                if k % dec.pp == 0:
                    dec._sched_resume(rep)
                else:
                    dec._stage_resume(rep, k % dec.pp)
                self._take(dec)
            elif best == self.own + D_INIT:
                self._start_transfer()
            elif best == self.own + D_TRANSFER:
                self._end_transfer()
            elif best == self.own + D_WATCHDOG:
                if not self.watchdog_started:
                    self.watchdog_started = True
                    self.next_check_at()
                elif self._check_due():
                    return CHECK
                else:  # no rule can act at this check: loop, as the caller would
                    self.next_check_at()
            else:
                self.flush_rows()
                return FINISHED
            if pre.error or dec.error:
                self.error = pre.error or dec.error
            if self.error:
                self.flush_rows()
                return FAILED

    @cython.ccall
    def next_check_at(self) -> cython.void:
        self._at(self.now + self.check_period, NORMAL, self.own + D_WATCHDOG)

    def configure_watch(
        self, always: cython.bint, cap: cython.double, tbt_bucket: cython.longlong, tbt_need: cython.double
    ) -> None:
        """Core.configure_watch; the TBT stop rule counts the decode pool's gaps (the user's TBT)."""
        self.watch_always = always
        self.cap = cap
        self.dec.configure_watch(always, cap, tbt_bucket, tbt_need)

    def watch(
        self, overload: cython.bint, late: cython.longlong, ptr: cython.longlong, oldest: cython.longlong
    ) -> None:
        self.watch_overload = overload
        self.w_late, self.w_ptr, self.w_oldest = late, ptr, oldest

    @cython.cfunc
    def _check_due(self) -> cython.bint:
        """Core._check_due over the watchdog's view of a disaggregated run (DisaggCluster.__init__): arrivals
        are the prefill pool's, "scheduled" is the decode admission (t_queued), "ignored" the prefill side's
        status; both final once set, so the same skips hold. Idle for the stall check: no micro-batch in
        flight in either pool and no transfer on the link."""
        rid: cython.longlong
        s: cython.double
        rep: Rep
        pre: Core = self.pre
        dec: Core = self.dec
        if self.watch_always or self.now >= self.cap:
            return True
        if dec.tbt_bucket >= 0 and dec.tbt_above >= dec.tbt_need:
            return True
        if pre.next >= self.n and self.active_transfers == 0:
            for rep in pre.reps + dec.reps:
                if rep.in_flight:
                    break
            else:
                return True
        if not self.watch_overload:
            return False
        if 2 * self.w_late > self.n - self.num_ignored:
            return True
        while self.w_ptr < pre.next and pre.arrived[self.w_ptr] < self.now - self.sched_delay_slo:
            rid = self.w_ptr
            s = self.t_queued[rid]
            if pre.status[rid] != IGNORED and (s != s or s - pre.arrived[rid] > self.sched_delay_slo):
                return True
            self.w_ptr += 1
        while self.w_oldest < pre.next and (
            pre.status[self.w_oldest] == IGNORED
            or self.t_queued[self.w_oldest] == self.t_queued[self.w_oldest]
        ):
            self.w_oldest += 1
        return self.w_oldest < pre.next and self.now - pre.arrived[self.w_oldest] > self.overload_wait

    @cython.ccall
    def end_run(self) -> cython.bint:
        if self.finished:
            return False
        self.finished = True
        self._at(self.now, NORMAL, self.own + D_FINISHED)
        return True

    @cython.ccall
    def flush_rows(self) -> cython.void:
        self.pre.num_rows = self.num_rows
        self.pre.flush_rows()
        self.num_rows = 0

    # -- hooks the pools call (Core._finish, _on_done, _sched_resume) --------------------------------------
    @cython.ccall
    def pool_done(self, core: Core, rid: cython.longlong) -> cython.void:
        """A request finished on the decode side, or was ignored on either
        (DisaggCluster._ignored/_decoded)."""
        self._take(core)
        self.num_done += 1
        if core.status[rid] == IGNORED:
            self.num_ignored += 1
        self._count_done()
        self._lend(core)

    @cython.cfunc
    def _count_done(self) -> cython.void:
        if self.num_done == self.n and not self.finished:
            self.finished = True
            self._at(self.now, NORMAL, self.own + D_FINISHED)

    @cython.ccall
    def prefilled(self, pre: Core, rep: Rep, rid: cython.longlong, now: cython.double) -> cython.void:
        """PrefillState.finish, then DisaggCluster._prefilled: the prompt's KV is complete and stays here; the
        decode router picks the replica whose blocks it will wait for."""
        j: cython.Py_ssize_t
        drep: Rep
        dec: Core = self.dec
        self._take(pre)
        pre.completed[rid] = now
        pre.status[rid] = DONE
        if pre.policy == P_V1:
            rep.running.remove(rid)
        rep.outstanding -= 1
        rep.held += 1
        self.t_prefilled[rid] = now
        self.t_prefill_replica[rid] = rep.index
        j = self._pick_decode()
        drep = dec.reps[j]
        dec.replica[rid] = drep.index
        self.incoming[j].append(rid)
        drep.outstanding += 1
        self._lend(dec)
        dec._notify(drep)
        self._take(dec)
        self._lend(pre)

    @cython.cfunc
    def _pick_decode(self) -> cython.Py_ssize_t:
        """DisaggCluster._pick on the decode side: ties go to the lowest index."""
        dec: Core = self.dec
        nrep: cython.Py_ssize_t = len(dec.reps)
        j: cython.Py_ssize_t
        best: cython.Py_ssize_t = 0
        rep: Rep
        score: cython.longlong
        top: cython.longlong = 0
        if self.router == DR_RR:
            best = self.rr % nrep
            self.rr += 1
            return best
        for j in range(nrep):
            rep = dec.reps[j]
            # lor: the fewest outstanding; kv: the most free KV blocks, less what requests routed there will
            # take
            score = -rep.outstanding if self.router == DR_LOR else rep.free - self._incoming_blocks(j)
            if j == 0 or score > top:
                best, top = j, score
        return best

    @cython.cfunc
    def _incoming_blocks(self, j: cython.Py_ssize_t) -> cython.longlong:
        rid: cython.longlong
        total: cython.longlong = 0
        bs: cython.longlong = self.dec.block_size
        for rid in self.incoming[j]:
            total += -(-self.dec.prompt[rid] // bs)
        return total

    @cython.ccall
    def admit_incoming(self, dec: Core, rep: Rep, now: cython.double) -> cython.void:
        """DisaggCluster._admit: give incoming requests their KV blocks, FIFO, after the replica's own
        preempted requests; each admitted one starts its transfer."""
        rid: cython.longlong
        blocks: cython.longlong
        j: cython.Py_ssize_t = rep.index - self.num_prefill
        q = self.incoming[j]
        if not q:
            return
        self._take(dec)
        while q and not rep.waiting:
            rid = q[0]
            blocks = -(-dec.prompt[rid] // dec.block_size)
            if not dec._can_allocate(rep, blocks) or dec._num_running(rep) >= dec.max_batch:
                if not dec._num_running(rep) and not rep.in_flight and not dec._can_allocate(rep, blocks):
                    q.popleft()  # larger than this decode pool can ever hold
                    rep.outstanding -= 1
                    dec.status[rid] = IGNORED
                    self.pre.status[rid] = IGNORED  # the watchdog's view: never "waiting to be scheduled"
                    self._release_prefill(rid)
                    self.num_done += 1
                    self.num_ignored += 1
                    self._count_done()
                    continue
                break
            q.popleft()
            dec._allocate(rep, blocks)
            dec.blocks[rid] = blocks
            rep.held += 1
            if not self.inits:
                self._at(now, URGENT, self.own + D_INIT)
            else:
                self.eid += 1
            self.inits.append((self.eid - 1, j, rid, now))
        self._lend(dec)

    @cython.cfunc
    def _release_prefill(self, rid: cython.longlong) -> cython.void:
        """The decode side has the KV (or gave up on it): the prefill replica frees the blocks."""
        pre: Core = self.pre
        rep: Rep = pre.reps[self.t_prefill_replica[rid]]
        pre._release(rep, pre.blocks[rid])
        pre.blocks[rid] = 0
        rep.held -= 1
        self._lend(pre)
        pre._notify(rep)
        self._take(pre)

    # -- the transfer process (DisaggCluster._transfer) -----------------------------------------------------
    @cython.cfunc
    def _start_transfer(self) -> cython.void:
        """Its start: FIFO behind the transfers already on the link; it holds the link for bytes / bandwidth
        and arrives a latency later."""
        rid: cython.longlong
        j: cython.longlong
        queued: cython.double
        start: cython.double
        end: cython.double
        nbytes: cython.double
        _, j, rid, queued = self.inits.popleft()
        if self.inits:
            nxt = self.inits[0]
            self.ev_time[self.own + D_INIT] = nxt[3]
            self.ev_prio[self.own + D_INIT] = URGENT
            self.ev_eid[self.own + D_INIT] = nxt[0]
            self.ev_on[self.own + D_INIT] = 1
        nbytes = cython.cast(cython.double, self.dec.prompt[rid]) * self.kv_token_bytes
        start = max(queued, self.link_free_at)
        self.link_free_at = start + nbytes / self.bytes_per_s
        end = self.link_free_at + self.latency
        self.t_queued[rid], self.t_start[rid], self.t_end[rid], self.t_nbytes[rid] = (
            queued,
            start,
            end,
            nbytes,
        )
        self.active_transfers += 1
        heapq.heappush(self.ends, (self.now + (end - queued), self.eid, j, rid))
        self.eid += 1
        self._head_end()

    @cython.cfunc
    def _head_end(self) -> cython.void:
        slot: cython.int = self.own + D_TRANSFER
        if not self.ends:
            self.ev_on[slot] = 0
            return
        head = self.ends[0]
        self.ev_time[slot] = head[0]
        self.ev_prio[slot] = NORMAL
        self.ev_eid[slot] = head[1]
        self.ev_on[slot] = 1

    @cython.cfunc
    def _end_transfer(self) -> cython.void:
        """Its end: the prefill side frees the blocks; the decode side computes the last prompt token next."""
        rid: cython.longlong
        j: cython.longlong
        dec: Core = self.dec
        rep: Rep
        _, _, j, rid = heapq.heappop(self.ends)
        self._head_end()
        self.active_transfers -= 1
        self._release_prefill(rid)
        rep = dec.reps[j]
        rep.held -= 1
        # The remote KV covers all but the last prompt token, which the decode side computes to sample token
        # 1.
        dec.target[rid] = dec.prompt[rid]
        dec.computed[rid] = dec.prompt[rid] - 1
        dec.status[rid] = RUNNING
        dec.scheduled[rid] = self.now
        _insort(rep.prefilling, rid)
        if dec.policy == P_V1:
            rep.running.append(rid)
        self._lend(dec)
        dec._notify(rep)
        self._take(dec)
        self.eid += 1  # the process ends: SimPy schedules its event, which nobody waits on

    # -- what the caller reads at each check ----------------------------------------------------------
    def counters(self) -> tuple:
        """(now, arrived, num_done, num_ignored, finished triggered, the decode side's TBT zeros)."""
        return self.now, self.pre.next, self.num_done, self.num_ignored, self.finished, self.dec.zeros

    def busy(self) -> tuple:
        """(transfers on the link, micro-batches in flight anywhere, micro-batches so far)."""
        rep: Rep
        in_flight: cython.longlong = 0
        mbs: cython.longlong = 0
        for rep in self.pre.reps + self.dec.reps:
            in_flight += rep.in_flight
            mbs += rep.w_micro_batches
        return self.active_transfers, in_flight, mbs
