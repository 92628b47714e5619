"""`simserve run --autoscale`: what it writes (replicas.csv, summary.json's autoscale section, replicas.png),
and bad input refused in one line, exit code 2, nothing written."""

from __future__ import annotations

import csv
import json

import pytest
from cli_runner import cli

# a quick run: the shipped Mistral-7B/A100 profile, a short trace
BASE = ["run", "--requests", "300", "--qps", "4", "--frontend", "constant"]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--autoscale", "4:2"], "minimum exceeds the maximum"),
        (["--autoscale", "0:2"], "at least 1 replica"),
        (["--autoscale", "1-2"], "MIN:MAX"),
        (["--autoscale", "1:2", "--scale-policy", "magic"], "unknown --scale-policy"),
        (["--autoscale", "1:2", "--replicas", "3"], "--replicas 3"),
        (["--autoscale", "1:2", "--cold-start-s", "100000"], "cold start"),
        (["--autoscale", "1:2", "--weights-from", "floppy"], "unknown storage"),
        (["--autoscale", "1:2", "--scale-target", "1.5"], "--scale-target"),
        (["--autoscale", "1:2", "--replica-capacity", "3"], "--replica-capacity"),
        (["--autoscale", "1:2", "--scale-policy", "slo", "--replica-capacity", "-1"], "--replica-capacity"),
        (["--autoscale", "1:2", "--prefill", "1xTP1", "--decode", "1xTP1"], "disaggregated"),
        (["--autoscale", "1:2", "--ttft-slo", "0"], "--ttft-slo"),
        (["--cold-start-s", "30"], "--autoscale"),
        (["--scale-policy", "queue"], "--autoscale"),
        (["--no-plots"], "--autoscale"),
    ],
)
def test_bad_autoscaler_input_is_one_line_and_writes_nothing(capsys, tmp_path, args, words):
    code, _, err = cli(capsys, *BASE, "--out", str(tmp_path / "o"), *args)
    assert code == 2, err
    assert err.count("\n") == 1 and words in err and "Traceback" not in err, err
    assert not (tmp_path / "o").exists()


def test_an_autoscaled_run_writes_its_replicas_its_gpu_hours_and_its_plot(capsys, tmp_path):
    out = tmp_path / "o"
    code, stdout, err = cli(
        capsys,
        *BASE,
        "--out",
        str(out),
        "--autoscale",
        "1:3",
        "--scale-target",
        "0.02",
        "--cold-start-s",
        "10",
    )
    assert code == 0, err
    assert "autoscaler: --scale-policy utilization 1:3" in stdout.replace("\n", " ")
    rows = list(csv.DictReader((out / "replicas.csv").open()))
    assert rows and rows[0]["event"] == "decision" and float(rows[0]["time_s"]) == 15.0
    assert max(int(r["active"]) for r in rows) > 1  # a 2% KV target on 4 qps scales up
    s = json.loads((out / "summary.json").read_text())
    a = s["autoscale"]
    assert a["cold_start"] == {"total_s": 10.0, "given": True}
    assert 0 < a["gpu_hours"] < a["static_peak_gpu_hours"]
    assert a["windows"] and all(0 <= w["slo_attainment"] <= 1 for w in a["windows"] if w["requests"])
    assert s["scenario"]["autoscale"]["max_replicas"] == 3
    assert (out / "replicas.png").stat().st_size > 1000


def test_without_autoscale_a_run_writes_no_replicas_file(capsys, tmp_path):
    code, _, err = cli(capsys, *BASE, "--out", str(tmp_path / "o"))
    assert code == 0, err
    assert not (tmp_path / "o" / "replicas.csv").exists()
    assert "autoscale" not in json.loads((tmp_path / "o" / "summary.json").read_text())
