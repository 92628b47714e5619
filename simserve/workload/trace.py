"""A request trace: prompt and output token counts per request, and optionally recorded arrival times.

`load_trace("sharegpt")` resolves a shipped trace in `traces/`; anything else is a path to a CSV/JSONL file in
one of the formats of `formats.py`. Every row is validated, and a bad row is reported as
`<file>: data row <n>: <problem>` so that the user can open the file at the right place.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from simserve.errors import SimserveError
from simserve.numerics import parse_floats
from simserve.shipped import shipped_dir
from simserve.workload import trace_cache
from simserve.workload.formats import (
    ARRIVAL_COLUMNS,
    OUTPUT_COLUMNS,
    PROMPT_COLUMNS,
    find_column,
    read_table,
)

TRACES_DIR = shipped_dir("traces")  # the repository's traces/ (or the wheel's copy)
# Shipped trace name -> file in TRACES_DIR; aliases map onto the same file.
SHIPPED = {"sharegpt": "sharegpt.csv.gz", "arxiv": "arxiv_summarization.csv.gz"}
ALIASES = {"chat": "sharegpt", "arxiv_summarization": "arxiv"}
if TYPE_CHECKING:  # pandas parses trace files; a cached trace (trace_cache.py) needs none
    import pandas as pd

_MAX_TOKENS = 2**31 - 1  # far above any context length; guards the int64 conversion against absurd values


@dataclass(frozen=True)
class Trace:
    name: str
    prompt_tokens: np.ndarray  # int64, > 0
    output_tokens: np.ndarray  # int64, > 0
    arrived_at: np.ndarray | None = None  # float64 seconds from trace start, non-decreasing, or None
    too_long: int = 0  # rows load_trace dropped for exceeding its max_total_tokens (reported, not silent)

    def __post_init__(self) -> None:
        # NOTE: loaders validate row by row with file context; this only guards traces built in code.
        prompt = np.asarray(self.prompt_tokens, dtype=np.int64)
        output = np.asarray(self.output_tokens, dtype=np.int64)
        if prompt.ndim != 1 or prompt.shape != output.shape:
            raise SimserveError(
                f"trace {self.name!r}: prompt and output token arrays must be 1-D and equally long"
            )
        if (prompt <= 0).any() or (output <= 0).any():
            raise SimserveError(f"trace {self.name!r}: token counts must be positive integers")
        object.__setattr__(self, "prompt_tokens", prompt)
        object.__setattr__(self, "output_tokens", output)
        if self.arrived_at is not None:
            arrived = np.asarray(self.arrived_at, dtype=np.float64)
            if arrived.shape != prompt.shape:
                raise SimserveError(f"trace {self.name!r}: arrived_at must have one time per request")
            if len(arrived) and (arrived[0] < 0 or (np.diff(arrived) < 0).any()):
                raise SimserveError(f"trace {self.name!r}: arrived_at must be >= 0 and non-decreasing")
            object.__setattr__(self, "arrived_at", arrived)

    def __len__(self) -> int:
        return len(self.prompt_tokens)

    def head(self, n: int) -> Trace:
        """The first n requests (arrival times kept: a prefix of a sorted series is sorted)."""
        arrived = None if self.arrived_at is None else self.arrived_at[:n]
        return Trace(self.name, self.prompt_tokens[:n], self.output_tokens[:n], arrived)

    def sample(self, n: int, seed: int) -> Trace:
        """n requests in a seeded random order; for n > len, whole fresh shuffles are concatenated.

        Recorded arrival times are dropped: after shuffling they no longer belong to the rows.
        """
        if n < 0:
            raise SimserveError(f"trace {self.name!r}: cannot sample {n} requests; n must be >= 0")
        if n and not len(self):
            raise SimserveError(f"trace {self.name!r} is empty; load a trace with at least one request")
        rng = np.random.default_rng(seed)
        rounds = -(-n // len(self)) if n else 0
        order = np.concatenate([rng.permutation(len(self)) for _ in range(rounds)] or [np.zeros(0, np.int64)])
        idx = order[:n]
        return Trace(self.name, self.prompt_tokens[idx], self.output_tokens[idx], None)

    def select(self, keep: np.ndarray) -> Trace:
        arrived = None if self.arrived_at is None else self.arrived_at[keep]
        return Trace(self.name, self.prompt_tokens[keep], self.output_tokens[keep], arrived)


def load_trace(name_or_path: str, max_total_tokens: int | None = None) -> Trace:
    """A shipped trace by name ("sharegpt"/"chat", "arxiv"/"arxiv_summarization") or a trace file by path.

    max_total_tokens drops requests whose prompt + output exceed it (the paper's "total <= 8192" filters).
    """
    path, name = resolve_trace(name_or_path)
    cache_key = trace_cache.key(path)
    cached = trace_cache.load(cache_key)
    if cached is not None:
        trace = Trace(name, *cached)
    else:
        trace = read_trace(path, name)
        trace_cache.store(cache_key, trace.prompt_tokens, trace.output_tokens, trace.arrived_at)
    if max_total_tokens is None:
        return trace
    if max_total_tokens <= 0:
        raise SimserveError(f"--max-model-len must be a positive number of tokens, got {max_total_tokens}")
    keep = trace.prompt_tokens + trace.output_tokens <= max_total_tokens
    if not keep.any():
        raise SimserveError(
            f"{path}: no request has prompt + output <= {max_total_tokens} tokens; raise --max-model-len"
        )
    return dataclasses.replace(trace.select(keep), too_long=int((~keep).sum()))


def resolve_trace(name_or_path: str) -> tuple[Path, str]:
    key = ALIASES.get(str(name_or_path), str(name_or_path))
    if key in SHIPPED:
        path = TRACES_DIR / SHIPPED[key]
        if not path.is_file():
            raise SimserveError(
                f"shipped trace {key!r} is missing at {path}; rebuild it: simserve trace build {key}"
            )
        return path, key
    path = Path(name_or_path)
    if path.is_file():
        return path, path.name.removesuffix(".gz").removesuffix(".csv").removesuffix(".jsonl")
    if path.is_dir():
        raise SimserveError(f"trace {path} is a directory; give a trace file (CSV or JSONL) in it")
    if path.exists():  # /dev/null, a FIFO, a socket: reading it would block or read nothing
        raise SimserveError(f"trace {path} is not a regular file; give a trace file (CSV or JSONL)")
    shipped = ", ".join(f"{k} ({', '.join(a for a, to in ALIASES.items() if to == k)})" for k in SHIPPED)
    raise SimserveError(
        f"no trace named {name_or_path!r} and no such file; shipped traces: {shipped}, or give a path"
    )


def read_trace(path: Path, name: str | None = None) -> Trace:
    """Read and validate every row of a trace file."""
    table = read_table(path)
    prompt = _token_counts(path, table, find_column(path, table, PROMPT_COLUMNS, "prompt tokens"))
    output = _token_counts(path, table, find_column(path, table, OUTPUT_COLUMNS, "output tokens"))
    arrived = None
    present = [c for c in ARRIVAL_COLUMNS if c in table.columns]
    if present:
        arrived = _arrival_times(path, table, present[0])
    return Trace(name or path.name, prompt, output, arrived)


def _numbers(path: Path, table: pd.DataFrame, column: str) -> np.ndarray:

    cells = table[column]
    values = parse_floats(cells.tolist())  # not pd.to_numeric: its last bit differs between pandas releases

    def what(i: int) -> str:
        cell = cells.iloc[i]
        if cell is None or (isinstance(cell, float) and np.isnan(cell)) or str(cell).strip() == "":
            return f"{column} is missing"
        return f"{column} is {str(cell)!r:.40}, not a finite number"

    _first_bad(path, [(~np.isfinite(values), what)])
    return values


def _token_counts(path: Path, table: pd.DataFrame, column: str) -> np.ndarray:
    values = _numbers(path, table, column)
    _first_bad(
        path,
        [
            (
                values != np.round(values),
                lambda i: f"{column} is {values[i]:g}, not a whole number of tokens",
            ),
            (values <= 0, lambda i: f"{column} is {values[i]:g}; token counts must be positive"),
            (
                values > _MAX_TOKENS,
                lambda i: f"{column} is {values[i]:g}; token counts must be <= {_MAX_TOKENS}",
            ),
        ],
    )
    return values.astype(np.int64)


def _arrival_times(path: Path, table: pd.DataFrame, column: str) -> np.ndarray:
    seconds = _numbers(path, table, column) * ARRIVAL_COLUMNS[column]
    raw = seconds / ARRIVAL_COLUMNS[column]
    earlier = np.concatenate([[False], np.diff(seconds) < 0])
    _first_bad(
        path,
        [
            (seconds < 0, lambda i: f"{column} is {raw[i]:g}; arrival times must be >= 0"),
            (
                earlier,
                lambda i: (
                    f"{column} {raw[i]:g} is earlier than the previous row's {raw[i - 1]:g}; "
                    "arrival times must be non-decreasing (sort the file by arrival time)"
                ),
            ),
        ],
    )
    return seconds


def _first_bad(path: Path, checks: list[tuple[np.ndarray, Callable[[int], str]]]) -> None:
    """Raise for the earliest failing row over all checks, counting how many rows fail in all."""
    failing = [(np.flatnonzero(mask), what) for mask, what in checks]
    failing = [(rows, what) for rows, what in failing if len(rows)]
    if not failing:
        return
    rows, what = min(failing, key=lambda f: f[0][0])
    others = len(np.unique(np.concatenate([r for r, _ in failing]))) - 1
    more = f" ({others} more bad rows)" if others else ""
    raise SimserveError(f"{path}: data row {rows[0] + 1}: {what(int(rows[0]))}{more}")
