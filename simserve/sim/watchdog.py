"""The overload watchdog's rules, without SimPy: both the SimPy cluster (cluster.py) and the compiled core's
driver (core_run.py) evaluate them at each check, so a run stops at the same check whichever model runs.

Overload (the run stops early and reports `overloaded`), either of:
  - more than half of the requests are certain to miss the scheduling-delay SLO (scheduled later than
    `sched_delay_slo_s` after arrival, or still waiting past it): the median scheduling delay, the capacity
    criterion, has failed whatever happens next;
  - the oldest request never yet scheduled has waited `overload_wait_s` (default 60 s = 30× the 2 s SLO).
    In a fluid model a queue that grows at rate ε·λ while the median delay stays ≤ 2 s leaves the last
    request waiting about twice the median, so a 60 s wait means the backlog is not transient.
"""

from __future__ import annotations

import math

import numpy as np

from simserve.sim.config import SimConfig
from simserve.sim.histogram import LogHistogram
from simserve.sim.request import IGNORED, Requests


class Watchdog:
    def __init__(self, reqs: Requests, cfg: SimConfig, tbt: LogHistogram, routed: list[int] | None = None):
        self.reqs, self.cfg, self.tbt = reqs, cfg, tbt
        # the ids in arrival order: ids themselves (None), or the routing order of answer-driven
        # conversations, whose follow-up rounds arrive in an order known only as answers complete
        # (conversation.py)
        self.routed = routed
        self.n = reqs.n
        self._late = 0  # requests certain to miss the scheduling-delay SLO
        self._late_ptr = 0
        self._oldest = 0  # lowest id that may still be waiting, never scheduled
        self._idle_mark: tuple[int, int] | None = None  # progress at the last check with every replica idle
        self.cap = math.inf if cfg.time_limit_s is None else cfg.time_limit_s
        self.tbt_stop = self._tbt_stop_rule(cfg.stop_tbt)

    def overloaded(self, now: float, arrived: int, num_ignored: int) -> bool:
        """The overload rule at `now` with `arrived` requests routed so far (saves the scan positions)."""
        overloaded, self._late, self._late_ptr, self._oldest = self.overload_rule(now, arrived, num_ignored)
        return overloaded

    def positions(self) -> tuple[int, int, int]:
        """The overload rule's saved scan: (late, scan pointer, oldest), for the compiled core's skip test."""
        return self._late, self._late_ptr, self._oldest

    def overload_rule(self, now: float, arrived: int, num_ignored: int) -> tuple[bool, int, int, int]:
        """The overload rule at `now`, and the scan positions after evaluating it (unsaved)."""
        r, cfg = self.reqs, self.cfg
        slo = cfg.sched_delay_slo_s
        late, ptr, oldest = self._late, self._late_ptr, self._oldest
        if self.routed is not None:
            return self._routed_rule(now, arrived, num_ignored, late, ptr, oldest)
        while ptr < arrived and r.arrived[ptr] < now - slo:
            s = r.scheduled[ptr]
            if r.status[ptr] != IGNORED and (s != s or s - r.arrived[ptr] > slo):
                late += 1
            ptr += 1
        if 2 * late > self.n - num_ignored:
            return True, late, ptr, oldest
        while oldest < arrived and (
            r.status[oldest] == IGNORED or r.scheduled[oldest] == r.scheduled[oldest]
        ):
            oldest += 1
        return oldest < arrived and now - r.arrived[oldest] > cfg.overload_wait_s, late, ptr, oldest

    def _routed_rule(self, now, arrived, num_ignored, late, ptr, oldest) -> tuple[bool, int, int, int]:
        """The same rule over positions in routing order (positions, not ids, are what it saves)."""
        r, cfg, ids = self.reqs, self.cfg, self.routed
        slo = cfg.sched_delay_slo_s
        while ptr < arrived and r.arrived[ids[ptr]] < now - slo:
            i = ids[ptr]
            s = r.scheduled[i]
            if r.status[i] != IGNORED and (s != s or s - r.arrived[i] > slo):
                late += 1
            ptr += 1
        if 2 * late > self.n - num_ignored:
            return True, late, ptr, oldest
        while oldest < arrived and (
            r.status[ids[oldest]] == IGNORED or r.scheduled[ids[oldest]] == r.scheduled[ids[oldest]]
        ):
            oldest += 1
        return oldest < arrived and now - r.arrived[ids[oldest]] > cfg.overload_wait_s, late, ptr, oldest

    def _tbt_stop_rule(self, stop: tuple[float, float] | None) -> tuple[int, float] | None:
        """(first bucket above the limit, gaps there that make the quantile exceed it whatever follows).

        Every token after a request's first adds one gap, so the run ends with T ≤ T_max = Σ(output − 1)
        gaps. The quantile is the gap at rank ⌊q(T − 1)⌋, so it exceeds the limit once A ≥ T − ⌊q(T − 1)⌋
        gaps lie above it; that bound never decreases in T, so A ≥ T_max − ⌊q(T_max − 1)⌋ settles it for any
        T the run may end with (and for the run so far)."""
        if stop is None:
            return None
        limit, q = stop
        t_max = int(np.maximum(self.reqs.output - 1, 0).sum())
        if t_max < 1:
            return None
        return self.tbt.first_bucket_above(limit), float(t_max - math.floor(q * (t_max - 1)))

    def tbt_missed(self) -> bool:
        return self.tbt_stop is not None and self.tbt.count_from(self.tbt_stop[0]) >= self.tbt_stop[1]

    def check_stall(self, all_arrived: bool, any_in_flight: bool, num_done: int, micro_batches: int) -> None:
        """Every request has arrived, yet no replica has had a micro-batch in flight at two checks a period
        apart, with nothing finished or started between: a policy that can never form a batch again. Fail
        loudly instead of letting the watchdog tick forever (a bug, never a user's input)."""
        if not all_arrived or any_in_flight:
            self._idle_mark = None
            return
        mark = (num_done, micro_batches)
        if mark == self._idle_mark:
            raise RuntimeError(f"simulation stalled with {self.n - num_done} requests unfinished")
        self._idle_mark = mark
