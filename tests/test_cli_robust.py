"""The CLI under the faults a daily user hits: an --out that holds other files, interrupts, burst loads."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_runner import cli

from simserve.io import MARKER

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(
    not (REPO / "profiles" / "a100-80gb" / "mistral-7b").is_dir(), reason="shipped Mistral-7B profile absent"
)
SMALL = ["--requests", "16", "--qps", "4"]


def test_out_that_is_a_file_is_refused_before_any_work(capsys, tmp_path):
    f = tmp_path / "results"
    f.write_text("mine")
    code, _, err = cli(capsys, "run", *SMALL, "--out", str(f))
    assert code == 2 and err.count("\n") == 1 and "is a file" in err
    assert f.read_text() == "mine"


def test_out_holding_foreign_files_is_refused_and_force_writes_beside_them(capsys, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    code, _, err = cli(capsys, "run", *SMALL, "--out", str(out))
    assert code == 2 and "did not write" in err and "--force" in err
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    code, _, _ = cli(capsys, "run", *SMALL, "--out", str(out), "--force")
    assert code == 0 and (out / "notes.txt").read_text() == "keep me" and (out / "summary.json").exists()


def test_rewriting_own_output_replaces_stale_files_only(capsys, tmp_path):
    pytest.importorskip("pyarrow")
    out = tmp_path / "run"
    assert cli(capsys, "run", *SMALL, "--out", str(out), "--format", "parquet")[0] == 0
    (out / "analysis.ipynb").write_text("{}")  # the user's own file, added after the first run
    assert cli(capsys, "run", *SMALL, "--out", str(out))[0] == 0
    names = sorted(p.name for p in out.iterdir())
    assert names == [MARKER, "analysis.ipynb", "iterations.csv", "requests.csv", "summary.json", "trace.json"]


@pytest.mark.skipif(
    os.geteuid() == 0, reason="root writes into read-only directories, so this cannot fail as root"
)
def test_unwritable_out_is_refused(capsys, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    code, _, err = cli(capsys, "run", *SMALL, "--out", str(locked / "run"))
    assert code == 2 and "not writable" in err


def _burst(tmp_path: Path) -> Path:
    trace = tmp_path / "burst.csv"
    trace.write_text("prompt_tokens,output_tokens,arrived_at\n" + "4000,50,0\n" * 32)
    return trace


def test_a_burst_runs_to_completion_by_default(capsys, tmp_path):
    args = ["run", "--trace", str(_burst(tmp_path)), "--arrival", "replay", "--requests", "32"]
    code, out, _ = cli(capsys, *args, "--out", str(tmp_path / "a"))
    full = json.loads((tmp_path / "a" / "summary.json").read_text())["summary"]
    assert code == 0 and full["completed"] == 32
    # what happened, in words: replay ignores --qps, and a finite burst drains rather than grows without bound
    text = " ".join(out.split())
    assert "a burst of 32 requests at once" in text and "QPS" not in text and "without bound" not in text
    assert f"a burst of 32 requests drained in {full['duration_s']:.1f} s" in text
    assert cli(capsys, *args, "--out", str(tmp_path / "b"), "--stop-when-overloaded")[0] == 0
    stopped = json.loads((tmp_path / "b" / "summary.json").read_text())["summary"]
    assert stopped["overloaded"] and stopped["completed"] < 32


def test_a_replay_takes_the_whole_trace_unless_told(capsys, tmp_path):
    # a recorded trace of 3,000 rows: a replay without --requests plays all of them (not the 2,048 a sampled
    # run takes), in order; --requests N still takes the first N
    trace = tmp_path / "day.csv"
    trace.write_text(
        "prompt_tokens,output_tokens,arrived_at\n" + "".join(f"64,2,{i * 0.5}\n" for i in range(3000))
    )
    args = ["run", "--trace", str(trace), "--arrival", "replay"]
    assert cli(capsys, *args, "--out", str(tmp_path / "all"))[0] == 0
    assert json.loads((tmp_path / "all" / "summary.json").read_text())["summary"]["num_requests"] == 3000
    assert cli(capsys, *args, "--requests", "10", "--out", str(tmp_path / "ten"))[0] == 0
    assert json.loads((tmp_path / "ten" / "summary.json").read_text())["summary"]["num_requests"] == 10


def test_cpu_overhead_and_ray_round_trip_switches(capsys, tmp_path):
    ttft = {}
    for name, extra in (("none", ["--no-cpu-overhead"]), ("default", []), ("ray", ["--ray-comm"])):
        assert cli(capsys, "run", *SMALL, "--seed", "3", *extra, "--out", str(tmp_path / name))[0] == 0
        ttft[name] = json.loads((tmp_path / name / "summary.json").read_text())["summary"]["ttft_p50_s"]
    assert ttft["none"] < ttft["default"] < ttft["ray"]
    code, _, err = cli(capsys, "run", *SMALL, "--no-cpu-overhead", "--ray-comm", "--out", str(tmp_path / "x"))
    assert code == 2 and "--no-cpu-overhead" in err


def test_dropped_and_repeated_rows_are_reported(capsys, tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("prompt_tokens,output_tokens\n100,10\n200,20\n9000,10\n")
    code, out, _ = cli(capsys, "run", "--trace", str(trace), "--requests", "5", "--out", str(tmp_path / "r"))
    notes = json.loads((tmp_path / "r" / "summary.json").read_text())["notes"]
    assert code == 0 and len(notes) == 2
    assert notes[0].startswith("1 trace rows dropped") and "--max-model-len" in notes[0]
    assert "3 of the 5 are repeats" in notes[1] and "repeats" in out


@pytest.mark.parametrize(
    "args, words",
    [
        (["run", "--max-model-len", "0"], "--max-model-len"),
        (["run", "--trace", "sharegpt", "--max-model-len", "1"], "--max-model-len"),
        (["sweep", "--tolerance", "2"], "--tolerance"),
        (["sweep", "--start-qps", "0", "--policies", "sarathi"], "--start-qps"),
        (["sweep", "--search", "newton", "--policies", "sarathi"], "--search"),
        (["sweep", "--search", "paper", "--policies", "sarathi"], "--paper-setup"),
        (["list", "colours"], "models, gpus"),
        # an SLO below one decode iteration: every search finds capacity 0, so there is no answer to write
    ],
)
def test_bad_input_names_the_option_in_one_line(capsys, tmp_path, args, words):
    code, _, err = (
        cli(capsys, *args, "--out", str(tmp_path / "o")) if args[0] != "list" else cli(capsys, *args)
    )
    assert code == 2 and err.count("\n") == 1 and words in err
    assert "np." not in err and "max_total_tokens" not in err
    assert not (tmp_path / "o").exists()


def test_an_impossible_slo_is_an_error_not_a_table_of_zeros(capsys, tmp_path):
    """An SLO below one decode iteration is found only by searching (each search ends at capacity 0), but
    then it gets the bad-input treatment: one error line after the progress bar, exit 2, no output."""
    args = ["sweep", "--slo", "1e-6", "--policies", "sarathi,vllm", "--budgets", "512", "--requests", "32"]
    code, out, err = cli(capsys, *args, "--no-cache", "--out", str(tmp_path / "o"))
    lines = err.strip().splitlines()
    assert code == 2 and "Traceback" not in err and sum(line.startswith("error:") for line in lines) == 1
    assert (
        lines[-1].startswith("error: no load meets P99 TBT") and "loosen that objective (--slo" in lines[-1]
    )
    assert not (tmp_path / "o").exists() and "Capacity" not in out


# A generous bound that only keeps a broken run from hanging the suite; the tests wait on the process's own
# signals (a file it writes at a known point), never on a guess of how long start-up takes.
SAFETY_S = 600

# Runs `simserve ARGS...` with hooks that write a file when the run reaches a known point, then wait there:
# the simulation's first progress report (and it blocks there, so the run cannot finish before the signal),
# and a stand-in for the clean-up at interpreter exit (the worker pool's threads are joined there).
_HARNESS = """
import atexit, pathlib, sys, time
from contextlib import contextmanager
import simserve.cli.run as run_cli
ready = pathlib.Path(sys.argv[1])

def wait_for(name):
    (ready / name).touch()
    deadline = time.monotonic() + SAFETY_S
    while not (ready / "go").exists() and time.monotonic() < deadline:
        time.sleep(0.02)

@contextmanager
def progress_bar(total):
    yield lambda done, _: wait_for("simulating")

run_cli._progress_bar = progress_bar
atexit.register(wait_for, "exiting")
from simserve.cli import main
sys.argv = ["simserve", *sys.argv[2:]]
main()
""".replace("SAFETY_S", str(SAFETY_S))


def _wait_for(path: Path, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + SAFETY_S
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path.name} never came"
        time.sleep(0.02)


def _interrupted_run(tmp_path: Path, *, second_ctrl_c: bool) -> tuple[int, str, Path]:
    out, ready = tmp_path / "run", tmp_path / "ready"
    ready.mkdir()
    env = {**os.environ, "SIMSERVE_CACHE": str(tmp_path / "cache")}
    cmd = [
        sys.executable,
        "-c",
        _HARNESS,
        str(ready),
        "run",
        "--requests",
        "64",
        "--qps",
        "2",
        "--out",
        str(out),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    _wait_for(ready / "simulating", proc)
    proc.send_signal(signal.SIGINT)
    if second_ctrl_c:
        _wait_for(ready / "exiting", proc)  # the one line is printed; the process is shutting down
        proc.send_signal(signal.SIGINT)
    (ready / "go").touch()
    _, err = proc.communicate(timeout=SAFETY_S)
    return proc.returncode, err, out


def test_ctrl_c_exits_130_in_one_line_leaving_no_output(tmp_path):
    code, err, out = _interrupted_run(tmp_path, second_ctrl_c=False)
    assert code == 130 and err.count("\n") == 1 and "interrupted; no output was written" in err
    assert not out.exists()


def test_a_second_ctrl_c_during_shutdown_still_ends_in_one_line(tmp_path):
    code, err, out = _interrupted_run(tmp_path, second_ctrl_c=True)
    assert code == 130 and err.count("\n") == 1 and "interrupted" in err, err
    assert not out.exists()


def test_plan_interrupted_after_writing_says_the_outputs_are_there(capsys, tmp_path, monkeypatch):
    import simserve.plan.report as report

    def write_then_ctrl_c(*args, **kwargs):
        write_outputs(*args, **kwargs)
        raise KeyboardInterrupt  # as a Ctrl-C right after the files landed, while the table prints

    write_outputs = report.write_outputs
    monkeypatch.setattr(report, "write_outputs", write_then_ctrl_c)
    out = tmp_path / "plan"
    args = ["plan", "--model", "mistral-7b", "--gpus", "a100", "--max-gpus", "1", "--budgets", "512"]
    code, _, err = cli(
        capsys, *args, "--requests", "32", "--executor", "serial", "--no-cache", "--out", str(out)
    )
    last = err.strip().splitlines()[-1]  # after the progress bar's line
    assert code == 130 and "after the outputs were written" in last and str(out) in last, err
    assert {"plan.csv", "plan.json", "searches.csv", "pareto.png"} <= {p.name for p in out.iterdir()}


def test_progress_reports_monotone_counts_and_changes_nothing():
    from simserve.sim.scenario import Scenario, run_scenario

    seen: list[int] = []
    s = Scenario(num_requests=200)
    with_bar = run_scenario(s, 3.0, progress=lambda done, total: seen.append(done))
    assert seen == sorted(seen) and 0 < seen[-1] <= 200
    assert with_bar.summary == run_scenario(s, 3.0).summary
