"""Capacity searches driven probe by probe, so every worker stays busy until the last search ends.

A search (capacity.find_capacity) is sequential: each probe's rate depends on the last one's pass/fail. Sent
whole to a worker, a sweep's longest search leaves the other cores idle at the end. Here the driver replays
each search from the probe records it has (`replay`): the first probe it lacks is the search's next job. Each
finished probe wakes its search again. The search itself is unchanged, so capacities are identical to solving
each search in one piece.

When fewer searches are waiting than there are workers, an idle worker runs a *speculative* probe: the rate a
search will simulate next if its probe in flight passes, or if it fails (`next_rates`). The assumed outcome
carries no latencies, so a guided search (guided.py) looks ahead along its current prediction; one of the two
is often the rate it will simulate, so the search's next step is already done when its probe returns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from simserve.tune.capacity import CapacityResult, search_capacity
from simserve.tune.probe import CacheMiss, MemoryCache, ProbeCache, probe, probe_key, quantiles_for


@dataclass
class Need:
    """The probe a search needs next."""

    key: str
    scenario: Any
    qps: float
    quantiles: tuple[float, ...]


def replay(task: Any, records: ProbeCache, assume: dict[float, bool] | None = None) -> CapacityResult | Need:
    """The search's result when every probe it asks for is in `records`, else the first probe missing.
    `assume` gives a pass/fail outcome for rates not simulated yet (to look ahead along one branch)."""
    quantiles = quantiles_for(task.slo)
    asked: list[float] = []
    assume = assume or {}
    passing = {key: 0.0 for key, _, _ in task.slo.limits()}

    def simulate(qps: float) -> dict[str, float]:
        asked.append(qps)
        if qps in assume:
            return passing if assume[qps] else {"overloaded": 1.0}
        return probe(task.scenario, qps, quantiles, records, offline=True)["metrics"]

    try:
        return search_capacity(
            simulate, task.slo, task.start_qps, task.tolerance, task.max_probes, **_search_args(task)
        )
    except CacheMiss as miss:
        return Need(str(miss), task.scenario, asked[-1], quantiles)


def _search_args(task: Any) -> dict[str, Any]:
    # NOTE: a CapacityTask's floor, first rate and search method are passed on exactly as jobs.solve does.
    return {k: getattr(task, k) for k in ("max_halvings", "first_qps", "search", "step") if hasattr(task, k)}


def next_rates(task: Any, records: ProbeCache, pending: float) -> list[Need]:
    """The probes the search asks for after the one at `pending`, if it passes and if it fails."""
    out = []
    for outcome in (True, False):
        step = replay(task, records, {pending: outcome})
        if isinstance(step, Need):
            out.append(step)
    return out


class Overlay(ProbeCache):
    """The records of this run in memory, over the on-disk cache (so a replay never re-reads a file)."""

    def __init__(self, inner: ProbeCache):
        self.inner, self.entries = inner, {}
        self.keys: dict[tuple, str] = {}

    def key(self, scenario: Any, qps: float, quantiles: tuple[float, ...]) -> str:
        """probe_key, remembered for this run: each replay of a search asks again for the key of every probe
        it has made (~550 keys a plan, ~0.3 ms each: the scenario's fields and its input files' digests
        hashed)."""
        try:
            memo = (scenario, qps, quantiles)
            hit = self.keys.get(memo)
        except TypeError:  # a scenario that cannot be hashed: no memo
            return probe_key(scenario, qps, quantiles)
        if hit is None:
            hit = self.keys[memo] = probe_key(scenario, qps, quantiles)
        return hit

    def get(self, key: str) -> dict | None:
        if key not in self.entries:
            record = self.inner.get(key)
            if record is None:
                return None
            self.entries[key] = record
        return self.entries[key]

    def put(self, key: str, record: dict) -> None:
        self.entries[key] = record


@dataclass
class Progress:
    simulated: int = 0  # probes simulated (speculative ones included)
    speculative: int = 0  # of which speculative
    wasted: int = 0  # speculative probes no search asked for (still cached for a later rerun)
    done: int = 0  # searches finished
    from_cache: int = 0  # searches replayed whole from the cache
    keys: set[str] = field(default_factory=set)  # every probe simulated this run


def drive(
    tasks: Sequence[Any],
    runner: Any,
    cache: ProbeCache,
    job: Callable[..., dict],
    cache_root: str | None,
    on_probe: Callable[[Progress], None] = lambda p: None,
    progress: Progress | None = None,
    speculate: bool = True,
) -> list[CapacityResult]:
    """Solve every task probe by probe on `runner`. `job(scenario, qps, quantiles, cache_root)` simulates one
    probe; when `cache_root` is None the workers cannot write the cache, so the driver does."""
    records = Overlay(cache)
    state = progress or Progress()
    results: list[CapacityResult | None] = [None] * len(tasks)
    steps: dict[int, Need] = {}
    inflight: dict[Any, Need] = {}  # handle → probe
    running: set[str] = set()
    speculated: set[str] = set()

    def advance(i: int) -> None:
        step = replay(tasks[i], records)
        if isinstance(step, Need):
            steps[i] = step
        else:
            results[i], state.done = step, state.done + 1
            steps.pop(i, None)

    def start(need: Need, speculative: bool) -> None:
        handle = runner.submit(job, need.scenario, need.qps, need.quantiles, cache_root)
        inflight[handle] = need
        running.add(need.key)
        if speculative:
            speculated.add(need.key)
            state.speculative += 1

    def fill() -> None:
        while len(inflight) < runner.parallel:
            waiting = [n for n in steps.values() if n.key not in running]
            if waiting:
                start(waiting[0], False)
                continue
            if not speculate:
                return
            ahead = [
                n
                for i, need in steps.items()
                for n in next_rates(tasks[i], records, need.qps)
                if n.key not in running and records.get(n.key) is None
            ]
            if not ahead:
                return
            start(ahead[0], True)

    for i in range(len(tasks)):
        advance(i)
    state.from_cache = state.done
    fill()
    while inflight:
        for handle, record in runner.wait_any(list(inflight)):
            need = inflight.pop(handle)
            running.discard(need.key)
            record = {**record, "qps": need.qps}
            records.put(need.key, record)
            if cache_root is None:
                cache.put(need.key, record)
            state.simulated += 1
            state.keys.add(need.key)
            for i in [i for i, n in steps.items() if n.key == need.key]:
                advance(i)
            on_probe(state)
        fill()
    used = {p_key for i, t in enumerate(tasks) for p_key in _keys(t, results[i], records)}
    state.wasted = len(speculated - used)
    return results  # type: ignore[return-value]


def _keys(task: Any, result: CapacityResult | None, records: Overlay) -> list[str]:
    if result is None:
        return []
    quantiles = quantiles_for(task.slo)
    return [records.key(task.scenario, p.qps, quantiles) for p in result.probes]


def memory_only(cache: ProbeCache) -> bool:
    return isinstance(cache, MemoryCache)
