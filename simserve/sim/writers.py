"""Stream a finished run's tables to disk a chunk at a time, instead of building each whole table first.

A 1M-request run has ~1M request rows and several million iteration rows; as DataFrames (plus the copies
pandas makes while formatting) they used to double the run's peak memory. Here each table is written in chunks
of CHUNK_ROWS rows from the simulator's own compact arrays, so the extra memory is one chunk.

Bytes: a CSV written chunk by chunk is identical to one written whole (same header, same per-value formatting;
tests/test_sim_golden.py pins it). Parquet files are written as one row group per chunk.

`iterations`: "all" writes every row; "sampled" every k-th row, k = ceil(rows / MAX_SAMPLED_ROWS) (the same rows
the Perfetto trace keeps); "none" writes no iterations table. The summary and trace.json are the same in every mode.
"""

from __future__ import annotations

import math
from pathlib import Path

from simserve.errors import SimserveError
from simserve.sim.cluster import RawRun
from simserve.sim.metrics import request_table

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


class _TableWriter:
    """Appends DataFrame chunks to one CSV or Parquet file."""

    def __init__(self, path: Path, fmt: str) -> None:
        self.path, self.fmt = path, fmt
        self._parquet = None
        self._first = True

    def write(self, df) -> None:
        if self.fmt == "csv":
            df.to_csv(self.path, index=False, header=self._first, mode="w" if self._first else "a")
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq

            table = pa.Table.from_pandas(df, preserve_index=False)
            if self._parquet is None:
                self._parquet = pq.ParquetWriter(self.path, table.schema)
            self._parquet.write_table(table)
        self._first = False

    def close(self) -> None:
        if self._parquet is not None:
            self._parquet.close()


def _write(path: Path, fmt: str, chunks) -> None:
    w = _TableWriter(path, fmt)
    try:
        for df in chunks:
            w.write(df)
    finally:
        w.close()


def write_tables(run: RawRun, out: Path, fmt: str = "csv", iterations: str = "all") -> None:
    """requests.<fmt> and (unless iterations == "none") iterations.<fmt> in `out`."""
    n = run.reqs.n
    _write(out / f"requests.{fmt}", fmt, (request_table(run, lo, min(lo + CHUNK_ROWS, n)) for lo in _starts(n)))
    if iterations == "none":
        return
    log = run.log
    rows = len(log)
    step = 1 if iterations == "all" else max(1, math.ceil(rows / MAX_SAMPLED_ROWS))
    span = CHUNK_ROWS * step  # keeps every chunk's first row on the sampling grid
    _write(
        out / f"iterations.{fmt}",
        fmt,
        (log.frame(lo, min(lo + span, rows), step) for lo in (range(0, rows, span) if rows else [0])),
    )


def _starts(n: int) -> range | list[int]:
    return range(0, n, CHUNK_ROWS) if n else [0]  # an empty table still gets its header
