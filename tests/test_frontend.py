"""The serving front end's latency (sim/frontend.py): in what a client sees, nowhere else."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from cli_runner import cli

from simserve.sim import simulate
from simserve.sim.bench_report import bench_metrics
from simserve.sim.config import SimConfig
from simserve.sim.frontend import API_SERVER_CPU, DEFAULT_FRONTEND_MS
from simserve.sim.metrics import summarize
from simserve.sim.testing import ConstantTimer


def test_a_constant_front_end_adds_to_ttft_and_e2e_only(capsys, tmp_path):
    docs = {}
    for name, extra in (
        ("default", []),
        ("engine", ["--frontend", "off"]),
        ("slow", ["--frontend-ms", "50"]),
    ):
        code, out, _ = cli(
            capsys,
            "run",
            "--requests",
            "40",
            "--seed",
            "2",
            "--frontend",
            "constant",
            *extra,
            "--out",
            str(tmp_path / name),
        )
        assert code == 0
        docs[name] = json.loads((tmp_path / name / "summary.json").read_text())["summary"]
        if name == "default":
            assert "10.2 ms of serving front end" in " ".join(out.split())
    assert DEFAULT_FRONTEND_MS == 10.2 and docs["default"]["frontend_s"] == pytest.approx(0.0102)
    assert "frontend_s" not in docs["engine"]  # an engine-side summary keeps its old keys
    for name, f in (("default", 0.0102), ("slow", 0.05)):
        for key in ("ttft_p50_s", "ttft_p99_s", "e2e_p50_s", "e2e_p90_s"):
            assert docs[name][key] - docs["engine"][key] == pytest.approx(f, abs=1e-12)
        for key in ("tbt_p50_s", "tbt_p99_s", "scheduling_delay_p50_s", "duration_s", "throughput_tps"):
            assert docs[name][key] == docs["engine"][key]
    assert (tmp_path / "default" / "requests.csv").read_bytes() == (
        tmp_path / "engine" / "requests.csv"
    ).read_bytes()


def test_paper_setup_runs_without_it(capsys, tmp_path):
    code, _, _ = cli(capsys, "run", "--requests", "10", "--paper-setup", "--out", str(tmp_path / "p"))
    assert code == 0
    assert "frontend_s" not in json.loads((tmp_path / "p" / "summary.json").read_text())["summary"]
    code, _, err = cli(
        capsys, "run", "--requests", "10", "--paper-setup", "--frontend-ms", "5", "--out", str(tmp_path / "q")
    )
    assert code == 2 and err.count("\n") == 1 and "--frontend-ms" in err
    code, _, err = cli(
        capsys,
        "run",
        "--requests",
        "10",
        "--paper-setup",
        "--frontend",
        "server",
        "--out",
        str(tmp_path / "q"),
    )
    assert code == 2 and err.count("\n") == 1 and "--frontend" in err


@pytest.mark.parametrize("value", ["-1", "nan", "inf"])
def test_a_bad_value_is_one_line(capsys, tmp_path, value):
    code, _, err = cli(capsys, "run", "--requests", "4", "--frontend-ms", value, "--out", str(tmp_path / "o"))
    assert code == 2 and err.count("\n") == 1 and "--frontend-ms" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_a_closed_loop_client_waits_the_front_end_out_and_back_in():
    # one slot, each request 0.4 s at the engine: the next reaches the engine 0.05 s after the last token
    cfg = SimConfig(policy="vllm-v1", max_concurrency=1, frontend_s=0.05)
    raw = simulate(np.full(4, 100), np.full(4, 4), np.zeros(4), ConstantTimer(0.1), 4000, cfg)
    assert raw.reqs.arrived.tolist() == pytest.approx([0.0, 0.45, 0.9, 1.35])
    m = bench_metrics(raw, math.inf)
    assert m["mean_ttft_ms"] == pytest.approx(150.0) and m["median_e2el_ms"] == pytest.approx(450.0)
    # the last reply's way out
    assert m["mean_tpot_ms"] == pytest.approx(100.0) and m["duration"] == pytest.approx(1.8)
    s = summarize(raw)
    assert s.ttft_p50_s == pytest.approx(0.15) and s.scheduling_delay_p50_s == 0.0


def test_sweep_adds_the_front_end_to_ttft_and_prints_it(capsys, tmp_path):
    """`sweep --frontend-ms`: the same probes and capacities (TBT and scheduling delay are engine-side), every
    TTFT in sweep.csv 25 ms later, and the printed note; without it TTFT stays engine-side, as before."""
    import pandas as pd

    rows = {}
    for name, extra in (("engine", []), ("client", ["--frontend-ms", "25"])):
        args = [
            "sweep",
            "--policies",
            "sarathi",
            "--budgets",
            "512",
            "--requests",
            "96",
            "--no-cache",
            "--no-plots",
            "--out",
            str(tmp_path / name),
            *extra,
        ]
        code, out, _ = cli(capsys, *args)
        assert code == 0
        assert ("25 ms of serving front end" in " ".join(out.split())) == bool(extra)
        rows[name] = pd.read_csv(tmp_path / name / "sweep.csv").iloc[0]
    for key in ("capacity_qps", "probes", "tbt_p99_s", "scheduling_delay_p50_s", "throughput_rps"):
        assert rows["client"][key] == rows["engine"][key]
    for key in ("ttft_p50_s", "ttft_p99_s"):
        assert rows["client"][key] == pytest.approx(rows["engine"][key] + 0.025, abs=1e-5)


def test_a_ttft_slo_counts_the_front_end():
    """The tuner's probe record (tune/simadapter.py) carries the client's TTFT, so --ttft-slo bounds it."""
    from dataclasses import replace

    from simserve.sim.scenario import Scenario
    from simserve.tune.simadapter import record_from_scenario

    base = Scenario(num_requests=48, seed=3)
    engine, client = (
        record_from_scenario(replace(base, frontend_ms=ms), 2.0, (0.5, 0.99), (0.5,))["metrics"]
        for ms in (0.0, 40.0)
    )
    assert client["ttft_p50_s"] == pytest.approx(engine["ttft_p50_s"] + 0.04)
    assert client["ttft_p99_s"] == pytest.approx(engine["ttft_p99_s"] + 0.04)
    assert client["tbt_p99_s"] == engine["tbt_p99_s"]
    assert client["scheduling_delay_p50_s"] == engine["scheduling_delay_p50_s"]


@pytest.mark.parametrize(
    "args",
    [
        ["sweep", "--toy", "--frontend-ms", "5"],
        ["sweep", "--paper-setup", "--frontend-ms", "5"],
        ["sweep", "--frontend-ms", "-1"],
        ["plan", "--model", "mistral-7b", "--gpus", "a100", "--frontend-ms", "nan"],
    ],
)
def test_sweep_and_plan_refuse_a_bad_front_end_in_one_line(capsys, tmp_path, args):
    code, _, err = cli(capsys, *args, "--out", str(tmp_path / "o"))
    assert code == 2 and err.count("\n") == 1 and "--frontend-ms" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_run_defaults_to_the_api_server_model(capsys, tmp_path):
    """`run`'s default: vLLM's API server as a queue (sim/api_server.py) plus the network's 10.2 ms; TBT and
    the scheduling delay stay engine-side; `--frontend off` is the engine-side run, whose engine times it
    keeps."""
    docs, rows, outs = {}, {}, {}
    for name, extra in (("server", []), ("off", ["--frontend", "off"]), ("two", ["--api-server-count", "2"])):
        code, out, _ = cli(
            capsys,
            "run",
            "--requests",
            "40",
            "--seed",
            "2",
            "--policy",
            "vllm-v1",
            *extra,
            "--out",
            str(tmp_path / name),
        )
        assert code == 0
        docs[name] = json.loads((tmp_path / name / "summary.json").read_text())
        rows[name] = (tmp_path / name / "requests.csv").read_text().splitlines()
        outs[name] = " ".join(out.split())
    server, off = docs["server"]["summary"], docs["off"]["summary"]
    assert "API server: 1 process(es)" in outs["server"] and "API server" not in outs["off"]
    api = server["api_server"]
    assert api["processes"] == 1 and api["network_ms"] == pytest.approx(DEFAULT_FRONTEND_MS)
    assert api["request_cpu_ms"] == pytest.approx(API_SERVER_CPU.request_s * 1e3)
    assert docs["two"]["summary"]["api_server"]["processes"] == 2 and "api_server" not in off
    assert server["ttft_p50_s"] > off["ttft_p50_s"] + 0.0102 + API_SERVER_CPU.request_s - 1e-9
    assert docs["server"]["vllm_bench_serve"]["api_server_count"] == 1
    assert rows["server"][0].endswith("sent_at_s,client_first_token_at_s,client_completed_at_s,status")
    assert rows["off"][0].endswith("tbt_max_s,status")


@pytest.mark.parametrize(
    "args, word",
    [
        (["--api-server-count", "0"], "--api-server-count"),
        (["--api-server-count", "-2"], "--api-server-count"),
        (["--frontend", "fast"], "--frontend"),
        (["--frontend", "off", "--frontend-ms", "3"], "--frontend-ms"),
        (["--frontend", "constant", "--api-server-count", "2"], "--api-server-count"),
        (["--frontend", "server", "--engine", "sglang"], "SGLang"),
        (["--frontend", "server", "--prefill", "1xTP1", "--decode", "1xTP1"], "disaggregated"),
    ],
)
def test_bad_front_end_options_are_one_line(capsys, tmp_path, args, word):
    code, _, err = cli(capsys, "run", "--requests", "4", *args, "--out", str(tmp_path / "o"))
    assert code == 2 and err.count("\n") == 1 and word in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()
