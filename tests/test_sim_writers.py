"""Streaming the run's tables to disk (simserve/sim/writers.py): chunked output equals whole-table output."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from simserve.cli import main
from simserve.sim import writers
from simserve.sim.metrics import build_result
from simserve.sim.perfetto import chrome_trace, chrome_trace_from_log
from simserve.sim.scenario import Scenario, simulate_scenario
from simserve.sim.testing import LinearTimer

TIMER = LinearTimer(0.01, 4e-5, 5e-8)


@pytest.fixture(scope="module")
def raw():
    run, dep = simulate_scenario(Scenario(num_requests=300, seed=2), 3.0, TIMER)
    return run, dep


def test_chunked_csv_is_byte_identical_to_the_whole_table(raw, tmp_path, monkeypatch):
    run, dep = raw
    whole = build_result(run, dep)
    whole.requests.to_csv(tmp_path / "r.csv", index=False)
    whole.iterations.to_csv(tmp_path / "i.csv", index=False)
    monkeypatch.setattr(writers, "CHUNK_ROWS", 7)  # many chunks, the last one partial
    out = tmp_path / "out"
    out.mkdir()
    writers.write_tables(run, out)
    assert (out / "requests.csv").read_bytes() == (tmp_path / "r.csv").read_bytes()
    assert (out / "iterations.csv").read_bytes() == (tmp_path / "i.csv").read_bytes()


def test_sampled_keeps_every_kth_row_and_none_writes_no_table(raw, tmp_path, monkeypatch):
    run, dep = raw
    rows = len(run.log)
    monkeypatch.setattr(writers, "MAX_SAMPLED_ROWS", 50)
    monkeypatch.setattr(writers, "CHUNK_ROWS", 6)
    out = tmp_path / "s"
    out.mkdir()
    writers.write_tables(run, out, iterations="sampled")
    step = math.ceil(rows / 50)
    expected = build_result(run, dep).iterations.iloc[::step].reset_index(drop=True)
    pd.testing.assert_frame_equal(pd.read_csv(out / "iterations.csv"), expected)
    none = tmp_path / "n"
    none.mkdir()
    writers.write_tables(run, none, iterations="none")
    assert sorted(p.name for p in none.iterdir()) == ["requests.csv"]


def test_parquet_chunks_read_back_as_the_whole_table(raw, tmp_path, monkeypatch):
    pytest.importorskip("pyarrow", reason="parquet output needs pyarrow")
    run, dep = raw
    monkeypatch.setattr(writers, "CHUNK_ROWS", 64)
    writers.write_tables(run, tmp_path, fmt="parquet")
    whole = build_result(run, dep)
    got = pd.read_parquet(tmp_path / "requests.parquet")
    pd.testing.assert_frame_equal(got, whole.requests, check_categorical=False)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "iterations.parquet"), whole.iterations)


def test_trace_from_the_log_equals_the_trace_from_the_table(raw):
    run, _ = raw
    table = run.log.to_frame()
    for cap in (10, 10**6):
        assert chrome_trace_from_log(run.log, cap) == chrome_trace(table, cap)


@pytest.mark.parametrize("cap", [10, 333, 10**6])
def test_the_streamed_trace_file_is_json_dumps_of_the_trace(raw, tmp_path, monkeypatch, cap):
    import json

    from simserve.sim import perfetto
    from simserve.sim.iterations import IterationLog

    run, _ = raw
    # plus a row that stands for several iterations (the table's format allows it; the simulator writes one
    # row per iteration), whose name "decode ×3" needs escaping; row 0, which every sample of the rows keeps
    log = IterationLog()
    log.add(0, 0, 0.0, 0.0, 0, 15, 5, 10, 3)
    log.add_rows(*run.log.block(0, len(run.log)))
    monkeypatch.setattr(perfetto, "CHUNK_EVENTS", 50)  # several chunks
    perfetto.write_chrome_trace(tmp_path / "t.json", log, cap)
    doc = chrome_trace_from_log(log, cap)
    assert any("×" in e["name"] for e in doc["traceEvents"])  # escaped names are covered
    assert (tmp_path / "t.json").read_text() == json.dumps(doc, separators=(",", ":"))


def test_bad_iterations_option_is_one_line_and_exit_2(capsys, tmp_path):
    with pytest.raises(SystemExit) as exc:
        main(["run", "--iterations", "some", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert (
        exc.value.code == 2 and err.startswith("error: ") and "--iterations" in err and err.count("\n") == 1
    )
    assert not (tmp_path / "o").exists()


@pytest.mark.skipif(writers._csv_rows is None, reason="the compiled table formatter is not built")
def test_the_compiled_formatter_writes_the_python_text():
    """simserve/sim/_textrows.pyx against the Python formatting it replaces, on floats whose repr is hard."""
    import numpy as np

    from simserve.sim import perfetto
    from simserve.sim.iterations import COLUMNS

    rng = np.random.default_rng(7)
    n = 3000
    odd = [
        0.0,
        -0.0,
        math.inf,
        -math.inf,
        math.nan,
        1e16,
        1e-5,
        1.5e300,
        5e-324,
        0.1 + 0.2,
        123456789012345678.0,
    ]
    floats = np.concatenate(
        [10 ** rng.uniform(-320, 308, n - len(odd)) * rng.choice([-1, 1], n - len(odd)), odd]
    )
    ints = rng.integers(-(2**63), 2**63 - 1, n)
    ints[:4] = [0, -1, 2**63 - 1, -(2**63)]
    cols = {
        "x": floats,
        "k": ints,
        "status": rng.integers(0, 4, n).astype(np.int8),
        "rep": np.repeat(floats[:300], 10),
    }
    assert writers._csv_lines(cols) == writers._csv_lines_python(cols)
    assert writers._csv_lines({k: v[:0] for k, v in cols.items()}) == ""
    rows = {c: rng.integers(0, 600, n) for c in COLUMNS}
    rows["start_s"] = np.cumsum(rng.random(n))
    rows["end_s"] = rows["start_s"] + rng.random(n) * 0.1
    rows["num_iterations"] = rng.integers(1, 4, n)
    for view in (rows, {c: v[::3] for c, v in rows.items()}):
        assert perfetto._batch_text(view) == perfetto._batch_text_python(view)


@pytest.mark.skipif(writers._csv_rows is None, reason="the compiled table formatter is not built")
def test_trace_microseconds_written_from_integers_are_their_repr():
    """_textrows._float_milli writes ts and dur (np.round(..., 3) microseconds) from integers when the value
    is the double nearest k/1000: the text must be repr's, also one ulp off that double (repr's own algorithm
    then), at the 1e12 limit, for -0.0, NaN, infinities, negatives and values with more decimals."""
    import numpy as np

    from simserve.sim import perfetto

    rng = np.random.default_rng(11)
    n = 20000
    ts = rng.integers(0, 10**13, n) / 1000.0  # up to 1e10 microseconds, 3 decimals
    ts[:200] = np.nextafter(ts[:200], np.inf)
    ts[200:400] = np.nextafter(ts[200:400], -np.inf)
    ts[400:600] = np.round(rng.random(200) * 1e6, 3)
    odd = [
        0.0,
        -0.0,
        math.nan,
        math.inf,
        -math.inf,
        1e12,
        1e12 - 0.001,
        999999999999.999,
        1e16,
        1e-5,
        0.001,
        0.1,
        0.0005,
        -1.0,
        -0.001,
        5e-324,
        0.1 + 0.2,
        2**53 / 1000,
        0.5,
        10.0,
        1234.5,
        100.05,
    ]
    ts[600 : 600 + len(odd)] = odd
    zero = np.zeros(n, dtype=np.int64)
    dur = ts[::-1].copy()
    got = perfetto._batch_events_text(['"x"'], zero, zero, zero, ts, dur, zero, zero, zero, zero, zero)
    pairs = zip(ts.tolist(), dur.tolist(), strict=True)
    want = ",".join(perfetto._EVENT % ('"x"', 0, 0, a, b, 0, 0, 0, 0, 0) for a, b in pairs)
    assert got == want
