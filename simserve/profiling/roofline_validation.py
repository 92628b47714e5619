"""The roofline backend against Vidur's measured kernels: load any GPU folder of the reference, predict,
compare.

Used by tests/test_roofline_validation.py and benchmarks/validate_kernels.py. Nothing here ships data: it
reads the reference files (../shared/reference/vidur/profiling) at test or benchmark time and returns error
tables. `calibrate` refits the A100's (sm80) physically meaningful constants (minimum durations, achieved
fractions of peak) on a subset of models; the held-out models measure how well they transfer. The other
compute capabilities are fitted in arch_calibration.py on the in-sample models of CALIBRATION_MODELS_BY_GPU.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd

from simserve.catalog import GPU, NODES, GPUSpec, ModelSpec
from simserve.deployment import Deployment
from simserve.ops import elementwise_ops, linear_ops
from simserve.profiling import collectives as coll
from simserve.profiling import nccl, nccl_validation
from simserve.profiling import roofline as rl

# label -> directory under compute/<gpu> (Vidur's Hugging Face ids).
VIDUR_MODELS = {
    "Llama-2-7B": "meta-llama/Llama-2-7b-hf",
    "Llama-2-70B": "meta-llama/Llama-2-70b-hf",
    "Llama-3-8B": "meta-llama/Meta-Llama-3-8B",
    "Llama-3-70B": "meta-llama/Meta-Llama-3-70B",
    "CodeLlama-34B": "codellama/CodeLlama-34b-Instruct-hf",
    "internlm-20b": "internlm/internlm-20b",
    "Qwen-72B": "Qwen/Qwen-72B",
    "phi-2": "microsoft/phi-2",
}
# Vidur's GPU folder (compute/<folder>) -> the catalog GPU it measured. A folder not listed is reported and
# skipped.
REFERENCE_GPUS = {"a100": "a100", "a40": "a40", "h100": "h100"}
CALIBRATION_MODELS = ("Llama-2-7B", "Llama-2-70B")
# The in-sample / out-of-sample split, fixed before any fit (docs/kernel-validation.md, "The split"): per GPU
# folder, the models whose rows a calibration may use. Every other model of that folder is held out.
CALIBRATION_MODELS_BY_GPU = {
    "a100": CALIBRATION_MODELS,
    "a40": ("internlm-20b", "Qwen-72B"),  # held out: CodeLlama-34B, phi-2
    "h100": ("internlm-20b", "Qwen-72B"),  # held out: CodeLlama-34B, phi-2
}
# The hard-target set for linear ops (the other three are reported as well).
TARGET_MODELS = ("Llama-2-7B", "Llama-2-70B", "Llama-3-8B", "CodeLlama-34B")
VIDUR_OPS = {
    "attn_pre_proj": "qkv_proj",
    "attn_post_proj": "o_proj",
    "mlp_up_proj": "up_proj",
    "mlp_down_proj": "down_proj",
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "mlp_norm",
    "attn_rope": "rotary",
    "mlp_act": "act",
    "add": "residual_add",
}
# The legacy attention file's shape: 64 q / 8 kv heads, n_embd 8192 at TP2 -> 32 q / 4 kv heads per GPU, d =
# 128.
LEGACY_ATTN_SHAPE = (32, 4, 128)
A100 = GPU.get("a100")


def reference_root(start: Path) -> Path:
    """../shared/reference/vidur/profiling beside the checkout that holds `start`."""
    return start.resolve().parents[1].parent / "shared" / "reference" / "vidur" / "profiling"


def _model_from_vidur(label: str, df: pd.DataFrame) -> ModelSpec:
    r = df.iloc[0]
    gated = bool(r["use_gated_mlp"])
    return ModelSpec(
        name=label,
        hf_id=VIDUR_MODELS[label],
        num_layers=1,
        hidden=int(r["n_embd"]),
        num_heads=int(r["n_head"]),
        num_kv_heads=int(r["n_kv_head"]),
        ffn=int(r["n_expanded_embd"]),
        vocab=int(r["vocab_size"]),
        max_position=32768,
        source="shape columns of Vidur's mlp.csv",
        activation="swiglu" if gated else "gelu",
    )


def reference_gpus(root: Path) -> dict[str, str]:
    """GPU folders under compute/ with a catalog GPU (folder -> catalog name); unknown folders are left
    out."""
    base = root / "compute"
    if not base.is_dir():
        return {}
    return {
        d.name: REFERENCE_GPUS[d.name]
        for d in sorted(base.iterdir())
        if d.is_dir() and d.name in REFERENCE_GPUS
    }


def unknown_reference_gpus(root: Path) -> list[str]:
    base = root / "compute"
    return (
        sorted(d.name for d in base.iterdir() if d.is_dir() and d.name not in REFERENCE_GPUS)
        if base.is_dir()
        else []
    )


def reference_models(root: Path, folder: str) -> tuple[str, ...]:
    """The VIDUR_MODELS measured on GPU `folder`, in VIDUR_MODELS order."""
    return tuple(
        label for label, hf in VIDUR_MODELS.items() if (root / "compute" / folder / hf / "mlp.csv").is_file()
    )


def _node_for(gpu: GPUSpec, tp: int):
    """A catalog box of `gpu` with at least `tp` GPUs: only its size matters for a kernel (no collective
    here)."""
    boxes = [n for n in NODES if n.gpu in GPU and GPU.get(n.gpu) == gpu and n.gpus_per_node >= tp]
    return boxes[0] if boxes else NODES.get("dgx-a100")


def load_mlp(root: Path, models: tuple[str, ...] | None = None, folder: str = "a100") -> pd.DataFrame:
    """Long table: gpu, model, set, op, kind (linear/elementwise), tp, num_tokens, measured_ms, k, n or
    nbytes.

    `folder` is a GPU folder of the reference tree (compute/<folder>); `models` defaults to every model in it.
    `set` is "calibration" for CALIBRATION_MODELS_BY_GPU[folder], else "held out"."""
    gpu = GPU.get(REFERENCE_GPUS[folder])
    models = reference_models(root, folder) if models is None else models
    in_sample = CALIBRATION_MODELS_BY_GPU.get(folder, ())
    frames = []
    for label in models:
        df = pd.read_csv(root / "compute" / folder / VIDUR_MODELS[label] / "mlp.csv")
        spec = _model_from_vidur(label, df)
        for tp, rows in df.groupby("num_tensor_parallel_workers"):
            dep = Deployment.create(spec, gpu, int(tp), 1, _node_for(gpu, int(tp)))
            tokens = rows["num_tokens"].to_numpy()
            common = {
                "gpu": gpu.name,
                "model": label,
                "set": "calibration" if label in in_sample else "held out",
            }
            for op in linear_ops(dep):
                vop = next(v for v, s in VIDUR_OPS.items() if s == op.name)
                frames.append(
                    pd.DataFrame(
                        {
                            **common,
                            "op": op.name,
                            "kind": "linear",
                            "tp": int(tp),
                            "num_tokens": tokens,
                            "measured_ms": rows[f"time_stats.{vop}.median"].to_numpy(),
                            "k": op.in_features,
                            "n": op.out_features,
                            "nbytes": 0.0,
                        }
                    )
                )
            for op in elementwise_ops(dep):
                # phi-2 (parallel attention and MLP) has one norm: an op Vidur did not time is left out
                for vop in (
                    v for v, s in VIDUR_OPS.items() if s == op.name and f"time_stats.{v}.median" in rows
                ):
                    frames.append(
                        pd.DataFrame(
                            {
                                **common,
                                "op": op.name,
                                "kind": "elementwise",
                                "tp": int(tp),
                                "num_tokens": tokens,
                                "measured_ms": rows[f"time_stats.{vop}.median"].to_numpy(),
                                "k": 0,
                                "n": 0,
                                "nbytes": tokens * float(op.bytes_per_token),
                            }
                        )
                    )
    return pd.concat(frames, ignore_index=True)


def predict_mlp(df: pd.DataFrame, c: rl.KernelConstants | None = None, tiles=None) -> np.ndarray:
    """Predicted times of the measured rows; `tiles` (a gemm_tiles.ArchTiles) replaces the GPU's for an
    ablation."""
    out = np.empty(len(df))
    gpus = df["gpu"] if "gpu" in df else pd.Series(A100.name, index=df.index)
    for (gpu_name, kind, op, k, n), idx in df.groupby([gpus, "kind", "op", "k", "n"]).groups.items():
        rows, gpu = df.loc[idx], GPU.get(gpu_name)
        if kind == "linear":
            out[df.index.get_indexer(idx)] = rl.gemm_ms(gpu, rows["num_tokens"], k, n, 2, c, tiles)
        else:
            out[df.index.get_indexer(idx)] = rl.elementwise_ms(gpu, op, rows["nbytes"], c)
    return out


def load_attention(root: Path) -> pd.DataFrame:
    """phase, batch_size, chunk, kv_len, measured_ms from the legacy A100 FlashAttention file."""
    df = pd.read_csv(root / "legacy" / "a100" / "attention.csv")
    dec = df[~df["is_prefill"].astype(bool)]
    pre = df[df["is_prefill"].astype(bool)]
    return pd.concat(
        [
            pd.DataFrame(
                {
                    "phase": "decode",
                    "batch_size": dec["batch_size"],
                    "chunk": 1,
                    "kv_len": dec["kv_cache_size"],
                    "measured_ms": dec["time_stats.attn_decode.median"],
                }
            ),
            pd.DataFrame(
                {
                    "phase": "prefill",
                    "batch_size": 1,
                    "chunk": pre["prefill_chunk_size"],
                    "kv_len": pre["kv_cache_size"],
                    "measured_ms": pre["time_stats.attn_prefill.median"],
                }
            ),
        ],
        ignore_index=True,
    )


def predict_attention(df: pd.DataFrame, c: rl.KernelConstants = rl.KERNELS) -> np.ndarray:
    dec = (df["phase"] == "decode").to_numpy()
    out = np.empty(len(df))
    out[dec] = rl.decode_attention_ms(A100, *LEGACY_ATTN_SHAPE, df["batch_size"][dec], df["kv_len"][dec], c=c)
    out[~dec] = rl.prefill_attention_ms(A100, *LEGACY_ATTN_SHAPE, df["chunk"][~dec], df["kv_len"][~dec], c=c)
    return out


def with_errors(df: pd.DataFrame, predicted: np.ndarray) -> pd.DataFrame:
    out = df.assign(predicted_ms=predicted)
    out["ape"] = (out["predicted_ms"] / out["measured_ms"] - 1).abs() * 100
    return out[out["measured_ms"] > 0]


def summary(df: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Median and p90 absolute percentage error per group, and the signed median bias."""
    g = df.assign(bias=(df["predicted_ms"] / df["measured_ms"] - 1) * 100).groupby(by)
    return pd.DataFrame(
        {
            "n": g.size(),
            "median_ape": g["ape"].median(),
            "p90_ape": g["ape"].quantile(0.9),
            "median_bias": g["bias"].median(),
        }
    ).round(2)


# ------------------------------------------------------------------------------------------- calibration


def _fit(loss, x0: list[float]) -> list[float]:
    from scipy.optimize import minimize  # scipy comes with scikit-learn; needed only to recalibrate

    res = minimize(loss, x0, method="Nelder-Mead", options={"maxiter": 4000, "xatol": 1e-5, "fatol": 1e-10})
    return [float(v) for v in res.x]


def _log_loss(measured: np.ndarray):
    def loss(predicted: np.ndarray) -> float:
        return float(np.mean(np.abs(np.log(np.maximum(predicted, 1e-12) / measured))))

    return loss


def calibrate(root: Path) -> dict[str, object]:
    """Refit the kernel and collective constants: mean |log(predicted/measured)| per family, Nelder-Mead.

    GEMM and elementwise constants on CALIBRATION_MODELS only; attention on the one legacy shape (in-sample);
    the collectives' one launch constant on the a100_dgx box (simserve/profiling/nccl_validation.py).
    """
    mlp = load_mlp(root, CALIBRATION_MODELS)
    lin = mlp[(mlp["kind"] == "linear") & (mlp["measured_ms"] > 0)].reset_index(drop=True)
    loss = _log_loss(lin["measured_ms"].to_numpy())
    base = rl.KERNELS

    def lin_loss(x: list[float]) -> float:
        c = dataclasses.replace(base, gemm_min_us=x[0], gemm_compute_eff=x[1], gemm_memory_eff=x[2])
        return loss(predict_mlp(lin, c))

    out: dict[str, object] = dict(
        zip(
            ["gemm_min_us", "gemm_compute_eff", "gemm_memory_eff"],
            _fit(lin_loss, [5.0, 0.7, 0.8]),
            strict=True,
        )
    )
    costs = {}
    for op in rl.ELEMENTWISE_COST:
        # The two norms are one kernel (RMSNorm over the hidden size): fit them together.
        same = ("attn_norm", "mlp_norm") if op.endswith("_norm") else (op,)
        rows = mlp[mlp["op"].isin(same) & (mlp["measured_ms"] > 0)]
        measured, nbytes = rows["measured_ms"].to_numpy(), rows["nbytes"].to_numpy()
        op_loss = _log_loss(measured)
        costs[op] = _fit(
            lambda x, nb=nbytes, f=op_loss: f((x[0] * 1e-6 + nb / (x[1] * A100.hbm_gbps * 1e9)) * 1e3),
            [2.0, 0.5],
        )
    out["elementwise_cost"] = costs

    att = load_attention(root)
    dec = att[(att["phase"] == "decode") & (att["measured_ms"] > 0)].reset_index(drop=True)
    pre = att[(att["phase"] == "prefill") & (att["measured_ms"] > 0)].reset_index(drop=True)
    dl, pl = _log_loss(dec["measured_ms"].to_numpy()), _log_loss(pre["measured_ms"].to_numpy())
    names = ["attn_decode_min_us", "attn_decode_memory_eff", "attn_decode_half_units_per_sm"]
    x = _fit(
        lambda x: dl(predict_attention(dec, dataclasses.replace(base, **dict(zip(names, x, strict=True))))),
        [10.0, 0.8, 0.4],
    )
    out.update(zip(names, x, strict=True))
    names = ["attn_prefill_min_us", "attn_prefill_compute_eff", "attn_prefill_row_overhead_keys"]
    x = _fit(
        lambda x: pl(predict_attention(pre, dataclasses.replace(base, **dict(zip(names, x, strict=True))))),
        [5.0, 0.5, 500.0],
    )
    out.update(zip(names, x, strict=True))

    out["launch_us"] = nccl_validation.calibrate_launch_us(nccl_validation.load(root))
    return out


# ------------------------------------------------------------------------------------ paper cross-check


def decode_iteration_ms(dep: Deployment, batch: int = 32, context: int = 4096) -> dict[str, float]:
    """GPU-kernel time of one decode iteration (`batch` requests at `context` tokens) summed over all layers.

    Per stage: layers/PP × (linear + elementwise + attention + TP all-reduces); times PP stages, as the
    paper's SLO is per token across the whole pipeline. CPU overheads and pipeline bubbles are not included;
    the PP send/recv hops are reported separately.
    """
    from simserve.ops import all_reduce_bytes, all_reduces_per_layer, attention_shape, send_recv_bytes

    m, gpu = dep.model, dep.gpu
    linear = sum(
        float(rl.gemm_ms(gpu, batch, op.in_features, op.out_features, m.dtype_bytes))
        for op in linear_ops(dep)
    )
    elementwise = sum(
        op.count * float(rl.elementwise_ms(gpu, op.name, batch * op.bytes_per_token))
        for op in elementwise_ops(dep)
    )
    s = attention_shape(dep)
    attention = float(
        rl.decode_attention_ms(
            gpu, s.q_heads, s.kv_heads, s.head_dim, batch, context, m.dtype_bytes, m.sliding_window
        )
    )
    reduce = 0.0
    if dep.tp > 1:
        reduce = all_reduces_per_layer(dep) * float(
            coll.all_reduce_ms(dep.node, dep.tp, all_reduce_bytes(dep, batch))
        )
    hops = 0.0
    for stage in range(dep.pp - 1):
        hop = nccl.stage_hop(dep.node, dep.network, dep.tp, stage)
        hops += float(nccl.hop_ms(dep.node, dep.network, hop, send_recv_bytes(dep, batch)))
    layers = m.num_layers  # (num_layers / pp per stage) × pp stages
    parts = {"linear": linear, "elementwise": elementwise, "attention": attention, "all_reduce": reduce}
    out = {k: v * layers for k, v in parts.items()}
    out["total"] = sum(out.values())
    out["pp_send_recv"] = hops
    return out
