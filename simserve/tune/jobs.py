"""Capacity searches as jobs: one search (or one probe) per job, replayed from the cache where possible.

`run_tasks` first replays every search from the probe cache in this process (a search whose probes are all
cached costs milliseconds), then sends the rest to a Runner (executors.py) and caches what comes back.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from simserve.tune.capacity import SLO, CapacityResult, find_capacity
from simserve.tune.executors import Runner
from simserve.tune.probe import CacheMiss, MemoryCache, ProbeCache, probe, quantiles_for, simulator


@dataclass(frozen=True)
class CapacityTask:
    scenario: Any  # a frozen dataclass: simserve.sim.scenario.Scenario, or toy.ToyScenario in tests
    slo: SLO
    tolerance: float = 0.025
    start_qps: float = 1.0
    max_probes: int = 30
    max_halvings: int = 10  # the search gives up (capacity 0) below start_qps / 2**max_halvings


def solve(task: CapacityTask, cache: ProbeCache | None = None, offline: bool = False) -> CapacityResult:
    """One capacity search; `offline` replays it from the cache and raises CacheMiss at the first gap."""
    simulate = simulator(task.scenario, quantiles_for(task.slo), cache, offline)
    return find_capacity(
        simulate, task.slo, task.start_qps, task.tolerance, task.max_probes, task.max_halvings
    )


class _CountingCache(ProbeCache):
    """Counts the probes a search had to simulate (cache misses) on top of another cache."""

    def __init__(self, inner: ProbeCache):
        self.inner, self.misses = inner, 0

    def get(self, key: str) -> dict | None:
        record = self.inner.get(key)
        self.misses += record is None
        return record

    def put(self, key: str, record: dict) -> None:
        self.inner.put(key, record)


def solve_job(task: CapacityTask, cache_root: str | None) -> tuple[CapacityResult, dict[str, dict], int]:
    """Worker entry point: with a shared disk it caches each probe as it goes (so a crash loses at most one);
    otherwise it returns its probe records for the driver to cache. Also returns how many it simulated."""
    inner = ProbeCache(cache_root) if cache_root else MemoryCache()
    cache = _CountingCache(inner)
    result = solve(task, cache)
    return result, (inner.entries if isinstance(inner, MemoryCache) else {}), cache.misses


def probe_job(scenario: Any, qps: float, quantiles: tuple[float, ...], cache_root: str | None) -> dict:
    return probe(scenario, qps, quantiles, ProbeCache(cache_root) if cache_root else None)


def run_tasks(
    tasks: Sequence[CapacityTask],
    runner: Runner,
    cache: ProbeCache,
    shared: bool,
    progress: bool = False,
    stats: dict | None = None,
) -> list[CapacityResult]:
    """Solve every task: replayed from `cache` where it can be, on `runner` otherwise (in completion order,
    each worker's probes cached as they arrive). `shared`: the workers can write `cache` themselves."""
    results: list[CapacityResult | None] = [None] * len(tasks)
    pending = []
    for i, task in enumerate(tasks):
        try:
            results[i] = solve(task, cache, offline=True)
        except CacheMiss:
            pending.append(i)
    stats = {} if stats is None else stats
    stats.update(tasks=len(tasks), from_cache=len(tasks) - len(pending), probes_simulated=0)
    root = str(cache.root) if shared and not isinstance(cache, MemoryCache) else None
    jobs = runner.map(solve_job, [(tasks[i], root) for i in pending])
    with progress_bar(progress) as bar:
        tid = bar.add_task("capacity searches", total=len(tasks), completed=stats["from_cache"])
        for j, (result, entries, simulated) in jobs:
            for k, record in entries.items():
                cache.put(k, record)
            results[pending[j]] = result
            stats["probes_simulated"] += simulated
            bar.advance(tid)
    return results  # type: ignore[return-value]


class _NoProgress:
    def add_task(self, *args: Any, **kwargs: Any) -> int:
        return 0

    def advance(self, *args: Any) -> None:
        pass


def progress_bar(show: bool) -> Any:
    if not show:
        return nullcontext(_NoProgress())
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=False,
    )
