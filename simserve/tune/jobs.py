"""Capacity searches as jobs: one probe per job (or one whole search, `solve_job`), replayed from the cache.

`run_tasks` replays every search from the probe cache in this process (a search whose probes are all cached
costs milliseconds) and drives the rest probe by probe on a Runner (scheduler.py), caching what comes back.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from simserve.tune.capacity import SLO, CapacityResult, search_capacity
from simserve.tune.executors import Runner
from simserve.tune.probe import MemoryCache, ProbeCache, probe, quantiles_for, simulator


@dataclass(frozen=True)
class CapacityTask:
    scenario: Any  # a frozen dataclass: simserve.sim.scenario.Scenario, or toy.ToyScenario in tests
    slo: SLO
    tolerance: float = 0.025
    start_qps: float = 1.0
    max_probes: int = 30
    max_halvings: int = 10  # the search gives up (capacity 0) below start_qps / 2**max_halvings
    first_qps: float | None = None  # the grid rate probed first (first_probe.py); None: start_qps
    search: str = "simserve"  # or "paper": the Sarathi-Serve paper's own search (paper_search.py)
    step: float = 2.0  # the bracketing factor (capacity.find_capacity)


def solve(task: CapacityTask, cache: ProbeCache | None = None, offline: bool = False) -> CapacityResult:
    """One capacity search; `offline` replays it from the cache and raises CacheMiss at the first gap."""
    simulate = simulator(task.scenario, quantiles_for(task.slo), cache, offline)
    return search_capacity(
        simulate,
        task.slo,
        task.start_qps,
        task.tolerance,
        task.max_probes,
        task.max_halvings,
        task.search,
        task.first_qps,
        task.step,
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
    speculate: bool = True,
) -> list[CapacityResult]:
    """Solve every task: replayed from `cache` where it can be, the rest probe by probe on `runner`
    (scheduler.py), each probe cached as it arrives. `shared`: the workers can write `cache` themselves.
    `stats` is filled as the run goes, so a caller that is interrupted still knows what was saved.
    `speculate`: let idle workers simulate the probes a search may ask next (wall time for CPU time)."""
    from simserve.tune.scheduler import Progress, drive

    stats = {} if stats is None else stats
    state = Progress()
    stats.update(tasks=len(tasks), from_cache=0, probes_simulated=0, probes_speculative=0)
    root = str(cache.root) if shared and not isinstance(cache, MemoryCache) else None
    with progress_bar(progress) as bar:
        tid = bar.add_task("capacity searches", total=len(tasks))

        def on_probe(p: Progress) -> None:
            stats.update(probes_simulated=p.simulated, probes_speculative=p.speculative)
            bar.update(
                tid, completed=p.done, description=f"capacity searches, {p.simulated} probes simulated"
            )

        results = drive(tasks, runner, cache, probe_job, root, on_probe, state, speculate)
    stats.update(
        from_cache=state.from_cache,
        probes_simulated=state.simulated,
        probes_speculative=state.speculative,
        probes_wasted=state.wasted,
    )
    return results


class _NoProgress:
    def add_task(self, *args: Any, **kwargs: Any) -> int:
        return 0

    def advance(self, *args: Any) -> None:
        pass

    def update(self, *args: Any, **kwargs: Any) -> None:
        pass


def progress_bar(show: bool) -> Any:
    """A rich progress bar on a terminal; nothing when stderr is a pipe or a file, where the bar's last frame
    would stay above a later error line (bad input is one line) or clutter a log."""
    import sys

    if not show or not sys.stderr.isatty():
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
