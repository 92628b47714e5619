"""The seam between the tuner and the simulator: run a Scenario at a rate and reduce it to a probe record.

A capacity must be a load the deployment sustains, not one a short run from an empty system gets away with. A
run starts empty and fills within about one request lifetime W (Little's law: L = λ·W requests in the system);
while it fills, and when the queue in front of it grows without bound, the number of requests in the system
rises through the run. So each probe measures that trend over the second half of its arrival window
(`steady_growth`: the least-squares slope of the number of requests in the system, as a fraction of the
arrivals in that half), and a run whose population still grows by more than STEADY_GROWTH is simulated again
with twice the requests (`steady_record`), up to MAX_EXTENSION times the scenario's own: a system that was
only filling settles (and its metrics then describe its steady state), one that cannot keep up is caught by
the overload rule or stays growing, and is marked `unsteady` (a failed probe: capacity.SLO.check).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from simserve import numerics
from simserve.tune.capacity import quantile_key

# The steady-state rule (module docstring). 2.5%: the search's default tolerance: a deployment that serves
# less than 97.5% of the offered load over the steady window is short of it by more than the search resolves.
# Measured at stable loads (256-4,096 requests; Mistral-7B/A100, LLaMA2-70B/H200, Qwen3-235B): -3.6% to +1.2%;
# on runs still filling, +5% to +35% (docs/tuning.md, The search, point 4).
STEADY_GROWTH = 0.025
MAX_EXTENSION = 16  # at most 16 × the scenario's requests (four doublings)
_SAMPLES = 64  # intervals of the window the population is sampled at

# Summary fields copied into every probe's metrics when the simulator reports them.
SUMMARY_FIELDS = (
    "throughput_rps",
    "throughput_tps",
    "completed",
    "ignored",
    "overloaded",
    "preemptions",
    "duration_s",
    "num_iterations",
    "kv_blocks_per_replica",
)


def _quantiles(values: np.ndarray, qs: tuple[float, ...] | np.ndarray) -> list[float]:
    values = values[np.isfinite(values)]
    if values.size == 0:
        return [math.nan] * len(qs)
    return numerics.percentiles(values, [100.0 * q for q in qs])


def _request_latencies(result: Any, frontend_s: float = 0.0) -> dict[str, np.ndarray]:
    """Per-request scheduling delay, TTFT and TPOT of completed requests (ignored ones are excluded). TTFT is
    the client's: the front end's latency (`--frontend-ms`, sim/frontend.py) is added, as `simserve run`'s
    summary does; the scheduling delay stays engine-side. TPOT as `vllm bench serve` computes it, (completion
    − first token) / (output − 1), for requests of two or more output tokens (a front end's constant delay
    shifts both ends alike)."""
    req = _columns(result.requests)
    done = req["status"] == "completed" if "status" in req else ~np.isnan(req["completed_at_s"])
    arrived, first = req["arrived_at_s"][done], req["first_token_at_s"][done]
    ttft = first - arrived
    out = req["output_tokens"][done].astype(float)
    many = out > 1
    decode = req["completed_at_s"][done] - first
    return {
        "scheduling_delay": req["scheduled_at_s"][done] - arrived,
        "ttft": ttft + frontend_s if frontend_s else ttft,
        "tpot": decode[many] / (out[many] - 1),
    }


_FLOAT_COLUMNS = ("arrived_at_s", "scheduled_at_s", "first_token_at_s", "completed_at_s")


def _columns(requests: Any) -> Mapping[str, np.ndarray]:
    """The request table's columns a probe reads, as arrays: probe_view's own (a mapping already), or a
    SimResult's DataFrame (float64 times, the status as text)."""
    if isinstance(requests, Mapping):
        return requests
    cols = {c: requests[c].to_numpy(float) for c in _FLOAT_COLUMNS if c in requests}
    if "output_tokens" in requests:
        cols["output_tokens"] = requests["output_tokens"].to_numpy()
    if "status" in requests:
        cols["status"] = requests["status"].astype(str).to_numpy()
    return cols


def steady_growth(result: Any) -> float | None:
    """How much the number of requests in the system grew over the second half of the arrival window, as a
    fraction of the requests that arrived in it (the least-squares slope of the count sampled at _SAMPLES + 1
    evenly spaced times, times the window): ~0 in steady state, the unserved fraction 1 − μ/λ when the queue
    grows, positive while the system is still filling. None when the run did not finish (overloaded, stopped
    early: it fails anyway) or its arrivals have no second half to speak of (all at once)."""
    req = _columns(result.requests)
    status = req["status"]
    kept = status != "ignored"
    if not kept.any() or (status[kept] != "completed").any():
        return None
    arrived = np.sort(req["arrived_at_s"][kept])
    completed = np.sort(req["completed_at_s"][kept])
    start, end = float(arrived[len(arrived) // 2]), float(arrived[-1])
    if not end > start:
        return None
    times = np.array([start + (end - start) * i / _SAMPLES for i in range(_SAMPLES + 1)])
    inside = np.searchsorted(arrived, times, side="right") - np.searchsorted(completed, times, side="right")
    # NOTE: integer sums: Σ x·n over symmetric offsets x (Σ x = 0, so the mean of n drops out), exact
    # everywhere
    offsets = [i - _SAMPLES // 2 for i in range(_SAMPLES + 1)]
    moment = sum(x * int(n) for x, n in zip(offsets, inside.tolist(), strict=True))
    slope = moment / sum(x * x for x in offsets)
    return slope * _SAMPLES / (len(arrived) - len(arrived) // 2)


def record_from_result(
    result: Any, qps: float, quantiles: tuple[float, ...], cdf_grid: tuple[float, ...]
) -> dict:
    """Reduce a SimResult to the probe record: summary fields, the quantiles SLOs can ask for, CDF curves.

    TBT quantiles come from the simulator's 0.1%-accurate log histogram of every token gap."""
    summary = result.summary
    summary = summary if isinstance(summary, Mapping) else summary.as_dict()
    metrics: dict[str, float] = {k: float(summary[k]) for k in SUMMARY_FIELDS if summary.get(k) is not None}
    metrics["qps"] = qps
    if summary.get("stopped_early"):  # only then, so records of runs to the end keep their fields
        metrics["stopped_early"] = 1.0
    if summary.get("capped"):  # the trial cap ended it (paper_setup): latencies cover completed requests
        metrics["capped"] = 1.0
    latencies = _request_latencies(result, float(summary.get("frontend_s") or 0.0))
    for family, values in latencies.items():
        for q, v in zip(quantiles, _quantiles(values, quantiles), strict=True):
            metrics[quantile_key(family, q)] = v
    for q, v in zip(quantiles, result.tbt.quantiles(quantiles), strict=True):
        metrics[quantile_key("tbt", q)] = float(v)
    tpot = latencies["tpot"]
    metrics["tpot_mean_s"] = numerics.fsum(tpot.tolist()) / tpot.size if tpot.size else math.nan
    growth = steady_growth(result)
    if growth is not None:
        metrics["growth"] = growth
    cdf = {family: _quantiles(values, cdf_grid) for family, values in latencies.items() if family != "tpot"}
    cdf["tbt"] = [float(v) for v in result.tbt.quantiles([float(q) for q in cdf_grid])]
    return {"metrics": metrics, "cdf": cdf}


def steady_record(scenario: Any, record: Any) -> dict:
    """`record(scenario)` (a probe's record), simulated again with twice the requests while the run was still
    growing (module docstring), up to MAX_EXTENSION × the scenario's own; marks `unsteady` when it never
    settled. Paper-comparable scenarios (a trial cap) keep the paper's criterion: no extension, no mark."""
    n = requests_of(scenario)
    result = record(scenario)
    if n is None or getattr(_first_pool(scenario), "time_limit_s", None) is not None:
        return result
    m, simulated = result["metrics"], n
    if "growth" not in m:  # not measured (a run that did not finish, a closed-form model): nothing to extend
        return result
    while m.get("growth", 0.0) > STEADY_GROWTH and simulated < MAX_EXTENSION * n:
        simulated *= 2
        result = record(with_requests(scenario, simulated))
        m = result["metrics"]
    m["requests_simulated"] = float(simulated)
    if m.get("growth", 0.0) > STEADY_GROWTH:
        m["unsteady"] = 1.0
    return result


def _first_pool(scenario: Any) -> Any:
    return getattr(scenario, "prefill", scenario)  # a disaggregated scenario: its pools share the workload


def requests_of(scenario: Any) -> int | None:
    n = getattr(_first_pool(scenario), "num_requests", None)
    return int(n) if isinstance(n, int) else None


def with_requests(scenario: Any, n: int) -> Any:
    """The scenario with `n` requests (each pool's, for a disaggregated one)."""
    from dataclasses import replace

    if hasattr(scenario, "prefill") and hasattr(scenario, "decode"):
        return replace(
            scenario,
            prefill=replace(scenario.prefill, num_requests=n),
            decode=replace(scenario.decode, num_requests=n),
        )
    return replace(scenario, num_requests=n)


def record_from_scenario(
    scenario: Any, qps: float, quantiles: tuple[float, ...], cdf_grid: tuple[float, ...]
) -> dict:
    """One capacity probe's record (tune/probe.py): the user's view of the run, a disaggregated one's as an
    aggregated one's."""
    from simserve.sim.disagg_scenario import DisaggScenario, run_disagg
    from simserve.sim.scenario import simulate_scenario

    if isinstance(scenario, DisaggScenario):
        raw = run_disagg(scenario, qps).raw
    else:
        raw = simulate_scenario(scenario, qps)[0]
    return record_from_result(probe_view(raw), qps, quantiles, cdf_grid)


def probe_view(raw: Any) -> Any:
    """What record_from_result reads of a run: the request table's columns it reads (arrays, no DataFrame),
    the summary fields it keeps (metrics.probe_summary) and the TBT histogram; not the per-iteration table,
    the latency percentiles of the summary or its busy times, which a probe never reads."""
    from types import SimpleNamespace

    from simserve.sim.metrics import STATUS, probe_summary

    r = raw.reqs
    requests = {
        "arrived_at_s": r.arrived,
        "scheduled_at_s": r.scheduled,
        "first_token_at_s": r.first_token,
        "completed_at_s": r.completed,
        "output_tokens": r.output,
        "status": np.asarray(STATUS)[r.status],
    }
    return SimpleNamespace(requests=requests, summary=probe_summary(raw), tbt=raw.tbt)


def check_fits(scenario: Any) -> None:
    """Raise SimserveError (one line) when the scenario's deployment cannot hold one max-length request."""
    from simserve.sim.scenario import check_scenario

    check_scenario(scenario)


def preload(scenarios: list[Any]) -> None:
    """Load each deployment's timer and each workload in this process before workers fork from it, so they
    inherit them: a cold predictor cache is fit once, not once per worker, and no worker reloads the trace."""
    from simserve.sim.scenario import _workload, scenario_timer

    for s in scenarios:
        scenario_timer(s)
        _workload(s.trace, s.max_len, s.num_requests, s.seed, s.arrival == "replay")
