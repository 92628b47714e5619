"""Probe-level driving of capacity searches (tune/scheduler.py) on the closed-form toy model.

Driving a search probe by probe, with or without speculative look-ahead, must give exactly the result of
solving it in one piece; progress must be reported once per simulated probe.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from simserve.tune.capacity import SLO
from simserve.tune.executors import Runner
from simserve.tune.jobs import CapacityTask, probe_job, run_tasks, solve
from simserve.tune.probe import MemoryCache
from simserve.tune.scheduler import Progress, drive, next_rates, replay
from simserve.tune.toy import ToyScenario

BASE = ToyScenario(num_requests=64)
TASKS = [
    CapacityTask(replace(BASE, policy=p, budget=b), SLO(0.1))
    for p, b in [("sarathi", 256), ("sarathi", 512), ("sarathi", 2048), ("vllm", None)]
    # a longer search: the others end before it
] + [CapacityTask(replace(BASE, budget=1024), SLO(0.1), tolerance=0.001)]


class TwoAtOnce(Runner):
    """A serial runner that claims two slots, so the driver speculates, with results in a fixed order."""

    def __init__(self) -> None:
        super().__init__("serial")

    @property
    def parallel(self) -> int:
        return 2


def test_probe_by_probe_equals_whole_searches() -> None:
    expected = [solve(t) for t in TASKS]
    seen: list[int] = []
    for runner in (Runner("serial"), TwoAtOnce()):
        cache = MemoryCache()
        state = Progress()
        got = drive(TASKS, runner, cache, probe_job, None, lambda p: seen.append(p.simulated), state)
        assert got == expected
        assert seen[-state.simulated :] == list(range(1, state.simulated + 1))  # one call per probe
        assert state.simulated == len(cache) == sum(len(r.probes) for r in got) + state.wasted
    assert state.speculative > 0  # two slots, one long search: its tail speculated


def test_replay_and_look_ahead() -> None:
    task = TASKS[1]
    cache = MemoryCache()
    first = replay(task, cache)
    assert first.qps == task.start_qps  # nothing cached: the search's first probe
    ahead = {n.qps for n in next_rates(task, cache, first.qps)}
    assert ahead == {2.0, 0.5}  # doubles if it passes, halves if it fails


def test_run_tasks_counts_searches_from_cache() -> None:
    cache, stats = MemoryCache(), {}
    run_tasks(TASKS, Runner("serial"), cache, shared=False, stats=stats)
    assert stats["from_cache"] == 0 and stats["probes_simulated"] == len(cache)
    again: dict = {}
    run_tasks(TASKS, Runner("serial"), cache, shared=False, stats=again)
    assert again["from_cache"] == len(TASKS) and again["probes_simulated"] == 0


@pytest.mark.parametrize("workers", [2])
def test_local_pool_gives_the_same_capacities(workers: int) -> None:
    with Runner("local", workers) as runner:
        got = run_tasks(TASKS, runner, MemoryCache(), shared=False)
    assert [r.capacity_qps for r in got] == [solve(t).capacity_qps for t in TASKS]
