"""Arrival processes: seeding, rates against theory, Sarathi's clipping, gamma CV, replay and its errors."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simserve.errors import SimserveError
from simserve.workload import PROCESSES, arrival_times, load_trace
from simserve.workload.arrivals import replay_time_scale

SHARED = Path(__file__).parents[1].parent / "shared"
SYNTHETIC = ("poisson", "poisson-clipped", "gamma")


@pytest.mark.parametrize("process", SYNTHETIC)
def test_same_seed_same_arrivals(process):
    a = arrival_times(1000, qps=4.0, process=process, seed=7, cv=2.0)
    assert np.array_equal(a, arrival_times(1000, qps=4.0, process=process, seed=7, cv=2.0))
    assert not np.array_equal(a, arrival_times(1000, qps=4.0, process=process, seed=8, cv=2.0))
    assert a.dtype == np.float64 and len(a) == 1000


def test_poisson_uses_numpy_generator_and_starts_at_the_first_gap():
    times = arrival_times(5, qps=2.0, seed=11)
    gaps = np.random.default_rng(11).exponential(0.5, size=5)
    assert np.allclose(times, np.cumsum(gaps))
    assert times[0] == pytest.approx(gaps[0]) and times[0] > 0
    assert len(arrival_times(0, qps=1.0)) == 0


def test_poisson_rate_and_exponential_gaps():
    gaps = np.diff(arrival_times(200_000, qps=5.0, seed=1), prepend=0.0)
    assert gaps.mean() == pytest.approx(0.2, rel=0.01)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.02)


def test_clipped_poisson_matches_sarathi_and_raises_the_rate_about_5_percent():
    qps = 2.0
    gaps = np.diff(arrival_times(200_000, qps=qps, process="poisson-clipped", seed=2), prepend=0.0)
    assert gaps.max() <= 3.0 / qps * (1 + 1e-9)  # diff of a cumsum: rounding only
    expected_mean = (1 - math.exp(-3)) / qps
    assert gaps.mean() == pytest.approx(expected_mean, rel=0.01)
    assert 1 / (gaps.mean() * qps) == pytest.approx(1.052, abs=0.01)  # real rate ~5% over the nominal one
    # same draws as the exact process, only clipped
    exact = np.diff(arrival_times(200_000, qps=qps, process="poisson", seed=2), prepend=0.0)
    assert np.allclose(gaps, np.minimum(exact, 3.0 / qps))


@pytest.mark.parametrize("cv", [0.5, 1.0, 3.0])
def test_gamma_mean_rate_and_coefficient_of_variation(cv):
    gaps = np.diff(arrival_times(200_000, qps=10.0, process="gamma", cv=cv, seed=3), prepend=0.0)
    assert gaps.mean() == pytest.approx(0.1, rel=0.02)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.03)


def test_replay_shifts_to_zero_and_scales_time():
    recorded = np.array([10.0, 10.5, 12.0, 12.0, 20.0])
    assert arrival_times(4, qps=1.0, process="replay", recorded=recorded).tolist() == [0.0, 0.5, 2.0, 2.0]
    half = arrival_times(5, qps=1.0, process="replay", recorded=recorded, time_scale=0.5)
    assert half.tolist() == [0.0, 0.25, 1.0, 1.0, 5.0]
    scale = replay_time_scale(recorded, qps=1.0)  # 4 gaps over 10 s = 0.4 req/s recorded
    assert scale == pytest.approx(0.4)
    fast = arrival_times(5, qps=1.0, process="replay", recorded=recorded, time_scale=scale)
    assert (len(fast) - 1) / fast[-1] == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"qps": 0.0}, "qps must be a positive request rate"),
        ({"qps": -1.0}, "qps must be a positive request rate"),
        ({"qps": 1.0, "process": "uniform"}, "unknown arrival process 'uniform'; choose one of poisson"),
        ({"qps": 1.0, "process": "gamma", "cv": 0.0}, "positive coefficient of variation"),
        ({"qps": 1.0, "process": "replay"}, "replay arrivals need recorded times"),
        ({"qps": 1.0, "process": "replay", "recorded": np.array([0.0, -1.0])}, "recorded arrival 2 is -1.0"),
        ({"qps": 1.0, "process": "replay", "recorded": np.array([0, 2.0, 1.0])}, "arrival 3 .* earlier than"),
        ({"qps": 1.0, "process": "replay", "recorded": np.array([0.0, 1.0])}, "only 2 are recorded"),
        (
            {"qps": 1.0, "process": "replay", "recorded": np.arange(5.0), "time_scale": 0},
            "--time-scale must be",
        ),
        ({"qps": 1.0, "process": "poisson", "time_scale": -1.0}, "--time-scale must be positive, got -1"),
        (
            {"qps": math.inf, "process": "replay", "recorded": np.arange(5.0)},
            "--qps inf .* --arrival replay keeps",
        ),
        (
            {"qps": math.inf, "process": "conversation", "recorded": np.arange(5.0)},
            "--arrival conversation keeps",
        ),
    ],
)
def test_bad_arrival_arguments(kwargs, message):
    with pytest.raises(SimserveError, match=message):
        arrival_times(3, **kwargs)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(0, 300),
    qps=st.floats(1e-3, 1e4),
    process=st.sampled_from(SYNTHETIC),
    seed=st.integers(0, 2**32 - 1),
    cv=st.floats(0.1, 8.0),
)
def test_synthetic_arrivals_are_positive_and_non_decreasing(n, qps, process, seed, cv):
    times = arrival_times(n, qps, process=process, seed=seed, cv=cv)
    assert len(times) == n
    assert (times > 0).all() and (np.diff(times) >= 0).all()


def test_processes_are_the_documented_six():
    assert PROCESSES == ("poisson", "poisson-clipped", "gamma", "vllm-bench", "replay", "conversation")


def test_replay_of_the_azure_conversation_trace():
    path = SHARED / "reference" / "vidur" / "traces" / "splitwise_conv.csv"
    if not path.is_file():
        pytest.skip(f"reference trace {path} is absent (a fresh clone without ../shared)")
    trace = load_trace(str(path))
    assert len(trace) == 19_366
    recorded_rate = (len(trace) - 1) / (trace.arrived_at[-1] - trace.arrived_at[0])
    assert recorded_rate == pytest.approx(5.53, abs=0.01)
    times = arrival_times(
        len(trace),
        qps=11.06,
        process="replay",
        recorded=trace.arrived_at,
        time_scale=replay_time_scale(trace.arrived_at, 11.06),
    )
    assert (len(times) - 1) / times[-1] == pytest.approx(11.06)
    assert np.allclose(np.diff(times) * 2, np.diff(trace.arrived_at), rtol=1e-3, atol=1e-9)
