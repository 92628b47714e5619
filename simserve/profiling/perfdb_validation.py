"""The roofline backend against NVIDIA's measured GEMMs: the bf16 tables of aiconfigurator-core's per-op
database.

`pip install aiconfigurator-core` (Apache-2.0, NVIDIA) carries measured GEMM latencies per GPU system and
engine release under aiconfigurator_core/systems/data/<system>/gemm/<engine>/<version>/gemm_perf.parquet
(columns m, n, k, latency in ms). This module reads them at validation time only: nothing of the tables is
copied into the repository, and without the package every caller gets `None` from `data_root()` and skips with
a reason. The product backend that builds profiles from the database is simserve/profiling/measured*.py; this
is only the roofline's calibration and validation set.

The split, fixed before any fit (docs/kernel-validation.md, "The split"): within the serving window (m ≤ 4096
tokens, n and k 1024-32768), a row of a GEMM_FIT_SYSTEMS GPU is in-sample when both n and k are powers of two
and out-of-sample otherwise (1536, 2560, 3072, 3584, 5120, 6144, 7168, 10240, 12288 — most real models'
widths); every other GPU (A100, H200, GB200, GB300) is held out whole. Attention: load_attention says its
split.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd

from simserve.catalog import GPU, GPUSpec

ENGINE = "vllm"
# database system -> catalog GPU name
SYSTEMS = {
    "a100_sxm": "a100",
    "l40s": "l40s",
    "h100_sxm": "h100",
    "h200_sxm": "h200",
    "b200_sxm": "b200",
    "gb200": "gb200",
    "b300_sxm": "b300",
    "gb300": "gb300",
    "rtx_pro_6000_server": "rtx-p6000",
}
# The systems whose power-of-two GEMMs fit a compute capability (arch_calibration.SOURCES): only their rows
# can be in-sample. Every other system is held out whole: H200, GB200 and GB300 are the dies of the H100, B200
# and B300 in other packages, so they check that a capability's constants move with the spec sheet alone; the
# A100's rows are out-of-sample because sm80 is fitted on Vidur's A100 profiles.
GEMM_FIT_SYSTEMS = ("l40s", "h100_sxm", "b200_sxm", "b300_sxm", "rtx_pro_6000_server")
WINDOW = {"m": (1, 4096), "n": (1024, 32768), "k": (1024, 32768)}

# GPUs the database measured that the built-in catalog may not hold yet (the catalog's entry wins when it
# exists). Spec-sheet numbers with their sources, for validation only.
FALLBACK_GPUS = (
    GPUSpec(
        name="L40S",
        memory_gib=44.5,
        peak_tflops=362.05,
        hbm_gbps=864.0,
        num_sms=142,
        arch="ada",
        aliases=("l40s",),
        source="NVIDIA L40S datasheet (362 TF/s dense FP16 tensor with FP32 accumulate, 864 GB/s GDDR6; "
        "18,176 CUDA cores = 142 SMs of 128, AD102)",
    ),
    GPUSpec(
        name="B200",
        memory_gib=178.4,
        peak_tflops=2250.0,
        hbm_gbps=8000.0,
        num_sms=148,
        arch="blackwell",
        aliases=("b200", "b200-sxm"),
        source="NVIDIA DGX B200 datasheet (8 GPUs: 72 PF FP8 training with sparsity -> 2.25 PF dense BF16 "
        "per GPU; 64 TB/s HBM3e -> 8 TB/s per GPU, 1,440 GB -> 180 GB); 148 SMs (NVIDIA Blackwell "
        "architecture technical brief)",
    ),
)


def gpu_for(system: str) -> GPUSpec:
    name = SYSTEMS[system]
    if name in GPU:
        return GPU.get(name)
    return next(g for g in FALLBACK_GPUS if name in (g.name.lower(), *g.aliases))


def data_root() -> Path | None:
    """aiconfigurator_core/systems/data of the installed package, or None when it is not installed."""
    spec = importlib.util.find_spec("aiconfigurator_core")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations))) / "systems" / "data"
    return root if root.is_dir() else None


def missing_reason() -> str:
    return (
        "aiconfigurator-core is not installed (pip install aiconfigurator-core): no database GEMMs validated"
    )


def _version_key(v: str) -> tuple:
    return tuple(int(p) if p.isdigit() else -1 for p in v.replace("rc", ".").replace("post", ".").split("."))


def gemm_file(root: Path, system: str) -> Path | None:
    """The newest engine release's GEMM table of `system`, or None."""
    base = root / system / "gemm" / ENGINE
    versions = (
        sorted((d.name for d in base.iterdir() if (d / "gemm_perf.parquet").is_file()), key=_version_key)
        if base.is_dir()
        else []
    )
    return base / versions[-1] / "gemm_perf.parquet" if versions else None


def _pow2(x: pd.Series) -> np.ndarray:
    v = x.to_numpy()
    return (v & (v - 1)) == 0


def load_gemm(root: Path, systems: tuple[str, ...] = tuple(SYSTEMS), dtype: str = "bfloat16") -> pd.DataFrame:
    """gpu, system, version, m, n, k, measured_ms, set, dtype: rows of `dtype` (bfloat16, or fp8: the
    per-tensor scaled fp8 GEMMs, W8A8 with the activations quantised per call) inside WINDOW of every system
    with a table."""
    frames = []
    for system in systems:
        path = gemm_file(root, system)
        if path is None:
            continue
        df = pd.read_parquet(path, columns=["gemm_dtype", "m", "n", "k", "latency"])
        df = df[df["gemm_dtype"] == dtype]
        for col, (lo, hi) in WINDOW.items():
            df = df[df[col].between(lo, hi)]
        in_sample = _pow2(df["n"]) & _pow2(df["k"]) & (system in GEMM_FIT_SYSTEMS)
        frames.append(
            pd.DataFrame(
                {
                    "gpu": gpu_for(system).name,
                    "system": system,
                    "version": f"{ENGINE} {path.parent.name}",
                    "m": df["m"].to_numpy(),
                    "n": df["n"].to_numpy(),
                    "k": df["k"].to_numpy(),
                    "measured_ms": df["latency"].to_numpy(dtype=float),
                    "set": np.where(in_sample, "calibration", "held out"),
                    "dtype": dtype,
                }
            )
        )
    frames = [f for f in frames if len(f)]  # a table without rows of this dtype (A100: no fp8)
    if not frames:
        return pd.DataFrame(
            columns=["gpu", "system", "version", "m", "n", "k", "measured_ms", "set", "dtype"]
        )
    out = pd.concat(frames, ignore_index=True)
    return out[out["measured_ms"] > 0].sort_values(["system", "n", "k", "m"]).reset_index(drop=True)


SERVING = "serving: cannot be L2-resident"
L2_WARM = "table only: may be L2-warm"


def condition(df: pd.DataFrame) -> np.ndarray:
    """Which condition each database GEMM row was timed in: SERVING where the collector's loop of weights
    exceeds l2_residency.COLD_L2_MULTIPLE x the GPU's L2 (no line survives between two replays, as in a decode
    step that streams every layer's weights), else L2_WARM (a condition serving never has; l2_residency's
    docstring)."""
    from simserve.profiling import l2_residency as l2

    out = np.empty(len(df), dtype=object)
    for system, idx in df.groupby("system").groups.items():
        pos = df.index.get_indexer(idx)
        dtype = str(df["dtype"].iloc[pos[0]]) if "dtype" in df else "bfloat16"
        warm = l2.can_be_resident(df["n"].to_numpy()[pos], df["k"].to_numpy()[pos], dtype, gpu_for(system))
        out[pos] = np.where(warm, L2_WARM, SERVING)
    return out


def predict(df: pd.DataFrame, kernels=None, tiles=None) -> np.ndarray:
    """Roofline GEMM times of the rows; `kernels` maps a GPU name to KernelConstants (default: each GPU's
    own). fp8 rows (a `dtype` column) run on the fp8 tensor-core peak with one byte per weight, as
    roofline.linear_table runs an fp8 deployment."""
    from simserve import precision
    from simserve.profiling import roofline as rl

    out = np.empty(len(df))
    dtype = df["dtype"] if "dtype" in df else pd.Series("bfloat16", index=df.index)
    for (gpu_name, system, k, n, dt), idx in (
        df.assign(dtype=dtype).groupby(["gpu", "system", "k", "n", "dtype"]).groups.items()
    ):
        gpu = gpu_for(system)
        nbytes = 1 if dt == "fp8" else 2
        if nbytes == 1:
            gpu = precision.gemm_gpu(gpu, "fp8")
        c = kernels.get(gpu_name) if kernels else None
        pos = df.index.get_indexer(idx)
        out[pos] = rl.gemm_ms(gpu, df["m"].to_numpy()[pos], int(k), int(n), nbytes, c, tiles)
    return out


# ---------------------------------------------------------------------------------------------- attention

ATTN_WINDOW = {"isl_max": 16384, "batch_max": 256, "kv_len_max": 16384}
# compute capability -> the system whose attention tables fit its constants (arch_calibration.fit_attention)
ATTENTION_SYSTEMS = {
    80: "a100_sxm",
    89: "l40s",
    90: "h100_sxm",
    100: "b200_sxm",
    103: "b300_sxm",
    120: "rtx_pro_6000_server",
}


def attention_file(root: Path, system: str, phase: str) -> Path | None:
    """The newest engine release's `context` or `generation` attention table of `system`, or None."""
    base = root / system / "attention" / ENGINE
    name = f"{phase}_attention_perf.parquet"
    versions = (
        sorted((d.name for d in base.iterdir() if (d / name).is_file()), key=_version_key)
        if base.is_dir()
        else []
    )
    return base / versions[-1] / name if versions else None


def load_attention(root: Path, systems: tuple[str, ...] = tuple(SYSTEMS)) -> pd.DataFrame:
    """gpu, system, phase, batch, q_heads, kv_heads, head_dim, tokens (prefill: prompt length; decode: KV
    length), measured_ms, set, kernel.

    bf16 KV cache, no sliding window; the fastest kernel the engine offers for each shape (vLLM picks one
    backend per GPU; the table measures each it has). In-sample ("calibration"): head dim 128 with a
    power-of-two number of query heads on a system of ATTENTION_SYSTEMS; every other head count and head dim,
    and every other system (H200, GB200, GB300), is held out."""
    frames = []
    fitted = set(ATTENTION_SYSTEMS.values())
    for system in systems:
        for phase in ("context", "generation"):
            path = attention_file(root, system, phase)
            if path is None:
                continue
            df = pd.read_parquet(path)
            if "window_size" not in df:  # older tables measured full attention only
                df = df.assign(window_size=0)
            df = df[
                (df["kv_cache_dtype"] == "bfloat16")
                & (df["window_size"] == 0)
                & (df["batch_size"] <= ATTN_WINDOW["batch_max"])
            ]
            df = df[df["num_heads"] >= df["num_key_value_heads"]]
            tokens = df["isl"] if phase == "context" else df["isl"] + df["step"]
            df = df.assign(tokens=tokens)[
                tokens <= (ATTN_WINDOW["isl_max"] if phase == "context" else ATTN_WINDOW["kv_len_max"])
            ]
            keys = ["batch_size", "num_heads", "num_key_value_heads", "head_dim", "tokens"]
            best = df.sort_values("latency").groupby(keys, as_index=False).first()
            in_sample = (best["head_dim"] == 128) & _pow2(best["num_heads"]) & (system in fitted)
            frames.append(
                pd.DataFrame(
                    {
                        "gpu": gpu_for(system).name,
                        "system": system,
                        "phase": "prefill" if phase == "context" else "decode",
                        "batch": best["batch_size"].to_numpy(),
                        "q_heads": best["num_heads"].to_numpy(),
                        "kv_heads": best["num_key_value_heads"].to_numpy(),
                        "head_dim": best["head_dim"].to_numpy(),
                        "tokens": best["tokens"].to_numpy(),
                        "measured_ms": best["latency"].to_numpy(dtype=float),
                        "set": np.where(in_sample, "calibration", "held out"),
                        "kernel": best["kernel_source"].to_numpy(),
                    }
                )
            )
    if not frames:
        return pd.DataFrame(
            columns=[
                "gpu",
                "system",
                "phase",
                "batch",
                "q_heads",
                "kv_heads",
                "head_dim",
                "tokens",
                "measured_ms",
                "set",
                "kernel",
            ]
        )
    out = pd.concat(frames, ignore_index=True)
    return out[out["measured_ms"] > 0].reset_index(drop=True)


def predict_attention(df: pd.DataFrame, constants=None) -> np.ndarray:
    """Roofline attention times (roofline_attention.py): decode over `tokens` of KV; prefill of `batch`
    prompts of `tokens` from an empty cache in one kernel. `constants` (an AttentionConstants) replaces each
    GPU's own."""
    from simserve.profiling import roofline_attention as ra

    out = np.empty(len(df))
    keys = ["system", "phase", "q_heads", "kv_heads", "head_dim"]
    for (system, phase, q, kv, hd), idx in df.groupby(keys).groups.items():
        gpu, rows, pos = gpu_for(system), df.loc[idx], df.index.get_indexer(idx)
        b, t = rows["batch"].to_numpy(dtype=float), rows["tokens"].to_numpy(dtype=float)
        if phase == "decode":
            out[pos] = ra.decode_ms(gpu, int(q), int(kv), int(hd), b, t, c=constants)
        else:
            out[pos] = ra.prefill_ms(gpu, int(q), int(kv), int(hd), t, 0, c=constants, batch=b)
    return out


# ---------------------------------------------------------------------------------------------- fused MoE

MOE_MODELS = ("qwen3-235b-a22b", "mixtral-8x7b", "deepseek-v3")
MOE_HELD_OUT_MODELS = ("deepseek-v3",)  # its shape (hidden 7168, 256 experts, top-8) is held out on every GPU
MOE_LAYOUTS = ((1, 1), (2, 1), (4, 1), (8, 1), (2, 2), (4, 4), (8, 8))  # (TP, EP): what vLLM runs


def majority_kernel_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The rows of the kernel measured on most of them (ties: the first name): one kernel per shape."""
    counts = df.groupby("kernel_source").size()
    return df[df["kernel_source"] == sorted(counts.index, key=lambda k: (-counts[k], k))[0]]


def moe_rows(df: pd.DataFrame, dtype: str):
    """(model, TP, EP, rows) for each catalog MoE model and vLLM layout the package measured: read_moe's rows
    with balanced routing, in the first of MOE_DTYPES[dtype] the shape has, of the majority kernel, the median
    latency per num_tokens."""
    from simserve.catalog.models import resolve_model
    from simserve.profiling.measured_moe import MOE_DTYPES

    df = df[df["distribution"] == "balanced"]
    for name in MOE_MODELS:
        m = resolve_model(name)
        shape = df[
            (df["hidden_size"] == m.hidden)
            & (df["inter_size"] == m.expert_ffn)
            & (df["topk"] == m.experts_per_token)
            & (df["num_experts"] == m.num_experts)
        ]
        moe_dtype = next((d for d in MOE_DTYPES[dtype] if (shape["moe_dtype"] == d).any()), None)
        if moe_dtype is None:
            continue
        shape = shape[shape["moe_dtype"] == moe_dtype]
        for tp, ep in MOE_LAYOUTS:
            rows = shape[(shape["moe_tp_size"] == tp // ep) & (shape["moe_ep_size"] == ep)]
            if rows.empty or m.num_heads % tp:
                continue
            yield (
                name,
                tp,
                ep,
                majority_kernel_rows(rows).groupby("num_tokens", as_index=False)["latency"].median(),
            )


def load_moe(root: Path, systems: tuple[str, ...] = tuple(SYSTEMS), dtype: str = "bf16") -> pd.DataFrame:
    """gpu, system, model, tp, ep, num_tokens, measured_ms, set: the package's fused-MoE rows (balanced
    routing, the kernel measured on most rows) of the catalog's MoE models at vLLM's layouts, in `dtype`
    (bf16; fp8: the block-scaled rows where the shape has them, as the measured backend reads them).
    In-sample: Qwen3-235B-A22B and Mixtral-8x7B on a GEMM_FIT_SYSTEMS GPU; DeepSeek-V3's shape and every other
    GPU are held out."""
    from simserve.profiling import measured
    from simserve.profiling.measured_moe import read_moe

    frames = []
    for system in systems:
        gpu = gpu_for(system)
        if measured.unavailable(gpu.name) or root is None:
            continue
        df, _ = read_moe(measured.open_database(gpu.name))
        if df is None:
            continue
        for name, tp, ep, rows in moe_rows(df, dtype):
            in_sample = system in GEMM_FIT_SYSTEMS and name not in MOE_HELD_OUT_MODELS
            frames.append(
                pd.DataFrame(
                    {
                        "gpu": gpu.name,
                        "system": system,
                        "model": name,
                        "tp": tp,
                        "ep": ep,
                        "dtype": dtype,
                        "num_tokens": rows["num_tokens"].to_numpy(dtype=float),
                        "measured_ms": rows["latency"].to_numpy(dtype=float),
                        "set": "calibration" if in_sample else "held out",
                    }
                )
            )
    cols = ["gpu", "system", "model", "tp", "ep", "dtype", "num_tokens", "measured_ms", "set"]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=cols)


def predict_moe(df: pd.DataFrame, kernels=None) -> np.ndarray:
    """Roofline fused-MoE times (roofline_moe.fused_expert_ms) of load_moe's rows; `kernels` maps a GPU name
    to KernelConstants (default: each GPU's own)."""
    from simserve.deployment import Deployment
    from simserve.profiling.roofline_moe import fused_expert_ms

    out = np.empty(len(df))
    for (gpu_name, system, model, tp, ep, dtype), idx in df.groupby(
        ["gpu", "system", "model", "tp", "ep", "dtype"]
    ).groups.items():
        pos = df.index.get_indexer(idx)
        dep = Deployment.create(model, gpu_for(system), int(tp), ep=int(ep), dtype=dtype)
        c = kernels.get(gpu_name) if kernels else None
        out[pos] = fused_expert_ms(dep, df["num_tokens"].to_numpy()[pos], c)
    return out
