"""simserve's Dynamo-derived autoscaler policies (sim/scale_policies.py: queue, slo) against Dynamo 1.6.1's
own planner code (dynamo.planner.core.state_machine.PlannerScalingState).

A simserve autoscaled run records what its policy saw at each decision (each serving replica's queued prompt
tokens, the replicas starting and draining, the requests since the last decision) and what it decided;
dynamo_driver.py replays the same sequence on Dynamo's planner in Dynamo's environment
(SIMSERVE_DYNAMO_PYTHON, default .venv-dynamo; tools/dynamo_env.sh builds it). Every decision must leave the
same replica target: a decision's own count, or, for no decision, the replicas held (serving + starting).
Hand-made sequences add the cases a run rarely meets (a start cancelled by a scale-down, the throughput
planner's step cap).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from simserve.sim import SimConfig, autoscale, simulate
from simserve.sim.autoscale import AutoscaleConfig
from simserve.sim.scale_policies import Load, Queue, Slo, View
from simserve.sim.testing import ConstantTimer

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
DYNAMO_PYTHON = Path(os.environ.get("SIMSERVE_DYNAMO_PYTHON") or ROOT / ".venv-dynamo" / "bin" / "python")
CONTEXT = 2048


class Recording:
    """A policy that writes down what it saw and the replica target its answer leaves."""

    def __init__(self, policy):
        self.policy, self.steps, self.targets, self.answers = policy, [], [], []

    def desired(self, now: float, view: View):
        wanted, metric = self.policy.desired(now, view)
        step = {
            "queued": [load.queued_tokens for load in view.active],
            "starting": view.starting,
            "draining": view.draining,
            "arrivals": view.arrivals,
            "elapsed_s": view.elapsed_s,
        }
        self.steps.append(step)
        self.targets.append(view.current if wanted is None else wanted)
        self.answers.append(wanted)
        return wanted, metric


def need_dynamo() -> None:
    if not DYNAMO_PYTHON.exists():
        pytest.skip(
            f"no Dynamo 1.6.1 planner environment at {DYNAMO_PYTHON}: build it with `bash "
            "tools/dynamo_env.sh`"
        )


def record_run(monkeypatch, policy: str, rates, **kw) -> Recording:
    """An autoscaled run (1:6 replicas, 5 s cold starts) of Poisson arrivals at each (qps, seconds) in
    turn."""
    need_dynamo()  # before the run: without Dynamo's environment there is nothing to compare it with
    made: list[Recording] = []
    step_s = kw.pop("step_s", 0.2)
    real = autoscale.make_policy
    monkeypatch.setattr(autoscale, "make_policy", lambda *a: made.append(Recording(real(*a))) or made[-1])
    monkeypatch.setenv("SIMSERVE_CORE", "reference")
    rng, t0, arrived = np.random.default_rng(0), 0.0, []
    for qps, seconds in rates:
        times = t0 + np.cumsum(rng.exponential(1.0 / qps, int(qps * seconds * 2) + 10))
        arrived.append(times[times < t0 + seconds])
        t0 += seconds
    arrived = np.concatenate(arrived)
    n = len(arrived)
    cfg = SimConfig(policy="sarathi", num_replicas=6, max_model_len=CONTEXT, stop_when_overloaded=False)
    scale = AutoscaleConfig(1, 6, policy, initial=1, cold_start_s=5.0, **kw)
    simulate(
        rng.integers(50, 400, n),
        rng.integers(20, 80, n),
        arrived,
        ConstantTimer(step_s),
        2000,
        cfg,
        autoscale=scale,
    )
    (rec,) = made
    return rec


def replay(rec: Recording, policy: str, lo: int, hi: int, capacity_rps: float = 0.0) -> list[int]:
    need_dynamo()
    w = {
        "policy": policy,
        "min": lo,
        "max": hi,
        "context_length": CONTEXT,
        "capacity_rps": capacity_rps,
        "steps": rec.steps,
    }
    proc = subprocess.run(
        [str(DYNAMO_PYTHON), str(HERE / "dynamo_driver.py")],
        input=json.dumps(w),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    answers = json.loads(proc.stdout)
    return [held(s) if a is None else a for s, a in zip(rec.steps, answers, strict=True)]


def held(step: dict) -> int:
    """What no decision holds: the serving replicas and those starting (draining ones are leaving)."""
    return len(step["queued"]) + step["starting"]


def moves(rec: Recording) -> tuple[int, int]:
    """How many decisions raised, and how many lowered, the replicas held."""
    pairs = [(t, held(s)) for t, s in zip(rec.targets, rec.steps, strict=True)]
    return sum(t > h for t, h in pairs), sum(t < h for t, h in pairs)


def diffs(rec: Recording, theirs: list[int]) -> list:
    return [
        (i, rec.steps[i], m, t) for i, (m, t) in enumerate(zip(rec.targets, theirs, strict=True)) if m != t
    ]


def replay_views(policy, views: list[View]) -> Recording:
    rec = Recording(policy)
    for k, view in enumerate(views):
        rec.desired(float(k), view)
    return rec


def _view(queued, starting=0, draining=0, arrivals=0, elapsed=180.0, lo=1, hi=6) -> View:
    return View(
        [Load(0, 0, q, 0, 100) for q in queued], starting, arrivals, elapsed, lo, hi, CONTEXT, draining
    )


# -- queue: the load-based planner ---------------------------------------------------------------------------
def test_the_queue_policy_decides_as_dynamos_load_planner_on_a_recorded_run(monkeypatch):
    rec = record_run(monkeypatch, "queue", [(2.0, 60.0), (20.0, 60.0), (2.0, 120.0)], interval_s=2.0)
    assert diffs(rec, replay(rec, "queue", 1, 6))[:5] == []
    # the run exercises what it checks: scale-ups, scale-downs, holds while replicas start and while one
    # drains
    ups, downs = moves(rec)
    assert ups and downs
    assert any(s["starting"] for s in rec.steps) and any(s["draining"] for s in rec.steps)


QUEUE_CASES = [
    _view([2100, 0]),  # one replica queues a whole context: one more
    _view([2048], hi=1),  # ...not past MAX
    _view([150, 10]),  # every one below a tenth: one fewer
    _view([205, 10]),  # one at a tenth: hold
    _view([10]),  # one replica: it stays
    _view(
        [10], starting=2
    ),  # quiet while two start: cancel them (one fewer than the serving one is below MIN)
    _view([10, 10], starting=1),  # one fewer than the serving two: cancels the start, drains one
    _view([3000], starting=1),  # busy while one starts: no second scale-up
    _view([10, 10], draining=1),  # a replica drains: observe only
    _view([3000], draining=1),
    _view([10, 10, 10], lo=3),  # at MIN
]


def test_the_queue_policy_decides_as_dynamos_load_planner_case_by_case():
    for lo, hi in ((1, 6), (3, 6), (1, 1)):
        views = [v for v in QUEUE_CASES if (v.min_replicas, v.max_replicas) == (lo, hi)]
        rec = replay_views(Queue(), views)
        assert diffs(rec, replay(rec, "queue", lo, hi)) == []


class WaitsForStarts(Queue):
    """simserve's earlier rule: no decision at all while a replica starts (Dynamo before pending startups)."""

    def desired(self, now, view):
        return (None, 0.0) if view.starting else super().desired(now, view)


def test_the_comparison_sees_a_rule_that_ignores_pending_starts():
    views = [v for v in QUEUE_CASES if (v.min_replicas, v.max_replicas) == (1, 6)]
    rec = replay_views(WaitsForStarts(), views)
    assert diffs(rec, replay(rec, "queue", 1, 6)) != []


# -- slo: throughput scaling, aggregated ---------------------------------------------------------------------
def test_the_slo_policy_decides_as_dynamos_throughput_planner_on_a_recorded_run(monkeypatch):
    rec = record_run(
        monkeypatch,
        "slo",
        [(2.0, 60.0), (20.0, 60.0), (2.0, 400.0)],
        capacity_qps=4.0,
        interval_s=4.0,
        step_s=0.02,
    )
    assert diffs(rec, replay(rec, "slo", 1, 6, capacity_rps=4.0))[:5] == []
    ups, downs = moves(rec)
    assert ups and downs
    assert any(s["starting"] for s in rec.steps)


def test_the_slo_policy_decides_as_dynamos_throughput_planner_case_by_case():
    rps = 2.0  # one replica's capacity; 180 s intervals: 360 requests fill one replica
    views = [
        _view([0], arrivals=0, hi=20),  # idle start: the leading zeros are not data
        _view([0], arrivals=700, hi=20),  # 3.9 rps -> 2
        _view([0] * 2, arrivals=5000, hi=20),  # 27.8 rps -> 14, at most 8 more than the 2 serving: 10
        _view([0] * 10, arrivals=0, hi=20),  # idle after traffic: a zero is data now -> MIN
        _view([0] * 2, starting=3, arrivals=2000, hi=20),  # wants 6 while 3 start: no scale-up
        _view([0] * 2, starting=3, arrivals=400, hi=20),  # wants 2 while 3 start: cancel them
        _view([0] * 2, starting=3, arrivals=100, hi=20),  # wants 1: cancel and drain one
        _view([0] * 2, draining=1, arrivals=1000, hi=20),  # a drain does not hold the throughput planner
        _view([0] * 4, arrivals=10000, hi=20),  # 55.6 rps -> 28, +8 -> 12
        _view([0] * 12, arrivals=10000, hi=20),  # 28 -> 20, MAX
    ]
    rec = replay_views(Slo(rps), views)
    assert diffs(rec, replay(rec, "slo", 1, 20, capacity_rps=rps)) == []
