"""The autoscaler: a cluster-level process that adds and removes replicas during a run (`--autoscale
MIN:MAX`).

Written once for both models. The SimPy reference runs it as a process (cluster.Cluster.autoscaler); the
compiled core returns to Python at its event (core_run.drive, code SCALE) and calls the same `wake`. Either
way `wake(now, loads, arrived, finished_at)` is called at the time it asked for and answers when it wants to
be woken next: at its next adjustment interval, or earlier when a cold start ends.

A run has MAX replicas in the model; each is in one phase:
  - inactive: no GPU held (counts no GPU-hours), gets no requests;
  - starting: its cold start (cold_start.py: weights, compile, CUDA graphs, engine start) runs until
    `ready_at`; GPU held, no requests yet;
  - active: the router sends it requests (`serving()`);
  - draining: scaled down, takes no new requests and leaves (inactive) once its last request finished
    (a vLLM pod's graceful shutdown: it stops accepting and finishes what it holds). It is noticed at the next
    wake; its GPU time ends at its last completion (`finished_at`), exactly.
Scaling up takes the lowest-numbered inactive replicas; scaling down first cancels cold starts (the youngest
first), then drains the active replica with the fewest outstanding requests (ties: the highest index):
Kubernetes' ReplicaSet deletes not-ready pods before ready ones (controller_utils.go, ActivePods ordering).
At least one replica stays active, so every arriving request has somewhere to go.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from simserve.errors import SimserveError
from simserve.sim.scale_policies import DEFAULT_INTERVAL_S, POLICIES, Load, View, make_policy

INACTIVE, STARTING, ACTIVE, DRAINING = 0, 1, 2, 3


@dataclass(frozen=True)
class AutoscaleConfig:
    """`--autoscale MIN:MAX` and its knobs; `initial` is `--replicas`, active at t = 0 (no cold start)."""

    min_replicas: int
    max_replicas: int
    policy: str = "utilization"
    initial: int = 1
    interval_s: float | None = None  # None: the policy's source's default (scale_policies.DEFAULT_INTERVAL_S)
    cold_start_s: float = 0.0  # a new replica's start-up (cold_start.py, or --cold-start-s)
    target: float | None = (
        None  # utilization: the KV-cache usage to hold (None: scale_policies.KV_USAGE_TARGET)
    )
    capacity_qps: float | None = None  # slo: one replica's capacity at the SLO

    @property
    def interval(self) -> float:
        return DEFAULT_INTERVAL_S[self.policy] if self.interval_s is None else self.interval_s

    def validate(self) -> AutoscaleConfig:
        lo, hi = self.min_replicas, self.max_replicas
        if lo < 1:
            raise SimserveError(
                f"--autoscale {lo}:{hi}: the minimum must be at least 1 replica (Kubernetes' HPA "
                f"and Dynamo's planner keep one; scale to zero is not modelled): use 1:{hi}"
            )
        if lo > hi:
            raise SimserveError(
                f"--autoscale {lo}:{hi}: the minimum exceeds the maximum; give MIN:MAX with "
                f"MIN <= MAX, e.g. {hi}:{lo}"
            )
        if self.policy not in POLICIES:
            raise SimserveError(
                f"unknown --scale-policy {self.policy!r}; choose one of {', '.join(POLICIES)}"
            )
        if not lo <= self.initial <= hi:
            raise SimserveError(
                f"--replicas {self.initial} is the autoscaler's starting count and must lie in "
                f"--autoscale {lo}:{hi}; give --replicas {lo}"
            )
        if not (self.interval > 0 and math.isfinite(self.interval)):
            raise SimserveError(f"--scale-interval must be positive seconds, got {self.interval_s}")
        if not (self.cold_start_s >= 0 and math.isfinite(self.cold_start_s)):
            raise SimserveError(f"--cold-start-s must be non-negative seconds, got {self.cold_start_s}")
        if self.target is not None and not 0 < self.target <= 1:
            raise SimserveError(f"--scale-target is a KV-cache usage in (0, 1], e.g. 0.5; got {self.target}")
        if self.target is not None and self.policy != "utilization":
            raise SimserveError(
                f"--scale-target is the utilization policy's; --scale-policy {self.policy} does not "
                "read it: drop it, or use --scale-policy utilization"
            )
        if self.policy == "slo" and not (
            self.capacity_qps is not None and self.capacity_qps > 0 and math.isfinite(self.capacity_qps)
        ):
            raise SimserveError(
                f"--replica-capacity must be a positive request rate, got {self.capacity_qps}"
            )
        return self


def parse_autoscale(text: str) -> tuple[int, int]:
    """MIN:MAX as two integers, or one line saying what is wrong."""
    parts = text.split(":")
    try:
        lo, hi = (int(p) for p in parts) if len(parts) == 2 else (None, None)
    except ValueError:
        lo = hi = None
    if lo is None or hi is None:
        raise SimserveError(f"--autoscale takes MIN:MAX replica counts, e.g. 1:8; got {text!r}")
    return lo, hi


class Autoscaler:
    """The controller: replica phases, the policy's decisions at each interval, and the record of both."""

    def __init__(self, config: AutoscaleConfig, context_length: int):
        self.config = config
        self.interval = config.interval
        self.context_length = context_length
        n = config.max_replicas
        self.phase = [ACTIVE if i < config.initial else INACTIVE for i in range(n)]
        self.ready_at = [math.inf] * n
        self.held_since = [0.0 if i < config.initial else math.nan for i in range(n)]
        self.spans: list[tuple[int, float, float]] = []  # (replica, GPU held from, to): finished allocations
        self.rows: list[tuple] = []  # replicas.csv (scale_report.COLUMNS)
        self.policy = make_policy(config.policy, config.target, config.capacity_qps)
        self.next_decision = self.interval
        self.last_decision, self.last_arrived = 0.0, 0
        self.version = 0  # bumped whenever the serving set changes (the core copies it then)

    # -- what the cluster asks -------------------------------------------------------------------------------
    def serving(self) -> list[int]:
        """The replicas the router may send requests to, by index."""
        return [i for i, p in enumerate(self.phase) if p == ACTIVE]

    def wake(
        self, now: float, loads: Sequence[Load], arrived: int, finished_at: Callable[[int], float]
    ) -> float:
        """Advance to `now` (cold starts that ended, drains that emptied, the policy's decision when one is
        due); returns the time of the next wake. `loads` has one Load per replica (all MAX), `arrived` counts
        the requests routed so far, `finished_at(i)` is replica i's last completion time."""
        before = self.version
        for i, p in enumerate(self.phase):
            if p == STARTING and self.ready_at[i] <= now:
                self.phase[i], self.ready_at[i] = ACTIVE, math.inf
                self.version += 1
            elif p == DRAINING and loads[i].outstanding == 0:
                self._release(i, max(self.held_since[i], finished_at(i)))
        if now >= self.next_decision:
            self._decide(now, loads, arrived)
            self.next_decision = now + self.interval
        elif self.version != before:
            self._record(now, "ready", None, math.nan)
        return min(self.next_decision, *self.ready_at)

    # -- decisions -------------------------------------------------------------------------------------------
    def _decide(self, now: float, loads: Sequence[Load], arrived: int) -> None:
        c = self.config
        view = View(
            active=[loads[i] for i in self.serving()],
            starting=self.phase.count(STARTING),
            arrivals=arrived - self.last_arrived,
            elapsed_s=now - self.last_decision,
            min_replicas=c.min_replicas,
            max_replicas=c.max_replicas,
            context_length=self.context_length,
            draining=self.phase.count(DRAINING),
        )
        wanted, metric = self.policy.desired(now, view)
        self.last_decision, self.last_arrived = now, arrived
        if wanted is not None:
            self._scale_to(now, wanted, loads)
        self._record(now, "decision", wanted, metric)

    def _scale_to(self, now: float, wanted: int, loads: Sequence[Load]) -> None:
        current = self.phase.count(ACTIVE) + self.phase.count(STARTING)
        while current < wanted and INACTIVE in self.phase:  # cold starts, lowest index first
            i = self.phase.index(INACTIVE)
            self.phase[i], self.held_since[i] = STARTING, now
            self.ready_at[i] = now + self.config.cold_start_s
            current += 1
        while current > wanted:
            starting = [i for i, p in enumerate(self.phase) if p == STARTING]
            if starting:  # cancel the youngest cold start: its GPU is given back now
                i = max(starting, key=lambda j: (self.ready_at[j], j))
                self._release(i, now)
            else:
                active = self.serving()
                if len(active) <= 1:
                    break
                i = min(active, key=lambda j: (loads[j].outstanding, -j))
                self.phase[i] = DRAINING
                self.version += 1
                if loads[i].outstanding == 0:
                    self._release(i, now)
            current -= 1

    def _release(self, i: int, at: float) -> None:
        self.spans.append((i, self.held_since[i], at))
        self.phase[i], self.ready_at[i], self.held_since[i] = INACTIVE, math.inf, math.nan
        self.version += 1

    def _record(self, now: float, event: str, wanted: int | None, metric: float) -> None:
        p = self.phase
        self.rows.append(
            (
                now,
                event,
                p.count(ACTIVE),
                p.count(STARTING),
                p.count(DRAINING),
                -1 if wanted is None else wanted,
                metric,
            )
        )

    def held(self, end: float) -> list[tuple[int, float, float]]:
        """Every allocation (replica, from, to), those still held at the run's `end` closed there."""
        open_ = [(i, t, end) for i, t in enumerate(self.held_since) if not math.isnan(t)]
        return sorted(self.spans + open_)


def replica_load(state) -> Load:
    """A reference replica's (state.ReplicaState) report; the core's Core.scale_loads reports the same."""
    r = state.reqs
    queued = 0
    for rid in state.waiting:
        queued += int(r.prompt[rid] - r.computed[rid])
    kv = state.kv
    return Load(state.outstanding, len(state.waiting), queued, kv.num_blocks - kv.free, kv.num_blocks)


def last_completion(reqs, i: int) -> float:
    """The last completion time of the requests replica `i` served (-inf when it served none)."""
    done = reqs.completed[reqs.replica == i]
    done = done[done == done]
    return float(done.max()) if len(done) else -math.inf
