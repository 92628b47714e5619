"""Paper-comparable mode (issue 10, item 3): clipped arrivals, the trial cap, the paper's capacity search, the
`--paper-setup` switch, and that none of it moves simserve's default results."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import replace

import numpy as np
import pytest

from simserve.cli import main
from simserve.sim.cluster import simulate
from simserve.sim.config import SimConfig
from simserve.sim.metrics import build_result
from simserve.sim.scenario import PAPER_TIME_LIMIT_S, Scenario, paper_setup
from simserve.sim.testing import LinearTimer
from simserve.tune.capacity import SLO, find_capacity, search_capacity
from simserve.tune.jobs import CapacityTask, solve
from simserve.tune.paper_search import paper_search
from simserve.tune.probe import MemoryCache, probe_key, scenario_fields
from simserve.workload import arrival_times

# -- arrivals ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("qps", [0.3, 1.0, 7.5])
def test_clipped_gaps_never_exceed_three_mean_gaps(qps: float) -> None:
    t = arrival_times(20_000, qps, "poisson-clipped", seed=3)
    gaps = np.diff(np.concatenate(([0.0], t)))
    assert gaps.max() <= 3.0 / qps + 1e-12 * t[-1]  # (differences of a cumulative sum: its rounding)
    assert gaps.max() > 0.999 * 3.0 / qps  # and the clip is reached
    plain = np.diff(np.concatenate(([0.0], arrival_times(20_000, qps, "poisson", seed=3))))
    assert plain.max() > 3.0 / qps  # the same draws unclipped do exceed it: the clip is doing the work
    # mean gap (1 - e^-3)/qps: Sarathi-Serve's generator runs 5.2 % faster than nominal
    assert gaps.mean() == pytest.approx((1 - math.exp(-3)) / qps, rel=0.02)


def test_paper_setup_sets_the_papers_trial() -> None:
    s = paper_setup(Scenario(stop_tbt=(0.1, 0.99)))
    assert (s.arrival, s.ray_comm, s.time_limit_s) == ("poisson-clipped", True, PAPER_TIME_LIMIT_S)
    assert not s.stop_when_overloaded and s.stop_tbt is None
    assert paper_setup(s) == s
    assert s.sim_config().time_limit_s == PAPER_TIME_LIMIT_S


# -- the trial cap -----------------------------------------------------------------------------------------

TIMER = LinearTimer(a=0.01, b=0.0005, c=0.0)


def _run(time_limit: float | None, n: int = 120, qps: float = 0.5, stretch: bool = True):
    rng = np.random.default_rng(0)
    prompt = rng.integers(50, 400, n)
    output = rng.integers(20, 200, n)
    arrived = arrival_times(n, qps, "poisson-clipped", seed=1)
    cfg = SimConfig(budget=256, time_limit_s=time_limit, stop_when_overloaded=False, stretch=stretch)
    return simulate(prompt, output, arrived, TIMER, 4000, cfg)


def test_the_cap_ends_the_run_and_metrics_cover_completed_requests_only() -> None:
    full, capped = _run(None), _run(100.0)
    assert not full.capped and capped.capped
    assert capped.end_time == pytest.approx(100.0)
    res = build_result(capped)
    req = res.requests
    done = req.status == "completed"
    assert 0 < done.sum() < len(req)  # some finished, some were cut
    assert (req.completed_at_s[done] <= 100.0).all()
    assert req.completed_at_s[~done].isna().all()
    s = res.summary
    assert s.capped and s.as_dict()["capped"] and s.completed == int(done.sum())
    # the scheduling delay is over completed requests only
    delays = (req.scheduled_at_s - req.arrived_at_s)[done]
    assert s.scheduling_delay_p50_s == pytest.approx(float(np.percentile(delays, 50)))
    # the capped run is the uncapped run's prefix: every request completed by the cap completed identically
    full_req = build_result(full).requests.set_index("request_id")
    cut = req.set_index("request_id")[done.to_numpy()]
    assert (full_req.loc[cut.index, "completed_at_s"] == cut.completed_at_s).all()


def test_a_cap_past_the_end_changes_nothing() -> None:
    free, late = build_result(_run(None, n=20, qps=2.0)), build_result(_run(1e6, n=20, qps=2.0))
    assert not late.summary.capped
    assert late.requests.equals(free.requests) and late.summary == free.summary
    assert "capped" not in free.summary.as_dict()  # an uncapped summary keeps its old fields


def test_a_bad_time_limit_is_one_clear_error() -> None:
    from simserve.errors import SimserveError

    with pytest.raises(SimserveError, match="time limit"):
        SimConfig(time_limit_s=0.0).validate()


# -- the paper's search ------------------------------------------------------------------------------------


def _model(capacity: float, delay_at: float = 0.5):
    """A closed-form load: passes up to `capacity`; the scheduling delay grows with load."""
    asked: list[float] = []

    def simulate(qps: float) -> dict[str, float]:
        asked.append(qps)
        ok = qps <= capacity
        return {
            "tbt_p99_s": 0.05 if ok else 0.5,
            "scheduling_delay_p50_s": delay_at * qps / capacity if ok else 600.0 * qps / capacity,
            "overloaded": 0.0 if ok else 1.0,
        }

    return simulate, asked


@pytest.mark.parametrize("capacity", [0.37, 1.234, 5.0, 13.7])
def test_paper_search_probes_rates_rounded_to_a_hundredth(capacity: float) -> None:
    simulate, asked = _model(capacity)
    res = paper_search(simulate, SLO(tbt_s=0.1), start_qps=1.0)
    assert asked and all(q == round(q, 2) for q in asked)
    assert all(a != b for a, b in zip(asked, asked[1:], strict=False))  # repeating the last rate ends it
    assert 0 < res.capacity_qps <= capacity
    # the paper's code keeps the *last* passing rate (not the highest: a failure with a delay above 500 s
    # halves the upper bound, which can drop it below an earlier pass)
    assert res.capacity_qps == [p.qps for p in res.probes if p.passed][-1]
    # it stops once the bracket is within 2.5 % of the last rate (or rounding repeats a rate)
    above = min((p.qps for p in res.probes if not p.passed), default=math.inf)
    assert above - res.capacity_qps <= max(0.025 * asked[-1], 0.02) or len(asked) == 20


def test_paper_search_follows_the_papers_steps() -> None:
    # Worked by hand from CapacitySearch.search: start 1 → bracket [0, 2]; probe 1.0 passes with delay
    # 0.5·1/1.5 = 0.33 < 2/4 → right = min(2·2, 2^32) = 4; probe 2.5 fails with a delay > 500 → right = 1.25;
    # probe 1.12 passes (delay 0.37 < 0.5) → right = min(2.5, 2.5) = 2.5; probe 1.81 fails (delay 724 > 500)
    # → right 0.905 < left: probe round((1.12 + 0.905)/2, 2) = 1.01, passes → right = min(1.81, 2.5) ...
    simulate, asked = _model(1.5)
    paper_search(simulate, SLO(tbt_s=0.1), start_qps=1.0)
    assert asked[:5] == [1.0, 2.5, 1.12, 1.81, 1.01]


def test_overloaded_alone_is_not_a_failure_in_the_papers_search() -> None:
    def simulate(qps: float) -> dict[str, float]:
        return {"tbt_p99_s": 0.05, "scheduling_delay_p50_s": 0.1, "overloaded": 1.0}

    assert paper_search(simulate, SLO(tbt_s=0.1), start_qps=1.0, max_probes=3).capacity_qps > 0
    assert find_capacity(simulate, SLO(tbt_s=0.1), start_qps=1.0).capacity_qps == 0


def test_search_capacity_dispatches_and_rejects_unknown_methods() -> None:
    from simserve.errors import SimserveError

    simulate, _ = _model(2.0)
    slo = SLO(tbt_s=0.1)
    assert search_capacity(simulate, slo, search="simserve") == find_capacity(simulate, slo)
    assert search_capacity(simulate, slo, search="paper") == paper_search(simulate, slo)
    with pytest.raises(SimserveError, match="unknown capacity search"):
        search_capacity(simulate, slo, search="vidur")


def test_a_paper_task_is_solved_probe_by_probe_as_in_one_piece() -> None:
    from simserve.tune.executors import Runner
    from simserve.tune.jobs import run_tasks
    from simserve.tune.toy import ToyScenario

    task = CapacityTask(ToyScenario(num_requests=64), SLO(tbt_s=0.1), start_qps=2.0, search="paper")
    whole = solve(task, MemoryCache())
    with Runner("serial") as runner:
        (driven,) = run_tasks([task], runner, MemoryCache(), shared=False)
    assert driven.capacity_qps == whole.capacity_qps > 0
    assert [p.qps for p in driven.probes] == [p.qps for p in whole.probes]
    assert all(p.qps == round(p.qps, 2) for p in whole.probes)


# -- default outputs and cache keys ------------------------------------------------------------------------


def test_default_scenarios_key_and_echo_as_before() -> None:
    s = Scenario()
    fields = scenario_fields(s)
    assert "time_limit_s" not in fields
    assert "time_limit_s" in scenario_fields(replace(s, time_limit_s=1800.0))
    # the cache key payload of a default scenario is the pre-existing field set
    assert probe_key(s, 1.0, (0.5,)) != probe_key(replace(s, time_limit_s=1800.0), 1.0, (0.5,))


def test_paper_runs_are_deterministic() -> None:
    s = paper_setup(Scenario(num_requests=120))
    from simserve.sim.scenario import run_scenario

    a, b = run_scenario(s, 0.05), run_scenario(s, 0.05)
    assert a.summary.capped and a.summary == b.summary
    assert a.requests.equals(b.requests)


# -- the command line --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--arrival", "gamma"], "--arrival gamma"),
        (["--no-cpu-overhead"], "--no-cpu-overhead"),
        (["--stop-when-overloaded"], "--stop-when-overloaded"),
    ],
)
def test_run_rejects_combinations_the_paper_could_not_have(tmp_path, capsys, extra, needle) -> None:
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exc:
        main(["run", "--paper-setup", *extra, "--requests", "20", "--out", str(out)])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and needle in err[0]
    assert not out.exists()


@pytest.mark.parametrize("extra", [["--toy"], ["--engine", "vllm"]])
def test_sweep_rejects_paper_setup_with_toy_or_engine(tmp_path, capsys, extra) -> None:
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exc:
        main(["sweep", "--paper-setup", *extra, "--out", str(out), "--no-cache"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--paper-setup" in err[0]
    assert not any(out.glob("*")) if out.exists() else True


def test_run_paper_setup_writes_a_capped_summary(tmp_path) -> None:
    out = tmp_path / "p"
    main(["run", "--paper-setup", "--requests", "120", "--qps", "0.05", "--out", str(out)])
    doc = json.loads((out / "summary.json").read_text())
    assert doc["summary"]["capped"] and doc["scenario"]["time_limit_s"] == PAPER_TIME_LIMIT_S
    assert doc["scenario"]["arrival"] == "poisson-clipped" and doc["scenario"]["ray_comm"]
    assert doc["summary"]["completed"] < 120


def test_run_without_the_switch_echoes_no_new_field(tmp_path) -> None:
    out = tmp_path / "d"
    main(["run", "--requests", "30", "--qps", "2", "--out", str(out)])
    doc = json.loads((out / "summary.json").read_text())
    assert "time_limit_s" not in doc["scenario"] and "capped" not in doc["summary"]
    assert hashlib.sha256((out / "requests.csv").read_bytes()).hexdigest()  # written whole


def test_a_paper_sweep_searches_the_papers_way() -> None:
    from simserve.tune.sweep import SweepSpec

    spec = SweepSpec(
        paper_setup(Scenario(num_requests=64)), policies=("vllm", "sarathi"), budgets=(512,), search="paper"
    )
    for _, _, task in spec.tasks():
        assert task.search == "paper" and task.first_qps is None  # its own start bracket
        assert task.scenario.stop_tbt is None and task.scenario.time_limit_s == PAPER_TIME_LIMIT_S
    default = SweepSpec(Scenario(num_requests=64), policies=("sarathi",), budgets=(512,))
    assert all(t.search == "simserve" and t.scenario.stop_tbt for _, _, t in default.tasks())
