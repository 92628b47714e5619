"""The run driver: driver.Core, the class a run builds (core_run.py), with its start-up and event loop.

`run` pops the next event (the smallest key among the slots) and resumes its process until the run ends or a
watchdog check where a rule may act (`_check_due`); the caller (core_run.py) applies the rules of watchdog.py
as cluster.Cluster does, then `watch` + `next_check_at` or `end_run`.
"""

from __future__ import annotations

import cython
import numpy as np

if cython.compiled:
    from cython.cimports.simserve.sim.core.lockstep import CoreLockstep
    from cython.cimports.simserve.sim.core.rep import Rep
    from cython.cimports.simserve.sim.core.timer import Timer
else:
    from .lockstep import CoreLockstep
    from .rep import Rep
    from .timer import Timer

from .consts import (
    CHECK,
    FAILED,
    FINISHED,
    IGNORED,
    INV_TIME_BACKWARDS,
    NORMAL,
    P_CHUNKED,
    P_EQUAL,
    P_FCFS,
    P_ORCA,
    P_PRESSURE,
    P_SARATHI,
    P_SGLANG,
    P_SLO,
    P_V1,
    P_VLLM,
    POLICY_CODES,
    ROLE_AGGREGATED,
    SCALE,
    SLOT_ARRIVALS,
    SLOT_FINISHED,
    SLOT_SCALE,
    SLOT_WATCHDOG,
    URGENT,
)

COMPILED = cython.compiled  # False when the core runs as plain Python (the package's COMPILED)


@cython.cclass
class Core(CoreLockstep):
    """One simulation's event loop and every replica's scheduler (cluster.py + replica.py + the policies)."""

    def __init__(self, arrays: dict, hist, params: dict, timer: Timer, log, row_ints, row_floats):
        self.prompt, self.output, self.arrived = arrays["prompt"], arrays["output"], arrays["arrived"]
        self.scheduled, self.first_token = arrays["scheduled"], arrays["first_token"]
        self.completed, self.last_token, self.tbt_max = (
            arrays["completed"],
            arrays["last_token"],
            arrays["tbt_max"],
        )
        self.computed, self.target, self.generated = arrays["computed"], arrays["target"], arrays["generated"]
        self.blocks, self.req_preemptions = arrays["blocks"], arrays["preemptions"]
        self.inflight, self.status, self.replica = arrays["inflight"], arrays["status"], arrays["replica"]
        self.stamp = arrays["stamp"]
        self.cached_tokens = arrays["cached_tokens"]
        self.prefix_group, self.prefix_tokens = arrays["prefix_group"], arrays["prefix_tokens"]
        self.spec, self.spec_sched, self.spec_steps = (
            arrays["spec"],
            arrays["spec_sched"],
            arrays["spec_steps"],
        )
        self.spec_off, self.spec_draws = arrays["spec_off"], arrays["spec_draws"]
        self.gaps = np.zeros(max(len(arrays["prompt"]), 1))
        self.counts = hist["counts"]
        self.zeros = hist["zeros"]
        self.log_gamma, self.offset, self.num_buckets = hist["log_gamma"], hist["offset"], hist["num"]
        p = params
        self.n = p["n"]
        self.pp = p["pp"]
        self.policy = POLICY_CODES[p["policy"]]
        self.dynamic = p["dynamic"]
        self.block_size = p["block_size"]
        bs = p["block_size"]
        self.block_mask = bs - 1 if bs & (bs - 1) == 0 else -1
        self.reserve = p["reserve"]
        self.unlimited = p["budget"] is None
        self.budget = 0 if self.unlimited else p["budget"]
        self.max_batch = p["max_batch"]
        self.prompt_limit = p["prompt_limit"]
        self.max_model_len = p["max_model_len"]
        self.router = p["router"]  # a routers.Router (core_run builds it, as cluster.Cluster does)
        self.check_period = p["check_period"]
        self.sched_delay_slo = p["sched_delay_slo"]
        self.tbt_target = p["tbt_target"]
        self.overload_wait = p["overload_wait"]
        self.pressure_floor = p["pressure_floor"]
        self.long_threshold = p["long_threshold"]
        self.long_adaptive = p["long_adaptive"]
        self.full_isl = p.get("reserve_full_isl", True)
        self.timer = timer
        self.role = p.get("role", ROLE_AGGREGATED)
        self.owner = None
        sg = p.get("sglang") or {}
        self.sg_mixed = sg.get("mixed", False)
        self.sg_lof = sg.get("lof", False)
        eos = arrays.get("ignore_eos")  # a workload's per-request ignore_eos, else the run's for all
        self.sg_eos = eos if eos is not None else np.full(self.n, sg.get("ignore_eos", True), dtype=np.uint8)
        self.sg_max_prefill = sg.get("max_prefill", 0)
        self.sg_init = sg.get("init", 0.0)
        self.sg_min = sg.get("min", 0.0)
        self.sg_decay = sg.get("decay", 0.0)
        self.sg_clip = sg.get("clip", 0)
        self.sg_retract_steps = sg.get("retract_steps", 0)
        self.sg_reserve = sg.get("reserve", 0)
        self.sg_lpm = sg.get("lpm", False)
        self.sg_lpm_max = sg.get("lpm_max", 0)
        self.sg_refresh_every = sg.get("refresh_every", 1)
        self.sg_in_batch_check = sg.get("in_batch_check", 0)
        self.sg_in_batch_dep = sg.get("in_batch_dep", 0)
        self.sg_eos_reserve = sg.get("eos_reserve", 0)
        self.equal_limit = 0.0
        # adaptive_budgets.equal_cost_size: a budget-sized chunk at prefix 0, stage 0
        if self.policy == P_EQUAL:
            self.equal_limit = timer.time([self.budget], [0], 0, 0, 0, 0)
        self.now = 0.0
        self.eid = 0
        caches = p["caches"] or [None] * p["num_replicas"]
        base = p.get("first_replica", 0)  # a decode pool's replicas are numbered after the prefill pool's
        self.reps = [
            Rep(base + i, p["num_blocks"], p["watermark_blocks"], self.pp, caches[i])
            for i in range(p["num_replicas"])
        ]
        rep: Rep
        radixes = p.get("radixes") or [None] * p["num_replicas"]
        for i, rep in enumerate(self.reps):  # NOTE: position, not rep.index (a decode pool's starts past 0)
            rep.sg_ratio = self.sg_init
            rep.radix = radixes[i]
            self._sync_radix(rep)
        self.next = 0
        self.released = p["released"]
        self.slot_waits = False
        self.frontend = p["frontend_s"]
        self.api = p.get("api")
        self.heap_route = p.get("due") is not None
        self.conversation = self.heap_route and self.api is None
        self.routed = arrays["routed"]
        if self.heap_route:
            self.due = p["due"]
        if self.conversation:
            self.child, self.think = arrays["child"], arrays["think"]
        self.num_done = 0
        self.num_ignored = 0
        self.finished = False
        self.next_check = 0.0
        self.watch_always = True  # until configure_watch(): every check returns, as before it existed
        self.watch_overload = True
        self.cap = float("inf")
        self.tbt_bucket = -1
        self.tbt_need = 0.0
        self.tbt_above = 0.0
        self.w_late = self.w_ptr = self.w_oldest = 0
        self.h_index = 0
        self.h_lo = self.h_hi = 0.0  # an empty interval: the first value takes the log
        self.batch_no = 0
        # NOTE: the policies whose batch, at PP = 1 with nothing waiting and nothing prefilling, is the
        # replica's decoding list itself and changes no other state (chunked sets its turn flag to prefills,
        # which a decode-only batch already left set)
        # (sglang with EAGLE: not stretched; its verifications go through the scheduler loop, _verify_stretch
        # being vllm-v1's)
        self.stretch_ok = (
            self.pp == 1
            and self.policy
            in (P_FCFS, P_ORCA, P_VLLM, P_SARATHI, P_CHUNKED, P_SLO, P_PRESSURE, P_EQUAL, P_V1, P_SGLANG)
            and not (self.policy == P_SGLANG and p.get("spec_k", 0))
        )
        # the stretch's growth of the other policies' decoding list (vllm-v1 and sglang have their own steps);
        # fcfs and orca take _paused_decodes, which does not grow
        self.stretch_grow = self.dynamic and self.policy not in (P_FCFS, P_ORCA, P_V1, P_SGLANG)
        self.spec_k = p.get("spec_k", 0)
        self.spec_lookahead = p.get("spec_lookahead", 0)
        self.spec_fraction = p.get("spec_fraction", 0.0)
        self.spec_passes = p.get("spec_passes", 0)
        self.spec_cpu_s = p.get("spec_cpu_s", 0.0)
        # NOTE: with speculative decoding the stretches are verification stretches (stretch._verify_stretch)
        self.v_pairs = [None] * len(arrays["prompt"]) if self.spec_k else None
        self._lockstep_init(p)
        self._ids_obj = np.zeros(max(len(arrays["prompt"]), 1), dtype=np.int64)
        self.ids = self._ids_obj
        if self.api is not None:
            api = self.api
            self.api_count, self.api_token_s, self.api_residual = api.count, api.token_s, api.residual
            self.api_free, self.api_tokens, self.api_out = api.free_at, api.tokens, api.out
            self.api_first, self.api_last, self.api_done, self.api_itl_max = (
                api.first,
                api.last,
                api.done,
                api.itl_max,
            )
            self.itl_counts, self.itl_zeros = api.itl.counts, api.itl.zeros
            self.api_share = np.zeros(api.count, dtype=np.int64)
            self.api_ends = np.zeros(api.count)
            self.api_ids = np.zeros(max(len(arrays["prompt"]), 1), dtype=np.int64)
            self.api_next = api.pending()
            self.api_open = api.child is None and api.released == api.reqs.n and api.next_send == 0
            self.api_send = 0
            self.api_sent, self.api_wait = api.sent, api.input_wait
            self.api_requests = np.zeros(api.count, dtype=np.int64)
            self.api_prompt_tokens = np.zeros(api.count, dtype=np.int64)
            self.api_request_s, self.api_prompt_token_s = api.request_s, api.prompt_token_s
        self.error = 0
        self.log = log
        self._row_ints_obj, self._row_floats_obj = row_ints, row_floats
        self.row_ints, self.row_floats = row_ints, row_floats
        self.num_rows = 0
        # SimPy starts the processes in the order Cluster.__init__ creates them, each with an URGENT event
        # at time 0: every replica's scheduler and its stages, then arrivals, then the watchdog.
        i: cython.int
        self.slot0 = (base + len(self.reps)) * self.pp  # slot of rep.index r's stage s: r * pp + s
        if self.dp > 1:  # the groups' processes instead (Cluster.__init__: lockstep.build's DpGroups)
            self.slot0 = self.num_groups
        self.scaled = p.get("scaled", False)
        self.num_slots = self.slot0 + (4 if self.scaled else 3)
        self.ev_time = np.zeros(self.num_slots)
        self.ev_prio = np.zeros(self.num_slots, dtype=np.intc)
        self.ev_eid = np.zeros(self.num_slots, dtype=np.int64)
        self.ev_on = np.zeros(self.num_slots, dtype=np.uint8)
        self.watchdog_started = False
        for i in range(self.slot0 + 2):  # every replica process, the arrivals, the watchdog: in that order
            self._schedule(0.0, URGENT, i)
        if self.scaled:  # then the autoscaler's process (Cluster.__init__ starts it last)
            self._schedule(0.0, URGENT, self.slot0 + SLOT_SCALE)

    @cython.ccall
    @cython.locals(i=cython.int, best=cython.int, t=cython.double, slot=cython.int)
    def run(self) -> cython.int:
        """Process events until the watchdog's check (CHECK), the end of the run (FINISHED) or a broken
        invariant (FAILED)."""
        while True:
            best = -1
            for i in range(self.num_slots):  # the smallest (time, priority, id) among the pending events
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
                return FAILED
            self.now = t
            if best < self.slot0:
                if self.dp > 1:
                    self._lockstep_resume(best)
                elif best % self.pp == 0:
                    self._sched_resume(self.reps[best // self.pp])
                    if self.stretch_ok and not self.error:
                        self._decode_stretch(self.reps[best // self.pp])
                else:
                    self._stage_resume(self.reps[best // self.pp], best % self.pp)
            else:
                slot = best - self.slot0
                if slot == SLOT_ARRIVALS:
                    self._arrivals()
                elif slot == SLOT_WATCHDOG:
                    if not self.watchdog_started:  # the process's start: its first timeout
                        self.watchdog_started = True
                        self.next_check_at()
                    elif self._check_due():
                        return CHECK  # NOTE: the rows stay here: nothing reads the log before the end
                    else:  # no rule can act at this check: loop, as the caller would (same time, same id)
                        self.next_check_at()
                elif slot == SLOT_SCALE:
                    # the caller wakes the autoscaler (Cluster.autoscaler), then schedule_scale()
                    return SCALE
                else:
                    self.flush_rows()
                    return FINISHED
            if self.error:
                self.flush_rows()
                return FAILED

    @cython.ccall
    def next_check_at(self) -> cython.void:
        """The watchdog loops: its next check one period from now."""
        self.next_check = self.now + self.check_period
        self._schedule(self.now + self.check_period, NORMAL, self.slot0 + SLOT_WATCHDOG)

    def configure_watch(
        self, always: cython.bint, cap: cython.double, tbt_bucket: cython.longlong, tbt_need: cython.double
    ) -> None:
        """What the caller's rules need: `always` (a progress callback: return at every check), the trial cap,
        the TBT stop rule's bucket and count (bucket -1: no such rule)."""
        self.watch_always = always
        self.cap = cap
        self.tbt_bucket = tbt_bucket
        self.tbt_need = tbt_need

    def watch(
        self, overload: cython.bint, late: cython.longlong, ptr: cython.longlong, oldest: cython.longlong
    ) -> None:
        """After a check the caller evaluated: is the overload rule still evaluated, and where its scan
        stands."""
        self.watch_overload = overload
        self.w_late, self.w_ptr, self.w_oldest = late, ptr, oldest

    @cython.cfunc
    def _check_due(self) -> cython.bint:
        """Could any rule of watchdog.py act at this check (Cluster.watchdog's order)? False only when each
        surely would not, and evaluating it would leave the rules' state as skipping it does.

        The overload rule's scan counts the requests that arrived more than the SLO ago and were not
        scheduled within it (unless ignored). A request scheduled in time, or ignored, is so for good: the
        scan passes it without counting whenever it runs. So the scan is skipped only while it would meet
        nothing else; the request it would count is left for the caller's scan (which the caller's
        watch() then reports). The oldest-waiter half reads a pointer over ids that are final the same way.
        The stall check only matters when every request has arrived and no replica has a micro-batch in
        flight; between two such checks, any micro-batch in flight changes its progress mark."""
        rid: cython.longlong
        s: cython.double
        rep: Rep
        if self.watch_always or self.now >= self.cap:
            return True
        if self.tbt_bucket >= 0 and self.tbt_above >= self.tbt_need:
            return True
        if self.next >= self.n:
            for rep in self.reps:
                if rep.in_flight:
                    break
            else:
                return True
        if not self.watch_overload:
            return False
        if 2 * self.w_late > self.n - self.num_ignored:
            return True
        # NOTE: positions in routing order (Watchdog scans `routed` the same way; ids themselves in an open or
        # closed loop, where routed[k] == k)
        while (
            self.w_ptr < self.next and self.arrived[self.routed[self.w_ptr]] < self.now - self.sched_delay_slo
        ):
            rid = self.routed[self.w_ptr]
            s = self.scheduled[rid]
            if self.status[rid] != IGNORED and (s != s or s - self.arrived[rid] > self.sched_delay_slo):
                return True
            self.w_ptr += 1
        while self.w_oldest < self.next:
            rid = self.routed[self.w_oldest]
            if not (self.status[rid] == IGNORED or self.scheduled[rid] == self.scheduled[rid]):
                break
            self.w_oldest += 1
        return (
            self.w_oldest < self.next
            and self.now - self.arrived[self.routed[self.w_oldest]] > self.overload_wait
        )

    # -- the autoscaler's seam (autoscale.py; cluster.Cluster.autoscaler) ------------------------------------
    def scale_loads(self) -> list:
        """Per replica, what autoscale.replica_load reports for the reference's: (outstanding, waiting, queued
        prompt tokens of the waiting, KV blocks used, KV blocks)."""
        rep: Rep
        rid: cython.longlong
        queued: cython.longlong
        out: list = []
        for rep in self.reps:
            queued = 0
            for rid in rep.waiting:
                queued += self.prompt[rid] - self.computed[rid]
            out.append((rep.outstanding, len(rep.waiting), queued, rep.num_blocks - rep.free, rep.num_blocks))
        return out

    def set_serving(self, indices: list) -> None:
        """The replicas the router may choose from now on (the autoscaler's active ones, by index)."""
        self.router.set_serving(indices)

    def schedule_scale(self, t: cython.double) -> None:
        """The autoscaler's `yield env.timeout(t - now)`: its next wake."""
        self._schedule(self.now + (t - self.now), NORMAL, self.slot0 + SLOT_SCALE)

    @cython.ccall
    def end_run(self) -> cython.bint:
        """Cluster._end_run: trigger `finished` now; False when the run had already finished."""
        if self.finished:
            return False
        self.finished = True
        self._schedule(self.now, NORMAL, self.slot0 + SLOT_FINISHED)
        return True

    # -- what the caller reads at each check ----------------------------------------------------------
    def busy(self) -> tuple:
        """(0: an aggregated run has no link, micro-batches in flight, micro-batches so far):
        DisaggCore.busy's view, so core_run.drive checks a stall the same way for both."""
        rep: Rep
        in_flight: cython.longlong = 0
        mbs: cython.longlong = 0
        for rep in self.reps:
            in_flight += rep.in_flight
            mbs += rep.w_micro_batches
        return 0, in_flight, mbs

    def replica_totals(self) -> list:
        """Per replica: (in_flight, micro_batches, outstanding, free, preemptions, bubble, work tuple)."""
        rep: Rep
        out: list = []
        for rep in self.reps:
            work = (rep.w_tokens, rep.w_prefill_pairs, rep.w_prefill_kv, rep.w_decode_kv, rep.w_micro_batches)
            out.append(
                (
                    rep.in_flight,
                    rep.w_micro_batches,
                    rep.outstanding,
                    rep.free,
                    rep.preemptions,
                    [rep.bubble[k] for k in range(self.pp)],
                    work,
                )
            )
        return out

    def counters(self) -> tuple:
        """(now, next, num_done, num_ignored, finished triggered, TBT zeros)."""
        return self.now, self.next, self.num_done, self.num_ignored, self.finished, self.zeros
