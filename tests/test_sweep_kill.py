"""A sweep killed with SIGKILL half-way leaves a valid cache and no output; the rerun resumes from it; no
worker of a killed sweep or plan outlives it."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("simserve.sim.scenario", reason="the simulator is not in this checkout")


def test_killed_sweep_resumes(tmp_path: Path) -> None:
    cache, out = tmp_path / "cache", tmp_path / "out"
    args = [
        sys.executable,
        "-c",
        "from simserve.cli import main; main()",
        "sweep",
        "--policies",
        "vllm,sarathi",
        "--budgets",
        "256,512",
        "--requests",
        "64",
        "--executor",
        "serial",
        "--cache",
        str(cache),
        "--out",
        str(out),
        "--no-plots",
    ]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while len(list(cache.glob("*/*.json"))) < 4 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        if proc.poll() is not None:
            pytest.skip("the sweep finished before it could be killed")
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    cached = list(cache.glob("*/*.json"))
    assert len(cached) >= 4
    for f in cached:
        assert "metrics" in json.loads(f.read_text())  # every entry complete: atomic writes
    assert not out.exists()
    done = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    simulated = int(re.search(r"(\d+) simulations", done.stdout).group(1))
    probes = int(pd.read_csv(out / "sweep.csv")["probes"].sum())
    # Killed early in the searches: every probe it cached is replayed, only the rest is simulated.
    assert simulated == probes - len(cached)


ORPHAN_S = 5  # a worker polls for its driver every 0.5 s, and on Linux the kernel kills it at once


@pytest.mark.parametrize(
    "command",
    [
        ["sweep", "--policies", "vllm,sarathi", "--budgets", "256,512", "--requests", "16384"],
        ["plan", "--model", "mistral-7b", "--gpus", "a100", "--max-gpus", "2", "--requests", "16384"],
    ],
    ids=lambda c: c[0],
)
def test_workers_die_with_their_killed_driver(tmp_path: Path, command: list[str]) -> None:
    """SIGKILL leaves the driver no clean-up; its workers ran on for 9+ minutes (issue 33). Now they go
    too."""
    from test_sweep_interrupt import alive, children

    args = [
        sys.executable,
        "-c",
        "from simserve.cli import main; main()",
        *command,
        "--workers",
        "2",
        "--no-cache",
        "--out",
        str(tmp_path / "out"),
        "--no-plots",
    ]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers: set[int] = set()
    try:
        deadline = time.monotonic() + 300
        while proc.poll() is None and time.monotonic() < deadline and len(workers) < 2:
            workers |= children(proc.pid)
            time.sleep(0.05)
        if proc.poll() is not None:
            pytest.skip(f"the {command[0]} finished before it could be killed")
        time.sleep(0.5)  # the workers are past their start-up, simulating
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        deadline = time.monotonic() + ORPHAN_S
        while any(alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = [w for w in workers if alive(w)]
        assert not left, f"worker processes {left} outlived their killed {command[0]} by {ORPHAN_S} s"
    finally:
        for w in workers:  # never leave one behind, even when the test fails
            if alive(w):
                os.kill(w, signal.SIGKILL)
