"""The capacity search and the sweep on the real simulator, on tiny configurations (64 requests)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

scenario = pytest.importorskip("simserve.sim.scenario", reason="the simulator is not in this checkout")

from simserve.cli import main  # noqa: E402
from simserve.errors import SimserveError  # noqa: E402
from simserve.tune.capacity import SLO  # noqa: E402
from simserve.tune.jobs import CapacityTask, solve  # noqa: E402
from simserve.tune.probe import CDF_GRID, STANDARD_QUANTILES  # noqa: E402
from simserve.tune.simadapter import record_from_result  # noqa: E402
from simserve.tune.sweep import SweepSpec, run_sweep  # noqa: E402

Scenario = scenario.Scenario
TINY = Scenario(
    model="mistral-7b",
    gpu="a100",
    trace="sharegpt",
    num_requests=64,
    policy="sarathi",
    budget=512,
    max_batch=128,
)


def test_probe_record_agrees_with_the_simulators_summary() -> None:
    result = scenario.run_scenario(TINY, 1.0)
    rec = record_from_result(result, 1.0, STANDARD_QUANTILES, CDF_GRID)
    m, s = rec["metrics"], result.summary
    assert m["tbt_p99_s"] == pytest.approx(s.tbt_p99_s)
    assert m["tbt_p50_s"] == pytest.approx(s.tbt_p50_s)
    assert m["scheduling_delay_p50_s"] == pytest.approx(s.scheduling_delay_p50_s)
    assert m["ttft_p99_s"] == pytest.approx(s.ttft_p99_s)
    assert m["completed"] == s.completed and m["overloaded"] == float(s.overloaded)
    for curve in rec["cdf"].values():
        assert len(curve) == len(CDF_GRID) and np.all(np.diff(curve) >= -1e-12)  # a CDF never decreases


def test_real_search_brackets_the_capacity() -> None:
    r = solve(CapacityTask(TINY, SLO(0.1)))
    assert r.capacity_qps > 0 and r.message == ""
    at = r.metrics_at_capacity
    assert at["tbt_p99_s"] <= 0.1 and at["scheduling_delay_p50_s"] <= 2.0 and not at["overloaded"]
    above = min(p.qps for p in r.probes if not p.passed)
    assert above <= r.capacity_qps * (1 + 0.025) + 1e-9  # bisection stopped within the tolerance


def test_slo_below_one_decode_iteration_gives_zero() -> None:
    # One Mistral-7B decode iteration on an A100 takes several milliseconds: 1 ms cannot be met.
    r = solve(CapacityTask(TINY, SLO(0.001), start_qps=1.0))
    assert r.capacity_qps == 0.0 and "no load meets" in r.message


def test_a_configuration_that_does_not_fit_fails_before_simulating() -> None:
    big = Scenario(model="falcon-180b", gpu="a100", tp=1, num_requests=8)
    with pytest.raises(SimserveError, match="does not fit"):
        run_sweep(SweepSpec(big, policies=("vllm",)), executor="serial")


def test_cli_out_of_memory_is_exit_2(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(
            [
                "sweep",
                "--model",
                "falcon-180b",
                "--tp",
                "1",
                "--policies",
                "vllm",
                "--no-cache",
                "--out",
                str(tmp_path / "o"),
            ]
        )
    err = capsys.readouterr().err
    assert (
        exc.value.code == 2 and err.startswith("error: ") and "does not fit" in err and err.count("\n") == 1
    )
    assert not (tmp_path / "o").exists()


def test_tiny_real_sweep_finds_sarathi_ahead_of_vllm_at_a_strict_slo(tmp_path: Path) -> None:
    spec = SweepSpec(TINY, policies=("vllm", "sarathi"), budgets=(512,), slos=(SLO(0.1),))
    result = run_sweep(spec, executor="local", workers=2, cache_dir=tmp_path)
    cap = result.rows.set_index("policy")["capacity_qps"]
    # The paper's claim, at the Mistral-7B strict SLO: stall-free batching carries more load than vLLM,
    # whose prefill-only batches stall decodes past 0.1 s.
    assert cap["sarathi"] > cap["vllm"] > 0
    assert result.cdfs and result.cdf_reference.startswith("vllm")
    again = run_sweep(spec, executor="local", workers=2, cache_dir=tmp_path)
    assert again.stats["probes_simulated"] == 0 and again.rows.equals(result.rows)
