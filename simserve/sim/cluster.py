"""The cluster: arrivals → router → replicas, plus the overload watchdog. `simulate` runs one experiment.

Processes: `arrivals` routes each request when it arrives (replicas also route whatever is due before they
schedule, so a batch formed at time t sees every arrival at or before t, whatever SimPy's event order);
`watchdog` evaluates the overload rule every `check_period_s`; each replica runs its scheduler loop and
pipeline stages (replica.py).

Overload (the run stops early and reports `overloaded`), either of:
  - more than half of the requests are certain to miss the scheduling-delay SLO (scheduled later than
    `sched_delay_slo_s` after arrival, or still waiting past it): the median scheduling delay, the capacity
    criterion, has failed whatever happens next;
  - the oldest request never yet scheduled has waited `overload_wait_s` (default 60 s = 30× the 2 s SLO).
    In a fluid model a queue that grows at rate ε·λ while the median delay stays ≤ 2 s leaves the last
    request waiting about twice the median, so a 60 s wait means the backlog is not transient.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import simpy

from simserve.errors import SimserveError
from simserve.sim import core_run
from simserve.sim.config import SimConfig
from simserve.sim.fastpath import settle
from simserve.sim.histogram import LogHistogram
from simserve.sim.iterations import IterationLog
from simserve.sim.policies import POLICIES
from simserve.sim.replica import BatchTimer, Replica
from simserve.sim.request import IGNORED, Requests
from simserve.sim.state import ReplicaState
from simserve.sim.watchdog import Watchdog

MAX_CHECKS_AHEAD = 64  # overload checks a stretch may look past (bounds the look-ahead's cost)


@dataclass
class RawRun:
    """Everything a finished simulation leaves behind; metrics.build_result turns it into tables."""

    cfg: SimConfig
    reqs: Requests
    request_ids: np.ndarray  # original trace positions, in the order of `reqs`
    log: IterationLog
    tbt: LogHistogram
    replicas: list[Replica]
    num_blocks: int
    overloaded: bool
    end_time: float
    stopped_early: bool = False  # cfg.stop_tbt: the TBT quantile had surely missed its limit
    capped: bool = False  # cfg.time_limit_s ended the run with requests unfinished


class Cluster:
    def __init__(
        self, env: simpy.Environment, reqs: Requests, cfg: SimConfig, timer: BatchTimer, num_blocks: int
    ):
        self.env, self.reqs, self.cfg = env, reqs, cfg
        self.n = reqs.n
        self.next = 0  # next request to arrive
        self.num_done = 0  # finished or ignored
        self.num_ignored = 0
        self.finished = env.event()
        self.progress: Callable[[int, int], None] | None = None
        self.overloaded = False
        self.next_check = cfg.check_period_s
        self.tbt = LogHistogram()
        self.stopped_early = False
        self.capped = False
        self.rules = Watchdog(reqs, cfg, self.tbt)
        self._cap = self.rules.cap
        self._tbt_stop = self.rules.tbt_stop
        self.log = IterationLog()
        self.prompt_limit = cfg.prompt_limit()
        policy = POLICIES[cfg.policy]
        pp = timer.num_stages
        self.replicas = [
            Replica(
                env,
                ReplicaState(i, reqs, cfg, num_blocks, pp, self.tbt, self._on_done, timer),
                policy,
                timer,
                self.log,
                self.route_due,
                self.stretch_until,
                cfg.stretch,
            )
            for i in range(cfg.num_replicas)
        ]
        if len(self.replicas) == 1 and cfg.stretch:
            self.replicas[0].quiet_window = self.quiet_window
            self.replicas[0].tbt_headroom = self.tbt_headroom
        self._rr = 0
        env.process(self.arrivals())
        env.process(self.watchdog())

    # -- arrivals and routing ----------------------------------------------------------------------
    def arrivals(self):
        env, arrived = self.env, self.reqs.arrived
        while self.next < self.n:
            t = arrived[self.next]
            while t > env.now:
                yield env.timeout(t - env.now)
            self.route_due(env.now)

    def route_due(self, now: float) -> None:
        r = self.reqs
        while self.next < self.n and r.arrived[self.next] <= now:
            rid = self.next
            self.next += 1
            if r.prompt[rid] > self.prompt_limit:
                r.status[rid] = IGNORED  # longer than the deployment accepts (Sarathi-Serve ignores it)
                self._on_done(-1, rid)
                continue
            rep = self._pick()
            r.replica[rid] = rep.index
            rep.state.enqueue(rid)
            rep.notify()

    def _pick(self) -> Replica:
        if self.cfg.router == "rr":
            rep = self.replicas[self._rr % len(self.replicas)]
            self._rr += 1
            return rep
        return min(self.replicas, key=lambda rep: rep.state.outstanding)  # ties: the lowest index

    def stretch_until(self, now: float, through_checks: bool = False) -> float:
        """The next time something outside a replica happens: an arrival or an overload check.

        With `through_checks` and a single replica, only a check that will stop the run counts: while that
        replica is in a steady stretch nobody is admitted, routed or dropped, so each check's answer is
        known in advance. (A stretch that runs through checks must give the same table rows, so only the
        PP = 2 fast path, which keeps a row per micro-batch, asks for it.)
        """
        nxt = float(self.reqs.arrived[self.next]) if self.next < self.n else np.inf
        t = self.next_check
        if through_checks and len(self.replicas) == 1:
            stops = self.cfg.stop_when_overloaded  # else a check only notes an overload; none ends the run
            for _ in range(MAX_CHECKS_AHEAD):
                if not t < nxt or (stops and self._overload_rule(t)[0]) or t >= self._cap:
                    break
                t = t + self.cfg.check_period_s  # the watchdog's own float operation
        return min(nxt, t)

    def quiet_window(self, now: float) -> tuple[float, float, float, float]:
        """For the one replica's quiet_stretch: the next arrival, the next overload check, the check
        period, and the first time something outside it can happen (an arrival or a stopping check)."""
        nxt = float(self.reqs.arrived[self.next]) if self.next < self.n else np.inf
        return nxt, self.next_check, self.cfg.check_period_s, self.stretch_until(now, True)

    def tbt_headroom(self) -> tuple[int, float] | None:
        """With the TBT stop rule: (its bucket, the weight of gaps in that bucket or above that may still be
        added before a check stops the run); None without it."""
        if self._tbt_stop is None:
            return None
        bucket, need = self._tbt_stop
        return bucket, need - self.tbt.count_from(bucket)

    def _on_done(self, replica: int, rid: int) -> None:
        self.num_done += 1
        if self.reqs.status[rid] == IGNORED:
            self.num_ignored += 1
        if self.num_done == self.n and not self.finished.triggered:
            self.finished.succeed()

    # -- overload ------------------------------------------------------------------------------------
    def watchdog(self):
        env, period = self.env, self.cfg.check_period_s
        while True:
            self.next_check = env.now + period
            yield env.timeout(period)
            if self.progress is not None:
                self.progress(self.num_done, self.n)
            if self._tbt_stop is not None:
                self._settle(env.now)  # the rule counts every gap that ended before now
            if not self.overloaded and self._overloaded(env.now):
                self.overloaded = True
                if self.cfg.stop_when_overloaded:
                    self._end_run(env.now)
                    return
            if self._tbt_missed():
                self.stopped_early = True
                self._end_run(env.now)
                return
            if env.now >= self._cap:  # the trial cap: a check, so the stretches stop short of it as above
                self.capped = self._end_run(env.now)
                return
            self._check_stall()

    def _end_run(self, now: float) -> bool:
        """End the run at the check at `now`, keeping the TBT gaps that ended before it; False when the run had
        already finished."""
        self._settle(now)
        if self.finished.triggered:
            return False
        self.finished.succeed()
        return True

    def _settle(self, now: float) -> None:
        """Count the TBT gaps of stretch iterations in flight that ended before `now`, as the step-by-step
        run has by the time its check at `now` runs (fastpath.settle)."""
        for rep in self.replicas:
            if rep.unsettled:
                settle(rep, now)

    def _check_stall(self) -> None:
        self.rules.check_stall(
            self.next >= self.n,
            any(rep.in_flight for rep in self.replicas),
            self.num_done,
            sum(rep.work.micro_batches for rep in self.replicas),
        )

    def _tbt_missed(self) -> bool:
        return self.rules.tbt_missed()

    def _overloaded(self, now: float) -> bool:
        return self.rules.overloaded(now, self.next, self.num_ignored)

    def _overload_rule(self, now: float) -> tuple[bool, int, int, int]:
        return self.rules.overload_rule(now, self.next, self.num_ignored)


def simulate(
    prompt_tokens: np.ndarray,
    output_tokens: np.ndarray,
    arrived_at: np.ndarray,
    timer: BatchTimer,
    num_blocks: int,
    cfg: SimConfig,
    progress: Callable[[int, int], None] | None = None,
) -> RawRun:
    """Replay requests through a cluster of identical replicas; `num_blocks` is the KV pool per replica.

    `progress(done, total)` is called once per overload check (each simulated second), for a progress bar.
    """
    cfg.validate()
    prompt = np.asarray(prompt_tokens, dtype=np.int64)
    output = np.asarray(output_tokens, dtype=np.int64)
    arrived = np.asarray(arrived_at, dtype=np.float64)
    if len(prompt) == 0:
        raise SimserveError("the trace has no requests; pick a trace with at least one request")
    if not len(prompt) == len(output) == len(arrived):
        raise SimserveError("prompt, output and arrival arrays differ in length")
    if (prompt < 1).any() or (output < 1).any():
        raise SimserveError("every request needs at least one prompt and one output token")
    if not np.isfinite(arrived).all() or (arrived < 0).any():
        raise SimserveError("arrival times must be finite and non-negative")
    order = np.argsort(arrived, kind="stable")  # ids in arrival order: FCFS is id order
    prompt, output, arrived = prompt[order], output[order], arrived[order]
    # A request stops once its length passes max_model_len (Sarathi-Serve: FINISHED_LENGTH_CAPPED).
    output = np.minimum(output, np.maximum(cfg.max_model_len + 1 - prompt, 1))
    reqs = Requests(prompt, output, arrived)
    core = core_run.choose(cfg, timer)
    if core is not None:  # the compiled core: the same results as the SimPy model below (core.py)
        log, tbt, replicas, overloaded, end, stopped, capped = core_run.run(core, reqs, cfg, timer, num_blocks, progress)
        return RawRun(cfg, reqs, order, log, tbt, replicas, num_blocks, overloaded, end, stopped, capped)
    env = simpy.Environment()
    cluster = Cluster(env, reqs, cfg, timer, num_blocks)
    cluster.progress = progress
    env.run(until=cluster.finished)
    return RawRun(
        cfg,
        reqs,
        order,
        cluster.log,
        cluster.tbt,
        cluster.replicas,
        num_blocks,
        cluster.overloaded,
        env.now,
        cluster.stopped_early,
        cluster.capped,
    )
