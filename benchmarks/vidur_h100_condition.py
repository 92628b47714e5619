"""Why Vidur's H100 GEMMs run slower than NVIDIA's table: each measurement condition of Vidur's source,
tested.

    python benchmarks/vidur_h100_condition.py        (validate_kernels.py --calibrate prints the same section)

Vidur (github.com/microsoft/vidur at 7d47513, data/profiling/compute/h100 dated May 2024) times linear ops
with `vidur/profiling/mlp/main.py`: `mlp_wrapper.py` casts the model to float16, runs it eagerly, and with the
default `--profile_method record_function` sums, per op, the durations of the GPU kernels the op's
`record_function` annotation launched (`utils/record_function_tracer.py`: CUPTI kernel times, no launch gaps);
`mlp_impl.py` GPTModel runs ONE block `num_repeat_steps` = 20 times, each linear layer a sarathi-serve
ColumnParallel/RowParallelLinear (torch.nn.functional.linear, so cuBLAS). NVIDIA's collector
(l2_residency.py's docstring) calls the same torch.nn.functional.linear in bf16, 6 layers in a replayed CUDA
graph, CUDA events around 6 replays.

Each difference is checked against data that Vidur's H100 rows are not fitted on, and a condition term would
be kept only if a physical mechanism survives. Rows: the mechanism, the check, its number, and whether it
explains the offset (Vidur / NVIDIA − 1 on the (m, k, n) both measured).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
from common import REPO, md, torch_profile_pairs

from simserve.catalog import GPU, MODELS
from simserve.deployment import Deployment
from simserve.ops import linear_ops
from simserve.profiling import perfdb_validation as pv
from simserve.profiling import roofline_validation as v

BANDS = [0, 16, 128, 512, 4096]


def shared_shapes(ref: Path, db_root: Path) -> pd.DataFrame:
    """Vidur's H100 GEMMs joined with NVIDIA's H100 bf16 table on (m, k, n); r = Vidur / NVIDIA − 1."""
    lin = v.load_mlp(ref, folder="h100")
    lin = lin[lin["kind"] == "linear"].rename(columns={"num_tokens": "m"})
    full = pd.read_parquet(
        pv.gemm_file(db_root, "h100_sxm"), columns=["gemm_dtype", "m", "n", "k", "latency"]
    )
    j = lin.merge(full[full["gemm_dtype"] == "bfloat16"][["m", "n", "k", "latency"]], on=["m", "n", "k"])
    j = j.assign(r=j["measured_ms"] / j["latency"] - 1, system="h100_sxm", dtype="bfloat16")
    return j.assign(condition=pv.condition(j))


def torch_vs_table(gpu_name: str = "h200") -> pd.DataFrame:
    """Our eager cuBLAS timings (torch backend, CUDA events per call, L2 zero-filled before each) against the
    shipped measured profile (NVIDIA's table) on the same GPU, with the flush's write-back min(W, L2) / HBM
    taken off the torch time (docs/kernel-validation.md, "What the tables measured")."""
    gpu, frames = GPU.get(gpu_name), []
    for model, j in torch_profile_pairs(gpu_name, REPO / "profiles", ("_torch", "_table")):
        for tp in sorted(j["tp"].unique()):
            for op in linear_ops(Deployment(MODELS.get(model), gpu, tp=int(tp))):
                s = j[(j["op"] == op.name) & (j["tp"] == tp)]
                wb_ms = min(2.0 * op.in_features * op.out_features, gpu.l2_bytes) / (gpu.hbm_gbps * 1e9) * 1e3
                frames.append(s.assign(r=(s["time_ms_torch"] - wb_ms) / s["time_ms_table"] - 1))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["num_tokens", "r"])


def best_tflops(ref: Path) -> dict[str, float]:
    """The fastest GEMM (m >= 1024) of each reference GPU folder, in TFLOPS: no part runs above its spec
    peak."""
    out = {}
    for folder in v.reference_gpus(ref):
        df = v.load_mlp(ref, folder=folder)
        g = df[(df["kind"] == "linear") & (df["num_tokens"] >= 1024)]
        out[folder] = float(
            (2.0 * g["num_tokens"] * g["n"] * g["k"] / (g["measured_ms"] * 1e-3) / 1e12).max()
        )
    return out


def residual_add_share(ref: Path, folder: str) -> float:
    """Median residual-add bandwidth over 100-200 MiB (2-4x the H100's L2) as a share of the GPU's spec
    HBM."""
    df = v.load_mlp(ref, folder=folder)
    e = df[(df["op"] == "residual_add") & df["nbytes"].between(100 * 2**20, 200 * 2**20)]
    gpu = GPU.get(v.REFERENCE_GPUS[folder])
    return float((e["nbytes"] / (e["measured_ms"] * 1e-3) / 1e9).median() / gpu.hbm_gbps)


def _pct(x: float) -> str:
    return f"{x * 100:+.1f}%"


def evidence(ref: Path, db_root: Path) -> pd.DataFrame:
    j = shared_shapes(ref, db_root)
    band = pd.cut(j["m"], BANDS)
    serving = j[j["condition"] == pv.SERVING]
    sb = serving.groupby(pd.cut(serving["m"], BANDS), observed=True)["r"].median()
    t = torch_vs_table()
    tb = (
        t.groupby(pd.cut(t["num_tokens"], [0, 128, 512, np.inf]), observed=True)["r"].median()
        if len(t)
        else None
    )
    sxm, nvl = GPU.get("h100"), GPU.get("h100-nvl")
    best = best_tflops(ref)
    small = j[band.cat.codes == 0]["r"].median()
    rows = [
        (
            "the offset itself",
            "Vidur / NVIDIA on the shapes both measured, by m: 1-16, 17-128, 129-512, 513-4096",
            ", ".join(_pct(x) for x in j.groupby(band, observed=True)["r"].median()),
            "-",
        ),
        (
            "dtype: float16 (Vidur) vs bfloat16",
            f"the H100's dense tensor peak is the same for both ({sxm.peak_tflops} TF/s, H100 datasheet)",
            "no rate difference",
            "no",
        ),
        (
            "timer span: CUPTI kernel durations (Vidur) vs CUDA events around graph replays",
            "Vidur's span excludes launch gaps, so it can only read faster; the gaps weigh most at m <= 16",
            f"Vidur {_pct(small)} at m 1-16 (slower, not faster)",
            "no",
        ),
        (
            "L2: NVIDIA's 6 weights may stay warm; Vidur's 20 repeats of one block stream the block's other "
            "GEMMs between two reads of a weight",
            "the offset on shapes NVIDIA's loop cannot hold in 2x L2 (serving "
            "condition), m 1-16, 17-128, 129-512, 513-4096",
            ", ".join(_pct(x) for x in sb),
            "no: it persists",
        ),
    ]
    if tb is not None:
        rows.append(
            (
                "eager cuBLAS vs the same call in a replayed CUDA graph",
                "our H200 torch-backend timings (eager, torch 2.11 cuBLAS) / NVIDIA's H200 table − 1, flush "
                "write-back taken off, m <= 128, 129-512, > 512",
                ", ".join(_pct(x) for x in tb),
                "no: eager is not slower at m > 512",
            )
        )
    rows += [
        (
            "SKU: Vidur's docs list H100 NVL and DGX H100 nodes, and compute/h100 is shared by both",
            f"fastest measured GEMM vs the NVL's {nvl.peak_tflops:.0f} TF/s dense peak (A100, A40 folders: "
            "their fastest / peak for scale)",
            f"{best.get('h100', float('nan')):.0f} TF/s = {best.get('h100', np.nan) / sxm.peak_tflops:.2f} "
            f"of the SXM's peak (A100 {best.get('a100', np.nan) / GPU.get('a100').peak_tflops:.2f}, A40 "
            f"{best.get('a40', np.nan) / GPU.get('a40').peak_tflops:.2f})",
            "no: above an NVL's peak, an SXM part",
        ),
        (
            "cuBLAS release: May 2024's (sarathi-serve's torch) vs vLLM 0.24's",
            "both call torch.nn.functional.linear; what is left is which kernel each cuBLAS picks per shape",
            "no measurement of the older cuBLAS outside Vidur's own rows",
            "the remaining difference; no physical term",
        ),
    ]
    return pd.DataFrame(rows, columns=["mechanism", "check", "number", "explains the offset"])


def section(ref: Path, db_root: Path) -> str:
    h100, a100 = residual_add_share(ref, "h100"), residual_add_share(ref, "a100")
    return "\n".join(
        [
            "### Vidur's H100 condition, from its source: no measurement condition explains the offset",
            "",
            "Vidur (github.com/microsoft/vidur at 7d47513; H100 data of May 2024) times linear ops in",
            "`vidur/profiling/mlp/`: float16 (`mlp_wrapper.py`), eager, and by default (`--profile_method",
            "record_function`) the sum of the CUPTI durations of the kernels each op's annotation launched",
            "(`utils/record_function_tracer.py`: no launch gaps, no L2 flush); `mlp_impl.py` runs one block "
            "20 times,",
            "each linear layer sarathi-serve's Column/RowParallelLinear, i.e. torch.nn.functional.linear on "
            "cuBLAS, the",
            "call NVIDIA's collector times too (kernel_source `torch.nn.functional.linear`). Each "
            "difference, checked on",
            "data Vidur's H100 rows are not fitted on (`python benchmarks/vidur_h100_condition.py`):",
            "",
            md(evidence(ref, db_root).set_index("mechanism")),
            "",
            "None of the conditions a term could model holds up, so no term is added: Vidur's H100 GEMM rows "
            "keep the",
            "errors of the first table (before = after), and Hopper stays fitted on NVIDIA's table alone "
            "(the stack",
            "nearest the vLLM release simserve models). The elementwise side alone would allow an NVL part:",
            f"Vidur's H100 residual adds over 100-200 MiB reach a median {h100:.2f} of the SXM's 3.35 TB/s "
            "(A100:",
            f"{a100:.2f} over the same sizes), which an NVL part's 3.9 TB/s would also allow; the GEMM peak "
            "above",
            "rules the NVL out.",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--reference",
        type=Path,
        default=v.reference_root(Path(__file__)),
        help="Vidur's reference data (default: ../shared/reference/vidur)",
    )
    ref = ap.parse_args(argv).reference
    db_root = pv.data_root()
    if db_root is None or not (ref / "compute" / "h100").is_dir():
        print(
            "skipped: needs aiconfigurator-core (pip install -e '.[measured]') and ../shared/reference/vidur "
            "with compute/h100"
        )
        return 0
    print(section(ref, db_root))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
