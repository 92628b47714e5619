"""The profile directory format: what every backend writes and the predictor reads.

profiles/<gpu>/<model>/
    linear.csv        op, tp, num_tokens, time_ms
    elementwise.csv   op, tp, num_tokens, time_ms
    attention.csv     phase, tp, batch_size, chunk, kv_len, time_ms
    collectives.csv   op, link, num_workers, size_bytes, time_ms
    provenance.json   backend, device, versions, date, command, ...

The ops: linear qkv_proj, o_proj, up_proj, down_proj; elementwise attn_norm, mlp_norm, rotary, act,
residual_add; collectives all_reduce, send_recv.
Times are milliseconds for ONE layer on ONE GPU (one call of the op). Attention rows: `prefill` is one
request's chunk of `chunk` new tokens attending to `kv_len` tokens already cached before it (batch_size 1;
kv_len 0 is a full prefill); `decode` is `batch_size` requests each attending to `kv_len` cached tokens (chunk
1). Collective rows: `link` is the node (e.g. a100-pairwise-nvlink) or network (ethernet-100g) the bytes
cross.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from simserve.errors import SimserveError
from simserve.io import atomic_path
from simserve.numerics import parse_floats
from simserve.shipped import shipped_dir

TABLES: dict[str, list[str]] = {
    "linear": ["op", "tp", "num_tokens", "time_ms"],
    "elementwise": ["op", "tp", "num_tokens", "time_ms"],
    "attention": ["phase", "tp", "batch_size", "chunk", "kv_len", "time_ms"],
    "collectives": ["op", "link", "num_workers", "size_bytes", "time_ms"],
}
PROVENANCE = "provenance.json"
SHIPPED_PROFILES = shipped_dir("profiles")  # the repository's profiles/ (or the wheel's copy)

# pandas is imported where a table is read: hashing a profile (the warm run path) needs none
if TYPE_CHECKING:
    import pandas as pd


def slug(name: str) -> str:
    return name.strip().lower().replace("/", "-").replace(" ", "-").replace("_", "-")


def profile_dir(root: str | Path, gpu: str, model: str) -> Path:
    """profiles/<gpu>/<model>, with catalog names made into lower-case directory names."""
    return Path(root) / slug(gpu) / slug(model)


@dataclass(frozen=True)
class Profile:
    path: Path
    linear: pd.DataFrame
    elementwise: pd.DataFrame
    attention: pd.DataFrame
    collectives: pd.DataFrame
    provenance: dict

    @property
    def content_hash(self) -> str:
        return content_hash(self.path)


def content_hash(path: str | Path) -> str:
    """sha256 over the profile's files (name and bytes), so a fitted predictor can be cached by it.

    Remembered in this process by each file's (mtime, size, inode), as the probe cache keys its inputs
    (tune/probe.py): a plan asks ~100 times for the hash of one or two profiles (2 ms each, reading ~3 MB)."""
    stats = []
    for name in _FILES:
        try:
            st = (Path(path) / name).stat()
        except FileNotFoundError:
            continue
        stats.append((name, st.st_mtime_ns, st.st_size, st.st_ino))
    return _content_hash(str(path), tuple(stats))


_FILES = (*(f"{t}.csv" for t in TABLES), PROVENANCE)


@functools.lru_cache(maxsize=64)
def _content_hash(path: str, stats: tuple) -> str:
    h = hashlib.sha256()
    for name, *_ in stats:
        h.update(name.encode())
        h.update((Path(path) / name).read_bytes())
    return h.hexdigest()[:16]


LABELS = ("op", "phase", "link")  # the text columns; every other column holds numbers


def validate_table(df: pd.DataFrame, table: str, where: str) -> pd.DataFrame:
    """Check columns and values: a missing column, a non-number, NaN or a negative time is an error."""
    missing = [c for c in TABLES[table] if c not in df.columns]
    if missing:
        raise SimserveError(
            f"{where}: missing column(s) {', '.join(missing)}; expected {', '.join(TABLES[table])}"
        )
    if df.empty:
        raise SimserveError(f"{where}: no rows; re-run `simserve profile` to regenerate it")
    numeric = [c for c in TABLES[table] if c not in LABELS]
    for col in numeric:
        import pandas as pd

        values = pd.Series(parse_floats(df[col].tolist()), index=df.index)
        bad = values.isna() | (values < 0) | ~np.isfinite(values.to_numpy())
        if bad.any():
            row = int(bad.to_numpy().nonzero()[0][0])
            raise SimserveError(
                f"{where}: row {row + 1} has {col}={df[col].iloc[row]!r} (NaN, negative or not a number); "
                f"fix or drop that row, or re-run the profiler"
            )
        # Counts (tokens, TP, sizes) stay integers, as a numeric CSV reader would have typed them.
        df[col] = values.astype("int64") if col != "time_ms" and (values % 1 == 0).all() else values
    if not (df["time_ms"] > 0).any():
        # A predictor fitted on zeros would simulate infinitely fast serving: a broken profiler run, not data.
        raise SimserveError(
            f"{where}: every time_ms is 0; re-run the profiler (`simserve profile`) for this table"
        )
    return df


def read_profile(path: str | Path) -> Profile:
    import pandas as pd

    path = Path(path)
    if not path.is_dir():
        raise SimserveError(
            f"profile directory {path} does not exist; create it with `simserve profile --gpu GPU --model "
            "MODEL`"
        )
    tables = {}
    for table in TABLES:
        f = path / f"{table}.csv"
        if not f.exists():
            raise SimserveError(f"profile {path} is missing {f.name}; re-run `simserve profile` for it")
        try:
            # As text: validate_table turns numbers into floats with Python's correctly rounded parser, so a
            # time reads as the same float under every pandas release (pandas' fast parsers have rounded the
            # last bit differently between releases).
            df = pd.read_csv(f, dtype=str, keep_default_na=False)
        except Exception as exc:
            raise SimserveError(
                f"{f} is not a readable CSV ({str(exc).splitlines()[0]}); re-run `simserve profile`"
            ) from None
        for col in df.columns:  # extra columns (a backend's own, e.g. time_min_ms): numbers where all are
            if col not in TABLES[table] and col not in LABELS:
                try:  # NOTE: what parse_floats does, stopping at the first cell that is not a number (a text
                    # column such as `kernel`: NaN cell by cell, 28,000 exceptions, was 0.1 s a generated
                    # profile)
                    values = np.array(list(map(float, df[col].tolist())), dtype=np.float64)
                except (TypeError, ValueError):
                    continue
                if not np.isnan(values).any():
                    df[col] = values
        tables[table] = validate_table(df, table, str(f))
    prov_file = path / PROVENANCE
    try:
        provenance = json.loads(prov_file.read_text())
    except FileNotFoundError:
        raise SimserveError(
            f"profile {path} is missing {PROVENANCE}; re-run `simserve profile` for it"
        ) from None
    except json.JSONDecodeError as exc:
        raise SimserveError(f"{prov_file} is not valid JSON ({exc}); re-run `simserve profile`") from None
    return Profile(path, provenance=provenance, **tables)


def write_profile(path: str | Path, tables: dict[str, pd.DataFrame], provenance: dict) -> Path:
    """Write all tables and the provenance into `path` atomically (all files appear together, or none)."""
    path = Path(path)
    for table in TABLES:
        if table not in tables:
            raise ValueError(f"write_profile needs a {table!r} table")
        validate_table(tables[table].copy(), table, f"{path}/{table}.csv")
    with atomic_path(path) as tmp:
        tmp.mkdir()
        for table, columns in TABLES.items():
            df = tables[table]
            extra = [c for c in df.columns if c not in columns]
            write_csv(df[columns + extra], tmp / f"{table}.csv")
        (tmp / PROVENANCE).write_text(json.dumps(provenance, indent=2, sort_keys=True) + "\n")
    return path


FLOAT_FORMAT = "%.6g"


def write_csv(df: pd.DataFrame, f: Path) -> None:
    """df.to_csv(f, index=False, float_format=FLOAT_FORMAT), byte for byte, for the columns profiles hold
    (integers, floats, text; any other column: pandas' own writer). pandas formats each value in Python and
    hands the rows to the csv module, as this does; without its per-block machinery, a plan's generated
    profile (~28,000 rows) is written in a quarter of the time (docs/planner.md, Speed)."""
    import csv
    import os

    cols: list[list] = []
    for name in df.columns:
        values = df[name].tolist()
        kind = df[name].dtype.kind
        if kind == "f":
            cols.append(["" if v != v else FLOAT_FORMAT % v for v in values])  # NaN: pandas' na_rep
        elif kind in "iu" or (kind in "OT" and all(isinstance(v, str) for v in values)):
            cols.append(values)
        else:
            df.to_csv(f, index=False, float_format=FLOAT_FORMAT)
            return
    with f.open("w", newline="") as fh:
        out = csv.writer(fh, lineterminator=os.linesep)  # pandas' defaults: minimal quoting, '"' doubled
        out.writerow([str(c) for c in df.columns])
        out.writerows(zip(*cols, strict=True))


def profiled_deployments(
    model,
    gpu,
    tps: list[int],
    node,
    network,
    max_model_len: int,
    dtype: str = "bf16",
    kv_dtype: str = "bf16",
    moe_skew: float = 0.0,
) -> list:
    """The deployments one profile run covers (one per TP degree), checked the same way for every backend.

    Collectives need a node to say which links they cross, so a GPU with no default node needs --node.
    """
    from simserve.deployment import Deployment

    if not tps:
        raise SimserveError("no TP degrees to profile; pass --tp, e.g. --tp 1,2,4")
    deps = [
        Deployment.create(
            model,
            gpu,
            tp,
            1,
            node,
            network,
            max_model_len=max_model_len,
            dtype=dtype,
            kv_dtype=kv_dtype,
            moe_skew=moe_skew,
        )
        for tp in sorted(set(tps))
    ]
    if deps[0].node is None:
        raise SimserveError(
            f"GPU {deps[0].gpu.name} has no default node for its collectives; pass --node NAME"
        )
    return deps
