"""The iteration log spilled to disk (simserve/sim/iterations.py): reading it back, and whole runs whose
outputs are byte-identical with and without spilling."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from simserve.cli import main
from simserve.sim import perfetto, writers
from simserve.sim.iterations import COLUMNS, IterationLog

REPO = Path(__file__).resolve().parents[1]
HAS_PROFILE = (REPO / "profiles" / "a100-80gb" / "mistral-7b").is_dir()


def _fill(log: IterationLog, rows: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    t = 0.0
    for _ in range(rows):
        d = float(rng.exponential(0.02))
        log.add(
            int(rng.integers(2)),
            int(rng.integers(2)),
            t,
            t + d,
            *map(int, rng.integers(0, 600, 4)),
            int(rng.integers(1, 9)),
        )
        t += d


def test_a_spilled_log_reads_back_as_the_one_held_in_memory():
    kept, spilled = IterationLog(spill_at=10**9), IterationLog(spill_at=7)
    _fill(kept, 100)
    _fill(spilled, 100)
    assert len(kept) == len(spilled) == 100
    assert kept.spilled == 0 and spilled.spilled == 98  # 14 blocks of 7 on disk, 2 rows in memory
    for lo, hi in ((0, 100), (0, 7), (5, 9), (13, 14), (95, 100), (97, 99), (40, 40), (90, 500)):
        for a, b in zip(kept.block(lo, hi), spilled.block(lo, hi), strict=True):
            assert np.array_equal(a, b)
    for step in (1, 3, 50, 1000):
        a, b = kept.columns(3, 100, step), spilled.columns(3, 100, step)
        assert all(np.array_equal(a[c], b[c]) for c in COLUMNS)
    assert all(np.array_equal(kept.column(c), spilled.column(c)) for c in COLUMNS)
    for (ia, fa), (ib, fb) in zip(kept.chunks(9), spilled.chunks(9), strict=True):
        assert np.array_equal(ia, ib) and np.array_equal(fa, fb)
    assert perfetto.chrome_trace_from_log(kept, 30) == perfetto.chrome_trace_from_log(spilled, 30)


def test_the_spill_threshold_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("SIMSERVE_ITERATION_SPILL_ROWS", "4")
    log = IterationLog()
    _fill(log, 10)
    assert log.spilled == 8 and len(log) == 10


CASES = {
    "one replica (grouped rows)": ["--requests", "150", "--qps", "2"],
    "two replicas (interleaved rows)": [
        "--requests",
        "150",
        "--qps",
        "4",
        "--replicas",
        "2",
        "--router",
        "lor",
    ],
    "sampled": ["--requests", "150", "--qps", "2", "--iterations", "sampled"],
}


def _outputs(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if not p.name.startswith(".")}


@pytest.mark.skipif(not HAS_PROFILE, reason="needs the shipped mistral-7b/a100 profile")
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_run_that_spills_writes_the_same_bytes(case, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(writers, "MAX_SAMPLED_ROWS", 100)  # the sampled table keeps every k-th of many rows
    monkeypatch.setattr(perfetto, "MAX_EVENTS", 300)  # and so does the trace
    monkeypatch.setattr(writers, "CHUNK_ROWS", 64)
    main(["run", *CASES[case], "--out", str(tmp_path / "kept")])
    monkeypatch.setenv("SIMSERVE_ITERATION_SPILL_ROWS", "37")
    main(["run", *CASES[case], "--out", str(tmp_path / "spilled")])
    kept, spilled = _outputs(tmp_path / "kept"), _outputs(tmp_path / "spilled")
    assert sorted(kept) == ["iterations.csv", "requests.csv", "summary.json", "trace.json"]
    assert json.loads(kept["trace.json"])["otherData"]["rows"] > 200  # the log did spill, several times
    assert kept == spilled
