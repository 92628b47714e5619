"""The analytic ("roofline") profiling backend: kernel times from spec-sheet peaks, no GPU needed.

Every kernel costs a minimum duration plus the smooth maximum sqrt(Tc² + Tm²) of its compute time Tc and its
memory time Tm (compute and HBM traffic overlap, but not perfectly near the ridge point). Peaks come from
`simserve/catalog/hardware.py`; the achieved fractions of peak and the minimum durations were calibrated once
on measured kernels per compute capability (ARCH_KERNELS): sm80 on Vidur's A100 profiles, sm86 on its A40
profile, sm90's elementwise ops on its H100 profile, the GEMMs of sm89/sm90/sm100/sm103/sm120 on NVIDIA's
database (aiconfigurator-core: L40S, H100, B200, B300, RTX PRO 6000; their bf16 and, apart, their per-tensor
fp8 GEMMs) — each on in-sample rows only, with held-out models, shapes and the H200, GB200 and GB300 reported
apart in docs/kernel-validation.md. Attention of today's kernels is roofline_attention.py; the legacy A100
attention kernel below stays for latent attention and the shipped A100 profiles. A GPU's numbers follow from
its spec sheet, its compute capability's efficiencies and its architecture's GEMM tiles (gemm_tiles.py).
`python benchmarks/validate_kernels.py --calibrate` refits them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pandas as pd

from simserve import precision
from simserve.catalog import GPUSpec, ModelSpec, NetworkSpec, NodeSpec
from simserve.deployment import Deployment
from simserve.ops import attention_shape, elementwise_ops, linear_ops
from simserve.profiling import collectives, gemm_tiles, grid, roofline_attention
from simserve.profiling.collectives import CollectiveConstants, collectives_table
from simserve.profiling.schema import profiled_deployments

BACKEND = "roofline (analytic)"

# --- GEMMs: t = t0 + sqrt(Tc² + Tm²), Tc on the token count padded to the GEMM tile -------------------------
# Calibrated on the measured A100 Vidur profiles (Llama-2-7B + Llama-2-70B, TP 1/2/4/8), see
# docs/execution-model.md.
GEMM_MIN_US = 5.6  # minimum GEMM kernel duration on the GPU (not CPU launch): the 1-token times are ~6 µs
GEMM_COMPUTE_EFF = 0.75  # achieved fraction of dense tensor-core peak in large GEMMs
GEMM_MEMORY_EFF = 0.85  # achieved fraction of HBM bandwidth streaming weights in skinny (decode) GEMMs
# GEMM kernels tile the token dimension: a partly filled tile costs a full one, and on Hopper a partly filled
# wave of tiles costs a full wave. The tile shapes per architecture (Ampere 64/128-row tiles, Hopper 256-row
# clusters) and the wave count on the GPU's SMs are in simserve/profiling/gemm_tiles.py.

# --- Elementwise ops: t = t0 + bytes / (e · HBM) with a per-kernel achieved bandwidth fraction --------------
# Calibrated on the measured A100 Vidur profiles (Llama-2-7B + Llama-2-70B): one shared efficiency is 8-116%
# off, because the kernels differ (a fused RMSNorm reduces over the hidden dimension; an add streams
# perfectly). (minimum duration µs, achieved fraction of HBM bandwidth); norms cover RMSNorm and LayerNorm
# alike.
ELEMENTWISE_COST = {
    "attn_norm": (2.4, 0.37),
    "mlp_norm": (2.4, 0.37),
    "rotary": (2.3, 0.47),
    "act": (2.2, 0.50),
    "residual_add": (1.2, 0.98),
}
# These are the A100's (sm80) fractions; other compute capabilities have their own (ARCH_KERNELS below).

# --- Decode attention (FlashAttention / paged attention over a KV cache) ------------------------------------
# Memory-bound: reads b·2·Hkv·d·L·2 bytes of KV. Few work units leave SMs idle: the kernel splits each
# (sequence, kv head) into KV partitions of ATTN_KV_SPLIT tokens, u = b·Hkv·ceil(L/split) units, and reaches
# the fraction occ = u / (u + n½) of its bandwidth, n½ = ATTN_DECODE_HALF_UNITS_PER_SM · num_SMs.
ATTN_KV_SPLIT = 512  # vLLM paged-attention v2 partition size (PARTITION_SIZE = 512)
# Calibrated on the measured legacy A100 FlashAttention profile (32 q / 4 kv heads per GPU, d = 128):
ATTN_DECODE_MIN_US = 12.0  # minimum decode-attention duration
ATTN_DECODE_MEMORY_EFF = 0.79  # achieved fraction of HBM bandwidth at full occupancy
ATTN_DECODE_HALF_UNITS_PER_SM = 0.41  # n½ ≈ 44 work units on A100's 108 SMs: half bandwidth below that

# --- Prefill / chunked-prefill attention: compute-bound on the score rectangle ------------------------------
# A chunk of c new tokens over a prefix of p cached ones. The measured times scale with the full c × (p + c)
# score rectangle (the causal half is not saved by the measured kernel: a causal-FLOPs form is 19% median off,
# the rectangle 5%), with query rows padded to the kernel's 128-row tile and a fixed per-row cost (load Q,
# finish the online softmax, write O) worth ATTN_PREFILL_ROW_OVERHEAD_KEYS extra keys.
ATTN_PREFILL_TILE_ROWS = 128  # FlashAttention-2 forward block M for head dim 128 on Ampere
# Calibrated on the measured legacy A100 FlashAttention profile:
ATTN_PREFILL_MIN_US = 7.3  # minimum prefill-attention duration
ATTN_PREFILL_COMPUTE_EFF = 0.48  # achieved fraction of tensor-core peak on the score rectangle
ATTN_PREFILL_ROW_OVERHEAD_KEYS = 760  # per-query-row fixed work, in units of keys attended


@dataclass(frozen=True)
class KernelConstants:
    """The constants above as one value, so calibration can try others (`dataclasses.replace`)."""

    gemm_min_us: float = GEMM_MIN_US
    gemm_compute_eff: float = GEMM_COMPUTE_EFF
    gemm_memory_eff: float = GEMM_MEMORY_EFF
    # Streaming weights needs bytes in flight: with u output tiles streaming, a memory-bound GEMM reaches the
    # fraction u / (u + n½) of its bandwidth, n½ = this × num_SMs (0: always all of it, the Ampere/Ada
    # calibration).
    gemm_stream_half_tiles_per_sm: float = 0.0
    elementwise_cost: tuple[tuple[str, float, float], ...] = tuple(
        (k, *v) for k, v in ELEMENTWISE_COST.items()
    )
    attn_kv_split: int = ATTN_KV_SPLIT
    attn_decode_min_us: float = ATTN_DECODE_MIN_US
    attn_decode_memory_eff: float = ATTN_DECODE_MEMORY_EFF
    attn_decode_half_units_per_sm: float = ATTN_DECODE_HALF_UNITS_PER_SM
    attn_prefill_tile_rows: int = ATTN_PREFILL_TILE_ROWS
    attn_prefill_min_us: float = ATTN_PREFILL_MIN_US
    attn_prefill_compute_eff: float = ATTN_PREFILL_COMPUTE_EFF
    attn_prefill_row_overhead_keys: float = ATTN_PREFILL_ROW_OVERHEAD_KEYS
    # fp8 (W8A8) GEMMs: (min µs, compute fraction of the fp8 peak, memory fraction[, streaming n½ per SM])
    # fitted on the measured per-tensor fp8 GEMMs of the capability (arch_calibration.fit_fp8); empty: the
    # bf16 constants.
    fp8_gemm: tuple[float, ...] = ()
    # Grouped (fused-MoE) GEMMs: (min µs, compute fraction, memory fraction) of bf16 and of fp8 (block-scaled)
    # experts, fitted on the measured fused-MoE tables (arch_calibration.fit_moe); empty: the dense GEMM
    # constants.
    moe_gemm: tuple[float, ...] = ()
    moe_fp8_gemm: tuple[float, ...] = ()


KERNELS = KernelConstants()  # sm80: A100, calibrated on its measured Vidur profiles


# --- Per compute capability: what each architecture's kernels achieve of its own spec-sheet peaks -----------
# Calibrated by `python benchmarks/validate_kernels.py --calibrate` on each one's in-sample rows only (the
# split is fixed in roofline_validation.py and perfdb_validation.py; docs/kernel-validation.md reports in- and
# out-of-sample errors apart). Attention of GQA/MHA models has its own constants per capability
# (roofline_attention.py).
def _arch(
    gemm: tuple[float, ...],
    elementwise: dict[str, tuple[float, float]],
    fp8: tuple[float, ...] = (),
    moe: tuple[float, ...] = (),
    moe_fp8: tuple[float, ...] = (),
) -> KernelConstants:
    """KERNELS with another architecture's (min µs, compute fraction, memory fraction[, streaming n½ per SM])
    and elementwise costs, its fp8 GEMM constants (the same four, of the fp8 peak; KernelConstants.fp8_gemm)
    and its grouped-GEMM constants of bf16 and fp8 experts (the first three; moe_gemm, moe_fp8_gemm)."""
    costs = tuple((op, *elementwise[op]) for op in ELEMENTWISE_COST)
    stream = gemm[3] if len(gemm) > 3 else 0.0
    return dataclasses.replace(
        KERNELS,
        gemm_min_us=gemm[0],
        gemm_compute_eff=gemm[1],
        gemm_memory_eff=gemm[2],
        gemm_stream_half_tiles_per_sm=stream,
        elementwise_cost=costs,
        fp8_gemm=fp8,
        moe_gemm=moe,
        moe_fp8_gemm=moe_fp8,
    )


# sm86 (A40, GA102 + GDDR6), fitted on the A40 profile's internlm-20b and Qwen-72B. GEMMs reach 0.79 of their
# dense peak (A100: 0.75) and need 3.1 µs at least (A100: 5.6; GA102's smaller L2 and fewer SMs finish a
# skinny GEMM's tiles sooner). Elementwise kernels reach 0.60-0.84 of GDDR6's bandwidth where the A100 reaches
# 0.37-0.98 of HBM2e's: the same per-SM bytes in flight (Little's law) cover far more of a 696 GB/s bus than
# of a 2 TB/s one.
SM86_ELEMENTWISE = {
    "attn_norm": (2.7, 0.60),
    "mlp_norm": (2.7, 0.60),
    "rotary": (1.2, 0.77),
    "act": (1.5, 0.78),
    "residual_add": (0.6, 0.84),
}
# sm90 (H100/H200): GEMMs fitted on the database's in-sample H100 GEMMs (Vidur's older-cuBLAS H100 GEMMs are
# reported apart: arch_calibration.GEMM_FROM_DATABASE_ONLY), on the fastest tile per problem (gemm_tiles.py):
# large GEMMs reach 0.87 of 989 TF/s, weight streaming 0.95 of HBM3 (the bound) once ~3 output tiles per SM
# stream, 3.0 µs floor. Elementwise (Vidur's internlm-20b and Qwen-72B) reach 0.42-0.58 of 3.35 TB/s (the
# residual add 1.09: its 3 operands stay in the 50 MB L2 between the profiler's repeats at most sizes).
SM90_ELEMENTWISE = {
    "attn_norm": (2.4, 0.42),
    "mlp_norm": (2.4, 0.42),
    "rotary": (1.8, 0.50),
    "act": (1.8, 0.58),
    "residual_add": (1.0, 1.09),
}
# fp8 GEMMs (W8A8, per-tensor scales: the package's CutlassFP8ScaledMMLinearKernel rows), fitted per
# capability on the same GPU's in-sample fp8 GEMMs (arch_calibration.fit_fp8; H200, GB200, GB300 and other
# shapes held out): the activations' quantisation runs before the scaled-mm (quantisation_bytes), and the
# scaled-mm reaches 0.46-0.53 of the fp8 peak on Hopper and Blackwell (vLLM 0.24's per-tensor path is ~1.2x
# its bf16 GEMMs at large m, not 2x), 5.0-5.6 µs at least (the quantisation's two kernels and the GEMM's).
# Before: the bf16 constants on the fp8 peak, 20-48% too fast (docs/kernel-validation.md). Fused MoE (vLLM's
# Triton fused_experts; bf16 and block-scaled fp8 experts), fitted per capability on the same GPU's fused-MoE
# rows of Qwen3-235B-A22B and Mixtral-8x7B (arch_calibration.fit_moe; DeepSeek-V3's shape, H200, GB200, GB300
# held out). Their minimum durations (8-19 µs per grouped GEMM) carry the routing, sort/align and un-permute
# kernels the form does not count; block-fp8 experts reach 0.18-0.5 of the fp8 peak. sm89's bf16 fit drives
# its minimum to 0 (not identifiable; the dense constants were within 9%), so the L40S keeps them for bf16
# experts.
ARCH_KERNELS: dict[int, KernelConstants] = {
    80: KERNELS,
    86: _arch((3.1, 0.79, 0.82), SM86_ELEMENTWISE),
    # sm89 (L40S), GEMMs fitted on the database's in-sample L40S GEMMs: 0.67 of 362 TF/s (FP32-accumulate
    # peak; AD102 throttles its clock under sustained tensor load), 1.3 µs floor. Elementwise: sm86's (GDDR6
    # too), unmeasured.
    89: _arch((1.3, 0.67, 0.83), SM86_ELEMENTWISE, fp8=(3.5, 0.63, 0.76), moe_fp8=(16.0, 0.50, 0.78)),
    90: _arch(
        (3.0, 0.87, 0.95, 0.021),
        SM90_ELEMENTWISE,
        fp8=(5.2, 0.53, 0.89, 0.060),
        moe=(18.5, 0.56, 0.90),
        moe_fp8=(15.9, 0.34, 0.93),
    ),
    # sm100 (B200; GB200 held out), GEMMs fitted on the database's in-sample B200 GEMMs, tiles chosen per
    # problem: 0.75 of 2.25 PF/s dense BF16, 0.95 of HBM3e (the bound), 2.6 µs floor. Elementwise: sm90's
    # (HBM), unmeasured.
    100: _arch(
        (2.6, 0.75, 0.95, 0.074),
        SM90_ELEMENTWISE,
        fp8=(5.6, 0.46, 0.91, 0.160),
        moe=(7.8, 0.40, 0.95),
        moe_fp8=(14.3, 0.18, 0.95),
    ),
    # sm103 (B300, Blackwell Ultra; GB300 held out), fitted on the database's in-sample B300 GEMMs: 0.84 of
    # 2.25 PF/s.
    103: _arch(
        (2.5, 0.84, 0.95, 0.072),
        SM90_ELEMENTWISE,
        fp8=(5.0, 0.49, 0.93, 0.178),
        moe=(7.8, 0.40, 0.95),
        moe_fp8=(12.5, 0.19, 0.95),
    ),
    # sm120 (RTX PRO 6000, GB202 + GDDR7), fitted on the database's in-sample RTX PRO 6000 GEMMs: 0.85 of 468
    # TF/s, 0.93 of 1.79 TB/s, 1.0 µs floor. Elementwise: sm86's (GDDR), unmeasured.
    120: _arch(
        (1.0, 0.85, 0.93, 0.015),
        SM86_ELEMENTWISE,
        fp8=(4.6, 0.92, 0.95, 0.035),
        moe=(14.0, 0.40, 0.90),
        moe_fp8=(12.7, 0.37, 0.87),
    ),
}


def kernels_for(gpu: GPUSpec) -> KernelConstants:
    """The kernel constants of `gpu`'s compute capability (the closest calibrated one of its architecture)."""
    cc = gpu.compute_capability
    if cc in ARCH_KERNELS:
        return ARCH_KERNELS[cc]
    same_arch = [k for k in ARCH_KERNELS if k // 10 == cc // 10]
    return ARCH_KERNELS[min(same_arch, key=lambda k: abs(k - cc))] if same_arch else KERNELS


def _peak(gpu: GPUSpec) -> float:
    return gpu.peak_tflops * 1e12


def _hbm(gpu: GPUSpec) -> float:
    return gpu.hbm_gbps * 1e9


def gemm_ms(
    gpu: GPUSpec,
    m,
    k: int,
    n: int,
    dtype_bytes: int = 2,
    c: KernelConstants | None = None,
    tiles: gemm_tiles.ArchTiles | None = None,
) -> np.ndarray:
    """(m × k) @ (k × n) in ms; m may be an array of token counts. `c` and `tiles` default to the GPU's
    own."""
    m = np.asarray(m, dtype=float)
    c = fp8_constants(c or kernels_for(gpu)) if dtype_bytes == 1 else (c or kernels_for(gpu))
    tiles = tiles or gemm_tiles.arch_tiles(gpu)
    if tiles.choices:  # Hopper, Blackwell: the fastest tile per problem, split-K, whole waves (gemm_tiles.py)
        tc = gemm_tiles.chosen_tile_seconds(tiles, m, k, n, gpu.num_sms, c.gemm_compute_eff * _peak(gpu))
    else:
        busy = gemm_tiles.wave_utilisation(tiles, m, n, gpu.num_sms)
        tc = gemm_tiles.padded_flops(tiles, m, k, n) / (c.gemm_compute_eff * _peak(gpu) * busy)
    tm = gemm_bytes(gpu, m, k, n, dtype_bytes) / (c.gemm_memory_eff * _hbm(gpu))
    if c.gemm_stream_half_tiles_per_sm:
        units = gemm_tiles.streaming_tiles(m, n)
        tm = tm * (units + c.gemm_stream_half_tiles_per_sm * gpu.num_sms) / units
    # before the GEMM, not beside
    tq = quantisation_bytes(gpu, m, k, dtype_bytes) / (c.gemm_memory_eff * _hbm(gpu))
    return (c.gemm_min_us * 1e-6 + np.hypot(tc, tm) + tq) * 1e3


def gemm_bytes(gpu: GPUSpec, m, k: int, n: int, dtype_bytes: int) -> np.ndarray:
    """HBM bytes the GEMM kernel itself moves for (m × k) @ (k × n) with `dtype_bytes` per weight: operands
    and output once. One byte per weight: bf16 activations in and out on Ampere (weight-only: dequantised in
    the kernel); on fp8 tensor cores (W8A8) the kernel reads the activations' fp8 copy (quantisation_bytes)
    and writes bf16."""
    if dtype_bytes != 1:
        return dtype_bytes * (m * k + k * n + m * n)
    act_in = 1 if gpu.arch in precision.FP8_ARCHS else precision.ACTIVATION_BYTES
    return act_in * m * k + k * n + precision.ACTIVATION_BYTES * m * n


def quantisation_bytes(gpu: GPUSpec, m, k: int, dtype_bytes: int) -> np.ndarray:
    """HBM bytes of quantising the (m × k) activations before a W8A8 GEMM, 0 for any other: vLLM's dynamic
    per-tensor scaled_fp8_quant runs a max reduction over the bf16 activations, then reads them again and
    writes the fp8 copy (2 + 2 + 1 bytes per element), in kernels of their own before the scaled-mm."""
    if dtype_bytes != 1 or gpu.arch not in precision.FP8_ARCHS:
        return np.zeros_like(np.asarray(m, dtype=float))
    return (2 * precision.ACTIVATION_BYTES + 1) * np.asarray(m, dtype=float) * k


def fp8_constants(c: KernelConstants) -> KernelConstants:
    """The GEMM constants an fp8 (one byte per weight) GEMM runs with: the capability's fitted fp8 ones where
    it has them (a W8A8 GEMM is a quantisation kernel for the activations plus a CUTLASS scaled-mm, not the
    bf16 cuBLAS kernel), else the bf16 ones (Ampere's weight-only fp8 dequantises to bf16 tensor cores)."""
    if not c.fp8_gemm:
        return c
    f = c.fp8_gemm
    stream = f[3] if len(f) > 3 else c.gemm_stream_half_tiles_per_sm
    return dataclasses.replace(
        c,
        gemm_min_us=f[0],
        gemm_compute_eff=f[1],
        gemm_memory_eff=f[2],
        gemm_stream_half_tiles_per_sm=stream,
        fp8_gemm=(),
    )


def moe_constants(c: KernelConstants, weight_bytes: int) -> KernelConstants:
    """The constants a grouped (fused-MoE) GEMM runs with: the capability's fitted ones for its expert dtype
    where it has them (vLLM's Triton fused-MoE kernel, not cuBLAS), else the dense GEMM ones."""
    f = c.moe_fp8_gemm if weight_bytes == 1 else c.moe_gemm
    if not f:
        return c
    return dataclasses.replace(c, gemm_min_us=f[0], gemm_compute_eff=f[1], gemm_memory_eff=f[2])


def elementwise_ms(gpu: GPUSpec, op: str, nbytes, c: KernelConstants | None = None) -> np.ndarray:
    """One call of a memory-bound op moving `nbytes` through HBM."""
    c = c or kernels_for(gpu)
    costs = {name: (t0, eff) for name, t0, eff in c.elementwise_cost}
    if op not in costs:
        raise ValueError(f"no elementwise cost for op {op!r}; known: {', '.join(costs)}")
    t0, eff = costs[op]
    return (t0 * 1e-6 + np.asarray(nbytes, dtype=float) / (eff * _hbm(gpu))) * 1e3


def decode_attention_ms(
    gpu: GPUSpec,
    q_heads: int,
    kv_heads: int,
    head_dim: int,
    batch,
    kv_len,
    dtype_bytes: int = 2,
    window: int | None = None,
    c: KernelConstants = KERNELS,
) -> np.ndarray:
    """`batch` sequences each attending with one query token to `kv_len` cached tokens."""
    b = np.asarray(batch, dtype=float)
    length = np.asarray(kv_len, dtype=float)
    if window:
        length = np.minimum(length, window)  # sliding-window attention reads only the last `window` tokens
    kv_bytes = b * 2 * kv_heads * head_dim * length * dtype_bytes
    qo_bytes = b * 2 * q_heads * head_dim * dtype_bytes
    flops = 4.0 * b * q_heads * head_dim * length
    units = b * kv_heads * np.ceil(length / c.attn_kv_split)
    occ = units / (units + c.attn_decode_half_units_per_sm * gpu.num_sms)
    tm = (kv_bytes + qo_bytes) / (c.attn_decode_memory_eff * _hbm(gpu))
    # Decode is memory-bound for GQA; Tc matters for MHA at long contexts. It uses the same FlashAttention
    # tensor-core rate as prefill (the legacy file has no compute-bound decode rows to fit one).
    tc = flops / (c.attn_prefill_compute_eff * _peak(gpu))
    return (c.attn_decode_min_us * 1e-6 + np.hypot(tc, tm) / occ) * 1e3


def prefill_attention_ms(
    gpu: GPUSpec,
    q_heads: int,
    kv_heads: int,
    head_dim: int,
    chunk,
    prefix,
    dtype_bytes: int = 2,
    window: int | None = None,
    c: KernelConstants = KERNELS,
) -> np.ndarray:
    """One request's chunk of `chunk` new tokens attending to `prefix` cached tokens and to itself."""
    ch = np.asarray(chunk, dtype=float)
    keys = np.asarray(prefix, dtype=float) + ch
    if window:
        keys = np.minimum(keys, window + ch)  # a query sees at most `window` keys; the chunk spans `ch` more
    tile = c.attn_prefill_tile_rows
    rows = np.ceil(ch / tile) * tile
    flops = 4.0 * q_heads * head_dim * rows * (keys + c.attn_prefill_row_overhead_keys)
    nbytes = dtype_bytes * (2 * q_heads * head_dim * ch + 2 * kv_heads * head_dim * keys)
    tc = flops / (c.attn_prefill_compute_eff * _peak(gpu))
    tm = nbytes / (c.attn_decode_memory_eff * _hbm(gpu))
    return (c.attn_prefill_min_us * 1e-6 + np.hypot(tc, tm)) * 1e3


def constants_dict(kernels: KernelConstants = KERNELS, coll: CollectiveConstants | None = None) -> dict:
    """Every constant the backend used, for provenance.json."""
    out = dataclasses.asdict(kernels)
    out["elementwise_cost"] = {name: {"min_us": t0, "bw_eff": e} for name, t0, e in kernels.elementwise_cost}
    # lists, as provenance.json reads back (merge.py compares)
    for name in ("fp8_gemm", "moe_gemm", "moe_fp8_gemm"):
        out[name] = list(getattr(kernels, name))
    out.update(dataclasses.asdict(coll or CollectiveConstants()))
    return out


def linear_table(
    deps: list[Deployment], tokens: np.ndarray, c: KernelConstants | None = None
) -> pd.DataFrame:
    from simserve.profiling.roofline_moe import expert_table

    frames = []
    for dep in deps:
        # fp8 weights: the fp8 tensor-core peak where there is one
        gpu = precision.gemm_gpu(dep.gpu, dep.dtype)
        for op in linear_ops(dep):
            t = gemm_ms(gpu, tokens, op.in_features, op.out_features, dep.weight_bytes, c)
            frames.append(pd.DataFrame({"op": op.name, "tp": dep.tp, "num_tokens": tokens, "time_ms": t}))
    frames.append(expert_table(deps, tokens, c))  # MoE models' routed experts, one op per EP degree
    return pd.concat(frames, ignore_index=True)


def elementwise_table(
    deps: list[Deployment], tokens: np.ndarray, c: KernelConstants | None = None
) -> pd.DataFrame:
    frames = []
    for dep in deps:
        for op in elementwise_ops(dep):
            t = elementwise_ms(dep.gpu, op.name, tokens * op.bytes_per_token, c)
            frames.append(pd.DataFrame({"op": op.name, "tp": dep.tp, "num_tokens": tokens, "time_ms": t}))
    return pd.concat(frames, ignore_index=True)


def attention_table(
    deps: list[Deployment], max_model_len: int, quick: bool, c: KernelConstants = KERNELS
) -> pd.DataFrame:
    """Attention rows: today's FlashAttention kernels per compute capability (roofline_attention.py) for
    GQA/MHA models; latent attention (MLA) keeps the legacy A100-fitted kernel `c` (roofline_moe.py)."""
    from simserve.profiling import roofline_attention as ra

    batches = grid.decode_batch_sizes()
    lengths = grid.kv_lengths(max_model_len)
    chunks = grid.prefill_chunks(max_model_len)
    prefixes = grid.prefill_prefixes(max_model_len)
    if quick:
        batches, lengths, prefixes = batches[::2], lengths[::2], prefixes[::2]
    b, kv = (a.ravel() for a in np.meshgrid(batches, lengths, indexing="ij"))
    ch, pre = (a.ravel() for a in np.meshgrid(chunks, prefixes, indexing="ij"))
    keep = ch + pre <= max_model_len
    ch, pre = ch[keep], pre[keep]
    from simserve.profiling.roofline_moe import mla_decode_attention_ms, mla_prefill_attention_ms

    frames = []
    for dep in deps:
        s, m = attention_shape(dep), dep.model
        shape = (s.q_heads, s.kv_heads, s.head_dim)
        if m.is_mla:
            dec = mla_decode_attention_ms(dep.gpu, s, b, kv, dep.kv_bytes, c)
            pre_t = mla_prefill_attention_ms(dep.gpu, s, ch, pre, dep.kv_bytes, c)
        else:  # an fp8 KV cache halves the bytes read; the kernels compute in bf16 (simserve/precision.py)
            dec = ra.decode_ms(dep.gpu, *shape, b, kv, dep.kv_bytes, m.sliding_window)
            pre_t = ra.prefill_ms(dep.gpu, *shape, ch, pre, dep.kv_bytes, m.sliding_window)
        frames.append(
            pd.DataFrame(
                {"phase": "decode", "tp": dep.tp, "batch_size": b, "chunk": 1, "kv_len": kv, "time_ms": dec}
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
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def model_fields(gpu: GPUSpec, coll: CollectiveConstants | None = None) -> dict:
    """The provenance fields that fix the model's numbers for `gpu`: a profile whose fields differ is
    stale."""
    return {
        "gpu_spec": {
            "peak_tflops": gpu.peak_tflops,
            "hbm_gbps": gpu.hbm_gbps,
            "num_sms": gpu.num_sms,
            "arch": gpu.arch,
            "sm_version": gpu.compute_capability,
            "source": gpu.source,
        },
        "constants": constants_dict(kernels_for(gpu), coll),
        "gemm_tiles": dataclasses.asdict(gemm_tiles.arch_tiles(gpu)),
        "attention": roofline_attention.provenance(gpu),
    }


def link_fields(node: NodeSpec, network: NetworkSpec | None) -> dict:
    """The provenance fields that fix the collective tables: the box and the network as the catalog had them
    (a profile written for an edited node or network is stale, like one for an edited GPU)."""
    from simserve.profiling import nccl

    return {
        "node_spec": dataclasses.asdict(node),
        "network_spec": None if network is None else dataclasses.asdict(network),
        # the collective model's own constants for this box: a profile written before they changed is stale
        "collective_model": {
            "launch_us": nccl.launch_us_for(node),
            "nccl_tuner_2_19": nccl.new_tuner(node),
            "vllm_allreduce": "vLLM 0.33.0 dispatch (vllm_allreduce.py)",
        },
    }


def profile(
    dep_model: ModelSpec,
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
) -> tuple[dict[str, pd.DataFrame], dict]:
    """Return the four tables of simserve/profiling/schema.py (ms per layer per GPU) and backend provenance
    fields."""
    deps = profiled_deployments(dep_model, gpu, tps, node, network, max_model_len, dtype, kv_dtype, moe_skew)
    node = deps[0].node
    tokens = grid.token_grid(max_tokens, quick)
    coll = collectives.for_node(node)
    tables = {
        "linear": linear_table(deps, tokens),
        "elementwise": elementwise_table(deps, tokens),
        "attention": attention_table(deps, max_model_len, quick),
        "collectives": collectives_table(node, network, sorted(set(tps)), quick, coll),
    }
    provenance = {
        "backend": BACKEND,
        "device": f"{gpu.name} (no GPU used: spec-sheet peaks with sm{gpu.compute_capability} efficiencies "
        "calibrated on measured kernels)",
        **model_fields(gpu, coll),
        **link_fields(node, network),
        "note": (
            "analytic model, not a measurement; errors against measured kernels in docs/kernel-validation.md"
        ),
    }
    # kept out of bf16 provenance: same bytes as before
    if (dtype, kv_dtype, moe_skew) != ("bf16", "bf16", 0.0):
        provenance["precision"] = {
            "weights": dtype,
            "kv_cache": kv_dtype,
            "fp8_tensor_cores": precision.has_fp8_tensor_cores(gpu),
        }
        provenance["moe_skew"] = moe_skew
    return tables, provenance
