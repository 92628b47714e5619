"""Writing a simserve profile in Vidur's tree (data/profiling/compute|network/...), so Vidur can run on it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from simserve.catalog import NODES, GPUSpec, ModelSpec, NodeSpec
from simserve.errors import SimserveError
from simserve.io import check_out_dir, output_dir
from simserve.profiling.nccl import pcie_link
from simserve.profiling.schema import Profile
from simserve.profiling.vidur_format import (
    EXPORT_MARKER,
    EXTRA_STATS,
    MLP_OPS,
    OP_MAP,
    STATS,
    VIDUR_VOCAB,
    stat_column,
    vidur_device,
    vidur_node,
)


def _stat_columns(rows: pd.DataFrame, op: str) -> dict[str, pd.Series]:
    """Vidur's five statistics for one op; where only the median is known all five are it and std is 0."""
    median = pd.to_numeric(rows["time_ms"])
    out = {}
    for stat in STATS:
        known = (
            pd.to_numeric(rows[EXTRA_STATS[stat]], errors="coerce") if EXTRA_STATS.get(stat) in rows else None
        )
        fallback = 0.0 * median if stat == "std" else median
        out[stat_column(op, stat)] = fallback if known is None else known.fillna(fallback)
    return out


def _keyed(rows: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Index rows by their key plus an occurrence number, so repeated measurements of one key stay
    distinct."""
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
    shape = {
        "n_head": model.num_heads,
        "n_kv_head": model.num_kv_heads,
        "n_embd": model.hidden,
        "n_expanded_embd": model.ffn,
        "vocab_size": VIDUR_VOCAB.get(vidur_model.hf_id, vidur_model.vocab),
        "use_gated_mlp": model.activation == "swiglu",
    }
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
            # reshapes are inside simserve's one attention time; the other phase's columns stay empty, as in
            # Vidur
            frame[col] = 0.0 if rows is None else values.where(rows)
    prov = profile.provenance
    max_len = prov.get("max_model_len") or int((att["kv_len"] + att["chunk"] * prefill).max())
    backend = prov.get("attention_backend") or f"simserve-{prov.get('backend', 'unknown')}"
    return frame.assign(
        n_embd=model.hidden,
        n_q_head=model.num_heads,
        n_kv_head=model.num_kv_heads,
        block_size=16,
        num_tensor_parallel_workers=att["tp"],
        max_model_len=max_len,
        batch_size=att["batch_size"],
        prefill_chunk_size=att["chunk"].where(prefill, 0),
        kv_cache_size=att["kv_len"],
        is_prefill=prefill,
        attention_backend=backend,
        profile_method=f"simserve:{prov.get('backend', 'unknown')}",
    )[
        [c for c in frame.columns if c.startswith("time_stats.")]
        + [
            "n_embd",
            "n_q_head",
            "n_kv_head",
            "block_size",
            "num_tensor_parallel_workers",
            "max_model_len",
            "batch_size",
            "prefill_chunk_size",
            "kv_cache_size",
            "is_prefill",
            "attention_backend",
            "profile_method",
        ]
    ]


def collective_frame(profile: Profile, op: str, node: NodeSpec) -> pd.DataFrame:
    """Rows inside `node` and across the network from it, with Vidur's devices_per_node convention.

    Vidur reads all-reduce rows with devices_per_node == num_workers (one node) and send/recv rows with
    devices_per_node 2 (same node) or 1 (next node). Vidur knows one hop inside a node (GPU 0 -> 1): the rows
    of a hop between NVLink pairs (`<node>:pcie`, see nccl.stage_hop) have no place in its format and are left
    out.
    """
    rows = profile.collectives[profile.collectives["op"] == op]
    rows = rows[rows["link"] != pcie_link(node.name)].reset_index(drop=True)
    inside = rows["link"] == node.name
    derived = np.where(
        inside,
        rows["num_workers"] if op == "all_reduce" else 2,
        1 if op == "send_recv" else node.gpus_per_node,
    )
    per_node = pd.to_numeric(
        rows.get("devices_per_node", pd.Series(np.nan, index=rows.index)), errors="coerce"
    )
    per_node = per_node.fillna(pd.Series(derived, index=rows.index)).astype(int)
    frame = pd.DataFrame(_stat_columns(rows, op))
    return frame.assign(
        rank=0,
        num_workers=rows["num_workers"],
        size=rows["size_bytes"],
        collective=op,
        devices_per_node=per_node,
        max_devices_per_node=node.gpus_per_node,
    )


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
    if model.is_moe or model.is_mla or model.head_size is not None:
        has = "experts" if model.is_moe else "latent attention" if model.is_mla else "a separate head_dim"
        raise SimserveError(
            f"Vidur's profile format has dense GQA layers only (hidden = heads × head_dim); {model.name} has "
            f"{has}: it cannot be exported"
        )
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
    if not (out / EXPORT_MARKER).exists():  # an earlier export (its marker predates io.MARKER) is ours
        check_out_dir(out)
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
    # NOTE: Vidur runs from this folder and writes its own outputs there: replace only the exported files.
    with output_dir(out, force=True) as tmp:
        for rel, frame in frames.items():
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            frame.to_csv(
                tmp / rel, index=False
            )  # repr() floats: Vidur reads back exactly what simserve holds
        (tmp / EXPORT_MARKER).write_text(json.dumps(note, indent=2, default=str) + "\n")
    return {str(rel): out / rel for rel in frames}
