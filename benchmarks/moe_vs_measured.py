"""Per-op error of simserve's roofline MoE, fp8 and MLA paths against NVIDIA's measured tables
(docs/models.md).

    python benchmarks/moe_vs_measured.py [--engine vllm] [--write]

For every catalog GPU with measured tables (the engine's default release), error = roofline / measured − 1,
reported as the signed median (bias; + means the roofline is too slow), median and P90 of |error|, and the
median error at few tokens (≤ 64: decode steps) and many (≥ 1024: prefill chunks):
  moe bf16 / moe fp8   the fused routed experts (roofline_moe.fused_expert_ms: two grouped GEMMs + SiLU·up) of
                       the catalog's MoE models (Qwen3-235B-A22B, Mixtral-8x7B, DeepSeek-V3) against the
                       package's balanced-routing fused-MoE rows, for the layouts vLLM runs: TP-only experts
                       (TP 1, 2, 4, 8) and EP = TP (2, 4, 8); fp8 is the block-scaled rows where the shape has
                       them (the published fp8 checkpoints' format), else per-tensor fp8 — what the measured
                       backend reads;
  fp8 GEMM             the package's per-tensor fp8 GEMMs (m ≤ 4096, n and k 1024–32768) against
                       roofline.gemm_ms on the fp8 tensor-core peak with one byte per weight
                       (precision.gemm_gpu);
  MLA decode / prefill DeepSeek-V3's whole attention module (its four projections from roofline.gemm_ms plus
                       roofline_moe's MLA attention) against the package's MLA module rows at 128/64/32/16
                       heads per GPU (TP 1–8), bf16 projections and KV; decode batch 1–256 over 128–16384
                       cached tokens, prefill one prompt of 128–16384 tokens;
  DP exchange          attention DP's dispatch + combine as simserve models vLLM's default all2all backend (an
                       all-gather and a reduce-scatter of every rank's hidden states, each timed as a ring
                       all-reduce of half of them: ops.exchange_bytes; roofline NCCL model, the package's box)
                       against the package's DeepEP dispatch + combine (low-latency and high-throughput
                       kernels; hidden 4096 and 7168, top-8 of 256, EP 8 on one node, EP 4 on a GB200/GB300
                       tray). Not the same algorithm: DeepEP is vLLM's opt-in backend (--all2all-backend
                       deepep_*), so this bounds the modelled exchange, it does not score it.

Nothing here is fitted. The roofline's constants (roofline.ARCH_KERNELS) were calibrated on dense bf16 GEMMs
and attention only — sm80 on Vidur's A100 profiles, sm90 on Vidur's H100 profile and the package's H100 bf16
GEMMs, sm89/sm100 on its L40S/B200 bf16 GEMMs — so every row below is out of sample for those fits (no MoE,
MLA or fp8 table entered any), and the H200, the GB200/GB300/B300 and the RTX Pro 6000 entered no fit at all.
`--write` replaces the generated block in docs/models.md. Needs `pip install -e '.[measured]'`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from common import write_block

from simserve import precision
from simserve.catalog import GPU
from simserve.catalog.models import resolve_model
from simserve.deployment import Deployment
from simserve.ops import linear_ops
from simserve.profiling import measured
from simserve.profiling import roofline as rl
from simserve.profiling.measured_moe import read_moe
from simserve.profiling.perfdb_validation import majority_kernel_rows, moe_rows
from simserve.profiling.roofline_moe import fused_expert_ms, mla_decode_attention_ms, mla_prefill_attention_ms

DOC = Path(__file__).resolve().parents[1] / "docs" / "models.md"
BEGIN, END = "<!-- moe_vs_measured: begin -->", "<!-- moe_vs_measured: end -->"


def moe_errors(db: measured.Database, gpu, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """(errors, token counts) of the fused routed experts over the catalog's MoE models and vLLM's layouts."""
    df, _ = read_moe(db)
    errs, toks = [], []
    if df is None:
        return np.array([]), np.array([])
    for name, tp, ep, rows in moe_rows(df, dtype):
        dep = Deployment.create(resolve_model(name), gpu, tp, ep=ep, dtype=dtype)
        t = rows["num_tokens"].to_numpy(dtype=float)
        errs.append(fused_expert_ms(dep, t) / rows["latency"].to_numpy() - 1.0)
        toks.append(t)
    return (np.concatenate(errs), np.concatenate(toks)) if errs else (np.array([]), np.array([]))


def fp8_gemm_errors(db: measured.Database, gpu) -> tuple[np.ndarray, np.ndarray]:
    try:
        df = db.gemm("fp8")
    except Exception:  # no per-tensor fp8 rows on this GPU (Ampere)
        return np.array([]), np.array([])
    df = df[(df["m"] <= 4096) & df["n"].between(1024, 32768) & df["k"].between(1024, 32768)]
    df = majority_kernel_rows(df).groupby(["m", "n", "k"], as_index=False)["latency"].median()
    g8 = precision.gemm_gpu(gpu, "fp8")
    pred = np.concatenate(
        [
            rl.gemm_ms(g8, g["m"].to_numpy(dtype=float), int(k), int(n), 1)
            for (n, k), g in df.groupby(["n", "k"], sort=True)
        ]
    )
    meas = np.concatenate([g["latency"].to_numpy() for _, g in df.groupby(["n", "k"], sort=True)])
    ms = np.concatenate([g["m"].to_numpy() for _, g in df.groupby(["n", "k"], sort=True)])
    return pred / meas - 1.0, ms


def mla_errors(db: measured.Database, gpu, phase: str) -> tuple[np.ndarray, np.ndarray]:
    from simserve.ops import attention_shape
    from simserve.profiling.measured_mla import read_modules

    mods, _ = read_modules(db)
    if mods is None:
        return np.array([]), np.array([])
    df = mods[phase]
    df = df[(df["gemm_type"] == "bfloat16") & (df["kv_cache_dtype"] == "bfloat16")]
    model = resolve_model("deepseek-v3")
    errs, toks = [], []
    for tp in (1, 2, 4, 8):
        dep = Deployment.create(model, gpu, tp)
        rows = df[df["num_heads"] == dep.heads_per_gpu]
        if phase == "decode":
            rows = rows.assign(length=rows["isl"] + rows["step"])
            rows = rows[rows["batch_size"].between(1, 256) & rows["length"].between(128, 16384)]
            rows = rows.groupby(["batch_size", "length"], as_index=False)["latency"].median()
            tokens = rows["batch_size"].to_numpy(dtype=float)
            att = mla_decode_attention_ms(
                gpu, attention_shape(dep), tokens, rows["length"].to_numpy(dtype=float)
            )
        else:
            rows = rows[(rows["batch_size"] == 1) & rows["isl"].between(128, 16384)]
            rows = rows.groupby("isl", as_index=False)["latency"].median()
            tokens = rows["isl"].to_numpy(dtype=float)
            att = mla_prefill_attention_ms(gpu, attention_shape(dep), tokens, np.zeros(len(rows)))
        if rows.empty:
            continue
        proj = sum(
            rl.gemm_ms(gpu, tokens, op.in_features, op.out_features)
            for op in linear_ops(dep)
            if op.name in ("qkv_a_proj", "q_b_proj", "kv_b_proj", "o_proj")
        )
        errs.append((proj + att) / rows["latency"].to_numpy() - 1.0)
        toks.append(tokens)
    return (np.concatenate(errs), np.concatenate(toks)) if errs else (np.array([]), np.array([]))


def exchange_errors(db: measured.Database, backend: str) -> tuple[np.ndarray, np.ndarray]:
    """simserve's attention-DP dispatch + combine (ops.dispatch_combine_bytes through the roofline's NCCL
    all-reduce model over EP ranks) against the package's DeepEP dispatch + combine at the same tokens per
    rank."""
    from simserve.catalog import NODES
    from simserve.profiling.collectives import all_reduce_ms

    path = db.folder / "comm" / db.engine / db.version / "moe_a2a_perf.parquet"
    if not path.exists() or db.system not in measured.BOXES:
        return np.array([]), np.array([])
    df = measured.read_table(
        path,
        [
            "comm_backend",
            "phase",
            "ep_size",
            "node_num",
            "hidden_size",
            "topk",
            "num_experts",
            "num_tokens",
            "latency",
        ],
    )
    df = df[
        (df["comm_backend"] == backend)
        & (df["node_num"] == 1)
        & (df["topk"] == 8)
        & (df["num_experts"] == 256)
        & df["hidden_size"].isin([4096, 7168])
    ]
    both = df.pivot_table(index=["ep_size", "hidden_size", "num_tokens"], columns="phase", values="latency")
    both = both.dropna().reset_index()
    if both.empty:
        return np.array([]), np.array([])
    node = NODES.get(measured.BOXES[db.system])
    ep, tokens = both["ep_size"].to_numpy(), both["num_tokens"].to_numpy(dtype=float)
    # ops.exchange_bytes: half of every rank's states
    half = ep * tokens * both["hidden_size"].to_numpy() * 2 / 2
    pred = np.array(
        [2 * float(all_reduce_ms(node, int(e), np.array([b]))[0]) for e, b in zip(ep, half, strict=True)]
    )
    meas = (both["dispatch"] + both["combine"]).to_numpy() / 1e3  # the a2a table's latency is in µs
    return pred / meas - 1.0, tokens


def _row(err: np.ndarray, tokens: np.ndarray) -> str:
    if len(err) == 0:
        return "0 | – | – | – | – | –"
    few, many = err[tokens <= 64], err[tokens >= 1024]

    def med(e: np.ndarray) -> str:
        return f"{np.median(e):+.0%}" if len(e) else "–"

    return (
        f"{len(err)} | {np.median(err):+.0%} | {np.median(np.abs(err)):.0%} | "
        f"{np.quantile(np.abs(err), 0.9):.0%} | {med(few)} | {med(many)}"
    )


def table(engine: str) -> str:
    lines = [
        f"{measured.PACKAGE} {measured.package_version()}, {engine} tables of each GPU's default release; "
        "error = roofline / measured − 1 (+: the roofline is too slow); `≤ 64` / `≥ 1024`: the median error "
        "at that many tokens (MLA decode: batch size)",
        "",
        "| GPU | release | path | rows | bias | median abs | P90 abs | ≤ 64 | ≥ 1024 |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, system in measured.SYSTEMS.items():
        if engine not in measured.engines(system):
            continue
        db = measured.open_database(name, engine)
        gpu = GPU.get(name)
        paths = {
            "moe bf16": moe_errors(db, gpu, "bf16"),
            "moe fp8": moe_errors(db, gpu, "fp8")
            if precision.has_fp8_tensor_cores(gpu)
            else (np.array([]),) * 2,
            "fp8 GEMM": fp8_gemm_errors(db, gpu),
            "MLA decode": mla_errors(db, gpu, "decode"),
            "MLA prefill": mla_errors(db, gpu, "prefill"),
            "DP exchange vs DeepEP LL": exchange_errors(db, "deepep_ll"),
            "DP exchange vs DeepEP HT": exchange_errors(db, "deepep_ht"),
        }
        for path, (err, tok) in paths.items():
            if len(err):
                lines.append(f"| {name} | {db.version} | {path} | {_row(err, tok)} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", default="vllm")
    ap.add_argument("--write", action="store_true", help=f"replace the generated block in {DOC.name}")
    args = ap.parse_args()
    out = table(args.engine)
    print(out)
    if args.write:
        write_block(DOC, BEGIN, END, out)


if __name__ == "__main__":
    main()
