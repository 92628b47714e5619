"""Profiles to and from Vidur (microsoft/vidur): its CSV layout on one side, simserve's schema on the other.

Vidur keeps `compute/<device>/<hf-model-id>/{mlp,attention}.csv` and `network/<node>/{all_reduce,send_recv}.csv`,
each op as `time_stats.<op>.{min,max,mean,median,std}` in ms. Import takes the `median` (what Vidur's own predictor
trains on) and keeps min/max/mean/std as extra `time_<stat>_ms` columns, so export gives them back unchanged.

Meaning of Vidur's attention columns (vidur/profiling/attention/attention_input.py): a prefill row is one request
whose `prefill_chunk_size` new tokens follow `kv_cache_size` tokens already processed — simserve's `chunk` and
`kv_len`; a decode row is `batch_size` requests each with `kv_cache_size` cached tokens (prefill_chunk_size 0). Vidur
times decode with the new token appended (kv_cache_size + 1 keys); simserve maps kv_cache_size to kv_len as is.
Collective `size` is bytes; a row whose `devices_per_node` is below `num_workers` crosses nodes.
"""

from __future__ import annotations

import datetime
import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd

from simserve.catalog import GPU, MODELS, NODES, GPUSpec, ModelSpec, NetworkSpec, NodeSpec
from simserve.errors import SimserveError
from simserve.io import atomic_path
from simserve.ops import ELEMENTWISE_OPS, LINEAR_OPS
from simserve.profiling.schema import Profile

# Vidur's op name -> simserve's, for the nine per-layer ops of mlp.csv (Vidur's `emb` has no simserve op).
OP_MAP = {
    "attn_pre_proj": "qkv_proj", "attn_post_proj": "o_proj", "mlp_up_proj": "up_proj",
    "mlp_down_proj": "down_proj", "input_layernorm": "attn_norm", "post_attention_layernorm": "mlp_norm",
    "attn_rope": "rotary", "mlp_act": "act", "add": "residual_add",
}  # fmt: skip
MLP_OPS = (
    "emb",
    "input_layernorm",
    "attn_pre_proj",
    "attn_rope",
    "attn_post_proj",
    "post_attention_layernorm",
    "mlp_up_proj",
    "mlp_act",
    "mlp_down_proj",
    "add",
)  # fmt: skip  (Vidur's column order)
STATS = ("min", "max", "mean", "median", "std")
EXTRA_STATS = {s: f"time_{s}_ms" for s in STATS if s != "median"}
FILES = ("mlp.csv", "attention.csv", "all_reduce.csv", "send_recv.csv")
UNKNOWN_NETWORK = "unknown-network"
EXPORT_MARKER = "simserve-export.json"
# Vidur's names for the catalog's GPUs and boxes (vidur/types DeviceSKUType, NodeSKUType).
VIDUR_DEVICE = {"A100-80GB": "a100", "A40-48GB": "a40", "H100-SXM": "h100", "H200": "h200"}
VIDUR_NODE = {"a100-pairwise-nvlink": "a100_pairwise_nvlink", "a40-pairwise-nvlink": "a40_pairwise_nvlink",
              "dgx-a100": "a100_dgx", "dgx-h100": "h100_dgx", "hgx-h200": "h200_dgx"}  # fmt: skip
# Vidur filters mlp.csv rows by vocab_size and pads the Llama-2 family's to 32768 (vidur/config/model_config.py,
# Llama2ModelConfig); other models use their published vocabulary.
VIDUR_VOCAB = {"meta-llama/Llama-2-7b-hf": 32768, "meta-llama/Llama-2-70b-hf": 32768,
               "codellama/CodeLlama-34b-Instruct-hf": 32768}  # fmt: skip


def vidur_device(gpu: GPUSpec) -> str:
    return VIDUR_DEVICE.get(gpu.name, gpu.name.lower().split("-")[0])


def vidur_node(node: NodeSpec) -> str:
    return VIDUR_NODE.get(node.name, node.name.replace("-", "_"))


def _col(op: str, stat: str = "median") -> str:
    return f"time_stats.{op}.{stat}"


# ---------------------------------------------------------------------------------------------- reading


def locate(src: Path, model: ModelSpec, gpu: GPUSpec, node: NodeSpec) -> dict[str, Path]:
    """The Vidur files present under `src`: flat (src/mlp.csv) or in Vidur's tree (src[/data/profiling]/compute/...)."""
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
        df = pd.read_csv(path)
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
            f"{path}: row {i + 1} (line {i + 2}) has {col}={df[col].iloc[i]!r} (NaN, negative or not a number); "
            f"fix or drop that row"
        )
    return values.astype("int64") if integer and rows is None else values


def _times(df: pd.DataFrame, op: str, path: Path, rows: pd.Series | None = None) -> pd.DataFrame:
    """time_ms from the median and, where Vidur wrote them, the other four statistics."""
    out = pd.DataFrame({"time_ms": _numbers(df, _col(op), path, rows)})
    for stat, name in EXTRA_STATS.items():
        if _col(op, stat) in df.columns:
            out[name] = pd.to_numeric(df[_col(op, stat)], errors="coerce")
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
    _require(df, ["num_tokens", "num_tensor_parallel_workers", *(_col(v) for v in OP_MAP)], path)
    _check_shape(df, {"n_head": model.num_heads, "n_kv_head": model.num_kv_heads, "n_embd": model.hidden,
                      "n_expanded_embd": model.ffn}, path, model)  # fmt: skip
    keys = pd.DataFrame({"tp": _numbers(df, "num_tensor_parallel_workers", path, integer=True),
                         "num_tokens": _numbers(df, "num_tokens", path, integer=True)})  # fmt: skip
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
    _check_shape(df, {"n_embd": model.hidden, "n_q_head": model.num_heads, "n_kv_head": model.num_kv_heads},
                 path, model)  # fmt: skip
    ints = {k: _numbers(df, k, path, integer=True) for k in keys}
    prefill = _flag(df["is_prefill"]) if "is_prefill" in df.columns else ints["prefill_chunk_size"] > 0
    parts = []
    for phase, rows, op in (("prefill", prefill, "attn_prefill"), ("decode", ~prefill, "attn_decode")):
        if not rows.any():
            continue
        _require(df, [_col(op)], path)
        t = _times(df, op, path, rows)[rows]
        chunk = ints["prefill_chunk_size"][rows] if phase == "prefill" else 1
        parts.append(pd.DataFrame({"phase": phase, "tp": ints["num_tensor_parallel_workers"][rows],
                                   "batch_size": ints["batch_size"][rows], "chunk": chunk,
                                   "kv_len": ints["kv_cache_size"][rows]}).join(t))  # fmt: skip
    table = pd.concat(parts).sort_index(kind="stable").reset_index(drop=True)  # source row order
    info = {k: sorted({str(v) for v in df[k].dropna()}) for k in ("attention_backend", "block_size", "max_model_len")
            if k in df.columns}  # fmt: skip
    return table, info


def read_collective(path: Path, op: str, node: NodeSpec, network: NetworkSpec | None) -> pd.DataFrame:
    df = _read_csv(path)
    _require(df, ["size", "num_workers", _col(op)], path)
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
    table = pd.DataFrame({"op": op, "link": link, "num_workers": workers,
                          "size_bytes": _numbers(df, "size", path, integer=True)})  # fmt: skip
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
                    f"--fill-from {fill_from.path} is a profile of {key} {fill_from.provenance[key]}, not {want}; "
                    f"fill from a profile of the same model and GPU"
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
    collectives = [read_collective(files[f"{op}.csv"], op, node, network)
                   for op in ("all_reduce", "send_recv") if f"{op}.csv" in files]  # fmt: skip
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


# ---------------------------------------------------------------------------------------------- export


def _stat_columns(rows: pd.DataFrame, op: str) -> dict[str, pd.Series]:
    """Vidur's five statistics for one op; where only the median is known all five are it and std is 0."""
    median = pd.to_numeric(rows["time_ms"])
    out = {}
    for stat in STATS:
        known = (
            pd.to_numeric(rows[EXTRA_STATS[stat]], errors="coerce") if EXTRA_STATS.get(stat) in rows else None
        )
        fallback = 0.0 * median if stat == "std" else median
        out[_col(op, stat)] = fallback if known is None else known.fillna(fallback)
    return out


def _keyed(rows: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Index rows by their key plus an occurrence number, so repeated measurements of one key stay distinct."""
    rows = rows.assign(k=rows.groupby(keys).cumcount().to_numpy())
    return rows.set_index([*keys, "k"])


def mlp_frame(profile: Profile, model: ModelSpec, vidur_model: ModelSpec) -> pd.DataFrame:
    ops = pd.concat([profile.linear, profile.elementwise], ignore_index=True)
    keyed = {op: _keyed(ops[ops["op"] == op], ["tp", "num_tokens"]) for op in OP_MAP.values()}
    index = pd.MultiIndex.from_frame(
        pd.concat([k.index.to_frame(index=False) for k in keyed.values()]).drop_duplicates()
    )
    columns: dict[str, pd.Series] = {}
    for vop in MLP_OPS:
        # Vidur's predictor never reads `emb`; an embedding gather moves the same bytes per token as a norm
        # (read and write num_tokens × hidden), so the export writes the attn_norm time for it.
        op = OP_MAP.get(vop, "attn_norm")
        rows = keyed[op].reindex(index)
        first = keyed[op].xs(0, level="k").reindex(index.droplevel("k"))
        rows = rows.fillna(first.set_axis(index))  # a key measured fewer times reuses its first measurement
        if rows["time_ms"].isna().any():
            tp, tokens, _ = rows.index[rows["time_ms"].isna().to_numpy().argmax()]
            raise SimserveError(
                f"{profile.path}: {op} has no time at tp={tp}, num_tokens={tokens} while other ops do; "
                f"Vidur needs every op at every token count: re-profile"
            )
        columns.update(_stat_columns(rows, vop))
    keys = index.to_frame(index=False)
    frame = pd.DataFrame({c: v.to_numpy() for c, v in columns.items()})
    shape = {"n_head": model.num_heads, "n_kv_head": model.num_kv_heads, "n_embd": model.hidden,
             "n_expanded_embd": model.ffn, "vocab_size": VIDUR_VOCAB.get(vidur_model.hf_id, vidur_model.vocab),
             "use_gated_mlp": model.activation == "swiglu"}  # fmt: skip
    return frame.assign(**shape, num_tokens=keys["num_tokens"], num_tensor_parallel_workers=keys["tp"])


def attention_frame(profile: Profile, model: ModelSpec) -> pd.DataFrame:
    att = profile.attention.reset_index(drop=True)
    prefill = att["phase"] == "prefill"
    frame = pd.DataFrame(index=att.index)
    phases = {
        "attn_input_reshape": None,
        "attn_decode": ~prefill,
        "attn_output_reshape": None,
        "attn_prefill": prefill,
    }
    for op, rows in phases.items():  # Vidur's column order
        for col, values in _stat_columns(att, op).items():
            # reshapes are inside simserve's one attention time; the other phase's columns stay empty, as in Vidur
            frame[col] = 0.0 if rows is None else values.where(rows)
    prov = profile.provenance
    max_len = prov.get("max_model_len") or int((att["kv_len"] + att["chunk"] * prefill).max())
    backend = prov.get("attention_backend") or f"simserve-{prov.get('backend', 'unknown')}"
    return frame.assign(
        n_embd=model.hidden, n_q_head=model.num_heads, n_kv_head=model.num_kv_heads, block_size=16,
        num_tensor_parallel_workers=att["tp"], max_model_len=max_len, batch_size=att["batch_size"],
        prefill_chunk_size=att["chunk"].where(prefill, 0), kv_cache_size=att["kv_len"], is_prefill=prefill,
        attention_backend=backend, profile_method=f"simserve:{prov.get('backend', 'unknown')}",
    )[[c for c in frame.columns if c.startswith("time_stats.")] + [
        "n_embd", "n_q_head", "n_kv_head", "block_size", "num_tensor_parallel_workers", "max_model_len",
        "batch_size", "prefill_chunk_size", "kv_cache_size", "is_prefill", "attention_backend", "profile_method",
    ]]  # fmt: skip


def collective_frame(profile: Profile, op: str, node: NodeSpec) -> pd.DataFrame:
    """Rows inside `node` and across the network from it, with Vidur's devices_per_node convention.

    Vidur reads all-reduce rows with devices_per_node == num_workers (one node) and send/recv rows with
    devices_per_node 2 (same node) or 1 (next node).
    """
    rows = profile.collectives[profile.collectives["op"] == op].reset_index(drop=True)
    inside = rows["link"] == node.name
    derived = np.where(inside, rows["num_workers"] if op == "all_reduce" else 2,
                       1 if op == "send_recv" else node.gpus_per_node)  # fmt: skip
    per_node = pd.to_numeric(
        rows.get("devices_per_node", pd.Series(np.nan, index=rows.index)), errors="coerce"
    )
    per_node = per_node.fillna(pd.Series(derived, index=rows.index)).astype(int)
    frame = pd.DataFrame(_stat_columns(rows, op))
    return frame.assign(rank=0, num_workers=rows["num_workers"], size=rows["size_bytes"], collective=op,
                        devices_per_node=per_node, max_devices_per_node=node.gpus_per_node)  # fmt: skip


def profile_node(profile: Profile) -> NodeSpec:
    name = profile.provenance.get("node")
    links = [link for link in profile.collectives["link"].unique() if link in NODES]
    if name is None and len(links) != 1:
        raise SimserveError(
            f"{profile.path}: cannot tell which node its collectives were measured on (links: "
            f"{', '.join(map(str, profile.collectives['link'].unique()))}); pass --node"
        )
    return NODES.get(name or links[0])


def export_vidur(
    profile: Profile,
    out: str | Path,
    model: ModelSpec,
    gpu: GPUSpec,
    node: NodeSpec,
    network_name: str | None = None,
    vidur_model: ModelSpec | None = None,
) -> dict[str, Path]:
    """Write `profile` in Vidur's tree under `out`/data/profiling (run Vidur from `out`); returns the files.

    `vidur_model` files the layer times under another model Vidur knows (it has no Mistral-7B, for example);
    its per-layer shapes must equal `model`'s.
    """
    vidur_model = vidur_model or model
    same = (
        "num_layers",
        "hidden",
        "num_heads",
        "num_kv_heads",
        "ffn",
        "activation",
        "norm",
        "parallel_attn_mlp",
    )
    differ = [f for f in same if getattr(model, f) != getattr(vidur_model, f)]
    if differ:
        raise SimserveError(
            f"--as-model {vidur_model.name} differs from {model.name} in {', '.join(differ)}; "
            f"Vidur would simulate other layers: pick a model with the same layer shapes"
        )
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not (out / EXPORT_MARKER).exists():
        raise SimserveError(
            f"{out} exists and is not an earlier simserve export; pass an empty or new --out folder"
        )
    network_name = network_name or vidur_node(node)
    compute = Path("data", "profiling", "compute", vidur_device(gpu), *vidur_model.hf_id.split("/"))
    net = Path("data", "profiling", "network", network_name)
    frames = {
        compute / "mlp.csv": mlp_frame(profile, model, vidur_model),
        compute / "attention.csv": attention_frame(profile, model),
        net / "all_reduce.csv": collective_frame(profile, "all_reduce", node),
        net / "send_recv.csv": collective_frame(profile, "send_recv", node),
    }
    note = {
        "source_profile": str(profile.path.resolve()),
        "source_provenance": profile.provenance,
        "model": model.name,
        "filed_as": vidur_model.hf_id,
        "device": vidur_device(gpu),
        "network_device": network_name,
        "rows": {str(p): len(f) for p, f in frames.items()},
        "estimated": "mlp.csv emb = attn_norm time (Vidur never reads emb); attention reshape times = 0; "
        "min/max/mean = median and std = 0 where the profile holds only medians",
    }
    with atomic_path(out) as tmp:
        for rel, frame in frames.items():
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            frame.to_csv(
                tmp / rel, index=False
            )  # repr() floats: Vidur reads back exactly what simserve holds
        (tmp / EXPORT_MARKER).write_text(json.dumps(note, indent=2, default=str) + "\n")
    return {str(rel): out / rel for rel in frames}


def resolve_profile_specs(profile: Profile, model: str | None, gpu: str | None) -> tuple[ModelSpec, GPUSpec]:
    """The model and GPU a profile is for: given names win, then provenance, then the profiles/<gpu>/<model> path."""
    prov = profile.provenance
    return MODELS.get(model or prov.get("model") or profile.path.name), GPU.get(
        gpu or prov.get("gpu") or profile.path.parent.name
    )
