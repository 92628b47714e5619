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
    HASH_BLOCK_TOKENS,
    HASH_COLUMN,
    OUTPUT_COLUMNS,
    PROMPT_COLUMNS,
    find_column,
    read_table,
)

TRACES_DIR = shipped_dir("traces")  # the repository's traces/ (or the wheel's copy)
# Shipped trace name -> file in TRACES_DIR; aliases map onto the same file.
SHIPPED = {
    "sharegpt": "sharegpt.csv.gz",
    "arxiv": "arxiv_summarization.csv.gz",
    "sharegpt-multiturn": "sharegpt_multiturn.csv.gz",
    "prefix-repetition": "prefix_repetition.csv.gz",
    # public production traces with arrival times (workload/public_traces.py)
    "mooncake-conversation": "mooncake_conversation.csv.gz",
    "mooncake-synthetic": "mooncake_synthetic.csv.gz",
    "azure-code-2023": "azure_code_2023.csv.gz",
    "azure-conv-2023": "azure_conv_2023.csv.gz",
}
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
    # Which requests share tokens (prefix caching, sim/prefix_cache.py), or None: the token stream each
    # request's first `prefix_tokens` tokens come from (-1: none). A conversation is one stream and each of
    # its turns lies on it whole (prompt and answer: the next turn's prompt carries both); a shared system
    # prompt is a stream its requests share for its length.
    prefix_group: np.ndarray | None = None
    prefix_tokens: np.ndarray | None = None
    # ... or chained prefix-block ids (Mooncake's hash_ids, one per HASH_BLOCK_TOKENS tokens), request i's
    # being hash_ids[hash_offsets[i]:hash_offsets[i + 1]]: a tree of prefixes (sim/prefix_cache.py,
    # shared_runs)
    hash_offsets: np.ndarray | None = None
    hash_ids: np.ndarray | None = None

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
        if (self.prefix_group is None) != (self.prefix_tokens is None):
            raise SimserveError(f"trace {self.name!r}: prefix_group and prefix_tokens go together")
        if self.prefix_group is not None:
            group = np.asarray(self.prefix_group, dtype=np.int64)
            shared = np.asarray(self.prefix_tokens, dtype=np.int64)
            if group.shape != prompt.shape or shared.shape != prompt.shape:
                raise SimserveError(f"trace {self.name!r}: prefix columns must have one value per request")
            if (group < -1).any() or (shared < 0).any():
                raise SimserveError(f"trace {self.name!r}: prefix groups are >= -1 and prefix tokens >= 0")
            object.__setattr__(self, "prefix_group", group)
            object.__setattr__(self, "prefix_tokens", shared)
        if (self.hash_offsets is None) != (self.hash_ids is None):
            raise SimserveError(f"trace {self.name!r}: hash_offsets and hash_ids go together")
        if self.hash_offsets is not None:
            offsets = np.asarray(self.hash_offsets, dtype=np.int64)
            ids = np.asarray(self.hash_ids, dtype=np.int64)
            if (
                offsets.shape != (len(prompt) + 1,)
                or offsets[0] != 0
                or offsets[-1] != len(ids)
                or (np.diff(offsets) < 0).any()
            ):
                raise SimserveError(
                    f"trace {self.name!r}: hash_offsets must be one row start per request, then the end"
                )
            if (ids < 0).any() or (ids > _MAX_TOKENS).any():
                raise SimserveError(
                    f"trace {self.name!r}: hash ids are whole numbers from 0 to {_MAX_TOKENS}"
                )
            if self.prefix_group is not None:
                raise SimserveError(
                    f"trace {self.name!r}: give prefix groups or hash ids, not both (one prefix identity per "
                    "trace)"
                )
            object.__setattr__(self, "hash_offsets", offsets)
            object.__setattr__(self, "hash_ids", ids)

    @property
    def in_order(self) -> bool:
        """A multi-turn trace (conversations with recorded arrivals): its rows are served in file order."""
        return self.prefix_group is not None and self.arrived_at is not None

    def _rows(self, idx, arrived) -> Trace:
        group = None if self.prefix_group is None else self.prefix_group[idx]
        shared = None if self.prefix_tokens is None else self.prefix_tokens[idx]
        offsets = ids = None
        if self.hash_offsets is not None:
            offsets, ids = take_rows(self.hash_offsets, self.hash_ids, np.arange(len(self))[idx])
        return Trace(
            self.name,
            self.prompt_tokens[idx],
            self.output_tokens[idx],
            arrived,
            0,
            group,
            shared,
            offsets,
            ids,
        )

    @property
    def prefix(self) -> tuple | None:
        """The prefix identity as cluster.simulate takes it: (group, tokens) [+ (hash offsets, hash ids)]."""
        if self.hash_offsets is not None:
            none = np.full(len(self), -1, dtype=np.int64)
            return none, np.zeros(len(self), dtype=np.int64), self.hash_offsets, self.hash_ids
        return None if self.prefix_group is None else (self.prefix_group, self.prefix_tokens)

    def __len__(self) -> int:
        return len(self.prompt_tokens)

    def head(self, n: int) -> Trace:
        """The first n requests (arrival times kept: a prefix of a sorted series is sorted)."""
        arrived = None if self.arrived_at is None else self.arrived_at[:n]
        return self._rows(slice(0, n), arrived)

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
        return self._rows(idx, None)

    def select(self, keep: np.ndarray) -> Trace:
        arrived = None if self.arrived_at is None else self.arrived_at[keep]
        return self._rows(keep, arrived)


def load_trace(name_or_path: str, max_total_tokens: int | None = None) -> Trace:
    """A shipped trace by name ("sharegpt"/"chat", "arxiv"/"arxiv_summarization") or a trace file by path.

    max_total_tokens drops requests whose prompt + output exceed it (the paper's "total <= 8192" filters).
    """
    path, name = resolve_trace(name_or_path)
    cache_key = trace_cache.key(path)
    cached = trace_cache.load(cache_key)
    if cached is not None:
        trace = Trace(name, *cached[:3], 0, *cached[3:])
    else:
        trace = read_trace(path, name)
        trace_cache.store(
            cache_key,
            trace.prompt_tokens,
            trace.output_tokens,
            trace.arrived_at,
            trace.prefix_group,
            trace.prefix_tokens,
            trace.hash_offsets,
            trace.hash_ids,
        )
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
    aliases = {k: ", ".join(a for a, to in ALIASES.items() if to == k) for k in SHIPPED}
    shipped = ", ".join(f"{k} ({aliases[k]})" if aliases[k] else k for k in SHIPPED)
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
    group, shared = _prefix_columns(path, table, prompt, output)
    offsets = ids = None
    if HASH_COLUMN in table.columns:
        if group is not None:
            raise SimserveError(
                f"{path}: both {HASH_COLUMN} and conversation/prefix_group columns; keep one prefix "
                f"identity (drop the other columns)"
            )
        offsets, ids = _hash_ids(path, table[HASH_COLUMN].tolist(), prompt)
    return Trace(name or path.name, prompt, output, arrived, 0, group, shared, offsets, ids)


def _hash_ids(path: Path, cells: list, prompt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CSR rows of prefix-block ids: a JSON list per row (JSONL) or ids separated by spaces (CSV); at most one
    id per HASH_BLOCK_TOKENS tokens of the prompt (an empty cell: the request shares nothing)."""
    rows: list[list[int]] = []
    for i, cell in enumerate(cells):
        try:
            if isinstance(cell, list):
                ids = [int(x) for x in cell if not isinstance(x, bool) and int(x) == x]
                ok = len(ids) == len(cell)
            else:
                ids = [int(x) for x in str(cell).split()]
                ok = True
        except (TypeError, ValueError, OverflowError):
            ok = False
        if not ok or any(x < 0 or x > _MAX_TOKENS for x in ids):
            raise SimserveError(
                f"{path}: data row {i + 1}: {HASH_COLUMN} is {str(cell)!r:.40}, not a list of whole numbers "
                f"from 0 to {_MAX_TOKENS} (in a CSV: ids separated by spaces)"
            )
        blocks = -(-int(prompt[i]) // HASH_BLOCK_TOKENS)
        if len(ids) > blocks:
            raise SimserveError(
                f"{path}: data row {i + 1}: {len(ids)} {HASH_COLUMN} for a {prompt[i]}-token prompt, which "
                f"spans {blocks} blocks of {HASH_BLOCK_TOKENS} tokens; give at most one id per block"
            )
        rows.append(ids)
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum([len(r) for r in rows], out=offsets[1:])
    return offsets, np.fromiter((x for r in rows for x in r), dtype=np.int64, count=int(offsets[-1]))


def take_rows(offsets: np.ndarray, ids: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of a CSR array (row i is ids[offsets[i]:offsets[i + 1]]), in the order given, repeats allowed."""
    offsets = np.asarray(offsets, dtype=np.int64)
    rows = np.asarray(rows, dtype=np.int64)
    starts, lengths = offsets[rows], offsets[rows + 1] - offsets[rows]
    new = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lengths, out=new[1:])
    # each kept id's place in `ids`: its row's start plus its place in the row
    at = np.repeat(starts - new[:-1], lengths) + np.arange(new[-1], dtype=np.int64)
    return new, np.asarray(ids, dtype=np.int64)[at]


CONVERSATION_COLUMNS = ("conversation_id", "conversation")
TURN_COLUMNS = ("round", "turn")


def _prefix_columns(path: Path, table: pd.DataFrame, prompt: np.ndarray, output: np.ndarray):
    """(prefix group, prefix tokens) per row, or (None, None): from a conversation and its turn number (every
    turn lies whole on its conversation's stream), or given as `prefix_group` / `prefix_tokens` columns."""
    conv = [c for c in CONVERSATION_COLUMNS if c in table.columns]
    turn = [c for c in TURN_COLUMNS if c in table.columns]
    if conv and turn:
        return _conversations(path, table, conv[0], turn[0], prompt, output)
    if "prefix_group" in table.columns or "prefix_tokens" in table.columns:
        if "prefix_group" not in table.columns or "prefix_tokens" not in table.columns:
            raise SimserveError(
                f"{path}: prefix_group and prefix_tokens go together; give both columns or none"
            )
        group = _whole(path, table, "prefix_group", -1)
        return group, np.where(group >= 0, _whole(path, table, "prefix_tokens", 0), 0)
    return None, None


def _whole(path: Path, table: pd.DataFrame, column: str, lowest: int) -> np.ndarray:
    values = _numbers(path, table, column)
    _first_bad(
        path,
        [
            (values != np.round(values), lambda i: f"{column} is {values[i]:g}, not a whole number"),
            (values < lowest, lambda i: f"{column} is {values[i]:g}; it must be >= {lowest}"),
            (values > _MAX_TOKENS, lambda i: f"{column} is {values[i]:g}; it must be <= {_MAX_TOKENS}"),
        ],
    )
    return values.astype(np.int64)


def _conversations(path, table, conv_col, turn_col, prompt, output):
    """Conversation ids become stream numbers (first seen first); each turn must come after the turn before it
    in the file and carry it: its prompt at least the previous turn's prompt plus answer."""
    turns = _whole(path, table, turn_col, 0)
    ids: dict[str, int] = {}
    group = np.empty(len(turns), dtype=np.int64)
    last: dict[int, int] = {}  # stream -> its latest row so far
    for i, cid in enumerate(table[conv_col].astype(str).tolist()):
        g = group[i] = ids.setdefault(cid, len(ids))
        j = last.get(g)
        last[g] = i
        if j is None:
            continue
        if turns[i] <= turns[j]:
            raise SimserveError(
                f"{path}: data row {i + 1}: conversation {cid!r} {turn_col} {turns[i]} comes after its "
                f"{turn_col} {turns[j]} (data row {j + 1}): a turn is listed before the turn it follows; "
                f"sort each conversation's turns in order"
            )
        if prompt[i] < prompt[j] + output[j]:
            raise SimserveError(
                f"{path}: data row {i + 1}: conversation {cid!r} {turn_col} {turns[i]} has a "
                f"{prompt[i]}-token prompt, shorter than {turn_col} {turns[j]}'s prompt and answer "
                f"({prompt[j]} + {output[j]}, data row {j + 1}); a turn's prompt carries the conversation so "
                "far"
            )
    return group, prompt + output


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
