"""Roofline kernel times for the op kinds of today's models: routed experts (grouped GEMM) and latent
attention.

They reuse roofline.py's form and constants unchanged (t = t0 + sqrt(Tc² + Tm²), the A100-calibrated achieved
fractions of peak), so a recalibration there carries over; none of these kernels has been measured here
(docs/models.md says what is validated and what is not).

- Grouped GEMM (fused MoE): one kernel per projection over the experts a batch touches on this GPU, timed with
  the activation between them as one fused op (fused_expert_ms), as the measured MoE tables time vLLM's
  kernel. Compute: each touched expert's rows padded to the GEMM tile; memory: every touched expert's weight
  slice once, plus the routed rows' activations in and out (the permuted copies, k per token). Expected
  touched experts and rows: ops.expert_load.
- MLA decode (vLLM's weight-absorbed form): every query head reads the one cached latent (kv_lora_rank + rope)
  per token; score FLOPs over the latent+rope width, value FLOPs over the latent width.
- MLA prefill (decompressed form): heads of width qk_nope+rope for scores and v_head_dim for values, reading
  the latent cache.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from simserve import precision
from simserve.catalog import GPUSpec
from simserve.deployment import Deployment
from simserve.ops import AttentionShape, expert_load, expert_ops, fused_expert_name
from simserve.profiling import gemm_tiles
from simserve.profiling.roofline import KernelConstants, kernels_for, moe_constants


def grouped_gemm_ms(
    gpu: GPUSpec, touched, rows, k: int, n: int, weight_bytes: int = 2, c: KernelConstants | None = None
) -> np.ndarray:
    """`touched` experts' (k × n) weight slices applied to `rows` routed token rows in all, spread evenly."""
    c = moe_constants(c or kernels_for(gpu), weight_bytes)
    touched = np.maximum(np.asarray(touched, dtype=float), 1e-9)
    rows = np.asarray(rows, dtype=float)
    tiles = gemm_tiles.arch_tiles(gpu)
    per_expert = rows / touched
    # No wave quantisation: vLLM's fused-MoE kernels are Triton grids over every expert's tiles, not
    # persistent cuBLAS kernels, so a partly filled wave is shared among experts.
    flops = touched * gemm_tiles.padded_flops(tiles, per_expert, k, n)
    tc = flops / (c.gemm_compute_eff * gpu.peak_tflops * 1e12)
    act = precision.ACTIVATION_BYTES * rows * (k + n)
    tm = (weight_bytes * touched * k * n + act) / (c.gemm_memory_eff * gpu.hbm_gbps * 1e9)
    return (c.gemm_min_us * 1e-6 + np.hypot(tc, tm)) * 1e3


def fused_expert_ms(dep: Deployment, tokens: np.ndarray, c: KernelConstants | None = None) -> np.ndarray:
    """The routed experts of one MoE layer on the busiest GPU for batches of `tokens` tokens: the gate+up
    grouped GEMM, SiLU(gate)·up over the routed rows (roofline.elementwise_ms's `act` cost) and the down
    grouped GEMM."""
    from simserve.profiling.roofline import elementwise_ms

    touched, rows = expert_load(dep, tokens)
    gpu = precision.gemm_gpu(dep.gpu, dep.dtype)
    up, down = expert_ops(dep)
    t = sum(
        grouped_gemm_ms(gpu, touched, rows, op.in_features, op.out_features, dep.weight_bytes, c)
        for op in (up, down)
    )
    act_bytes = rows * 3 * down.in_features * precision.ACTIVATION_BYTES  # reads gate and up, writes one
    return t + elementwise_ms(dep.gpu, "act", act_bytes, c)


def expert_deployments(deps: list[Deployment]) -> list[Deployment]:
    """Every EP degree each MoE deployment's TP degree allows (a profile holds them all: `--ep` picks one): EP
    dividing TP, and under attention DP (dp ranks of this TP on one node) EP = dp·TP with whole experts."""
    import dataclasses

    out = []
    for base in deps:
        m, gpus = base.model, base.node.gpus_per_node if base.node else base.tp
        if not m.is_moe:
            continue
        out += [
            dataclasses.replace(base, ep=ep)
            for ep in range(1, base.tp + 1)
            if base.tp % ep == 0 and m.num_experts % ep == 0
        ]
        out += [
            dataclasses.replace(base, ep=dp * base.tp, dp=dp)
            for dp in range(2, gpus // base.tp + 1)
            if m.num_experts % (dp * base.tp) == 0
        ]
    return out


def expert_table(
    deps: list[Deployment], tokens: np.ndarray, c: KernelConstants | None = None
) -> pd.DataFrame:
    """linear.csv rows of the routed experts' fused op (ops.fused_expert_name) for every EP degree."""
    frames = [
        pd.DataFrame(
            {
                "op": fused_expert_name(dep),
                "tp": dep.tp,
                "num_tokens": tokens,
                "time_ms": fused_expert_ms(dep, tokens, c),
            }
        )
        for dep in expert_deployments(deps)
    ]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def mla_decode_attention_ms(
    gpu: GPUSpec, s: AttentionShape, batch, kv_len, kv_bytes: int = 2, c: KernelConstants | None = None
) -> np.ndarray:
    """`batch` sequences, one query token each, over `kv_len` cached latents (same occupancy model as GQA
    decode with one KV head: vLLM's MLA decode kernels split each sequence's KV into partitions the same
    way)."""
    c = c or kernels_for(gpu)
    b = np.asarray(batch, dtype=float)
    length = np.asarray(kv_len, dtype=float)
    width = s.latent_dim + s.rope_dim
    cache = b * length * width * kv_bytes
    q_out = b * s.q_heads * (width + s.latent_dim) * precision.ACTIVATION_BYTES
    flops = 2.0 * b * s.q_heads * length * (width + s.latent_dim)
    # 16 heads per work unit
    units = b * np.ceil(length / c.attn_kv_split) * max(1, math.ceil(s.q_heads / 16))
    occ = units / (units + c.attn_decode_half_units_per_sm * gpu.num_sms)
    tm = (cache + q_out) / (c.attn_decode_memory_eff * gpu.hbm_gbps * 1e9)
    tc = flops / (c.attn_prefill_compute_eff * gpu.peak_tflops * 1e12)
    return (c.attn_decode_min_us * 1e-6 + np.hypot(tc, tm) / occ) * 1e3


def mla_prefill_attention_ms(
    gpu: GPUSpec, s: AttentionShape, chunk, prefix, kv_bytes: int = 2, c: KernelConstants | None = None
) -> np.ndarray:
    """One request's chunk over its prefix, in the decompressed form: scores over qk_head_dim, values over
    v_head_dim, per head; the score rectangle and row overhead as in roofline.prefill_attention_ms."""
    c = c or kernels_for(gpu)
    ch = np.asarray(chunk, dtype=float)
    keys = np.asarray(prefix, dtype=float) + ch
    tile = c.attn_prefill_tile_rows
    rows = np.ceil(ch / tile) * tile
    flops = (
        2.0 * s.q_heads * (s.qk_head_dim + s.v_head_dim) * rows * (keys + c.attn_prefill_row_overhead_keys)
    )
    nbytes = kv_bytes * keys * (s.latent_dim + s.rope_dim)
    nbytes = nbytes + precision.ACTIVATION_BYTES * ch * s.q_heads * (s.qk_head_dim + s.v_head_dim)
    tc = flops / (c.attn_prefill_compute_eff * gpu.peak_tflops * 1e12)
    tm = nbytes / (c.attn_decode_memory_eff * gpu.hbm_gbps * 1e9)
    return (c.attn_prefill_min_us * 1e-6 + np.hypot(tc, tm)) * 1e3
