"""`simserve run` and `run_scenario`: bad input, determinism, output files."""

from __future__ import annotations

import pickle
from pathlib import Path

import pandas as pd
import pytest

from simserve.cli import main
from simserve.errors import SimserveError
from simserve.sim.scenario import Scenario, run_scenario
from simserve.sim.testing import LinearTimer

REPO = Path(__file__).resolve().parents[1]
HAS_PROFILE = (REPO / "profiles" / "a100-80gb" / "mistral-7b").is_dir()


def cli(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(["run", *args])
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


@pytest.mark.parametrize(
    "args, words",
    [
        (["--budget", "0"], "--budget"),
        (["--max-batch", "0"], "--max-batch"),
        (["--qps", "0"], "--qps"),
        (["--qps", "-2"], "--qps"),
        (["--policy", "fastest"], "unknown policy"),
        (["--router", "random"], "unknown router"),
    ],
)
def test_bad_input_is_one_error_line_and_exit_2(capsys, tmp_path, args, words):
    code, _, err = cli(capsys, *args, "--out", str(tmp_path / "out"))
    assert code == 2
    assert err.startswith("error: ") and words in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_an_empty_trace_is_an_error(capsys, tmp_path):
    trace = tmp_path / "empty.csv"
    trace.write_text("num_prefill_tokens,num_decode_tokens\n")
    code, _, err = cli(capsys, "--trace", str(trace), "--out", str(tmp_path / "out"))
    assert code == 2 and err.startswith("error: ") and "empty" in err and err.count("\n") == 1


def test_run_scenario_takes_a_timer_and_is_repeatable():
    s = Scenario(num_requests=64, seed=3)
    assert pickle.loads(pickle.dumps(s)) == s
    timer = LinearTimer(0.01, 4e-5, 5e-8)
    a, b = run_scenario(s, 2.0, timer), run_scenario(s, 2.0, timer)
    pd.testing.assert_frame_equal(a.requests, b.requests)
    assert a.summary == b.summary and a.summary.completed == 64 and not a.overloaded
    with pytest.raises(SimserveError, match="stages"):
        run_scenario(Scenario(num_requests=8, pp=2, model="llama2-70b", gpu="a40", tp=4), 1.0, timer)


@pytest.mark.skipif(not HAS_PROFILE, reason="profiles/a100-80gb/mistral-7b is not in this checkout")
def test_same_inputs_and_seed_give_byte_identical_outputs(capsys, tmp_path):
    args = ["--requests", "48", "--qps", "3", "--seed", "7", "--budget", "256"]
    for name in ("a", "b"):
        code, out, err = cli_ok(capsys, *args, "--out", str(tmp_path / name))
        assert "completed" in out
    files = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert files == [".simserve-output", "iterations.csv", "requests.csv", "summary.json", "trace.json"]
    for f in files:
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f
    req = pd.read_csv(tmp_path / "a" / "requests.csv")
    assert len(req) == 48 and {"request_id", "tbt_mean_s", "tbt_max_s", "preemptions"} <= set(req.columns)


def cli_ok(capsys, *args: str) -> tuple[int, str, str]:
    main(["run", *args])
    out = capsys.readouterr()
    return 0, out.out, out.err
