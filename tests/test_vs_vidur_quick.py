"""The Vidur side of benchmarks/vs_vidur.py without running Vidur: inputs it writes and what it reads back.

Running Vidur itself needs its own venv (minutes to build), so that part is opt-in: set SIMSERVE_VIDUR_TESTS=1
after `python benchmarks/vs_vidur.py --quick` has created .venv-vidur/.
"""

from __future__ import annotations

import json
import lzma
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import vidur_runner as vr  # noqa: E402

from simserve.errors import SimserveError  # noqa: E402
from simserve.io import exact_floats


def _fake_profile(root: Path, scale: float = 1.0) -> Path:
    tree = root / "data" / "profiling"
    for rel, name in (
        ("compute/a100/m", "mlp.csv"),
        ("compute/a100/m", "attention.csv"),
        ("network/n", "all_reduce.csv"),
        ("network/n", "send_recv.csv"),
    ):
        (tree / rel).mkdir(parents=True, exist_ok=True)
        pd.DataFrame({"x": [1, 2], "time_stats.op.median": [0.5 * scale, 0.7]}).to_csv(
            tree / rel / name, index=False
        )
    return root


def test_replay_trace_keeps_arrivals_and_lengths_exactly(tmp_path):
    arrived = np.cumsum(np.random.default_rng(3).exponential(0.7, 50))
    prompt, output = np.arange(1, 51) * 7, np.arange(50, 0, -1)
    path = vr.write_replay_trace(tmp_path / "t.csv", arrived, prompt, output)
    back = pd.read_csv(path, **exact_floats())
    assert (back["Date"] == vr.TRACE_DATE).all()  # Vidur keeps only rows of one date
    assert np.array_equal(back["Time"].to_numpy(), arrived)  # bit-exact, not rounded
    assert np.array_equal(back["PromptTokenCount"], prompt) and np.array_equal(
        back["CompletionTokenCount"], output
    )


def test_staged_profile_is_a_hub_snapshot_keyed_by_content(tmp_path):
    setup = vr.VidurSetup(model="meta-llama/Llama-2-7b-hf")
    a = vr.stage_profile(_fake_profile(tmp_path / "a"), setup, tmp_path / "cache")
    repo = a.cache_dir / "profiling_data" / "compute" / f"datasets--{a.compute_dataset.replace('/', '--')}"
    rev = (repo / "refs" / "main").read_text()
    snap = repo / "snapshots" / rev
    assert json.loads((snap / "config.json").read_text()) == {"model": setup.model, "device_sku": "a100"}
    with lzma.open(snap / "mlp.csv.xz") as f:
        assert pd.read_csv(f, **exact_floats())["time_stats.op.median"].tolist() == [0.5, 0.7]
    # Same bytes -> same cache (trained predictors reused); other bytes or another grid -> another cache.
    assert vr.stage_profile(_fake_profile(tmp_path / "b"), setup, tmp_path / "cache") == a
    assert vr.stage_profile(_fake_profile(tmp_path / "c", 2.0), setup, tmp_path / "cache") != a
    other_grid = vr.VidurSetup(model=setup.model, grid=vr.DEFAULT_GRID)
    assert vr.stage_profile(_fake_profile(tmp_path / "b"), other_grid, tmp_path / "cache") != a


def test_missing_profile_file_is_one_clear_error(tmp_path):
    root = _fake_profile(tmp_path)
    next(root.rglob("attention.csv")).unlink()
    with pytest.raises(SimserveError, match="no attention.csv"):
        vr.find_vidur_files(root)


def test_flags_carry_policy_budget_memory_and_grid(tmp_path):
    staged = vr.StagedProfile(tmp_path, "local/p", "local/n")
    setup = vr.VidurSetup(model="m", policy="vllm", token_budget=4096, num_blocks=6999, grid=vr.REDUCED_GRID)
    args = vr.vidur_args(setup, staged, tmp_path / "t.csv", tmp_path / "out")
    flag = {a: args[i + 1] for i, a in enumerate(args[:-1]) if a.startswith("--")}
    assert flag["--replica_scheduler_config_type"] == "vllm"
    assert flag["--vllm_scheduler_config_max_tokens_in_batch"] == "4096"
    assert flag["--cache_config_num_blocks"] == "6999"
    assert flag["--request_generator_config_type"] == "trace_replay"
    assert flag["--trace_request_generator_config_time_scale_factor"] == "1"
    assert flag["--random_forrest_execution_time_predictor_config_k_fold_cv_splits"] == "2"
    with pytest.raises(SimserveError, match="no policy"):
        vr.vidur_args(vr.VidurSetup(model="m", policy="fcfs"), staged, tmp_path / "t.csv", tmp_path)


@pytest.mark.skipif(
    os.environ.get("SIMSERVE_VIDUR_TESTS") != "1" or not (vr.VENV / ".simserve-vidur").exists(),
    reason="runs Vidur: set SIMSERVE_VIDUR_TESTS=1 once .venv-vidur/ exists (benchmarks/vs_vidur.py --quick)",
)
def test_quick_benchmark_runs_end_to_end(tmp_path):
    import vs_vidur

    assert vs_vidur.main(["--quick", "--requests", "40", "--out", str(tmp_path)]) == 0
    report = json.loads(next(tmp_path.rglob("report.json")).read_text())
    (run,) = report["runs"]
    assert {r["metric"] for r in run["compare"]} >= {"ttft_p50", "tbt_p99", "e2e_p99"}
