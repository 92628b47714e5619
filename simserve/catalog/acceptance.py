"""Published per-position acceptance of speculative decoding, per (method, model family, dataset).

The table is `acceptance.csv` beside this module (sources, conversions and the in-sample / held-out split:
docs/speculative-sources.md); a user's own file has the same columns. Values follow vLLM's metric: at position
k, the fraction of drafts whose k-th token was accepted (vllm:spec_decode_num_accepted_tokens_per_pos /
num_drafts), so a curve is cumulative and cannot rise with k. The mean accepted length per step is 1 + the
curve's sum.
"""

from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass
from pathlib import Path

from simserve.errors import SimserveError

COLUMNS = ("method", "model_family", "dataset", "position", "acceptance", "source", "note")
METHODS = ("eagle", "eagle3", "mtp", "ngram")
SHIPPED = Path(__file__).with_name("acceptance.csv")

Key = tuple[str, str, str]


@dataclass(frozen=True)
class AcceptanceCurve:
    """One (method, model family, dataset): acceptance[k-1] is the cumulative acceptance at draft position
    k."""

    method: str
    model_family: str
    dataset: str
    acceptance: tuple[float, ...]
    source: str
    note: str

    @property
    def key(self) -> Key:
        return (self.method, self.model_family, self.dataset)

    def mean_accepted_length(self, k: int | None = None) -> float:
        """Tokens per verify step with k drafts (the bonus token included): 1 + sum of the first k
        positions."""
        return 1.0 + sum(self.acceptance[: len(self.acceptance) if k is None else k])


def _name(value: str) -> str:
    # "Llama_3.1 8B" and "llama-3.1-8b" are one name (as catalog/table.py keys names).
    return value.strip().lower().replace("_", "-").replace(" ", "-")


def _label(key: Key) -> str:
    return "(" + ", ".join(key) + ")"


def _read_rows(path: Path) -> list[dict[str, str]]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise SimserveError(
            f"acceptance file {path} does not exist; pass a CSV with columns {','.join(COLUMNS)}"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SimserveError(f"acceptance file {path} could not be read ({exc}); pass a UTF-8 CSV") from None
    reader = csv.DictReader(text.splitlines())
    if tuple(reader.fieldnames or ()) != COLUMNS:
        got = ",".join(reader.fieldnames or ()) or "nothing"
        raise SimserveError(
            f"acceptance file {path}: the header must be exactly {','.join(COLUMNS)} (got {got})"
        )
    rows = list(reader)
    if not rows:
        raise SimserveError(
            f"acceptance file {path} has a header but no rows; add one row per draft position"
        )
    return rows


def _parse_row(row: dict[str, str], where: str) -> tuple[Key, int, float]:
    if None in row or any(v is None for v in row.values()):
        raise SimserveError(
            f"{where}: expected {len(COLUMNS)} fields ({','.join(COLUMNS)}); quote fields with commas"
        )
    method, family, dataset = (_name(row[c]) for c in ("method", "model_family", "dataset"))
    if not (method and family and dataset):
        raise SimserveError(f"{where}: method, model_family and dataset must not be empty")
    if method not in METHODS:
        raise SimserveError(f"{where}: method {row['method']!r} is not one of {', '.join(METHODS)}")
    key = (method, family, dataset)
    try:
        position = int(row["position"])
    except ValueError:
        position = 0
    if position < 1:
        raise SimserveError(
            f"{where}: position {row['position']!r} of {_label(key)} must be a whole number >= 1"
        )
    try:
        value = float(row["acceptance"])
    except ValueError:
        value = math.nan
    if not 0.0 <= value <= 1.0:  # NaN fails this too
        raise SimserveError(
            f"{where}: acceptance {row['acceptance']!r} of {_label(key)} at position {position} is not a "
            f"probability in [0, 1]; give the fraction of drafts whose token at that position was accepted"
        )
    return key, position, value


def load_acceptance(path: str | os.PathLike | None = None) -> dict[Key, AcceptanceCurve]:
    """Read and check an acceptance CSV (the shipped table when no path is given); one curve per key."""
    path = SHIPPED if path is None else Path(path)
    points: dict[Key, dict[int, float]] = {}
    meta: dict[Key, tuple[str, str]] = {}
    for line, row in enumerate(_read_rows(path), start=2):
        where = f"acceptance file {path}, line {line}"
        key, position, value = _parse_row(row, where)
        curve = points.setdefault(key, {})
        if position in curve:
            raise SimserveError(f"{where}: position {position} of {_label(key)} is given twice; keep one row")
        curve[position] = value
        meta.setdefault(key, (row["source"].strip(), row["note"].strip()))
    table = {}
    for key, curve in points.items():
        positions = sorted(curve)
        if positions != list(range(1, len(positions) + 1)):
            raise SimserveError(
                f"acceptance file {path}: {_label(key)} has positions {', '.join(map(str, positions))}; "
                f"they must run 1..K without gaps"
            )
        values = tuple(curve[p] for p in positions)
        for k in range(1, len(values)):
            if values[k] > values[k - 1]:
                raise SimserveError(
                    f"acceptance file {path}: {_label(key)} rises from {values[k - 1]:g} at position {k} to "
                    f"{values[k]:g} at position {k + 1}; cumulative acceptance cannot rise (for conditional "
                    f"per-position rates, give their running products)"
                )
        table[key] = AcceptanceCurve(*key, values, *meta[key])
    return table


def _families(name: str) -> list[str]:
    """The family names to try: the name as given, then its simserve catalog model when it is an alias of one
    (meta-llama/Llama-3.1-8B-Instruct is the catalog's Llama-3.1-8B)."""
    from simserve.catalog.models import MODELS

    names = [_name(name)]
    if name in MODELS and _name(MODELS.get(name).name) not in names:
        names.append(_name(MODELS.get(name).name))
    return names


def lookup(
    method: str, model_family: str, dataset: str, table: dict[Key, AcceptanceCurve] | None = None
) -> tuple[float, ...]:
    """The cumulative acceptance at positions 1..K for a key; an unknown key fails naming the known ones."""
    return curve(method, model_family, dataset, table).acceptance


def curve(
    method: str, model_family: str, dataset: str, table: dict[Key, AcceptanceCurve] | None = None
) -> AcceptanceCurve:
    """The published curve for a key, with its source; an unknown key fails naming the known ones."""
    table = load_acceptance() if table is None else table
    families = _families(model_family)
    for family in families:
        key = (_name(method), family, _name(dataset))
        if key in table:
            return table[key]
    asked = (_name(method), families[0], _name(dataset))
    alias = f" (catalog model {families[1]})" if len(families) > 1 else ""
    same_method = sorted(k for k in table if k[0] == asked[0])
    known = ", ".join(f"{m}/{f}/{d}" for m, f, d in (same_method or sorted(table)))
    scope = f"for {asked[0]}" if same_method else "(no rows for this method)"
    raise SimserveError(
        f"no acceptance for {_label(asked)}{alias}; known {scope}: {known}; pass your own with --acceptance "
        f"FILE (columns {','.join(COLUMNS)})"
    )
