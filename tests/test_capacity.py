"""The capacity search against closed-form latency models, where the true capacity is known exactly."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simserve.errors import SimserveError
from simserve.tune.capacity import (
    SLO,
    CapacityResult,
    SeedSpread,
    capacity_over_seeds,
    find_capacity,
    quantile_key,
    search_capacity,
)


def mm1(decode_s: float = 0.02, mu: float = 5.0, delay_scale: float = 0.2):
    """P99 TBT = decode / (1 − ρ); median delay = scale · ρ / (1 − ρ); overloaded at ρ ≥ 1."""

    def simulate(qps: float) -> dict[str, float]:
        rho = qps / mu
        if rho >= 1:
            return {"overloaded": 1.0, "tbt_p99_s": math.nan, "scheduling_delay_p50_s": math.nan}
        return {
            "overloaded": 0.0,
            "tbt_p99_s": decode_s / (1 - rho),
            "scheduling_delay_p50_s": delay_scale * rho / (1 - rho),
            "ttft_p90_s": 0.5 + delay_scale * rho / (1 - rho),
        }

    return simulate


def test_quantile_key_names() -> None:
    assert quantile_key("tbt", 0.99) == "tbt_p99_s"
    assert quantile_key("scheduling_delay", 0.5) == "scheduling_delay_p50_s"
    assert quantile_key("ttft", 0.999) == "ttft_p99.9_s"
    assert quantile_key("ttft", 0.9) == "ttft_p90_s"


def test_mm1_capacity_matches_theory_within_tolerance() -> None:
    # TBT binds: 0.02 / (1 − q/5) ≤ 0.1  ⇔  q ≤ 4; delay at q=4 is 0.8 s ≤ 2 s.
    r = find_capacity(mm1(), SLO(0.1), start_qps=1.0, tolerance=0.025)
    assert 4.0 * (1 - 0.025) <= r.capacity_qps <= 4.0
    assert r.message == ""
    assert r.metrics_at_capacity["tbt_p99_s"] <= 0.1
    # Every passing probe is at or below capacity; every failing probe above it.
    assert all(p.qps <= r.capacity_qps for p in r.probes if p.passed)
    assert all(p.qps > r.capacity_qps for p in r.probes if not p.passed)


def test_scheduling_delay_binds_when_tbt_is_loose() -> None:
    # TBT 1 s allows q < 4.9; delay 0.2·ρ/(1−ρ) ≤ 2 ⇔ ρ ≤ 10/11 ⇔ q ≤ 4.545.
    r = find_capacity(mm1(), SLO(1.0), tolerance=0.01)
    assert 5 * 10 / 11 * 0.99 <= r.capacity_qps <= 5 * 10 / 11
    failing = [p for p in r.probes if not p.passed and "overloaded" not in p.reason]
    assert any("scheduling delay" in p.reason for p in failing)


def test_ttft_slo_uses_its_quantile() -> None:
    # P90 TTFT = 0.5 + 0.2ρ/(1−ρ) ≤ 1 ⇔ ρ ≤ 5/7.
    slo = SLO(tbt_s=None, scheduling_delay_s=None, ttft_s=1.0, ttft_quantile=0.9)
    r = find_capacity(mm1(), slo, tolerance=0.01)
    assert 5 * 5 / 7 * 0.99 <= r.capacity_qps <= 5 * 5 / 7


def test_overloaded_run_fails_without_reading_metrics() -> None:
    r = find_capacity(mm1(), SLO(0.1), start_qps=100.0)
    over = [p for p in r.probes if p.metrics["overloaded"]]
    assert over and all(not p.passed and "overloaded" in p.reason for p in over)
    assert 3.9 <= r.capacity_qps <= 4.0


def test_impossible_slo_reports_zero_with_a_message() -> None:
    # One decode iteration alone takes 20 ms; an SLO of 10 ms cannot be met at any load.
    r = find_capacity(mm1(), SLO(0.01), start_qps=1.0, max_halvings=10)
    assert r.capacity_qps == 0.0
    assert "no load meets" in r.message and "P99 TBT" in r.message
    assert len(r.probes) <= 11
    assert r.metrics_at_capacity == {}


def test_missing_metric_is_named() -> None:
    with pytest.raises(KeyError, match="ttft_p99_s"):
        find_capacity(lambda q: {"tbt_p99_s": 0.01, "scheduling_delay_p50_s": 0.0}, SLO(0.1, ttft_s=1.0))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"tbt_s": 0.0},
        {"tbt_s": -1.0},
        {"tbt_s": math.inf},
        {"tbt_quantile": 1.0},
        {"scheduling_delay_quantile": 0.0},
        {"tbt_s": None, "ttft_s": None},
    ],
)
def test_bad_slo_is_one_line_error(kwargs: dict) -> None:
    with pytest.raises(SimserveError) as exc:
        SLO(**kwargs)
    assert "\n" not in str(exc.value)


def test_bad_search_parameters() -> None:
    with pytest.raises(SimserveError):
        find_capacity(mm1(), SLO(), start_qps=0.0)
    with pytest.raises(SimserveError):
        find_capacity(mm1(), SLO(), tolerance=0.0)


@settings(max_examples=200, deadline=None)
@given(
    capacity=st.floats(0.01, 500.0),
    start=st.floats(0.01, 500.0),
    tol=st.floats(0.005, 0.2),
)
def test_threshold_model_brackets_the_true_capacity(capacity: float, start: float, tol: float) -> None:
    simulate = lambda q: {"tbt_p99_s": 0.05 if q <= capacity else 1.0, "scheduling_delay_p50_s": 0.0}  # noqa: E731
    r = find_capacity(simulate, SLO(0.1), start_qps=start, tolerance=tol, max_probes=60)
    if capacity < start / 2**10:
        assert r.capacity_qps == 0.0
    else:
        assert capacity * (1 - tol) * (1 - 1e-5) <= r.capacity_qps <= capacity
    assert len(r.probes) <= 60


@settings(max_examples=200, deadline=None)
@given(outcomes=st.lists(st.booleans(), min_size=1, max_size=64), start=st.floats(0.1, 100.0))
def test_terminates_on_any_pass_fail_pattern(outcomes: list[bool], start: float) -> None:
    """Even a non-monotone (noisy) simulator cannot make the search loop: the probe budget bounds it."""
    calls = iter(outcomes * 100)
    simulate = lambda q: {"tbt_p99_s": 0.05 if next(calls) else 1.0, "scheduling_delay_p50_s": 0.0}  # noqa: E731
    r = find_capacity(simulate, SLO(0.1), start_qps=start, max_probes=25)
    assert len(r.probes) <= 25 + 1  # at most 25 questions; guidance costs at most one extra simulation
    assert r.capacity_qps == 0.0 or any(p.passed and p.qps == r.capacity_qps for p in r.probes)


def test_seed_spread_and_capacity_over_seeds() -> None:
    spread, results = capacity_over_seeds(lambda s: mm1(mu=4.0 + s), [0, 1, 2], SLO(0.1), tolerance=0.01)
    caps = [r.capacity_qps for r in results]
    assert spread.capacities == tuple(caps)
    assert spread.min == min(caps) < spread.mean < spread.max == max(caps)
    assert spread.std > 0
    # Capacity 0.8·μ for each seed's μ.
    for mu, cap in zip((4.0, 5.0, 6.0), caps, strict=True):
        assert 0.8 * mu * 0.99 <= cap <= 0.8 * mu
    one = SeedSpread((2.0,))
    assert (one.mean, one.std, one.min, one.max) == (2.0, 0.0, 2.0, 2.0)


def test_result_round_trips_through_a_dict() -> None:
    r = find_capacity(mm1(), SLO(0.1, ttft_s=None))
    again = CapacityResult.from_dict(r.to_dict())
    assert again == r


def _threshold(capacity: float):
    return lambda q: {"tbt_p99_s": 0.05 if q <= capacity else 1.0, "scheduling_delay_p50_s": 0.0}


@settings(max_examples=200, deadline=None)
@given(capacity=st.floats(1e-4, 500.0), k=st.integers(-8, 10))
def test_starting_anywhere_on_the_grid_finds_the_same_capacity(capacity: float, k: int) -> None:
    """first_qps only changes the probes taken to the bracket, not the bracket: same capacity, same floor."""
    simulate = _threshold(capacity)
    plain = find_capacity(simulate, SLO(0.1), start_qps=1.0, max_probes=60)
    moved = find_capacity(simulate, SLO(0.1), start_qps=1.0, max_probes=60, first_qps=2.0**k)
    assert moved.capacity_qps == plain.capacity_qps
    assert moved.probes[0].qps == 2.0**k
    assert (moved.capacity_qps == 0.0) == (capacity < 1.0 / 2**10)


def test_first_qps_above_capacity_walks_down_through_failures() -> None:
    r = find_capacity(_threshold(3.7), SLO(0.1), start_qps=1.0, first_qps=8.0)
    assert [p.qps for p in r.probes[:3]] == [8.0, 4.0, 2.0]
    assert [p.passed for p in r.probes[:3]] == [False, False, True]


# -- the guided search (guided.py): the bisection's answer from fewer simulations ----------------------------


def _curve(capacity: float, steep: float):
    """A monotone latency curve crossing the 0.1 s TBT limit at `capacity`; the delay never binds."""
    return lambda q: {
        "tbt_p99_s": 0.1 * math.exp(min(steep * (q / capacity - 1), 50)),
        "scheduling_delay_p50_s": 0.01,
    }


@settings(max_examples=200, deadline=None)
@given(
    capacity=st.floats(1e-3, 500.0),
    steep=st.floats(0.05, 20.0),
    start=st.floats(0.01, 100.0),
    tol=st.floats(0.005, 0.2),
    threshold=st.booleans(),
)
def test_guided_search_finds_the_bisections_capacity(
    capacity: float, steep: float, start: float, tol: float, threshold: bool
) -> None:
    """On any monotone model the guided search ends where the plain bisection does, with at most one
    simulation more than the plain bisection (which simulates each question it asks)."""
    simulate = _threshold(capacity) if threshold else _curve(capacity, steep)
    plain = find_capacity(simulate, SLO(0.1), start_qps=start, tolerance=tol, max_probes=60, guided=False)
    guided = find_capacity(simulate, SLO(0.1), start_qps=start, tolerance=tol, max_probes=60)
    assert (guided.capacity_qps, guided.message) == (plain.capacity_qps, plain.message)
    assert len(guided.probes) <= len(plain.probes) + 1
    if guided.capacity_qps > 0:
        assert guided.metrics_at_capacity == plain.metrics_at_capacity  # the capacity itself was simulated


def test_guided_search_simulates_fewer_rates_on_a_smooth_curve() -> None:
    for slo in (SLO(0.1), SLO(1.0)):  # TBT binds / the scheduling delay binds
        plain = find_capacity(mm1(), slo, tolerance=0.01, guided=False)
        guided = find_capacity(mm1(), slo, tolerance=0.01)
        assert guided.capacity_qps == plain.capacity_qps
        assert len(guided.probes) < len(plain.probes)


def test_search_names() -> None:
    bisect = search_capacity(mm1(), SLO(0.1), search="bisect")
    assert bisect == find_capacity(mm1(), SLO(0.1), guided=False)
    assert search_capacity(mm1(), SLO(0.1)).capacity_qps == bisect.capacity_qps
    with pytest.raises(SimserveError, match="unknown capacity search"):
        search_capacity(mm1(), SLO(0.1), search="newton")
