"""A sweep killed with SIGKILL half-way leaves a valid cache and no output; the rerun resumes from it."""

from __future__ import annotations

import json
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
