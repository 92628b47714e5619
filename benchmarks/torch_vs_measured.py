"""Kernels timed on a real GPU against the measured backend and the roofline (docs/kernel-validation.md).

    python benchmarks/torch_vs_measured.py [--torch-root profiles/torch] [--gpu h200]

The torch profiles under `profiles/torch/<gpu>/<model>/` were timed by `simserve profile --backend torch` on
the GPU itself (docs/profiling.md § Profiles timed on a real GPU says how). They are an out-of-sample check
for both other sources of kernel times: nothing in the measured backend (NVIDIA's aiconfigurator-core tables,
vLLM kernels) or in the roofline's calibration saw them. For each model the shipped measured profile
(`profiles/<gpu>/<model>/`) and a roofline profile written on the same grid are read, rows are joined on their
grid point, and errors are other / torch − 1 (+ means the other source is slower than the GPU was), as the
signed median (bias), the median and the P90 of |error|, per op family and regime:
  linear      GEMMs by token count: m ≤ 64 (weight-bandwidth bound), 64 < m ≤ 512, m > 512 (compute bound);
  attention   decode (batch × context), prefill over no prefix (whole prompts) and prefill chunks over a
              prefix;
  elementwise norms, rotary, activation, residual add (torch runs them as eager, unfused kernels; vLLM fuses
              rotary and SwiGLU, so torch's times are upper bounds for those two).
Both comparison profiles are read or written by simserve itself: no GPU and no extra package is needed.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
from common import md

from simserve.catalog import GPU, MODELS
from simserve.predictor.load import default_profiles_root
from simserve.profiling import roofline
from simserve.profiling.schema import profile_dir, read_profile, write_profile

KEYS = {
    "linear": ["op", "tp", "num_tokens"],
    "attention": ["phase", "tp", "batch_size", "chunk", "kv_len"],
    "elementwise": ["op", "tp", "num_tokens"],
}


def _regime(table: str, df: pd.DataFrame) -> pd.Series:
    if table == "linear":
        return pd.cut(df["num_tokens"], [0, 64, 512, np.inf], labels=["m ≤ 64", "64 < m ≤ 512", "m > 512"])
    if table == "attention":
        prefill = np.where(df["kv_len"] == 0, "prefill, no prefix", "prefill chunk over a prefix")
        return pd.Series(np.where(df["phase"] == "decode", "decode", prefill), index=df.index)
    return df["op"]


def errors(torch_tables: dict, other_tables: dict, table: str) -> pd.DataFrame:
    t = torch_tables[table][KEYS[table] + ["time_ms"]]
    o = other_tables[table][KEYS[table] + ["time_ms"]]
    j = t.merge(o, on=KEYS[table], suffixes=("_torch", "_other"))
    j["err"] = j["time_ms_other"] / j["time_ms_torch"] - 1.0
    j["regime"] = _regime(table, j).astype(str)
    return j


def _stats(err: pd.Series) -> str:
    a = err.abs()
    return f"{len(err)} | {err.median():+.1%} | {a.median():.1%} | {a.quantile(0.9):.1%}"


def roofline_tables(model: str, gpu: str, tps: list[int], tmp: Path) -> dict:
    spec = GPU.get(gpu)
    tables, prov = roofline.profile(MODELS.get(model), spec, tps, None, None)
    path = write_profile(tmp / gpu / model, tables, {**prov, "model": model, "gpu": spec.name})
    return vars(read_profile(path))


def section() -> str:
    """The roofline against the kernels timed on a real GPU (profiles/torch/<gpu>/): out-of-sample, pooled
    over models; the section benchmarks/validate_kernels.py puts in docs/kernel-validation.md."""
    root = default_profiles_root() / "torch"
    gpus = sorted(d.name for d in root.iterdir() if d.is_dir()) if root.is_dir() else []
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for gpu in gpus:
            for model_dir in sorted(d for d in (root / gpu).iterdir() if (d / "linear.csv").is_file()):
                torch_p = read_profile(model_dir)
                tps = sorted(int(t) for t in torch_p.linear["tp"].unique())
                roof = roofline_tables(model_dir.name, gpu, tps, Path(tmp))
                for table in ("linear", "attention"):
                    rows.append(errors(vars(torch_p), roof, table).assign(gpu=gpu, table=table))
    if not rows:
        return ""
    err = pd.concat(rows, ignore_index=True)
    g = err.groupby(["gpu", "table", "regime"])["err"]
    out = pd.DataFrame(
        {
            "n": g.size(),
            "median_ape": g.apply(lambda e: e.abs().median() * 100),
            "p90_ape": g.apply(lambda e: e.abs().quantile(0.9) * 100),
            "median_bias": g.median() * 100,
        }
    ).round(2)
    return "\n".join(
        [
            "### Kernels timed on a real GPU (profiles/torch/): every row out-of-sample",
            "",
            "The torch backend's profiles timed on the GPU itself (docs/profiling.md, torch 2.11 + cuBLAS, "
            "SDPA",
            "FlashAttention-2, an L2 flush before each timing) against a roofline profile on the same grid, "
            "pooled over",
            f"their models ({', '.join(gpus)}). Bias + means the roofline is slower. Hopper's roofline is "
            "fitted on vLLM's",
            "FlashAttention-3 and cuBLAS kernels, which run 6-7% (GEMM, m > 512) and up to ~1.9x (long "
            "prefill) faster",
            'than these; the small-m GEMM gap follows the flush\'s write-backs ("What the tables measured", '
            "below).",
            "",
            md(out),
            "",
        ]
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--torch-root", default=str(default_profiles_root() / "torch"))
    ap.add_argument("--gpu", default="h200")
    ap.add_argument(
        "--section",
        action="store_true",
        help="print docs/kernel-validation.md's section on every GPU's torch profiles instead",
    )
    args = ap.parse_args()
    if args.section:
        print(section())
        return
    root = Path(args.torch_root)
    gpu_dir = profile_dir(root, args.gpu, "x").parent
    models = (
        sorted(p.name for p in gpu_dir.iterdir() if (p / "linear.csv").is_file()) if gpu_dir.is_dir() else []
    )
    if not models:
        raise SystemExit(f"no torch profiles under {gpu_dir}")
    print(
        "| model | TP | table | regime | vs measured backend: rows | bias | median abs | P90 abs "
        "| vs roofline: rows | bias | median abs | P90 abs |"
    )
    print("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for model in models:
            torch_p = read_profile(gpu_dir / model)
            tps = sorted(int(t) for t in torch_p.linear["tp"].unique())
            meas_p = vars(read_profile(profile_dir(default_profiles_root(), args.gpu, model)))
            roof_p = roofline_tables(model, args.gpu, tps, Path(tmp))
            for table in KEYS:
                em, er = errors(vars(torch_p), meas_p, table), errors(vars(torch_p), roof_p, table)
                for regime in sorted(em["regime"].unique()):
                    m, r = em[em["regime"] == regime]["err"], er[er["regime"] == regime]["err"]
                    tp_label = ",".join(map(str, tps))
                    print(f"| {model} | {tp_label} | {table} | {regime} | {_stats(m)} | {_stats(r)} |")


if __name__ == "__main__":
    main()
