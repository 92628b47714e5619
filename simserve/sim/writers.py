"""Stream a finished run's tables to disk a chunk at a time, instead of building each whole table first.

A 1M-request run has ~1M request rows and several million iteration rows; as DataFrames (plus the copies
pandas makes while formatting) they used to double the run's peak memory. Here each table is written in chunks
of CHUNK_ROWS rows from the simulator's own compact arrays, so the extra memory is one chunk.

CSV is formatted here, without pandas (importing it was a third of a warm `simserve run`), exactly as
pandas' `to_csv(index=False)` formats it: floats by their shortest repr (pandas uses numpy's `astype(str)`,
which gives the same text), NaN as an empty field, integers by `str`, status by name; nothing here needs
quoting. So the bytes are those of the whole table written by pandas (tests/test_sim_writers.py compares
them; tests/test_sim_golden.py pins them). Parquet goes through pandas and pyarrow, one row group per chunk.

`iterations`: "all" writes every row; "sampled" every k-th row, k = ceil(rows / MAX_SAMPLED_ROWS) (the same
rows the Perfetto trace keeps); "none" writes no iterations table. The summary and trace.json are the same in
every mode.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from simserve.errors import SimserveError
from simserve.sim.cluster import RawRun
from simserve.sim.metrics import STATUS, request_columns

try:  # the compiled formatter (setup.py builds it; the same text as _csv_lines_python, faster)
    from simserve.sim._textrows import csv_rows as _csv_rows
except ImportError:  # built without a C compiler
    _csv_rows = None

_amin, _amax = np.minimum.reduce, np.maximum.reduce
CHUNK_ROWS = 65_536
MAX_SAMPLED_ROWS = 200_000
FORMATS = ("csv", "parquet")
ITERATIONS = ("all", "sampled", "none")


def check_options(fmt: str, iterations: str) -> None:
    """One-line errors for --format / --iterations, before anything is simulated or written."""
    if fmt not in FORMATS:
        raise SimserveError(f"unknown --format {fmt!r}; choose csv or parquet")
    if iterations not in ITERATIONS:
        raise SimserveError(f"unknown --iterations {iterations!r}; choose all, sampled or none")
    if fmt == "parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise SimserveError(
                "--format parquet needs pyarrow: pip install pyarrow, or use --format csv"
            ) from None


def _csv_lines(cols: dict[str, np.ndarray]) -> str:
    """The rows of one chunk as CSV text, formatted as pandas' to_csv formats them."""
    if _csv_rows is None:
        return _csv_lines_python(cols)
    columns, kinds = [], []
    for name, values in cols.items():
        if name == "status":
            columns.append([STATUS[code] for code in values.tolist()])
            kinds.append("s")
        else:
            columns.append(values)
            kinds.append("f" if values.dtype.kind == "f" else "i")
    n = len(next(iter(cols.values()))) if cols else 0
    return _csv_rows(columns, "".join(kinds).encode(), n)


def _csv_lines_python(cols: dict[str, np.ndarray]) -> str:
    """_csv_lines in Python: the fallback without the compiled formatter, and what tests compare it with.

    pandas writes a float column as `values.astype(str)`, numpy's shortest round-trip repr, which is
    Python's float repr (identical on every float64 tried, exponents and inf included; repr is ~2x faster).
    """
    text = []
    for name, values in cols.items():
        if name == "status":
            text.append([STATUS[code] for code in values.tolist()])
        elif values.dtype.kind == "f":
            s = list(map(repr, values.tolist()))
            for i in np.flatnonzero(np.isnan(values)).tolist():
                s[i] = ""  # pandas' na_rep
            text.append(s)
        elif len(values) and values[0] == values[-1] and _amin(values) == _amax(values):
            # NOTE: replica, stage, num_iterations are often one value
            text.append([str(int(values[0]))] * len(values))
        else:
            text.append(list(map(str, values.tolist())))
    return "".join(",".join(row) + "\n" for row in zip(*text, strict=True))


class _TableWriter:
    """Appends chunks (column name -> array) to one CSV or Parquet file."""

    def __init__(self, path: Path, fmt: str) -> None:
        self.path, self.fmt = path, fmt
        self._parquet = None
        self._csv = None

    def write(self, cols: dict[str, np.ndarray]) -> None:
        if self.fmt == "csv":
            if self._csv is None:
                self._csv = open(self.path, "w", newline="")  # noqa: SIM115 (closed in close())
                self._csv.write(",".join(cols) + "\n")
            self._csv.write(_csv_lines(cols))
            return
        import pandas as pd
        import pyarrow as pa
        import pyarrow.parquet as pq

        if "status" in cols:
            cols = {**cols, "status": pd.Categorical.from_codes(cols["status"], STATUS)}
        table = pa.Table.from_pandas(pd.DataFrame(cols), preserve_index=False)
        if self._parquet is None:
            self._parquet = pq.ParquetWriter(self.path, table.schema)
        self._parquet.write_table(table)

    def close(self) -> None:
        for f in (self._parquet, self._csv):
            if f is not None:
                f.close()


def _write(path: Path, fmt: str, chunks) -> None:
    w = _TableWriter(path, fmt)
    try:
        for cols in chunks:
            w.write(cols)
    finally:
        w.close()


def write_tables(run: RawRun, out: Path, fmt: str = "csv", iterations: str = "all") -> None:
    """requests.<fmt> and (unless iterations == "none") iterations.<fmt> in `out`."""
    n = run.reqs.n
    _write(
        out / f"requests.{fmt}", fmt, (request_columns(run, lo, min(lo + CHUNK_ROWS, n)) for lo in _starts(n))
    )
    if iterations == "none":
        return
    log = run.log
    rows = len(log)
    step = 1 if iterations == "all" else max(1, math.ceil(rows / MAX_SAMPLED_ROWS))
    span = CHUNK_ROWS * step  # keeps every chunk's first row on the sampling grid
    _write(
        out / f"iterations.{fmt}",
        fmt,
        (log.columns(lo, min(lo + span, rows), step) for lo in (range(0, rows, span) if rows else [0])),
    )


def _starts(n: int) -> range | list[int]:
    return range(0, n, CHUNK_ROWS) if n else [0]  # an empty table still gets its header
