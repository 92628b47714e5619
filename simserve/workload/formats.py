"""Trace files on disk: reading CSV / JSONL (plain or gzip) into raw columns, and writing trace CSVs.

The column names of three families are accepted, so a trace from another tool loads as it is:

* Vidur / Sarathi-Serve: `num_prefill_tokens`, `num_decode_tokens`, optional `arrived_at` (seconds);
* vLLM benchmarks: `prompt_len | input_len | prompt_tokens` and
  `output_len | expected_output_len | output_tokens`;
* Mooncake / Bailian JSONL: `input_length`, `output_length`, `timestamp` (milliseconds), and `hash_ids`: the
  request's chained prefix-block ids, one per HASH_BLOCK_TOKENS tokens (a JSON list; in a CSV, the ids
  separated by spaces), which prefix caching keys blocks by (sim/prefix_cache.py).

Reading keeps every cell as text, so that validation (in `trace.py`) can quote the offending value.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from simserve.errors import SimserveError
from simserve.io import atomic_path

# The first alias present wins; the canonical (Vidur) name comes first.
PROMPT_COLUMNS = ("num_prefill_tokens", "prompt_len", "input_len", "prompt_tokens", "input_length")
OUTPUT_COLUMNS = ("num_decode_tokens", "output_len", "expected_output_len", "output_tokens", "output_length")
# Arrival column -> factor that converts it to seconds.
ARRIVAL_COLUMNS = {"arrived_at": 1.0, "timestamp": 1e-3}
# Prefix-block ids: one id per block of this many tokens. Mooncake's FAST'25 traces: "The block size is 512
# tokens" (kvcache-ai/Mooncake, FAST25-release/README.md, "Trace Format", `hash_ids`).
HASH_COLUMN = "hash_ids"
HASH_BLOCK_TOKENS = 512

if TYPE_CHECKING:  # imported where a file is parsed: a cached trace (trace_cache.py) needs no pandas
    import pandas as pd

_EXPECTED = (
    "a CSV or JSONL trace with columns num_prefill_tokens,num_decode_tokens[,arrived_at] (or "
    "vLLM/Mooncake names)"
)


def read_table(path: Path) -> pd.DataFrame:
    """Every row of a trace file as text cells (object dtype), in file order; row i is data row i + 1."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":  # gzip magic: accept `.gz` whatever the file is called
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise SimserveError(
                f"{path}: corrupt gzip data ({exc}); re-download or re-create the file"
            ) from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise SimserveError(f"{path}: not a CSV file (binary content); give {_EXPECTED}") from None
    if "\x00" in text:
        raise SimserveError(f"{path}: not a CSV file (binary content); give {_EXPECTED}")
    body = text.lstrip()
    if not body:
        raise SimserveError(f"{path}: the trace is empty; give {_EXPECTED}")
    table = _read_json_rows(path, body) if body[0] in "[{" else _read_csv(path, text)
    if table.empty:
        raise SimserveError(
            f"{path}: the trace is empty (a header but no data rows); add at least one request"
        )
    return table


def _read_csv(path: Path, text: str) -> pd.DataFrame:
    import pandas as pd

    try:
        # NOTE: blank lines are kept (as empty rows) so that "data row N" matches the file; trailing ones are
        # dropped. index_col=False + warnings as errors: pandas would otherwise turn surplus fields into an
        # index and silently shift every column.
        with warnings.catch_warnings():
            warnings.simplefilter("error", pd.errors.ParserWarning)
            table = pd.read_csv(
                io.StringIO(text),
                dtype=str,
                keep_default_na=False,
                skip_blank_lines=False,
                skipinitialspace=True,
                index_col=False,
            )
    except (pd.errors.ParserError, pd.errors.ParserWarning, ValueError) as exc:
        ragged = _ragged_row(text)
        if ragged is not None:
            row, cells, columns = ragged
            raise SimserveError(
                f"{path}: data row {row}: {cells} cells where the header has {columns}; "
                f"give that row one cell per column"
            ) from None
        detail = str(exc).strip().splitlines()[-1]
        raise SimserveError(f"{path}: not a well-formed CSV file ({detail}); give {_EXPECTED}") from None
    table.columns = [str(c).strip() for c in table.columns]
    blank = table.isna() | (table == "")
    filled = np.flatnonzero(~blank.all(axis=1).to_numpy())
    return table.iloc[: filled[-1] + 1] if len(filled) else table.iloc[:0]


def _ragged_row(text: str) -> tuple[int, int, int] | None:
    """The first data row with more cells than the header: (data row number, its cells, header cells).

    NOTE: pandas names such a row by its line in the file ("line 3"); every other trace error counts data
    rows (a blank line is a row, as in `_read_csv`), so this finds the row in those terms."""
    rows = csv.reader(io.StringIO(text), skipinitialspace=True)
    header = next(rows, [])
    for number, row in enumerate(rows, start=1):
        if len(row) > len(header):
            return number, len(row), len(header)
    return None


def _read_json_rows(path: Path, body: str) -> pd.DataFrame:
    """JSON Lines (one object per line, Mooncake style) or one JSON array of objects."""
    import pandas as pd

    if body[0] == "[":
        try:
            records = json.loads(body)
        except json.JSONDecodeError as exc:
            raise SimserveError(
                f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}); fix the file"
            ) from None
    else:
        records = []
        for line in body.splitlines():
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                row = len(records) + 1
                raise SimserveError(
                    f"{path}: row {row}: not valid JSON ({exc.msg}); one JSON object per line"
                ) from None
    for row, record in enumerate(records, start=1):
        if not isinstance(record, dict):
            raise SimserveError(
                f"{path}: row {row}: expected a JSON object with token counts, got {record!r:.40}"
            )
    return pd.DataFrame.from_records(records).astype(object)


def find_column(path: Path, table: pd.DataFrame, aliases: tuple[str, ...], what: str) -> str:
    for name in aliases:
        if name in table.columns:
            return name
    found = ", ".join(map(str, table.columns)) or "none"
    raise SimserveError(
        f"{path}: missing the {what} column: expected one of {', '.join(aliases)} (found: {found})"
    )


def write_trace_csv(path: str | Path, columns: dict[str, np.ndarray]) -> Path:
    """Write a trace CSV atomically; a `.gz` name is gzip-compressed with a fixed mtime so rebuilds are
    identical."""
    import pandas as pd

    path = Path(path)
    text = pd.DataFrame(columns).to_csv(index=False, lineterminator="\n")
    with atomic_path(path) as tmp:
        if path.suffix == ".gz":
            with open(tmp, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
                gz.write(text.encode())
        else:
            tmp.write_text(text)
    return path
