"""Queueing sanity, metrics, overload and the fast path (simserve.sim)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from simserve.sim import SimConfig, build_result, simulate
from simserve.sim.histogram import LogHistogram
from simserve.sim.perfetto import chrome_trace
from simserve.sim.testing import ConstantTimer, LinearTimer


@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_single_server_with_constant_service_matches_md1(rho):
    # One-token prompts and outputs, max batch 1, request-level FCFS: each request is one iteration of s.
    s, n = 1.0, 60_000
    rng = np.random.default_rng(1)
    arrived = np.cumsum(rng.exponential(s / rho, n))
    ones = np.ones(n, dtype=np.int64)
    cfg = SimConfig(policy="fcfs", max_batch=1, max_model_len=16, sched_delay_slo_s=1e9, overload_wait_s=1e9)
    res = build_result(simulate(ones, ones, arrived, ConstantTimer(s), 10, cfg))
    r = res.requests.iloc[n // 10 :]  # past the warm-up from an empty system
    wait = (r.scheduled_at_s - r.arrived_at_s).mean()
    mu = 1 / s
    assert wait == pytest.approx(rho / (2 * mu * (1 - rho)), rel=0.06)  # Pollaczek–Khinchine for M/D/1
    assert (r.completed_at_s - r.scheduled_at_s).to_numpy() == pytest.approx(s)


def test_histogram_quantiles_are_within_a_tenth_of_a_percent():
    rng = np.random.default_rng(0)
    x = rng.lognormal(-3, 1, 50_000)
    h = LogHistogram()
    h.add_many(x[:25_000])
    for v in x[25_000:30_000]:
        h.add(float(v))
    h.add_many(x[30_000:40_000:2], weight=2.0)  # weighted samples stand for repeated ones
    ref = np.concatenate([x[:30_000], np.repeat(x[30_000:40_000:2], 2)])
    for q in (0.5, 0.9, 0.99):
        assert h.quantile(q) == pytest.approx(np.quantile(ref, q, method="lower"), rel=2.5e-3)
    assert h.total == len(ref)
    h.add(0.0)  # zeros rank first
    qs = (0.0, 1e-9, 0.5, 0.9, 0.99, 1.0)
    assert h.quantiles(qs) == [h.quantile(q) for q in qs]  # one cumulative sum, the same answers


def test_a_steady_decode_run_has_one_row_per_iteration():
    args = (np.array([600]), np.array([300]), np.array([0.0]), LinearTimer(0.01, 1e-5, 1e-6), 1000)
    res = build_result(simulate(*args, SimConfig(budget=256)))
    assert len(res.iterations) == 3 + 299 and (res.iterations.num_iterations == 1).all()
    assert res.summary.num_iterations == 302


def test_tbt_counts_every_gap_including_stalls_and_not_the_first_token():
    # vLLM: request 1's prefill stalls request 0's decodes for one iteration.
    res = build_result(
        simulate(
            np.array([10, 10]),
            np.array([4, 2]),
            np.array([0.0, 0.015]),
            ConstantTimer(0.01),
            100,
            SimConfig(policy="vllm", stretch=False),
        )
    )
    r0 = res.requests.iloc[0]
    assert r0.tbt_max_s == pytest.approx(0.02)  # the stall doubles one gap
    assert r0.tbt_mean_s == pytest.approx((0.01 + 0.02 + 0.01) / 3)
    assert res.tbt.total == 3 + 1  # (4 − 1) + (2 − 1) gaps


def test_far_beyond_capacity_stops_early_and_says_overloaded():
    n = 5000
    rng = np.random.default_rng(0)
    ones = np.full(n, 2000)
    res = build_result(
        simulate(
            ones,
            np.full(n, 200),
            np.cumsum(rng.exponential(0.01, n)),
            LinearTimer(0.02, 1e-4, 1e-8),
            2000,
            SimConfig(max_model_len=4096),
        )
    )
    s = res.summary
    assert s.overloaded and s.completed < n / 10
    assert s.duration_s < 70  # stopped once the queue outgrew the scheduling-delay SLO for good


def test_pipeline_bubbles_are_reported_and_stages_alternate():
    # PP 2, one request: its tokens go through both stages in turn, so each stage idles half the time.
    res = build_result(
        simulate(
            np.array([16]),
            np.array([50]),
            np.array([0.0]),
            ConstantTimer(0.01, num_stages=2),
            100,
            SimConfig(),
        )
    )
    s = res.summary
    assert s.stage_busy == pytest.approx((0.5, 0.5), abs=0.02)
    assert s.stage_bubble == pytest.approx((0.5, 0.5), abs=0.02)
    assert res.requests.completed_at_s[0] == pytest.approx(50 * 0.02)


def test_chrome_trace_has_a_track_per_stage_and_caps_events():
    res = build_result(
        simulate(
            np.full(30, 100),
            np.full(30, 20),
            np.linspace(0, 1, 30),
            ConstantTimer(0.01, num_stages=2),
            1000,
            SimConfig(num_replicas=2),
        )
    )
    doc = chrome_trace(res.iterations)
    names = {(e["pid"], e.get("tid")) for e in doc["traceEvents"] if e["ph"] == "M"}
    assert names == {(0, None), (1, None), (0, 0), (0, 1), (1, 0), (1, 1)}
    assert sum(e["ph"] == "X" for e in doc["traceEvents"]) == len(res.iterations)
    small = chrome_trace(res.iterations, max_events=10)
    assert sum(e["ph"] == "X" for e in small["traceEvents"]) <= 10
    assert small["otherData"]["sampled_every"] > 1
    json.dumps(doc)
