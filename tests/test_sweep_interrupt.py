"""Ctrl-C and SIGTERM on a running `simserve sweep` (local worker processes), sent as real signals.

Each test starts a sweep, waits until its workers run and at least one probe is cached, signals the main
process only (not its process group, so the driver alone must stop the workers), and checks: the exit code,
one line on stderr saying what was saved and how to resume, no traceback, and no worker process left.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("simserve.sim.scenario", reason="the simulator is not in this checkout")
if not Path("/proc/self/stat").exists():
    pytest.skip("needs /proc to list the sweep's worker processes", allow_module_level=True)

HANG_S = 60  # far beyond the ~2 s a stop takes: only a hang reaches it


def children(pid: int) -> set[int]:
    """Pids whose parent is `pid` (read from /proc; zombies excluded)."""
    out = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            out.add(int(stat.parent.name))
    return out


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def start_sweep(tmp_path: Path) -> tuple[subprocess.Popen, Path, set[int]]:
    cache = tmp_path / "cache"
    args = [
        sys.executable,
        "-c",
        "from simserve.cli import main; main()",
        "sweep",
        "--policies",
        "vllm,sarathi",
        "--budgets",
        "256,512,1024",
        # Probes long enough (~0.1 s each on the compiled core) that two workers finishing theirs after a
        # signal are told apart from one write racing it; at 1,024 requests a probe takes ~10 ms and both can
        # race.
        "--requests",
        "16384",
        "--workers",
        "2",
        "--cache",
        str(cache),
        "--out",
        str(tmp_path / "out"),
        "--no-plots",
    ]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    workers: set[int] = set()
    while proc.poll() is None and time.monotonic() < deadline:
        workers |= children(proc.pid)
        if len(workers) >= 2 and any(cache.glob("*/*.json")):
            break
        time.sleep(0.05)
    if proc.poll() is not None:
        pytest.skip("the sweep finished before it could be interrupted")
    return proc, cache, workers


def finish(proc: subprocess.Popen) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=HANG_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"the sweep did not stop within {HANG_S} s of the signal")
    return proc.returncode, err


@pytest.mark.parametrize(
    ("signals", "code", "word"),
    [
        ([signal.SIGINT], 130, "interrupted"),
        ([signal.SIGINT, signal.SIGINT], 130, "interrupted"),  # a second Ctrl-C while it stops
        ([signal.SIGTERM], 143, "terminated"),
    ],
    ids=["ctrl-c", "ctrl-c-twice", "sigterm"],
)
def test_signal_stops_sweep_and_its_workers(tmp_path: Path, signals: list, code: int, word: str) -> None:
    proc, cache, workers = start_sweep(tmp_path)
    before = len(list(cache.glob("*/*.json")))
    for sig in signals:
        proc.send_signal(sig)
        time.sleep(0.05)
    rc, err = finish(proc)
    assert rc == code, err
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines[-1].startswith(f"{word}: no output was written; the "), err
    assert not any(line.startswith("interrupted;") for line in lines), err  # one line, not two
    assert f"saved in {cache}; rerun the same command to resume" in lines[-1]
    assert not (tmp_path / "out").exists()  # nothing partial written
    # The workers were stopped mid-probe, not left to finish: at most one probe (whose write raced the
    # signal) was added after it; both workers were busy, so finishing their probes would add two.
    saved = len(list(cache.glob("*/*.json")))
    assert saved - before <= 1
    reported = int(re.search(r"the (\d+) probe", lines[-1]).group(1))
    assert reported == saved  # the line counts what the cache gained (it was empty), even when writes raced
    deadline = time.monotonic() + 10  # the workers were terminated; give the kernel a moment to reap them
    while any(alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [w for w in workers if alive(w)], "worker processes outlived the sweep"


def test_sigterm_stops_plan_in_one_line(tmp_path: Path) -> None:
    """`plan` died by SIGTERM with no line at all (exit 143, right, but silent); it says what `sweep` says."""
    cache = tmp_path / "cache"
    args = [
        sys.executable,
        "-c",
        "from simserve.cli import main; main()",
        "plan",
        "--model",
        "mistral-7b",
        "--gpus",
        "a100",
        "--max-gpus",
        "2",
        "--requests",
        "16384",
        "--workers",
        "2",
        "--cache",
        str(cache),
        "--out",
        str(tmp_path / "out"),
        "--no-plots",
    ]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    workers: set[int] = set()
    while proc.poll() is None and time.monotonic() < deadline and len(workers) < 2:
        workers |= children(proc.pid)
        time.sleep(0.05)
    if proc.poll() is not None:
        pytest.skip("the plan finished before it could be terminated")
    try:
        proc.send_signal(signal.SIGTERM)
        rc, err = finish(proc)
        lines = [line for line in err.splitlines() if line.strip()]
        assert rc == 143 and "Traceback" not in err, err
        assert lines[-1].startswith("terminated: no output was written; the "), err
        assert f"saved in {cache}; rerun the same command to resume" in lines[-1]
        assert not (tmp_path / "out").exists()
        deadline = time.monotonic() + 10
        while any(alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [w for w in workers if alive(w)], "worker processes outlived the plan"
    finally:
        for w in workers:  # never leave one behind, even when the test fails
            if alive(w):
                os.kill(w, signal.SIGKILL)
