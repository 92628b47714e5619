"""The autoscaler's policies: from what the replicas report to how many replicas the run should have.

Each policy is a small object with `desired(now, view) -> (replicas wanted or None, the metric it saw)`; the
controller (autoscale.py) calls it once per adjustment interval and applies the answer (cold starts, drains).
Each follows public code or documentation, cited where its constants are:

- utilization: Kubernetes' Horizontal Pod Autoscaler on a per-pod metric, here each replica's KV-cache usage
  (vLLM's `vllm:kv_cache_usage_perc`, what KServe's and the vLLM production stack's KEDA examples scale on):
  `desired = ceil(ready * mean usage / target)` with the 10% tolerance, pods without metrics yet (cold starts)
  counted at 0 when scaling up and at the target when scaling down, a 300 s scale-down stabilisation window
  (the highest recommendation of the last 300 s wins) and the default scale-up limit (double, or +4, per
  period). kubernetes/kubernetes pkg/controller/podautoscaler/replica_calculator.go (calcPlainMetricReplicas)
  and horizontal.go (stabilizeRecommendation, the default behaviour);
  kubernetes.io/docs/tasks/run-application/ horizontal-pod-autoscale/ ("Algorithm details", "Default
  Behavior": sync period 15 s, tolerance 0.1).
- queue: Dynamo's load-based planner, its easy-mode rule on queued prefill work, as Dynamo 1.6.1 runs it for a
  prefill pool (ai-dynamo/dynamo components/src/dynamo/planner/core/load_scaling.py, `_advance_load_single`
  and `_prefill_easy_decision`, throughput thresholds `_PREFILL_THROUGHPUT_SCALE_UP = 1.0`,
  `_PREFILL_THROUGHPUT_SCALE_DOWN = 0.1`): each serving replica's queued prompt tokens over the context
  length; one more than the serving replicas if any is at 1.0 or above; one fewer (not below MIN,
  `min_endpoint`) if every one is below 0.1 and more than one serves or one is starting. The replica inventory
  is what Dynamo's Kubernetes connector reports (connectors/kubernetes.py, `_get_worker_inventory_sync`):
  while a replica drains (a terminating pod) the deployment is unstable and the planner only observes
  (`_load_scaling_blocked`); while replicas start (pending startup) it may not scale up but may scale down,
  cancelling starts (state_machine.py, `advance_load` and `_startup_reduction`). Dynamo's guard against a
  scale-down that would trigger a scale-up (`_consolidation_safe_easy_target`: max ratio x ready / (ready - 1)
  >= 1.0) never fires with these thresholds (every ratio is below 0.1 and ready / (ready - 1) <= 2), so it is
  not written here. Interval 5 s (config/defaults.py, `load_adjustment_interval`). Dynamo's own rule for an
  aggregated pool (`_agg_easy_decision`, on KV usage) is not this one: simserve keeps the prefill rule, a
  queue signal beside HPA's KV-usage one. Checked against Dynamo 1.6.1's code:
  tests/conformance/test_dynamo_planner.py.
- slo: Dynamo's SLA planner, throughput scaling in aggregated mode (core/throughput_scaling.py,
  `_throughput_agg`): predict the next interval's requests, `desired = max(ceil(demand_rps / engine_rps),
  min_endpoint)`, at most `max_throughput_scaling_replicas` (8) away from the serving replicas per decision
  (`_cap_throughput_replicas`), at most MAX (the GPU budget, one GPU a replica); while replicas start, no
  scale-up (a lower target cancels starts). engine_rps is the capacity of one replica at the SLO (simserve
  measures it: its capacity search on one replica, or --replica-capacity). Predictor: Dynamo's
  `ConstantPredictor` (the next interval as the last; core/load/predictors.py), not its default ARIMA.
  Interval 180 s (`throughput_adjustment_interval`). Checked as the queue rule is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# HPA's defaults (kube-controller-manager flags and autoscaling/v2 HPAScalingRules defaults)
HPA_SYNC_PERIOD_S = 15.0  # --horizontal-pod-autoscaler-sync-period
HPA_TOLERANCE = 0.1  # --horizontal-pod-autoscaler-tolerance
HPA_SCALE_DOWN_WINDOW_S = 300.0  # behavior.scaleDown.stabilizationWindowSeconds
HPA_SCALE_UP_PODS = 4  # behavior.scaleUp.policies: Pods 4 or Percent 100 per 15 s, selectPolicy Max
# The KV-cache usage each replica should run at: the KEDA example's threshold for vLLM's
# vllm:gpu_cache_usage_perc (docs.cloudeka.ai, "Example: autoscaling vLLM with KEDA based on GPU KV cache
# usage": threshold '0.5', "start with a conservative threshold (e.g. 50%)"). HPA has no default target:
# --scale-target.
KV_USAGE_TARGET = 0.5
# Dynamo's planner (ai-dynamo/dynamo components/src/dynamo/planner/config/defaults.py, SLAPlannerDefaults)
DYNAMO_LOAD_INTERVAL_S = 5.0  # load_adjustment_interval
DYNAMO_THROUGHPUT_INTERVAL_S = 180.0  # throughput_adjustment_interval
QUEUE_SCALE_UP = 1.0  # load_scaling.py _PREFILL_THROUGHPUT_SCALE_UP: queued prompt tokens >= context length
QUEUE_SCALE_DOWN = 0.1  # _PREFILL_THROUGHPUT_SCALE_DOWN: queued < context length / 10
DYNAMO_THROUGHPUT_STEP = 8  # max_throughput_scaling_replicas: the most one throughput decision moves

POLICIES = ("utilization", "queue", "slo")
DEFAULT_INTERVAL_S = {
    "utilization": HPA_SYNC_PERIOD_S,
    "queue": DYNAMO_LOAD_INTERVAL_S,
    "slo": DYNAMO_THROUGHPUT_INTERVAL_S,
}


@dataclass(frozen=True)
class Load:
    """What one replica reports at a decision (its Prometheus metrics, in vLLM's terms)."""

    outstanding: int  # routed to it and not finished: running + waiting
    waiting: int  # vllm:num_requests_waiting
    queued_tokens: int  # prompt tokens of its waiting requests not computed yet
    kv_used: int  # KV blocks in use
    kv_total: int  # KV blocks in its pool

    @property
    def kv_usage(self) -> float:
        return self.kv_used / self.kv_total if self.kv_total else 0.0


@dataclass(frozen=True)
class View:
    """The cluster as a policy sees it at a decision."""

    active: list[Load]  # the replicas serving (ready), by index
    starting: int  # replicas in their cold start (pods not ready: no metrics yet)
    arrivals: int  # requests that arrived since the previous decision
    elapsed_s: float  # seconds since the previous decision
    min_replicas: int
    max_replicas: int
    context_length: int  # the engine's max model length (Dynamo's `context_length`)
    draining: int = 0  # replicas scaled down and still finishing their requests (terminating pods)

    @property
    def current(self) -> int:
        """The replica count the autoscaler set (HPA's currentReplicas, Dynamo's expected workers)."""
        return len(self.active) + self.starting


class Utilization:
    """HPA on each replica's KV-cache usage (module docstring)."""

    def __init__(
        self, target: float, tolerance: float = HPA_TOLERANCE, window_s: float = HPA_SCALE_DOWN_WINDOW_S
    ):
        self.target, self.tolerance, self.window_s = target, tolerance, window_s
        self.recommendations: list[tuple[float, int]] = []  # (time, replicas): the scale-down window's

    def desired(self, now: float, view: View) -> tuple[int | None, float]:
        usage = [load.kv_usage for load in view.active]
        mean = math.fsum(usage) / len(usage)
        current = view.current
        wanted = self._replicas(usage, view.starting, current)
        wanted = self._stabilise(now, wanted, current)
        # the default scale-up policies: at most double, or 4 more, per period (selectPolicy Max)
        wanted = min(wanted, max(2 * current, current + HPA_SCALE_UP_PODS))
        return min(max(wanted, view.min_replicas), view.max_replicas), mean

    def _replicas(self, usage: list[float], missing: int, current: int) -> int:
        """replica_calculator.go's calcPlainMetricReplicas: ready pods' usage, pods without metrics (starting)
        counted at 0 to scale up and at the target to scale down, never reversing the direction."""
        ratio = math.fsum(usage) / len(usage) / self.target
        if missing == 0:
            if abs(1.0 - ratio) <= self.tolerance:
                return current
            return math.ceil(ratio * len(usage))
        fill = self.target if ratio < 1.0 else 0.0
        new_ratio = math.fsum([*usage, *([fill] * missing)]) / (len(usage) + missing) / self.target
        if abs(1.0 - new_ratio) <= self.tolerance or (ratio < 1.0 < new_ratio) or (ratio > 1.0 > new_ratio):
            return current
        wanted = math.ceil(new_ratio * (len(usage) + missing))
        if (new_ratio < 1.0 and wanted > current) or (new_ratio > 1.0 and wanted < current):
            return current
        return wanted

    def _stabilise(self, now: float, wanted: int, current: int) -> int:
        """horizontal.go's stabilizeRecommendationWithBehaviors, scale-up window 0: scaling down goes no lower
        than the highest recommendation of the last `window_s` seconds."""
        self.recommendations = [(t, r) for t, r in self.recommendations if t > now - self.window_s]
        self.recommendations.append((now, wanted))
        if wanted >= current:
            return wanted
        return min(current, max(r for _, r in self.recommendations))


class Queue:
    """Dynamo's load-based rule on queued prefill work (module docstring)."""

    def desired(self, now: float, view: View) -> tuple[int | None, float]:
        ratios = [load.queued_tokens / view.context_length for load in view.active]
        worst, ready = max(ratios), len(view.active)
        if view.draining:  # Dynamo: "Scaling in progress ..., observing only"
            return None, worst
        if worst >= QUEUE_SCALE_UP:
            if view.starting:  # advance_load: no scale-up while replicas start
                return None, worst
            return min(ready + 1, view.max_replicas), worst
        if (ready > 1 or view.starting) and all(r < QUEUE_SCALE_DOWN for r in ratios):
            wanted = max(ready - 1, view.min_replicas)
            # _startup_reduction: a target that cancels no start is no decision
            return (None if wanted >= view.current else wanted), worst
        return None, worst


class Slo:
    """Dynamo's SLA planner, aggregated mode, constant predictor (module docstring)."""

    def __init__(self, capacity_qps: float):
        self.capacity_qps = capacity_qps
        self.last: float | None = None  # the ConstantPredictor's buffer: its last non-idle point

    def desired(self, now: float, view: View) -> tuple[int | None, float]:
        # BasePredictor.add_data_point skips the leading idle period (zeros before the first request)
        if view.arrivals or self.last is not None:
            self.last = float(view.arrivals)
        demand = (
            self.last or 0.0
        ) / view.elapsed_s  # predict_next(): the last interval's requests, per second
        ready = len(view.active)
        wanted = max(math.ceil(demand / self.capacity_qps), view.min_replicas)
        wanted = min(max(wanted, ready - DYNAMO_THROUGHPUT_STEP), ready + DYNAMO_THROUGHPUT_STEP)
        wanted = min(max(wanted, view.min_replicas), view.max_replicas)
        if view.starting and wanted > ready:  # no scale-up while replicas start
            return None, demand
        return wanted, demand


def make_policy(name: str, target: float | None, capacity_qps: float | None):
    if name == "utilization":
        return Utilization(KV_USAGE_TARGET if target is None else target)
    if name == "queue":
        return Queue()
    return Slo(float(capacity_qps))
