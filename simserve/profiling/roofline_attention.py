"""Roofline attention for today's FlashAttention kernels, calibrated per compute capability on NVIDIA's
measured tables.

Prefill (FlashAttention 2/3, FlashInfer's TRT-LLM kernels): the query rows of a chunk are cut into tiles of
`tile_rows`; each tile walks the key tiles it can see — causal, so query tile i of a chunk over a prefix of p
tokens sees p + min(chunk, (i + 1) · tile_rows) keys, and the fully masked key tiles are skipped (the legacy
kernel of roofline.prefill_attention_ms computed the whole rectangle: 1.5-2.5x too slow against these
kernels). The query heads that share a KV head are packed into one tile's rows (pack-GQA), so a short chunk
still fills a tile. Each key tile costs its tensor-core work at `prefill_compute_eff` of the SM's share of
peak, and each query tile a fixed `prefill_tile_us` (load Q, start the pipeline, finish the online softmax,
write O: latency that a tile with few key tiles cannot hide). The tiles run in waves on the SMs, and no kernel
ends before its longest tile (the last query tile of the longest chunk sees every key). Memory: Q, K, V and O
once.

Decode (split-KV paged attention, FlashDecoding): memory-bound, as roofline.decode_attention_ms, with each
compute capability's own minimum duration, achieved bandwidth and occupancy half-point.

Constants per compute capability come from `python benchmarks/validate_kernels.py --calibrate`
(arch_calibration.fit_attention): fitted on the database's head dim 128, power-of-two query-head rows of one
GPU per capability; every other head count and head dim, the H200, GB200 and GB300 are out-of-sample
(docs/kernel-validation.md).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from simserve.catalog import GPUSpec


@dataclass(frozen=True)
class AttentionConstants:
    kernel: str  # what the engine runs on this architecture (the database's kernel_source), for provenance
    prefill_min_us: float
    prefill_compute_eff: float  # achieved fraction of dense tensor peak on the visible key tiles
    prefill_tile_us: float  # fixed cost of one query tile
    decode_min_us: float
    decode_memory_eff: float
    decode_half_units_per_sm: float
    tile_rows: int = 128  # query rows per tile (FA2/FA3/TRT-LLM forward, head dim 128)
    tile_cols: int = 128  # keys per tile
    kv_split: int = 512  # decode: KV tokens per split (FlashDecoding partitions)


# Fitted by arch_calibration.fit_attention on the database's in-sample rows (docs/kernel-validation.md has the
# refitted values beside these and the errors). sm86 (A40) runs sm80's FlashAttention-2 and has no table:
# sm80's.
ARCH_ATTENTION: dict[int, AttentionConstants] = {
    # (kernel, prefill: min µs, compute fraction, µs per query tile; decode: min µs, bandwidth fraction, n½
    # per SM)
    80: AttentionConstants("vllm_flash_attn (FA2)", 1.2, 0.58, 6.4, 16.9, 0.71, 0.156),
    89: AttentionConstants("vllm_flash_attn_fa2", 1.3, 0.52, 0.74, 8.8, 0.87, 0.032),
    90: AttentionConstants("vllm_flash_attn_fa3", 7.9, 0.65, 4.7, 12.0, 0.89, 0.054),
    100: AttentionConstants("flashinfer trtllm-gen", 7.2, 0.57, 4.8, 9.1, 0.92, 0.118),
    103: AttentionConstants("flashinfer trtllm-gen", 6.5, 0.69, 4.0, 9.0, 0.90, 0.001),
    120: AttentionConstants("vllm_flash_attn_fa2", 0.1, 0.64, 3.8, 10.7, 0.86, 0.081),
}
ARCH_ATTENTION[86] = ARCH_ATTENTION[80]


def attention_for(gpu: GPUSpec) -> AttentionConstants:
    """The attention constants of `gpu`'s compute capability (the nearest calibrated one of its
    architecture)."""
    cc = gpu.compute_capability
    if cc in ARCH_ATTENTION:
        return ARCH_ATTENTION[cc]
    same_arch = [k for k in ARCH_ATTENTION if k // 10 == cc // 10]
    return ARCH_ATTENTION[min(same_arch, key=lambda k: abs(k - cc))] if same_arch else ARCH_ATTENTION[80]


def visible_key_tiles(chunk, prefix, tile_rows: float, tile_cols: int) -> tuple[np.ndarray, np.ndarray]:
    """(key tiles summed over a chunk's query tiles, key tiles of its last query tile) under the causal
    mask."""
    ch, pre = np.broadcast_arrays(
        np.maximum(np.asarray(chunk, dtype=float), 1), np.asarray(prefix, dtype=float)
    )
    n_tiles = np.ceil(ch / tile_rows)
    i = np.arange(int(n_tiles.max(initial=1)))
    keys = pre[..., None] + np.minimum(ch[..., None], (i + 1) * tile_rows)
    total = (np.ceil(keys / tile_cols) * (i < n_tiles[..., None])).sum(axis=-1)
    return total, np.ceil((pre + ch) / tile_cols)


def prefill_ms(
    gpu: GPUSpec,
    q_heads: int,
    kv_heads: int,
    head_dim: int,
    chunk,
    prefix,
    dtype_bytes: int = 2,
    window: int | None = None,
    c: AttentionConstants | None = None,
    batch=1,
) -> np.ndarray:
    """`batch` requests' chunks of `chunk` new tokens over `prefix` cached ones, in one kernel, in ms."""
    c = c or attention_for(gpu)
    ch = np.maximum(np.asarray(chunk, dtype=float), 1)
    pre = np.asarray(prefix, dtype=float)
    if window:
        pre = np.minimum(pre, window)  # a query sees at most `window` keys before it
    b = np.asarray(batch, dtype=float)
    group = max(1, q_heads // kv_heads)  # query heads packed into one tile's rows (pack-GQA)
    key_tiles, last = visible_key_tiles(ch, pre, c.tile_rows / group, c.tile_cols)
    query_tiles = np.ceil(ch * group / c.tile_rows)
    sm_rate = c.prefill_compute_eff * gpu.peak_tflops * 1e12 / gpu.num_sms
    tile_work = 4.0 * head_dim * c.tile_rows * c.tile_cols / sm_rate  # one query tile x one key tile, seconds
    per_head = key_tiles * tile_work + query_tiles * c.prefill_tile_us * 1e-6
    units = b * kv_heads * query_tiles
    waves = np.ceil(units / gpu.num_sms)
    tc = np.maximum(waves * per_head / query_tiles, last * tile_work + c.prefill_tile_us * 1e-6)
    nbytes = dtype_bytes * b * (2 * q_heads * head_dim * ch + 2 * kv_heads * head_dim * (pre + ch))
    tm = nbytes / (c.decode_memory_eff * gpu.hbm_gbps * 1e9)
    return (c.prefill_min_us * 1e-6 + np.hypot(tc, tm)) * 1e3


def decode_ms(
    gpu: GPUSpec,
    q_heads: int,
    kv_heads: int,
    head_dim: int,
    batch,
    kv_len,
    dtype_bytes: int = 2,
    window: int | None = None,
    c: AttentionConstants | None = None,
) -> np.ndarray:
    """`batch` sequences each attending with one query token to `kv_len` cached tokens, in ms."""
    c = c or attention_for(gpu)
    b = np.asarray(batch, dtype=float)
    length = np.asarray(kv_len, dtype=float)
    if window:
        length = np.minimum(length, window)
    kv_bytes = b * 2 * kv_heads * head_dim * length * dtype_bytes
    qo_bytes = b * 2 * q_heads * head_dim * 2
    units = b * kv_heads * np.maximum(np.ceil(length / c.kv_split), 1)  # an empty cache still runs one split
    occ = units / (units + c.decode_half_units_per_sm * gpu.num_sms)
    tm = (kv_bytes + qo_bytes) / (c.decode_memory_eff * gpu.hbm_gbps * 1e9)
    tc = 4.0 * b * q_heads * head_dim * length / (c.prefill_compute_eff * gpu.peak_tflops * 1e12)
    return (c.decode_min_us * 1e-6 + np.hypot(tc, tm) / occ) * 1e3


def provenance(gpu: GPUSpec) -> dict:
    return dataclasses.asdict(attention_for(gpu))
