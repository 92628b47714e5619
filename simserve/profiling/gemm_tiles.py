"""GEMM tile shapes per GPU architecture, and the tile and wave quantisation they cause.

A GEMM library cuts the (tokens × out_features) output into CTA tiles and runs one tile per SM at a time. A partly
filled tile costs a full one (tile quantisation), and where the kernel is persistent (one CTA per SM looping over
the tiles) a partly filled last wave of tiles costs a full wave (wave quantisation), so the step a GEMM takes when
the token count crosses a tile boundary depends on the architecture's tile shapes and on the GPU's SM count.
Background: NVIDIA, "Matrix Multiplication Background User's Guide" (DU-09799-001, 2023), sections 2.3 (typical
cuBLAS tile sizes) and 3.1-3.2 (tile and wave quantisation).

PyTorch's `linear` calls cuBLAS on the transposed problem, so a cuBLAS kernel named `tilesize128x256` covers 128
output features × 256 tokens; below, `rows` always run along the tokens and `cols` along the output features.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from simserve.catalog import GPUSpec


@dataclass(frozen=True)
class ArchTiles:
    arch: str
    small_rows: int  # token rows of a CTA tile below `large_from` tokens (more CTAs for a short GEMM)
    rows: int  # token rows per CTA tile (× the cluster's extent along the tokens) from `large_from` on
    large_from: int
    cols: int  # output features per CTA tile (only used where `persistent`)
    persistent: bool  # one CTA per SM looping over tiles: a partly filled last wave costs a full one
    source: str


ARCH_TILES: dict[str, ArchTiles] = {
    tiles.arch: tiles
    for tiles in (
        # Ampere (sm80/sm86): cuBLAS picks per problem among many tile shapes (64x64 ... 256x128, the
        # `ampere_*_s16816gemm_*_128x128_*` / `*_256x128_*` kernels, plus split-K), non-persistent. The measured
        # A100 GEMMs show the token-dimension steps of 64-row tiles below 256 tokens and 128-row tiles from 256
        # (+24% at 128 -> 136, +31% at 256 -> 264), and no wave steps: a wave term on 108 SMs raises the linear-op
        # median error from 4.7% to 7.2% (docs/kernel-validation.md). These are the A100 calibration's tiles.
        ArchTiles("ampere", small_rows=64, rows=128, large_from=256, cols=128, persistent=False,
                  source="CUTLASS 2.x sm80 threadblock tiles 128x128/128x256/64x64 (CUTLASS profiler defaults); "
                         "steps checked on the measured A100 GEMMs (Vidur profiles)"),
        # Ada (sm89) has no new GEMM instructions: CUTLASS and cuBLAS run the sm80 mma.sync kernels with the
        # same tile shapes, on fewer, faster-clocked SMs with GDDR memory.
        ArchTiles("ada", small_rows=64, rows=128, large_from=256, cols=128, persistent=False,
                  source="CUTLASS: sm89 runs the sm80 tensor-op kernels (no wgmma/TMA on Ada); same tiles as Ampere"),
        # Hopper (sm90): warp-specialized persistent kernels (TMA + wgmma). H100 traces of LLM serving show cuBLAS 12
        # running `sm90_xmma_gemm_*_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off` (128 features ×
        # 256 tokens, data-parallel: segment-K off) and `tilesize256x128x64`, and `tilesize64x128x64_..._segment_k_on`
        # (split-K) for small problems; CUTLASS 3 pairs 128-row CTAs in 2x1 clusters. So tokens come in 256-row
        # steps from 256 on, 64-row below, and the grid is the SM count: waves are quantised by it. (128-row tiles
        # cannot give the measured H100 step of +39% at 256 -> 264: they give +23%, docs/kernel-validation.md.)
        # No wave term (persistent=False), measured: on the database's H100 GEMMs and Vidur's H100 profile (in-sample
        # rows, constants refitted for each variant) the wave term raises the P90 error from ~23% to ~31-40%
        # (docs/kernel-validation.md, "Hopper tile ablation"): cuBLAS 12.4+ picks per problem among data-parallel,
        # split-K and stream-K schedules, which fills the last wave.
        ArchTiles("hopper", small_rows=64, rows=256, large_from=256, cols=128, persistent=False,
                  source="cuBLAS 12 sm90_xmma_gemm tilesize128x256x64 / 256x128x64 (segment_k_off) and 64x128x64 "
                         "(segment_k_on) kernels in H100 traces; CUTLASS 3 sm90 KernelTmaWarpSpecialized* "
                         "128x256x64 tiles, cluster 2x1x1 (CUTLASS profiler default cluster)"),
        # Blackwell (sm100): CUTLASS's sm100 kernels issue 2-SM MMAs over 256-row CTA pairs from persistent CTAs, but
        # the database's in-sample B200 GEMMs (cuBLAS under torch, vLLM 0.24) fit 128-row tiles with no wave term
        # best: mean |log error| 0.114 against 0.146 for 256-row persistent tiles (constants refitted for each;
        # docs/kernel-validation.md, "Tile ablation"). cuBLAS's sm100 heuristics pick smaller tiles and stream-K.
        ArchTiles("blackwell", small_rows=64, rows=128, large_from=256, cols=128, persistent=False,
                  source="selected on the in-sample B200 GEMMs of aiconfigurator-core 0.12.0 (vllm 0.24.0) among "
                         "Ampere-like 128-row and CUTLASS sm100 2-SM 256-row persistent tiles"),
    )
}  # fmt: skip


def arch_tiles(gpu: GPUSpec) -> ArchTiles:
    return ARCH_TILES[gpu.arch]


def padded_rows(tiles: ArchTiles, m) -> np.ndarray:
    """Token rows of tensor-core work: m rounded up to the tile the library uses at that size (at least one)."""
    m = np.asarray(m, dtype=float)
    rows = np.where(m >= tiles.large_from, tiles.rows, tiles.small_rows)
    return np.ceil(np.maximum(m, 1) / rows) * rows


def tile_count(tiles: ArchTiles, m, n: int) -> np.ndarray:
    """CTA tiles of an (m tokens × n features) output."""
    m = np.asarray(m, dtype=float)
    rows = np.where(m >= tiles.large_from, tiles.rows, tiles.small_rows)
    return np.ceil(np.maximum(m, 1) / rows) * math.ceil(n / tiles.cols)


def waves(tiles: ArchTiles, m, n: int, num_sms: int) -> np.ndarray:
    """Waves of work units on `num_sms` SMs; fewer tiles than SMs are split along k to fill them (split-K)."""
    t = tile_count(tiles, m, n)
    split = np.maximum(1, num_sms // t)
    return np.ceil(t * split / num_sms)


def wave_utilisation(tiles: ArchTiles, m, n: int, num_sms: int) -> np.ndarray:
    """Busy fraction of the SM-waves a GEMM occupies: 1 where the library is not persistent (see ARCH_TILES)."""
    if not tiles.persistent:
        return np.ones_like(np.asarray(m, dtype=float))
    t = tile_count(tiles, m, n)
    units = t * np.maximum(1, num_sms // t)
    return units / (waves(tiles, m, n, num_sms) * num_sms)


def padded_flops(tiles: ArchTiles, m, k: int, n: int) -> np.ndarray:
    """2·m·k·n on the padded token rows; persistent kernels also pad the features to whole tiles."""
    cols = math.ceil(n / tiles.cols) * tiles.cols if tiles.persistent else n
    return 2.0 * padded_rows(tiles, m) * k * cols
