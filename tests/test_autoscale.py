"""The autoscaler (sim/autoscale.py, sim/scale_policies.py): each policy's rule on hand-made views, the
controller's phases (cold start, drain, GPU time), and whole runs whose rate steps up and down."""

from __future__ import annotations

import math

import numpy as np
import pytest

from simserve.errors import SimserveError
from simserve.sim import SimConfig, simulate
from simserve.sim.autoscale import ACTIVE, DRAINING, INACTIVE, STARTING, AutoscaleConfig, Autoscaler
from simserve.sim.scale_policies import Load, Queue, Slo, Utilization, View
from simserve.sim.testing import ConstantTimer


def _load(kv_used=0, outstanding=0, queued=0, total=100) -> Load:
    return Load(outstanding, 0, queued, kv_used, total)


def _view(active, starting=0, arrivals=0, elapsed=1.0, lo=1, hi=8, ctx=1000, draining=0) -> View:
    return View(active, starting, arrivals, elapsed, lo, hi, ctx, draining)


# -- utilization (HPA) ---------------------------------------------------------------------------------------
def test_hpa_scales_by_the_ratio_of_usage_to_target():
    # the HPA docs' example: 50 replicas at 90% of a 75% target -> 60
    hpa = Utilization(target=0.75)
    assert hpa.desired(0.0, _view([_load(90)] * 50, hi=100))[0] == 60


def test_hpa_holds_within_its_tolerance_and_scales_down_only_after_its_window():
    hpa = Utilization(target=0.5)
    assert hpa.desired(0.0, _view([_load(54)] * 4))[0] == 4  # 8% above target: within 10%
    assert hpa.desired(15.0, _view([_load(10)] * 4))[0] == 4  # wants 1, but 4 was recommended 15 s ago
    assert hpa.desired(301.0, _view([_load(10)] * 4))[0] == 1  # the window has passed


def test_hpa_counts_starting_replicas_at_zero_when_scaling_up():
    # 2 ready at 0.6 of a 0.5 target (ratio 1.2), 2 starting at 0: 1.2 / 4 / 0.5 = 0.6 would reverse: hold 4
    assert Utilization(target=0.5).desired(0.0, _view([_load(60)] * 2, starting=2))[0] == 4
    # 2 ready at 0.9 (ratio 1.8), 1 starting at 0: 1.8 / 3 / 0.5 = 1.2 -> ceil(1.2 x 3) = 4
    assert Utilization(target=0.5).desired(0.0, _view([_load(90)] * 2, starting=1))[0] == 4
    # ...where without the starting one HPA would have asked ceil(1.8 x 2) = 4 for the ready two alone
    assert Utilization(target=0.5).desired(0.0, _view([_load(90)] * 2))[0] == 4


def test_hpa_scale_up_is_limited_to_double_or_four_more():
    assert Utilization(target=0.1).desired(0.0, _view([_load(100)] * 2, hi=100))[0] == 6  # 2 + 4
    assert Utilization(target=0.1).desired(0.0, _view([_load(100)] * 10, hi=100))[0] == 20  # 2 x 10


# -- queue (Dynamo's load-based planner) ---------------------------------------------------------------------
def test_queue_adds_one_when_any_replica_queues_a_context_and_removes_one_when_all_are_nearly_empty():
    q = Queue()
    assert q.desired(0.0, _view([_load(queued=1000), _load()]))[0] == 3
    assert q.desired(0.0, _view([_load(queued=99), _load(queued=50)]))[0] == 1
    assert q.desired(0.0, _view([_load(queued=100), _load()]))[0] is None  # 0.1 is not below 0.1
    assert q.desired(0.0, _view([_load(queued=5000)], starting=1))[0] is None  # scaling in progress


def test_queue_observes_while_a_replica_drains_and_scales_down_through_starting_ones():
    """Dynamo 1.6.1 (state_machine.py, advance_load; its Kubernetes connector's inventory): a terminating pod
    blocks the load planner; pending starts block only scale-ups, and a scale-down target cancels them."""
    q = Queue()
    assert q.desired(0.0, _view([_load(queued=5000)], draining=1))[0] is None
    assert q.desired(0.0, _view([_load(queued=10)], starting=2))[0] == 1  # MIN: both starts cancelled
    assert q.desired(0.0, _view([_load(queued=10)] * 2, starting=1))[0] == 1  # the start and a serving one
    assert q.desired(0.0, _view([_load(queued=10)] * 2, starting=1, lo=2))[0] == 2  # the start only
    assert q.desired(0.0, _view([_load(queued=10)] * 2, lo=2))[0] is None  # at MIN, nothing to cancel


# -- slo (Dynamo's SLA planner) ------------------------------------------------------------------------------
def test_slo_sizes_to_the_predicted_rate_over_one_replicas_capacity():
    slo = Slo(capacity_qps=3.0)
    assert slo.desired(0.0, _view([_load()], arrivals=0, elapsed=10.0))[0] == 1  # idle start: min
    assert slo.desired(10.0, _view([_load()], arrivals=70, elapsed=10.0))[0] == 3  # 7 qps / 3 -> 3
    assert slo.desired(20.0, _view([_load()], arrivals=200, elapsed=10.0, hi=5))[0] == 5  # capped at MAX


def test_slo_moves_at_most_eight_replicas_and_does_not_scale_up_while_replicas_start():
    slo = Slo(capacity_qps=1.0)
    assert slo.desired(0.0, _view([_load()], arrivals=200, elapsed=10.0, hi=100))[0] == 9  # wants 20: 1 + 8
    # wants 5: 30 - 8
    assert slo.desired(10.0, _view([_load()] * 30, arrivals=50, elapsed=10.0, hi=100))[0] == 22
    # wants 4
    assert slo.desired(20.0, _view([_load()] * 2, starting=3, arrivals=40, elapsed=10.0))[0] is None
    assert slo.desired(30.0, _view([_load()] * 2, starting=3, arrivals=20, elapsed=10.0))[0] == 2  # cancels 3


# -- the controller ------------------------------------------------------------------------------------------
def _loads(n, outstanding=0):
    return [_load(outstanding=outstanding)] * n


def test_a_new_replica_serves_only_after_its_cold_start_and_a_drained_one_leaves_at_its_last_completion():
    cfg = AutoscaleConfig(1, 3, "slo", initial=1, interval_s=10.0, cold_start_s=25.0, capacity_qps=1.0)
    a = Autoscaler(cfg.validate(), 1000)
    assert a.wake(0.0, _loads(3), 0, lambda i: -math.inf) == 10.0
    assert a.wake(10.0, _loads(3), 25, lambda i: -math.inf) == 20.0  # 2.5 qps -> 3 replicas: two cold starts
    assert a.phase == [ACTIVE, STARTING, STARTING] and a.serving() == [0]
    assert a.wake(20.0, _loads(3), 50, lambda i: -math.inf) == 30.0
    assert a.wake(30.0, _loads(3), 75, lambda i: -math.inf) == 35.0  # the cold starts end at 35
    assert a.wake(35.0, _loads(3), 80, lambda i: -math.inf) == 40.0
    assert a.serving() == [0, 1, 2]
    # the rate falls to 1 qps: two replicas drain, the fewest outstanding first (ties: the highest index)
    busy = [_load(outstanding=3), _load(outstanding=1), _load(outstanding=1)]
    a.wake(40.0, busy, 85, lambda i: -math.inf)
    assert a.phase == [ACTIVE, DRAINING, DRAINING] and a.serving() == [0]
    a.wake(50.0, [busy[0], _load(), busy[2]], 90, lambda i: 44.5)  # replica 1 emptied at 44.5
    assert a.phase == [ACTIVE, INACTIVE, DRAINING]
    assert (1, 35.0 - 25.0, 44.5) in a.held(60.0)  # held from its decision at 10 s to its last completion
    assert a.held(60.0)[0] == (0, 0.0, 60.0)


def test_scaling_down_cancels_a_cold_start_before_draining_a_serving_replica():
    cfg = AutoscaleConfig(1, 2, "slo", initial=1, interval_s=10.0, cold_start_s=100.0, capacity_qps=1.0)
    a = Autoscaler(cfg.validate(), 1000)
    a.wake(10.0, _loads(2), 20, lambda i: -math.inf)  # 2 qps -> 2
    a.wake(20.0, _loads(2), 20, lambda i: -math.inf)  # 0 qps -> 1: the start is cancelled
    assert a.phase == [ACTIVE, INACTIVE] and a.held(30.0) == [(0, 0.0, 30.0), (1, 10.0, 20.0)]


@pytest.mark.parametrize(
    ("cfg", "says"),
    [
        (AutoscaleConfig(3, 2), "the minimum exceeds the maximum"),
        (AutoscaleConfig(0, 2), "at least 1 replica"),
        (AutoscaleConfig(1, 2, "magic"), "unknown --scale-policy"),
        (AutoscaleConfig(1, 2, initial=3), "--replicas 3"),
        (AutoscaleConfig(1, 2, "slo"), "--replica-capacity"),
        (AutoscaleConfig(1, 2, "queue", target=0.5), "--scale-target"),
        (AutoscaleConfig(1, 2, cold_start_s=-1.0), "--cold-start-s"),
    ],
)
def test_bad_autoscaler_settings_are_one_line_naming_them(cfg, says):
    with pytest.raises(SimserveError, match=says):
        cfg.validate()


# -- whole runs ----------------------------------------------------------------------------------------------
def step_arrivals(rates: list[tuple[float, float]], seed: int = 0) -> np.ndarray:
    """Poisson arrivals at each (rate qps, for seconds) in turn."""
    rng, out, t0 = np.random.default_rng(seed), [], 0.0
    for qps, seconds in rates:
        gaps = rng.exponential(1.0 / qps, int(qps * seconds * 2) + 10)
        times = t0 + np.cumsum(gaps)
        out.append(times[times < t0 + seconds])
        t0 += seconds
    return np.concatenate(out)


def _step_run(policy: str, step_s: float = 0.02, **kw):
    arrived = step_arrivals([(2.0, 60.0), (20.0, 60.0), (2.0, 400.0)])
    n = len(arrived)
    rng = np.random.default_rng(1)
    cfg = SimConfig(policy="sarathi", num_replicas=6, max_model_len=2048, stop_when_overloaded=False)
    scale = AutoscaleConfig(1, 6, policy, initial=1, cold_start_s=5.0, **kw)
    return simulate(
        rng.integers(50, 400, n),
        rng.integers(20, 80, n),
        arrived,
        ConstantTimer(step_s),
        2000,
        cfg,
        autoscale=scale,
    )


@pytest.mark.parametrize(
    ("policy", "kw"),
    [
        ("utilization", {"target": 0.05}),
        ("queue", {"interval_s": 2.0, "step_s": 0.2}),  # slow steps: 20 qps queues prompts on one replica
        ("slo", {"capacity_qps": 4.0, "interval_s": 20.0}),
    ],
)
def test_every_policy_follows_a_rate_step_up_and_back_down(policy, kw):
    raw = _step_run(policy, **kw)
    rows = raw.scaler.rows
    peak = max(r[2] for r in rows)
    assert peak >= 2, rows  # it scaled up during the 20 qps minute
    assert rows[-1][2] < peak  # and back down after it
    served = np.bincount(raw.reqs.replica[raw.reqs.replica >= 0], minlength=6)
    assert (served > 0).sum() >= 2
    # no request went to a replica before it was ready or after it started draining: each started after
    # its replica's allocation began plus the cold start (replica 0 serves from t = 0)
    held = raw.scaler.held(raw.end_time)
    for i in range(1, 6):
        mine = raw.reqs.arrived[raw.reqs.replica == i]
        spans = [(a + 5.0, b) for j, a, b in held if j == i]
        assert all(any(a <= t <= b for a, b in spans) for t in mine)


@pytest.mark.parametrize("core", ["reference", ""])
@pytest.mark.parametrize("policy", ["utilization", "queue"])
def test_an_autoscaler_that_cannot_move_gives_the_fixed_runs_results(monkeypatch, core, policy):
    """--replicas K --autoscale K:K is the fixed K (what benchmarks/autoscale_step.py's static rows rely
    on)."""
    monkeypatch.setenv("SIMSERVE_CORE", core)
    arrived = step_arrivals([(2.0, 30.0), (20.0, 30.0), (2.0, 30.0)])
    n = len(arrived)
    rng = np.random.default_rng(2)
    prompt, output = rng.integers(50, 400, n), rng.integers(20, 80, n)
    cfg = SimConfig(
        policy="sarathi", num_replicas=3, max_model_len=2048, stop_when_overloaded=False, router="lor"
    )
    timer = ConstantTimer(0.05)
    fixed = simulate(prompt, output, arrived, timer, 300, cfg)
    pinned = simulate(
        prompt,
        output,
        arrived,
        timer,
        300,
        cfg,
        autoscale=AutoscaleConfig(
            3, 3, policy, initial=3, interval_s=1.0, target=0.01 if policy == "utilization" else None
        ),
    )
    assert len(pinned.scaler.rows) > 50  # it decided, every second, and could not move
    for name in ("scheduled", "first_token", "completed", "replica", "preemptions"):
        assert np.array_equal(getattr(fixed.reqs, name), getattr(pinned.reqs, name), equal_nan=True), name
    assert fixed.end_time == pinned.end_time and len(fixed.log) == len(pinned.log)


def test_a_cold_start_is_its_parts_with_the_weights_read_at_the_stores_measured_rate():
    from dataclasses import replace

    from simserve.memory import weights_bytes_per_gpu
    from simserve.sim.cold_start import CAPTURE_S, COMPILE_S, ENGINE_S, cold_start
    from simserve.sim.scenario import Scenario

    s = Scenario(model="llama-3-8b", gpu="h100", policy="vllm-v1", vllm_worker=True)
    s3, gp3 = cold_start(s, "s3"), cold_start(s, "gp3")
    assert s3.weights_s == pytest.approx(weights_bytes_per_gpu(s.deployment()) / (3.51 * 2**30))
    assert 4.0 < s3.weights_s < 4.5  # Llama-3-8B: ~15 GiB of bf16 weights at S3's 3.51 GiB/s
    assert gp3.weights_s / s3.weights_s == pytest.approx(3.51 / 1.03)
    assert (s3.compile_s, s3.engine_s) == (COMPILE_S, ENGINE_S) and s3.capture_s == pytest.approx(CAPTURE_S)
    assert s3.total_s == pytest.approx(s3.weights_s + s3.compile_s + s3.capture_s + s3.engine_s)
    eager = cold_start(replace(s, enforce_eager=True), "s3")  # no graphs, no compilation
    assert (eager.compile_s, eager.capture_s) == (0.0, 0.0) and eager.total_s == pytest.approx(
        s3.weights_s + ENGINE_S
    )
    with pytest.raises(SimserveError, match="unknown storage"):
        cold_start(s, "floppy")
