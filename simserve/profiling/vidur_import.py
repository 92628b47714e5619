"""Reading Vidur's CSVs into simserve's tables: times unchanged, each bad cell named by file and row."""

from __future__ import annotations

import datetime
import hashlib
from pathlib import Path

import numpy as np
import pandas as pd

from simserve.catalog import GPUSpec, ModelSpec, NetworkSpec, NodeSpec
from simserve.errors import SimserveError
from simserve.io import exact_floats
from simserve.ops import ELEMENTWISE_OPS, LINEAR_OPS
from simserve.profiling.schema import Profile
from simserve.profiling.vidur_format import (
    EXTRA_STATS,
    FILES,
    OP_MAP,
    UNKNOWN_NETWORK,
    stat_column,
    vidur_device,
    vidur_node,
)


def locate(src: Path, model: ModelSpec, gpu: GPUSpec, node: NodeSpec) -> dict[str, Path]:
    """The Vidur files present under `src`: flat (src/mlp.csv) or in Vidur's tree
    (src[/data/profiling]/compute/...)."""
    if not src.is_dir():
        raise SimserveError(
            f"Vidur profile directory {src} does not exist; pass the folder holding mlp.csv etc."
        )
    found = {}
    for name in FILES:
        sub = (
            ("compute", vidur_device(gpu), *model.hf_id.split("/"))
            if name in FILES[:2]
            else ("network", vidur_node(node))
        )
        for base in (src, src / "data" / "profiling"):
            for cand in (base / name, base.joinpath(*sub, name)):
                if name not in found and cand.is_file():
                    found[name] = cand
    if not found:
        raise SimserveError(
            f"no Vidur profile files ({', '.join(FILES)}) in {src} or under its compute/{vidur_device(gpu)}/"
            f"{model.hf_id}/ and network/{vidur_node(node)}/ folders; point at the folder that holds them"
        )
    return found


def _read_csv(path: Path) -> pd.DataFrame:
    try:
        df = pd.read_csv(path, **exact_floats())
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError) as exc:
        raise SimserveError(
            f"{path} is not a readable CSV ({str(exc).splitlines()[0]}); fix or re-export it"
        ) from None
    df = df.loc[
        :, [not str(c).startswith("Unnamed:") for c in df.columns]
    ]  # Vidur's network files carry an index
    if df.empty:
        raise SimserveError(f"{path} has no rows; re-run Vidur's profiler for it")
    return df.reset_index(drop=True)


def _require(df: pd.DataFrame, columns: list[str], path: Path) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise SimserveError(f"{path}: missing column(s) {', '.join(missing)}; is this a Vidur {path.name}?")


def _numbers(
    df: pd.DataFrame, col: str, path: Path, rows: pd.Series | None = None, integer: bool = False
) -> pd.Series:
    """The column as numbers; a NaN, negative or non-number in a checked row names the file and row."""
    values = pd.to_numeric(df[col], errors="coerce")
    bad = ~np.isfinite(values.to_numpy(dtype=float)) | (values.to_numpy(dtype=float) < 0)
    if integer:
        bad |= np.nan_to_num(values.to_numpy(dtype=float)) % 1 != 0
    if rows is not None:
        bad &= rows.to_numpy()
    if bad.any():
        i = int(bad.nonzero()[0][0])
        raise SimserveError(
            f"{path}: row {i + 1} (line {i + 2}) has {col}={df[col].iloc[i]!r} (NaN, negative or not a "
            "number); fix or drop that row"
        )
    return values.astype("int64") if integer and rows is None else values


def _times(df: pd.DataFrame, op: str, path: Path, rows: pd.Series | None = None) -> pd.DataFrame:
    """time_ms from the median and, where Vidur wrote them, the other four statistics."""
    out = pd.DataFrame({"time_ms": _numbers(df, stat_column(op), path, rows)})
    for stat, name in EXTRA_STATS.items():
        if stat_column(op, stat) in df.columns:
            out[name] = pd.to_numeric(df[stat_column(op, stat)], errors="coerce")
    return out


def _check_shape(df: pd.DataFrame, expected: dict[str, int], path: Path, model: ModelSpec) -> None:
    """Refuse rows measured for another architecture: Vidur's files name the shape they timed."""
    for col, want in expected.items():
        if col in df.columns:
            got = pd.to_numeric(df[col], errors="coerce")
            bad = (got != want).to_numpy()
            if bad.any():
                i = int(bad.nonzero()[0][0])
                raise SimserveError(
                    f"{path}: row {i + 1} has {col}={df[col].iloc[i]} but {model.name} has {want}; "
                    f"pass the --model it was measured for"
                )


def read_mlp(path: Path, model: ModelSpec) -> tuple[pd.DataFrame, pd.DataFrame]:
    df = _read_csv(path)
    _require(df, ["num_tokens", "num_tensor_parallel_workers", *(stat_column(v) for v in OP_MAP)], path)
    _check_shape(
        df,
        {
            "n_head": model.num_heads,
            "n_kv_head": model.num_kv_heads,
            "n_embd": model.hidden,
            "n_expanded_embd": model.ffn,
        },
        path,
        model,
    )
    keys = pd.DataFrame(
        {
            "tp": _numbers(df, "num_tensor_parallel_workers", path, integer=True),
            "num_tokens": _numbers(df, "num_tokens", path, integer=True),
        }
    )
    by_op = {op: pd.concat([keys, _times(df, v, path)], axis=1).assign(op=op) for v, op in OP_MAP.items()}
    linear = pd.concat([by_op[op] for op in LINEAR_OPS], ignore_index=True)
    elementwise = pd.concat([by_op[op] for op in ELEMENTWISE_OPS], ignore_index=True)
    return linear, elementwise


def _flag(values: pd.Series) -> pd.Series:
    return values.astype(str).str.strip().str.lower().isin(["true", "1", "1.0"])


def read_attention(path: Path, model: ModelSpec) -> tuple[pd.DataFrame, dict]:
    df = _read_csv(path)
    keys = ["batch_size", "prefill_chunk_size", "kv_cache_size", "num_tensor_parallel_workers"]
    _require(df, keys, path)
    _check_shape(
        df,
        {"n_embd": model.hidden, "n_q_head": model.num_heads, "n_kv_head": model.num_kv_heads},
        path,
        model,
    )
    ints = {k: _numbers(df, k, path, integer=True) for k in keys}
    prefill = _flag(df["is_prefill"]) if "is_prefill" in df.columns else ints["prefill_chunk_size"] > 0
    parts = []
    for phase, rows, op in (("prefill", prefill, "attn_prefill"), ("decode", ~prefill, "attn_decode")):
        if not rows.any():
            continue
        _require(df, [stat_column(op)], path)
        t = _times(df, op, path, rows)[rows]
        chunk = ints["prefill_chunk_size"][rows] if phase == "prefill" else 1
        parts.append(
            pd.DataFrame(
                {
                    "phase": phase,
                    "tp": ints["num_tensor_parallel_workers"][rows],
                    "batch_size": ints["batch_size"][rows],
                    "chunk": chunk,
                    "kv_len": ints["kv_cache_size"][rows],
                }
            ).join(t)
        )
    table = pd.concat(parts).sort_index(kind="stable").reset_index(drop=True)  # source row order
    info = {
        k: sorted({str(v) for v in df[k].dropna()})
        for k in ("attention_backend", "block_size", "max_model_len")
        if k in df.columns
    }
    return table, info


def read_collective(path: Path, op: str, node: NodeSpec, network: NetworkSpec | None) -> pd.DataFrame:
    df = _read_csv(path)
    _require(df, ["size", "num_workers", stat_column(op)], path)
    if "collective" in df.columns and (df["collective"] != op).any():
        i = int((df["collective"] != op).to_numpy().nonzero()[0][0])
        raise SimserveError(
            f"{path}: row {i + 1} is a {df['collective'].iloc[i]!r} row in the {op} file; drop it"
        )
    if "max_devices_per_node" in df.columns:
        boxes = set(pd.to_numeric(df["max_devices_per_node"], errors="coerce").dropna().astype(int))
        if boxes - {node.gpus_per_node}:
            raise SimserveError(
                f"{path} was measured on a box with {sorted(boxes)} GPUs per node, but {node.name} holds "
                f"{node.gpus_per_node}; pass the --node it was measured on"
            )
    workers = _numbers(df, "num_workers", path, integer=True)
    per_node = (
        _numbers(df, "devices_per_node", path, integer=True) if "devices_per_node" in df.columns else workers
    )
    crosses = (per_node < workers).to_numpy()
    link = np.where(crosses, network.name if network else UNKNOWN_NETWORK, node.name)
    table = pd.DataFrame(
        {
            "op": op,
            "link": link,
            "num_workers": workers,
            "size_bytes": _numbers(df, "size", path, integer=True),
        }
    )
    return table.join(_times(df, op, path)).assign(devices_per_node=per_node)


# ---------------------------------------------------------------------------------------------- import


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def import_vidur(
    src: str | Path,
    model: ModelSpec,
    gpu: GPUSpec,
    node: NodeSpec,
    network: NetworkSpec | None = None,
    fill_from: Profile | None = None,
) -> tuple[dict[str, pd.DataFrame], dict]:
    """Vidur's files under `src` as simserve tables (times unchanged) plus provenance.

    A missing Vidur file is taken from `fill_from` (an existing simserve profile for the same model and GPU);
    without it, a missing file is an error naming the files and the fix.
    """
    src = Path(src)
    files = locate(src, model, gpu, node)
    missing = [f for f in FILES if f not in files]
    if missing and fill_from is None:
        raise SimserveError(
            f"{src} has no {', '.join(missing)}; pass --fill-from PROFILE_DIR to take those tables from an "
            f"existing simserve profile of {model.name} on {gpu.name} (e.g. one from `simserve profile`)"
        )
    if fill_from is not None:
        for key, want in (("model", model.name), ("gpu", gpu.name)):
            if fill_from.provenance.get(key, want) != want:
                raise SimserveError(
                    f"--fill-from {fill_from.path} is a profile of {key} {fill_from.provenance[key]}, not "
                    f"{want}; fill from a profile of the same model and GPU"
                )
    tables: dict[str, pd.DataFrame] = {}
    origin: dict[str, str] = {}
    attention_info: dict = {}
    if "mlp.csv" in files:
        tables["linear"], tables["elementwise"] = read_mlp(files["mlp.csv"], model)
        origin["linear"] = origin["elementwise"] = "vidur mlp.csv"
    if "attention.csv" in files:
        tables["attention"], attention_info = read_attention(files["attention.csv"], model)
        origin["attention"] = "vidur attention.csv"
    collectives = [
        read_collective(files[f"{op}.csv"], op, node, network)
        for op in ("all_reduce", "send_recv")
        if f"{op}.csv" in files
    ]
    filled = (
        f"simserve profile {fill_from.path} (backend {fill_from.provenance.get('backend', '?')})"
        if fill_from
        else ""
    )
    for table in ("linear", "elementwise", "attention"):
        if table not in tables:
            tables[table], origin[table] = getattr(fill_from, table).copy(), filled
    for op in ("all_reduce", "send_recv"):
        if f"{op}.csv" not in files:
            rows = fill_from.collectives[fill_from.collectives["op"] == op]
            collectives.append(rows.copy())
    tables["collectives"] = pd.concat(collectives, ignore_index=True)
    origin["collectives"] = " + ".join(
        f"vidur {op}.csv" if f"{op}.csv" in files else filled for op in ("all_reduce", "send_recv")
    )
    provenance = {
        "backend": "vidur-import",
        "model": model.name,
        "gpu": gpu.name,
        "node": node.name,
        "network": network.name if network else None,
        "device": f"{gpu.name} as measured by Vidur's profiler (device folder {vidur_device(gpu)!r})",
        "source": str(src.resolve()),
        "files": {name: {"path": str(p.resolve()), "sha256": _sha256(p)} for name, p in files.items()},
        "tables": origin,
        "time_column": "median (min/max/mean/std kept as time_<stat>_ms)",
        "op_map": OP_MAP,
        "not_imported": "mlp.csv emb (simserve times no embedding op); attention.csv attn_input_reshape and "
        "attn_output_reshape (about 1 µs, outside the attention kernel)",
        "attention_source": attention_info,
        "attention_backend": ", ".join(attention_info.get("attention_backend", [])) or None,
        "max_model_len": _single_int(attention_info.get("max_model_len", [])),
        "cross_node_link": network.name if network else UNKNOWN_NETWORK,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    return {name: exact_text(df) for name, df in tables.items()}, provenance


def _single_int(values: list[str]) -> int | None:
    return int(float(values[0])) if len(values) == 1 else None


def exact_text(df: pd.DataFrame) -> pd.DataFrame:
    """Time columns as repr() text so schema.write_profile keeps every digit.

    NOTE: write_profile formats floats with %.6g, which rounds Vidur's 7-digit times (102.3925 ms in the
    Llama-3-70B file); text columns pass through its CSV writer untouched, and repr() round-trips exactly.
    """
    df = df.copy()
    for col in ["time_ms", *EXTRA_STATS.values()]:
        if col in df.columns:
            df[col] = [repr(float(v)) if v == v else "" for v in pd.to_numeric(df[col], errors="coerce")]
    return df
