"""The roofline's error against NVIDIA's measured tables, per GPU (docs/profiling.md, "Measured backend").

    python benchmarks/measured_vs_roofline.py [--engine vllm] [--max-m 4096]

For every catalog GPU with measured tables (the engine's current release), errors are roofline / measured − 1,
reported as the signed median (bias; + means the roofline is too slow), the median and the P90 of |error|:
  GEMM        the package's bf16 GEMMs with m ≤ --max-m and n, k in 1024–32768, against `roofline.gemm_ms`;
  attention   decode (batch 1–256, 128–16384 cached tokens) and whole-prompt prefill (batch 1, 128–16384
              tokens) rows of the head shapes 8B (32/8 heads per GPU) and 70B at TP 4 (16/2) and TP 8 (8/1),
              head dim 128, against `roofline_attention.decode_ms` / `prefill_ms` (each compute capability's
              FlashAttention);
  all-reduce  what the measured backend uses (the engine's all-reduce up to 8 MiB, NCCL above; 16 KiB–256 MiB,
              2/4/8 GPUs) against the roofline profile's NCCL model, both in the box the package measured in.
  --vidur     an independent check of the measured backend itself: Vidur's measured H100 linear ops
              (../shared/reference/vidur/profiling/compute/h100/*/mlp.csv, read at run time, skipped when
              absent) against the measured backend's interpolated GEMMs and against the roofline.
Needs `pip install -e '.[measured]'`.
"""

from __future__ import annotations

import argparse

import numpy as np

from simserve.catalog import GPU
from simserve.profiling import measured
from simserve.profiling import roofline as rl
from simserve.profiling import roofline_attention as ra


def gemm_errors(gpu_name: str, engine: str, max_m: int) -> tuple[np.ndarray, np.ndarray]:
    db = measured.open_database(gpu_name, engine)
    df = db.gemm("bf16")
    df = df[(df["m"] <= max_m) & df["n"].between(1024, 32768) & df["k"].between(1024, 32768)]
    df = df.groupby(["m", "n", "k"], as_index=False)["latency"].median()
    gpu = GPU.get(gpu_name)
    pred = np.concatenate(
        [
            rl.gemm_ms(gpu, g["m"].to_numpy(), int(k), int(n))
            for (n, k), g in df.groupby(["n", "k"], sort=True)
        ]
    )
    meas = np.concatenate([g["latency"].to_numpy() for _, g in df.groupby(["n", "k"], sort=True)])
    ms = np.concatenate([g["m"].to_numpy() for _, g in df.groupby(["n", "k"], sort=True)])
    return pred / meas - 1.0, ms


ATTENTION_SHAPES = ((32, 8), (16, 2), (8, 1))


def attention_errors(gpu_name: str, engine: str, phase: str) -> np.ndarray:
    db = measured.open_database(gpu_name, engine)
    gpu = GPU.get(gpu_name)
    df = db.attention(phase)
    df = df[(df["head_dim"] == 128) & (df["kv_cache_dtype"] == "bfloat16") & (df["window_size"] == 0)]
    counts = df.groupby("kernel_source").size()
    df = df[df["kernel_source"] == sorted(counts.index, key=lambda k: (-counts[k], k))[0]]
    errs = []
    for q, kv in ATTENTION_SHAPES:
        s = df[(df["num_heads"] == q) & (df["num_key_value_heads"] == kv)]
        if phase == "decode":
            s = s.assign(length=s["isl"] + s["step"])
            s = s[s["batch_size"].between(1, 256) & s["length"].between(128, 16384)]
            pred = ra.decode_ms(gpu, q, kv, 128, s["batch_size"].to_numpy(), s["length"].to_numpy())
        else:
            s = s[(s["batch_size"] == 1) & s["isl"].between(128, 16384)]
            pred = ra.prefill_ms(gpu, q, kv, 128, s["isl"].to_numpy(), np.zeros(len(s)))
        errs.append(pred / s["latency"].to_numpy() - 1.0)
    return np.concatenate(errs)


def allreduce_errors(gpu_name: str, engine: str) -> np.ndarray:
    from simserve.catalog import NODES
    from simserve.profiling.collectives import all_reduce_ms
    from simserve.profiling.measured_backend import collective_table

    db = measured.open_database(gpu_name, engine)
    node = NODES.get(measured.BOXES[db.system])  # the box the package measured in
    col, _ = collective_table(db, node, None, [2, 4, 8], quick=False)
    col = col[
        (col["op"] == "all_reduce") & col["size_bytes"].between(16384, 2**28) & (col["source"] != "modelled")
    ]
    errs = [
        all_reduce_ms(node, int(n), g["size_bytes"].to_numpy()) / g["time_ms"].to_numpy() - 1.0
        for n, g in col.groupby("num_workers")
    ]
    return np.concatenate(errs)


def _row(err: np.ndarray) -> str:
    return (
        f"{len(err)} | {np.median(err):+.1%} | {np.median(np.abs(err)):.1%} | "
        f"{np.quantile(np.abs(err), 0.9):.1%}"
    )


def vidur_h100_linear(root) -> None:
    """Measured backend and roofline against Vidur's measured H100 linear ops, per model (median / P90
    |error|)."""
    import pandas as pd

    from simserve.catalog import ModelSpec
    from simserve.deployment import Deployment
    from simserve.ops import linear_ops
    from simserve.profiling.measured_backend import gemm_ms, measured_gemm_rows

    vops = {
        "qkv_proj": "attn_pre_proj",
        "o_proj": "attn_post_proj",
        "up_proj": "mlp_up_proj",
        "down_proj": "mlp_down_proj",
    }
    h100 = GPU.get("h100")
    table, _ = measured_gemm_rows(measured.open_database("H100-SXM"), "bf16")
    files = sorted((root / "compute" / "h100").glob("*/*/mlp.csv"))
    if not files:
        print(f"\n(no Vidur H100 files under {root}: skipped)")
        return
    print(
        "\nVidur's measured H100 linear ops (mlp.csv medians) against the measured backend and the "
        "roofline:\n"
    )
    print(
        "| model (Vidur file) | rows | measured backend: bias | median abs | P90 abs | roofline: bias | "
        "median abs | P90 abs |\n|---|---:|---:|---:|---:|---:|---:|---:|"
    )
    every_m, every_r = [], []
    for f in files:
        df = pd.read_csv(f)
        r = df.iloc[0]
        spec = ModelSpec(
            name=f.parent.name,
            hf_id=f.parent.name,
            num_layers=1,
            hidden=int(r["n_embd"]),
            num_heads=int(r["n_head"]),
            num_kv_heads=int(r["n_kv_head"]),
            ffn=int(r["n_expanded_embd"]),
            vocab=int(r["vocab_size"]),
            max_position=32768,
            activation="swiglu" if bool(r["use_gated_mlp"]) else "gelu",
            source=str(f),
        )
        em, er = [], []
        for tp, rows in df.groupby("num_tensor_parallel_workers"):
            dep = Deployment.create(spec, h100, int(tp), 1, None)
            tokens = rows["num_tokens"].to_numpy()
            for op in linear_ops(dep):
                want = rows[f"time_stats.{vops[op.name]}.median"].to_numpy()
                got, _ = gemm_ms(table, tokens, op.in_features, op.out_features)
                em.append(got / want - 1)
                er.append(rl.gemm_ms(h100, tokens, op.in_features, op.out_features) / want - 1)
        em, er = np.concatenate(em), np.concatenate(er)
        every_m.append(em)
        every_r.append(er)
        print(f"| {f.parent.name} | {_row(em)} | {_row(er).split(' | ', 1)[1]} |")
    em, er = np.concatenate(every_m), np.concatenate(every_r)
    print(f"| all | {_row(em)} | {_row(er).split(' | ', 1)[1]} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", default="vllm")
    ap.add_argument("--max-m", type=int, default=4096)
    ap.add_argument(
        "--vidur", action="store_true", help="also check against Vidur's measured H100 linear ops"
    )
    args = ap.parse_args()
    print(
        f"{measured.PACKAGE} {measured.package_version()}, {args.engine} bf16 GEMMs, m ≤ {args.max_m}, "
        "n and k 1024–32768; error = roofline / measured − 1\n"
    )
    print(
        "| GPU | system | release | rows | bias (median) | median abs | P90 abs | m > 512: bias | median abs "
        "|"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    for name, system in measured.SYSTEMS.items():
        if args.engine not in measured.engines(system):
            continue
        err, ms = gemm_errors(name, args.engine, args.max_m)
        big = err[ms > 512]
        version = measured.default_version(system, args.engine)
        print(
            f"| {name} | {system} | {version} | {len(err)} | {np.median(err):+.1%} | "
            f"{np.median(np.abs(err)):.1%} | {np.quantile(np.abs(err), 0.9):.1%} | {np.median(big):+.1%} | "
            f"{np.median(np.abs(big)):.1%} |"
        )
    print(
        "\n| GPU | decode rows | bias | median abs | P90 abs | prefill rows | bias | median abs | P90 abs |"
        " all-reduce rows | bias | median abs | P90 abs |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, system in measured.SYSTEMS.items():
        if args.engine not in measured.engines(system):
            continue
        dec, pre = (
            attention_errors(name, args.engine, "decode"),
            attention_errors(name, args.engine, "prefill"),
        )
        print(f"| {name} | {_row(dec)} | {_row(pre)} | {_row(allreduce_errors(name, args.engine))} |")
    if args.vidur:
        from pathlib import Path

        vidur_h100_linear(
            Path(__file__).resolve().parents[2] / "shared" / "reference" / "vidur" / "profiling"
        )


if __name__ == "__main__":
    main()
