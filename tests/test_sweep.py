"""The sweep machinery (grid, executors, probe cache, outputs, CLI errors) on the closed-form toy model."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from simserve.cli import main
from simserve.errors import SimserveError
from simserve.tune import toy
from simserve.tune.capacity import SLO
from simserve.tune.probe import ProbeCache, probe_key, quantiles_for
from simserve.tune.report import summarize, write_outputs
from simserve.tune.sweep import SweepSpec, best_per_policy, label, run_sweep
from simserve.tune.toy import ToyScenario

BASE = ToyScenario(num_requests=64)
SMALL = SweepSpec(BASE, policies=("orca", "vllm", "sarathi"), budgets=(256, 512, 513), slos=(SLO(0.1),))


def test_grid_sweeps_budgets_only_where_they_exist() -> None:
    spec = SweepSpec(
        BASE,
        policies=("fcfs", "orca", "vllm", "sarathi", "chunked", "hybrid"),
        budgets=(256, 512),
        max_batches=(64, 128),
        reserving_max_batch=16,
    )
    configs = spec.configs()
    assert ("fcfs", None, 16) in configs and ("orca", None, 16) in configs
    assert [c for c in configs if c[0] == "vllm"] == [("vllm", None, 64), ("vllm", None, 128)]
    assert [c for c in configs if c[0] == "sarathi"] == [
        ("sarathi", b, m) for b in (256, 512) for m in (64, 128)
    ]
    assert len(spec.tasks()) == len(configs)
    assert label("sarathi", 512, 128) == "sarathi-512" and label("vllm", None, 64) == "vllm-bs64"
    seeded = replace(spec, seeds=(0, 1, 2), slos=(SLO(0.1), SLO(0.5)))
    assert len(seeded.tasks()) == 6 * len(configs)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"policies": ("vllm", "bogus")}, "unknown policy 'bogus'"),
        ({"budgets": ()}, "--budgets is empty"),
        ({"budgets": (0,)}, "positive"),
        ({"max_batches": ()}, "max batch"),
        ({"policies": ()}, "empty"),
    ],
)
def test_bad_grid_is_one_line_error(kwargs: dict, match: str) -> None:
    with pytest.raises(SimserveError, match=match) as exc:
        SweepSpec(BASE, **kwargs)
    assert "\n" not in str(exc.value)


def test_sweep_finds_each_configurations_capacity(tmp_path: Path) -> None:
    r = run_sweep(SMALL, executor="serial", cache_dir=tmp_path)
    assert list(r.rows["label"]) == ["orca-bs16", "vllm-bs128", "sarathi-256", "sarathi-512", "sarathi-513"]
    for _, row in r.rows.iterrows():
        assert row["tbt_p99_s"] <= 0.1 and row["scheduling_delay_p50_s"] <= 2.0
        assert row["capacity_qps"] > 0 and row["probes"] >= 3
    by = r.rows.set_index("label")["capacity_qps"]
    # The toy pays for a whole extra 128-token tile at 513: the sweep must see the dip.
    assert by["sarathi-513"] < by["sarathi-512"]
    # CDFs are taken at vLLM's capacity for each policy's best configuration.
    assert r.cdf_qps == by["vllm-bs128"] and r.cdf_reference.startswith("vllm")
    assert {k.removesuffix(" (overloaded)") for k in r.cdfs} == set(best_per_policy(r.rows)["label"])
    assert "orca-bs16 (overloaded)" in r.cdfs  # orca cannot carry vLLM's capacity in the toy model


def test_rerun_is_served_from_the_cache(tmp_path: Path) -> None:
    first = run_sweep(SMALL, executor="serial", cache_dir=tmp_path)
    assert first.stats["from_cache"] == 0 and first.stats["probes_simulated"] > 0
    again = run_sweep(SMALL, executor="serial", cache_dir=tmp_path)
    assert again.stats["from_cache"] == again.stats["tasks"] and again.stats["probes_simulated"] == 0
    pd.testing.assert_frame_equal(first.rows, again.rows)
    assert json.dumps(again.cdfs, sort_keys=True) == json.dumps(
        first.cdfs, sort_keys=True
    )  # (NaN-safe comparison)


def test_a_new_slo_reuses_the_simulations(tmp_path: Path) -> None:
    run_sweep(SMALL, executor="serial", cache_dir=tmp_path)
    looser = run_sweep(replace(SMALL, slos=(SLO(0.12),)), executor="serial", cache_dir=tmp_path)
    total = int(looser.rows["probes"].sum())
    assert 0 < looser.stats["probes_simulated"] < total  # the shared low-rate probes were not re-run


def test_interrupted_sweep_leaves_a_valid_cache_and_resumes(tmp_path: Path, monkeypatch) -> None:
    reference = run_sweep(SMALL, executor="serial", cache_dir=None)
    total = int(reference.rows["probes"].sum())
    real, calls = toy.ToyScenario.record, {"n": 0}

    def crashing(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] > total // 2:
            raise KeyboardInterrupt  # as if the user pressed Ctrl-C half-way
        return real(self, *args, **kwargs)

    monkeypatch.setattr(toy.ToyScenario, "record", crashing)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(SMALL, executor="serial", cache_dir=tmp_path)
    files = list(tmp_path.glob("*/*.json"))
    assert len(files) == total // 2
    for f in files:
        assert "metrics" in json.loads(f.read_text())
    assert not list(tmp_path.rglob("*.tmp"))  # atomic writes leave no temporaries
    monkeypatch.setattr(toy.ToyScenario, "record", real)
    resumed = run_sweep(SMALL, executor="serial", cache_dir=tmp_path)
    assert resumed.stats["probes_simulated"] == total - total // 2
    pd.testing.assert_frame_equal(resumed.rows, reference.rows)


def test_worker_processes_give_the_same_answer_as_one_process(tmp_path: Path) -> None:
    serial = run_sweep(SMALL, executor="serial")
    local = run_sweep(SMALL, executor="local", workers=2, cache_dir=tmp_path)
    pd.testing.assert_frame_equal(serial.rows, local.rows)
    assert len(ProbeCache(tmp_path)) > 0  # the workers wrote the cache themselves


def test_cache_key_covers_the_scenario_and_the_rate() -> None:
    q = quantiles_for(SLO())
    key = probe_key(BASE, 1.0, q)
    assert key == probe_key(ToyScenario(num_requests=64), 1.0, q)
    assert key != probe_key(BASE, 1.001, q)
    assert key != probe_key(replace(BASE, seed=1), 1.0, q)
    assert key != probe_key(replace(BASE, num_requests=65), 1.0, q)
    assert key != probe_key(BASE, 1.0, quantiles_for(SLO(tbt_quantile=0.97)))


def test_seeds_report_a_spread(tmp_path: Path) -> None:
    spec = replace(SMALL, policies=("sarathi",), budgets=(512,), seeds=(0, 1, 2, 3))
    row = run_sweep(spec, executor="serial").rows.iloc[0]
    assert row["seeds"] == 4 and row["capacity_std"] > 0
    assert row["capacity_min"] < row["capacity_qps"] < row["capacity_max"]


def test_outputs_are_written_together(tmp_path: Path) -> None:
    spec = replace(SMALL, slos=(SLO(0.1), SLO(0.2)), max_batches=(64, 128))
    result = run_sweep(spec, executor="serial")
    out = tmp_path / "out"
    write_outputs(result, out)
    names = {p.name for p in out.iterdir()}
    assert {
        "sweep.csv",
        "probes.csv",
        "summary.json",
        "latency_cdfs.json",
        "capacity_vs_budget.png",
        "capacity_per_policy.png",
        "latency_cdfs.png",
        "tradeoff.png",
    } <= names
    csv = pd.read_csv(out / "sweep.csv")
    assert {"policy", "budget", "max_batch", "slo_s", "capacity_qps"} <= set(csv.columns)
    assert len(csv) == len(result.rows)
    summary = json.loads((out / "summary.json").read_text())
    strict = summary["results"][0]
    assert strict["slo"]["tbt_s"] == 0.1 and strict["sarathi_best_budget"] in (256, 512, 513)
    assert strict["sarathi_gain_over_vllm"] == pytest.approx(
        strict["best"]["sarathi"]["capacity_qps"] / strict["best"]["vllm"]["capacity_qps"]
    )
    assert summarize(result)["grid"]["budgets"] == [256, 512, 513]
    for png in out.glob("*.png"):
        assert png.read_bytes()[:4] == b"\x89PNG"


def _cli(args: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(args)
        raise SystemExit(0)
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--slo", "0"], "SLO must be a positive"),
        (["--slo", "-0.1"], "SLO must be a positive"),
        (["--budgets", ""], "--budgets is empty"),
        (["--policies", "vllm,magic"], "unknown policy 'magic'"),
        (["--budgets", "512,abc"], "comma-separated"),
        (["--executor", "ray", "--address", "127.0.0.1:9"], "no Ray cluster answers at 127.0.0.1:9"),
        (["--executor", "ray", "--address", "nonsense"], "not HOST:PORT"),
        (["--address", "127.0.0.1:9"], "--address is for --executor ray"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(args: list[str], match: str, capsys, tmp_path: Path) -> None:
    code, out, err = _cli(["sweep", "--toy", "--out", str(tmp_path / "o"), "--no-cache", *args], capsys)
    assert code == 2
    assert err.startswith("error: ") and match in err and err.count("\n") == 1
    assert not (tmp_path / "o").exists()


def test_cli_sweep_writes_the_outputs_and_prints_the_table(tmp_path: Path, capsys) -> None:
    args = [
        "sweep",
        "--toy",
        "--policies",
        "vllm,sarathi",
        "--budgets",
        "256,512",
        "--executor",
        "serial",
        "--out",
        str(tmp_path / "o"),
        "--cache",
        str(tmp_path / "cache"),
    ]
    code, out, err = _cli(args, capsys)
    assert code == 0, err
    assert "sarathi-512" in out or "sarathi-256" in out
    assert "vs vLLM" in out and (tmp_path / "o" / "sweep.csv").exists()
    code, out, _ = _cli(args, capsys)
    assert code == 0 and "(3 from cache, 0 simulations)" in out
