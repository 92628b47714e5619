"""The seam between the tuner and the simulator: run a Scenario at a rate and reduce it to a probe record."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from simserve import numerics
from simserve.tune.capacity import quantile_key

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
    """Per-request scheduling delay and TTFT of completed requests (ignored ones are excluded). TTFT is the
    client's: the front end's latency (`--frontend-ms`, sim/frontend.py) is added, as `simserve run`'s summary
    does; the scheduling delay stays engine-side."""
    req = result.requests
    done = req[req["status"] == "completed"] if "status" in req else req[req["completed_at_s"].notna()]
    ttft = (done["first_token_at_s"] - done["arrived_at_s"]).to_numpy(float)
    return {
        "scheduling_delay": (done["scheduled_at_s"] - done["arrived_at_s"]).to_numpy(float),
        "ttft": ttft + frontend_s if frontend_s else ttft,
    }


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
    cdf = {family: _quantiles(values, cdf_grid) for family, values in latencies.items()}
    cdf["tbt"] = [float(v) for v in result.tbt.quantiles([float(q) for q in cdf_grid])]
    return {"metrics": metrics, "cdf": cdf}


def record_from_scenario(
    scenario: Any, qps: float, quantiles: tuple[float, ...], cdf_grid: tuple[float, ...]
) -> dict:
    from simserve.sim.scenario import run_scenario

    return record_from_result(run_scenario(scenario, qps), qps, quantiles, cdf_grid)


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
