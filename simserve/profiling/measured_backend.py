"""The measured profiling backend: simserve's profile grid filled from NVIDIA's measured per-op tables.

`simserve profile --backend measured --gpu h200 --model llama-2-70b --tp 2,4,8` reads the
`aiconfigurator-core` package's tables for the GPU and one engine release (measured.py) and writes the same
four tables on the same grid as the roofline backend, so the predictor fits them unchanged. Each row says how
its time was got (`source` column: measured / interpolated / derived / extrapolated / modelled;
measured_grid.py) and provenance.json counts them:
  linear       GEMMs of the model's dtype at each op's (k, n) per GPU: log-log along m between the measured
               token counts (both sides of each measured tile boundary kept), bilinear in (log n, log k)
               between shapes; the rows the package timed with their weights warm in L2 floored to streaming
               them from HBM (l2_residency.py); a MoE model's routed experts as the package's fused-MoE times
               per EP degree (measured_moe.py);
  attention    measured_attention.py (heads per GPU, chunked prefill over a prefix, decode over a KV length);
               latent attention (DeepSeek) from the measured MLA modules less their projections
               (measured_mla.py);
  collectives  all_reduce: the engine's own all-reduce kernel (CUDA-graph variant) where the engine runs it
               (vLLM: vllm_allreduce.py's dispatch; SGLang: up to its buffer limit), NCCL's measured
               all_reduce elsewhere, at the TP degrees the package measured; send_recv: the package has no
               point-to-point table (its own P2P op is analytic), so these rows come from simserve's NCCL
               model;
  elementwise  the package has no norm/rotary/activation tables (it models them from bandwidth too), so these
               rows come from simserve's roofline (roofline.elementwise_ms) and are marked modelled.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from simserve.catalog import GPUSpec, ModelSpec, NetworkSpec, NodeSpec
from simserve.deployment import Deployment
from simserve.errors import SimserveError
from simserve.ops import attention_shape, linear_ops
from simserve.profiling import grid, l2_residency, measured
from simserve.profiling.collectives import collectives_table
from simserve.profiling.measured_attention import Attention
from simserve.profiling.measured_grid import DERIVED, KIND_NAMES, bracket, counts, loglog, names, point_kind
from simserve.profiling.measured_moe import deepep_table, read_moe
from simserve.profiling.roofline import link_fields as roofline_link_fields
from simserve.profiling.schema import profiled_deployments

BACKEND = "measured"
# SGLang's custom all-reduce handles inputs up to its IPC buffer, 8 MiB (as vLLM's default,
# vllm/distributed/device_communicators/custom_all_reduce.py: CustomAllreduce(max_size=8192 * 1024)); larger
# ones go to NCCL. vLLM 0.33.0's own choice per size, GPU generation and TP degree: vllm_allreduce.py.
CUSTOM_AR_MAX_BYTES = 8 * 2**20
MAX_MEASURED_TP = 8  # the package measures all-reduce on 2, 4 and 8 GPUs (2 and 4 on GB200/GB300 trays)
# the packaged all-reduce tables count bf16 elements; TP all-reduces move bf16 activations
ACTIVATION_BYTES = 2


def _between(x0: float, v0: np.ndarray, x1: float, v1: np.ndarray, x: float) -> np.ndarray:
    slope = np.log(v1 / v0) / np.log(x1 / x0)
    if not x0 < x < x1:
        slope = np.clip(slope, 0.0, 2.0)
    return v0 * np.exp(slope * np.log(x / x0))


def gemm_ms(table: pd.DataFrame, tokens: np.ndarray, k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(tokens × k) @ (k × n) from one dtype's GEMM rows: along m per measured (n, k), then across n and k."""
    ns, ks = bracket(table["n"].unique(), n), bracket(table["k"].unique(), k)
    by_n = []
    kinds = np.zeros(len(tokens), dtype=int)
    for nj in ns:
        by_k = []
        for kl in ks:
            s = table[(table["n"] == nj) & (table["k"] == kl)]
            if s.empty:  # the package skips a few huge shapes (65536 × 65536): step to the shape beside it
                raise SimserveError(
                    f"no measured GEMM at n={nj}, k={kl} near ({n}, {k}); use --backend roofline"
                )
            v, kind = loglog(s["m"], s["latency"], tokens)
            by_k.append(v)
            kinds = np.maximum(kinds, kind)
        by_n.append(by_k[0] if len(ks) == 1 else _between(ks[0], by_k[0], ks[1], by_k[1], k))
    out = by_n[0] if len(ns) == 1 else _between(ns[0], by_n[0], ns[1], by_n[1], n)
    shape_kind = max(point_kind(table["n"].unique(), n), point_kind(table["k"].unique(), k))
    return out, np.maximum(kinds, shape_kind)


def measured_gemm_rows(db: measured.Database, dtype: str) -> tuple[pd.DataFrame, str]:
    """NVIDIA's GEMM rows of one dtype from the kernel measured on the whole grid: the median latency per
    (m, n, k), and that kernel's name."""
    df = db.gemm(dtype)
    sizes = df.groupby("kernel_source").size()
    # the kernel measured on the whole grid
    kernel = str(sorted(sizes.index, key=lambda k: (-sizes[k], k))[0])
    rows = df[df["kernel_source"] == kernel].groupby(["m", "n", "k"], as_index=False)["latency"].median()
    return rows, kernel


def linear_table(
    deps: list[Deployment],
    tokens: np.ndarray,
    gemms: pd.DataFrame,
    kernel: str,
    moe: pd.DataFrame | None = None,
    moe_where: str = "",
) -> pd.DataFrame:
    from simserve.profiling.measured_moe import expert_table

    frames = []
    for dep in deps:
        for op in linear_ops(dep):
            t, kind = gemm_ms(gemms, tokens, op.in_features, op.out_features)
            frames.append(
                pd.DataFrame(
                    {
                        "op": op.name,
                        "tp": dep.tp,
                        "num_tokens": tokens,
                        "time_ms": t,
                        "source": names(kind),
                        "kernel": kernel,
                    }
                )
            )
    # MoE models: the fused routed experts per EP degree
    frames.append(expert_table(deps, tokens, moe, moe_where))
    return pd.concat(frames, ignore_index=True)


def attention_table(
    deps: list[Deployment], db: measured.Database, kv_dtype: str, max_model_len: int, quick: bool
) -> tuple[pd.DataFrame, dict]:
    batches, lengths = grid.decode_batch_sizes(), grid.kv_lengths(max_model_len)
    chunks, prefixes = grid.prefill_chunks(max_model_len), grid.prefill_prefixes(max_model_len)
    if quick:
        batches, lengths, prefixes = batches[::2], lengths[::2], prefixes[::2]
    b, kv = (a.ravel() for a in np.meshgrid(batches, lengths, indexing="ij"))
    ch, pre = (a.ravel() for a in np.meshgrid(chunks, prefixes, indexing="ij"))
    keep = ch + pre <= max_model_len
    ch, pre = ch[keep], pre[keep]
    frames, kernels = [], {}
    rows = {} if deps[0].model.is_mla else {phase: db.attention(phase) for phase in ("prefill", "decode")}
    selected: dict = {}  # the rows each phase's kernel measured, chosen once for every TP degree
    for dep in deps:
        if dep.model.is_mla:
            dec, k_dec, pre_t, k_pre, kernels = _mla_attention(dep, db, kv_dtype, b, kv, ch, pre)
        else:
            s, window = attention_shape(dep), dep.model.sliding_window
            where = f"{db.folder}/attention/{db.engine}/{db.version}"
            att = Attention(
                rows["prefill"], rows["decode"], s.q_heads, s.kv_heads, s.head_dim, kv_dtype, where, selected
            )
            kernels = {"prefill": att.prefill_kernel, "decode": att.decode_kernel}
            dec, k_dec = att.decode(b, kv, window)
            pre_t, k_pre = att.prefill(ch, pre, window)
            k_dec, k_pre = names(k_dec), names(k_pre)
        frames.append(
            pd.DataFrame(
                {
                    "phase": "decode",
                    "tp": dep.tp,
                    "batch_size": b,
                    "chunk": 1,
                    "kv_len": kv,
                    "time_ms": dec,
                    "source": k_dec,
                    "kernel": kernels["decode"],
                }
            )
        )
        frames.append(
            pd.DataFrame(
                {
                    "phase": "prefill",
                    "tp": dep.tp,
                    "batch_size": 1,
                    "chunk": ch,
                    "kv_len": pre,
                    "time_ms": pre_t,
                    "source": k_pre,
                    "kernel": kernels["prefill"],
                }
            )
        )
    return pd.concat(frames, ignore_index=True), kernels


def _mla_attention(dep: Deployment, db: measured.Database, kv_dtype: str, b, kv, ch, pre) -> tuple:
    """Latent attention: the measured MLA modules less their projections (measured_mla.py), or the roofline's
    MLA kernels marked modelled, with the reason, where the package has no module rows for the deployment."""
    from simserve.profiling import measured_mla
    from simserve.profiling.roofline_moe import mla_decode_attention_ms, mla_prefill_attention_ms

    modules, where = measured_mla.read_modules(db)
    why = measured_mla.why_unmeasured(modules, dep, kv_dtype, where)
    if why:
        s, reason = attention_shape(dep), f"simserve roofline: {why}"
        dec = mla_decode_attention_ms(dep.gpu, s, b, kv, dep.kv_bytes)
        pre_t = mla_prefill_attention_ms(dep.gpu, s, ch, pre, dep.kv_bytes)
        return dec, "modelled", pre_t, "modelled", {"prefill": reason, "decode": reason}
    gemm_type, gemm_dtype = measured_mla.DERIVE_GEMM
    gemm_rows, _ = measured_gemm_rows(db, gemm_dtype)
    att, info = measured_mla.attention(modules, dep, kv_dtype, gemm_ms, gemm_rows, where)
    dec, k_dec = att.decode(b, kv, None)
    pre_t, k_pre = att.prefill(ch, pre, None)
    derived = np.full(len(dec), DERIVED)  # module less its projections: DERIVED at best
    kernels = {
        phase: f"{k} MLA module less {gemm_type} projections ({info['clamped'][phase]} rows at the floor)"
        for phase, k in info["kernels"].items()
    }
    return (dec, names(np.maximum(k_dec, derived)), pre_t, names(np.maximum(k_pre, DERIVED)), kernels)


def collective_table(
    db: measured.Database, node: NodeSpec, network: NetworkSpec | None, tps: list[int], quick: bool
) -> tuple[pd.DataFrame, dict]:
    sizes = np.array(grid.collective_sizes())
    if quick:
        sizes = sizes[::2]
    elements = sizes / ACTIVATION_BYTES
    nccl_version, nccl = db.nccl()
    custom = db.custom_allreduce()
    info = {
        "nccl_version": nccl_version,
        "custom_allreduce_version": custom[0] if custom else None,
        "custom_allreduce_max_bytes": CUSTOM_AR_MAX_BYTES,
    }
    frames = []
    for tp in sorted({t for t in tps if t > 1}):
        rows = nccl[nccl["num_gpus"] == tp]
        box = measured.BOXES.get(db.system)
        why = (
            f"measured in {box}, not {node.name}"
            if node.name != box
            else f"no measured rows for {tp} GPUs"
            if rows.empty
            else None
        )
        # e.g. A100 NVLink pairs (measured: DGX A100), TP 8 on GB200 (measured: a 4-GPU tray): modelled
        if why:
            from simserve.profiling.collectives import all_reduce_ms

            frames.append(
                pd.DataFrame(
                    {
                        "op": "all_reduce",
                        "link": node.name,
                        "num_workers": tp,
                        "size_bytes": sizes,
                        "time_ms": all_reduce_ms(node, tp, sizes),
                        "source": "modelled",
                        "kernel": f"simserve NCCL model (nccl.py): {why}",
                    }
                )
            )
            continue
        t, kind = loglog(rows["message_size"], rows["latency"], elements)
        kernel = np.full(len(sizes), f"nccl {nccl_version}", dtype=object)
        if custom is not None:
            c = custom[1]
            graph = [k for k in c["kernel_source"].unique() if "graph" in str(k).lower()]
            c = c[(c["num_gpus"] == tp) & (c["kernel_source"].isin(graph) if graph else True)]
            if not c.empty and db.engine == "vllm":  # vLLM 0.33.0's choice per size (vllm_allreduce.py)
                from simserve.catalog import GPUSpec
                from simserve.profiling.vllm_allreduce import allreduce_ms

                ct, ck = loglog(c["message_size"], c["latency"], elements)
                t, which = allreduce_ms(GPUSpec.from_name(node.gpu).compute_capability, tp, sizes, ct, t)
                mine = np.isin(which, ("flashinfer", "custom")) | ((which == "symm_mem") & (t == ct))
                kind[mine] = ck[mine]
                label = f"{db.engine} {custom[0]} custom all-reduce ({c['kernel_source'].iloc[0]})"
                kernel = np.array(
                    [
                        f"{label}; vLLM 0.33.0 runs {w}"
                        if m
                        else f"nccl {nccl_version}; vLLM 0.33.0 runs {w}"
                        for w, m in zip(which, mine, strict=True)
                    ],
                    dtype=object,
                )
            elif not c.empty:
                small = sizes <= CUSTOM_AR_MAX_BYTES
                ct, ck = loglog(c["message_size"], c["latency"], elements[small])
                t[small], kind[small] = ct, ck
                kernel[small] = f"{db.engine} {custom[0]} custom all-reduce ({c['kernel_source'].iloc[0]})"
        frames.append(
            pd.DataFrame(
                {
                    "op": "all_reduce",
                    "link": node.name,
                    "num_workers": tp,
                    "size_bytes": sizes,
                    "time_ms": t,
                    "source": names(kind),
                    "kernel": kernel,
                }
            )
        )
    p2p = collectives_table(node, network, [1], quick)  # send/recv only: no table in the package
    frames.append(p2p.assign(source="modelled", kernel="simserve NCCL model (nccl.py)"))
    return pd.concat(frames, ignore_index=True), info


def elementwise_table(deps: list[Deployment], tokens: np.ndarray) -> pd.DataFrame:
    from simserve.profiling import roofline

    return roofline.elementwise_table(deps, tokens).assign(source="modelled")


def profile(
    model: ModelSpec,
    gpu: GPUSpec,
    tps: list[int],
    node: NodeSpec | None,
    network: NetworkSpec | None,
    max_model_len: int = 16384,
    max_tokens: int = 16384,
    quick: bool = False,
    dtype: str = "bf16",
    kv_dtype: str = "bf16",
    moe_skew: float = 0.0,
    engine: str = "vllm",
    engine_version: str | None = None,
) -> tuple[dict[str, pd.DataFrame], dict]:
    """The four tables of simserve/profiling/schema.py (ms per layer per GPU) and their provenance fields.

    `dtype` picks the GEMM rows (bf16, fp8: the package's per-tensor-scaled fp8 kernels, fp8_block),
    `kv_dtype` the attention rows' KV cache (bf16, fp8)."""
    db = measured.open_database(gpu.name, engine, engine_version)
    deps = profiled_deployments(model, gpu, tps, node, network, max_model_len, dtype, kv_dtype, moe_skew)
    kv_dtype = {"bf16": "bfloat16", "fp8": "fp8"}.get(kv_dtype, kv_dtype)
    tokens = grid.token_grid(max_tokens, quick)
    gemms, gemm_kernel = measured_gemm_rows(db, dtype)
    # the tables time GEMMs with their weights warm in L2 where they fit; serving streams them from HBM
    gemms, l2_floor = l2_residency.floor_to_hbm(gemms, measured.GEMM_DTYPES.get(dtype, dtype), gpu)
    attention, att_kernels = attention_table(deps, db, kv_dtype, max_model_len, quick)
    collectives, comm = collective_table(db, deps[0].node, network, tps, quick)
    moe, moe_where = read_moe(db) if model.is_moe else (None, "")
    if model.is_moe:  # DeepEP dispatch + combine, for attention-DP runs that ask for it (--all2all-backend)
        a2a, comm["deepep_unavailable"] = deepep_table(db, model, deps[0].node)
        collectives = pd.concat([collectives, a2a], ignore_index=True)
    tables = {
        "linear": linear_table(deps, tokens, gemms, gemm_kernel, moe, moe_where),
        "elementwise": elementwise_table(deps, tokens),
        "attention": attention,
        "collectives": collectives,
    }
    row_counts = {name: counts([_KIND[s] for s in df["source"]]) for name, df in tables.items()}
    extrapolated = sum(c["extrapolated"] for c in row_counts.values())
    provenance = {
        "backend": BACKEND,
        "device": f"{gpu.name} (NVIDIA's measurements on {db.system}; no GPU used to write this profile)",
        "measured": {
            "package": measured.PACKAGE,
            "package_version": measured.package_version(),
            "system": db.system,
            "engine": db.engine,
            "engine_version": db.version,
            "gemm_dtype": measured.GEMM_DTYPES.get(dtype, dtype),
            "gemm_kernel": gemm_kernel,
            "gemm_l2_floor": l2_floor.provenance(gpu),
            "kv_cache_dtype": kv_dtype,
            "attention_kernels": att_kernels,
            **({"moe_table": moe_where or None} if model.is_moe else {}),
            **comm,
            "license": measured.LICENSE,
            "attribution": measured.ATTRIBUTION,
        },
        **roofline_link_fields(deps[0].node, network),  # the box and network the modelled rows assume
        "row_counts": row_counts,
        "note": (
            "rows per table by how their time was got (the `source` column): measured on the package's "
            "grid, interpolated between grid points, derived by a stated identity from measured rows, "
            f"extrapolated beyond the grid ({extrapolated} rows), or modelled (no table: elementwise ops "
            "from the roofline, send/recv from simserve's NCCL model; MoE and MLA shapes the package lacks "
            "from the roofline, the `kernel` column saying what it lacks); method in "
            "simserve/profiling/measured_backend.py"
        ),
    }
    return tables, provenance


_KIND = {name: i for i, name in enumerate(KIND_NAMES)}
