"""Routed-expert (fused MoE) times from NVIDIA's measured MoE tables, for each EP degree a profile covers.

The package times vLLM's fused-MoE call (`fused_experts`: routing permutation, gate+up grouped GEMM, SiLU·up,
down grouped GEMM, un-permute and top-k weighting) on ONE GPU that holds num_experts/moe_ep experts, each
sliced to inter_size/moe_tp, for `num_tokens` tokens that all reach that GPU — exactly what one GPU of a TP/EP
group runs when every TP rank sees the whole batch (no attention data parallelism), which is simserve's
layout: moe_tp = expert TP = TP/EP, moe_ep = EP. Its rows are keyed by the model's full (hidden, inter, top-k,
experts), the MoE dtype and the routing spread (`balanced`, or the package's own power laws).

Read as the dense GEMMs are (measured_grid.py): log-log along num_tokens between measured counts, extrapolated
past them with a clamped slope, and every row says how (`source`) and from which kernel (`kernel`). Where the
package has no rows for a shape — another model's widths, an EP × expert-TP mix vLLM does not run (it has
TP-only or EP-only experts), simserve's Zipf skew (the package measured its own power-law routing, not that) —
the rows come from simserve's roofline (roofline_moe.fused_expert_ms), are marked `modelled`, and the `kernel`
column says what the package lacks. Nothing is interpolated across model shapes: a fused MoE's time depends on
top-k and expert count in ways one shape does not predict for another.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from simserve.deployment import Deployment
from simserve.errors import SimserveError
from simserve.ops import fused_expert_name
from simserve.profiling.measured_grid import MODELLED, loglog, names
from simserve.profiling.roofline_moe import expert_deployments, fused_expert_ms

# simserve's --dtype → the package's moe_dtype, best first. DeepSeek-V3/R1's published fp8 checkpoints are
# block-scaled (128×128), and the package measures those shapes only as fp8_block: taken when per-tensor fp8
# is absent, and the row's kernel says so.
MOE_DTYPES = {"bf16": ("bfloat16",), "fp8": ("fp8_block", "fp8")}
COLUMNS = [
    "kernel_source",
    "moe_dtype",
    "num_tokens",
    "hidden_size",
    "inter_size",
    "topk",
    "num_experts",
    "moe_tp_size",
    "moe_ep_size",
    "distribution",
    "latency",
]


def _shape_rows(df: pd.DataFrame, dep: Deployment) -> pd.DataFrame:
    m = dep.model
    return df[
        (df["hidden_size"] == m.hidden)
        & (df["inter_size"] == m.expert_ffn)
        & (df["topk"] == m.experts_per_token)
        & (df["num_experts"] == m.num_experts)
    ]


def why_unmeasured(df: pd.DataFrame | None, dep: Deployment, where: str) -> str | None:
    """None when the table has balanced rows for this deployment's experts, else what it lacks (for the
    row)."""
    m = dep.model
    shape = f"hidden {m.hidden}, inter {m.expert_ffn}, top-{m.experts_per_token} of {m.num_experts}"
    if df is None:
        return f"no MoE table at {where}"
    if dep.moe_skew:
        return (
            f"--moe-skew {dep.moe_skew:g} is simserve's Zipf routing; the package measured balanced and its "
            "own power-law routing only"
        )
    rows = _shape_rows(df, dep)
    if rows.empty:
        return f"no measured MoE rows for {shape} in {where}"
    dtypes = [d for d in MOE_DTYPES[dep.dtype] if (rows["moe_dtype"] == d).any()]
    if not dtypes:
        return (
            f"no {'/'.join(MOE_DTYPES[dep.dtype])} MoE rows for {shape} in {where} (has "
            f"{', '.join(sorted(rows['moe_dtype'].unique()))})"
        )
    rows = rows[rows["moe_dtype"] == dtypes[0]]
    lay = rows[(rows["moe_tp_size"] == dep.expert_tp) & (rows["moe_ep_size"] == dep.ep)]
    if lay.empty:
        have = sorted(set(zip(rows["moe_tp_size"], rows["moe_ep_size"], strict=True)))
        return (
            f"no {dtypes[0]} MoE rows for expert TP {dep.expert_tp} × EP {dep.ep} ({shape}) in {where}; "
            f"measured (TP, EP): {', '.join(f'({t}, {e})' for t, e in have)}"
        )
    if not (lay["distribution"] == "balanced").any():
        return f"no balanced-routing MoE rows for {shape}, TP {dep.expert_tp} × EP {dep.ep} in {where}"
    return None


def fused_moe_ms(df: pd.DataFrame, dep: Deployment, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray, str]:
    """(times, kinds, kernel) of the deployment's fused MoE at `tokens`, from balanced rows; why_unmeasured
    first."""
    rows = _shape_rows(df, dep)
    dtype = next(d for d in MOE_DTYPES[dep.dtype] if (rows["moe_dtype"] == d).any())
    rows = rows[
        (rows["moe_dtype"] == dtype)
        & (rows["moe_tp_size"] == dep.expert_tp)
        & (rows["moe_ep_size"] == dep.ep)
        & (rows["distribution"] == "balanced")
    ]
    sizes = rows.groupby("kernel_source").size()
    # the engine's default path for this shape
    kernel = str(sorted(sizes.index, key=lambda k: (-sizes[k], k))[0])
    rows = rows[rows["kernel_source"] == kernel]
    t, kind = loglog(rows["num_tokens"], rows["latency"], tokens)
    label = f"{kernel} ({dtype})"
    return t, kind, label


def expert_table(
    deps: list[Deployment], tokens: np.ndarray, df: pd.DataFrame | None, where: str
) -> pd.DataFrame:
    """linear.csv rows of the fused routed-expert op for every EP degree, with `source` and `kernel` per
    row."""
    frames = []
    for dep in expert_deployments(deps):
        why = why_unmeasured(df, dep, where)
        if why:
            t, kind, kernel = (
                fused_expert_ms(dep, tokens),
                np.full(len(tokens), MODELLED),
                f"simserve roofline: {why}",
            )
        else:
            t, kind, kernel = fused_moe_ms(df, dep, tokens)
        frames.append(
            pd.DataFrame(
                {
                    "op": fused_expert_name(dep),
                    "tp": dep.tp,
                    "num_tokens": tokens,
                    "time_ms": t,
                    "source": names(kind),
                    "kernel": kernel,
                }
            )
        )
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def read_moe(db) -> tuple[pd.DataFrame | None, str]:
    """(rows, where) of the database's MoE table for its engine release; (None, where) when it has none."""
    from simserve.profiling import measured

    path = db.folder / "moe" / db.engine / db.version / "moe_perf.parquet"
    where = f"{db.system}/moe/{db.engine}/{db.version}"
    if not path.exists():
        return None, where
    df = measured.read_table(path, COLUMNS)
    if df.empty:
        raise SimserveError(f"{path}: no rows; reinstall {measured.PACKAGE}")
    return df, where


A2A_COLUMNS = [
    "comm_backend",
    "phase",
    "ep_size",
    "node_num",
    "hidden_size",
    "topk",
    "num_experts",
    "num_tokens",
    "latency",
]
DEEPEP = {"deepep_ll": "deepep_low_latency", "deepep_ht": "deepep_high_throughput"}  # package → vLLM's names


def deepep_table(db, model, node) -> tuple[pd.DataFrame, str | None]:
    """collectives.csv rows of DeepEP's dispatch + combine for attention-DP runs (`--all2all-backend
    deepep_*`): op `a2a_<vLLM backend>`, num_workers = the package's EP size, size_bytes = one rank's tokens ×
    hidden × 2, the two phases' measured latencies (µs in the table) summed. Only the model's hidden size and
    top-k on one node in the box the package measured in; the expert count is the measured one nearest the
    model's (DeepEP moves each token to the ranks its top-k experts sit on, which the count barely changes at
    EP 8), `derived` when it differs. (rows, None), or (empty, why not)."""
    from simserve.profiling import measured
    from simserve.profiling.measured_grid import DERIVED, MEASURED

    path = db.folder / "comm" / db.engine / db.version / "moe_a2a_perf.parquet"
    where = f"{db.system}/comm/{db.engine}/{db.version}"
    if not model.is_moe:
        return pd.DataFrame(), "not a MoE model"
    if not path.exists():
        return pd.DataFrame(), f"no DeepEP table at {where}"
    if node.name != measured.BOXES.get(db.system):
        return pd.DataFrame(), f"DeepEP measured in {measured.BOXES.get(db.system)}, not {node.name}"
    df = measured.read_table(path, A2A_COLUMNS)
    df = df[
        (df["node_num"] == 1) & (df["hidden_size"] == model.hidden) & (df["topk"] == model.experts_per_token)
    ]
    if df.empty:
        return pd.DataFrame(), (
            f"no DeepEP rows for hidden {model.hidden}, top-{model.experts_per_token} in {where}"
        )
    have = np.array(sorted(df["num_experts"].unique()), dtype=float)
    experts = int(have[np.argmin(np.abs(np.log(have / model.num_experts)))])
    df = df[df["num_experts"] == experts]
    frames = []
    for (backend, ep), g in df.groupby(["comm_backend", "ep_size"], sort=True):
        if backend not in DEEPEP:
            continue
        both = g.pivot_table(index="num_tokens", columns="phase", values="latency", aggfunc="median").dropna()
        if both.empty or not {"dispatch", "combine"} <= set(both.columns):
            continue
        tokens = both.index.to_numpy(dtype=float)
        frames.append(
            pd.DataFrame(
                {
                    "op": f"a2a_{DEEPEP[backend]}",
                    "link": node.name,
                    "num_workers": int(ep),
                    "size_bytes": tokens * model.hidden * model.dtype_bytes,
                    "time_ms": (both["dispatch"] + both["combine"]).to_numpy() / 1e3,
                    "source": names(
                        np.full(len(tokens), MEASURED if experts == model.num_experts else DERIVED)
                    ),
                    "kernel": f"DeepEP {backend} dispatch + combine ({experts} experts measured)",
                }
            )
        )
    if not frames:
        return pd.DataFrame(), f"no DeepEP dispatch + combine pairs in {where}"
    return pd.concat(frames, ignore_index=True), None
