"""The sweep's latency CDFs: TBT, TTFT and scheduling-delay quantile curves of each policy's best
configuration, all at one load (sweep.cdf_load), reusing the searches' probes where they ran to the end."""

from __future__ import annotations

from typing import Any

import pandas as pd

from simserve.tune.executors import Runner
from simserve.tune.jobs import probe_job, progress_bar
from simserve.tune.probe import CacheMiss, ProbeCache, probe, probe_key, quantiles_for


def latency_cdfs(
    spec: Any,
    best: pd.DataFrame,
    qps: float,
    runner: Runner,
    cache: ProbeCache,
    shared: str | None,
    progress: bool,
) -> dict[str, dict[str, list[float]]]:
    """TBT / TTFT / scheduling-delay quantile curves of each policy's best configuration (`best`: one row a
    policy, sweep.best_per_policy) at one load."""
    quantiles = quantiles_for(spec.slos[0])
    jobs, labels, out = [], [], {}
    for _, row in best.iterrows():
        budget = None if pd.isna(row["budget"]) else int(row["budget"])
        scenario = spec.scenario(row["policy"], budget, int(row["max_batch"]), spec.seeds[0])
        searched = spec.search_scenario(*_config(row), spec.seeds[0], spec.slos[0])
        try:  # the search's own probe at this load, when it ran to the end; else the full run's
            record = probe(searched, qps, quantiles, cache, offline=True)
            if record["metrics"].get("stopped_early"):
                raise CacheMiss("stopped early")
            out[row["label"]] = record
            continue
        except CacheMiss:
            pass
        try:
            out[row["label"]] = probe(scenario, qps, quantiles, cache, offline=True)
        except CacheMiss:
            jobs.append((scenario, qps, quantiles, shared))
            labels.append(row["label"])
    with progress_bar(progress and bool(jobs)) as bar:
        tid = bar.add_task(f"latency CDFs at {qps:.3g} qps", total=len(jobs))
        for i, record in runner.map(probe_job, jobs):
            if shared is None:  # the worker could not write the driver's cache: do it here
                cache.put(probe_key(*jobs[i][:3]), record)
            out[labels[i]] = record
            bar.advance(tid)
    # An overloaded configuration's curves cover only the requests that completed before the run stopped.
    return {
        lab + (" (overloaded)" if out[lab]["metrics"].get("overloaded") else ""): out[lab]["cdf"]
        for lab in best["label"]
        if lab in out
    }


def _config(row: Any) -> tuple[str, int | None, int]:
    return row["policy"], None if pd.isna(row["budget"]) else int(row["budget"]), int(row["max_batch"])
