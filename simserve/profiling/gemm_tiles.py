"""GEMM tile shapes per GPU architecture, and the tile and wave quantisation they cause.

A GEMM library cuts the (tokens × out_features) output into CTA tiles and runs one tile per SM at a time. A
partly filled tile costs a full one (tile quantisation), and where the kernel is persistent (one CTA per SM
looping over the tiles) a partly filled last wave of tiles costs a full wave (wave quantisation), so the step
a GEMM takes when the token count crosses a tile boundary depends on the architecture's tile shapes and on the
GPU's SM count. Background: NVIDIA, "Matrix Multiplication Background User's Guide" (DU-09799-001, 2023),
sections 2.3 (typical cuBLAS tile sizes) and 3.1-3.2 (tile and wave quantisation).

PyTorch's `linear` calls cuBLAS on the transposed problem, so a cuBLAS kernel named `tilesize128x256` covers
128 output features × 256 tokens; below, `rows` always run along the tokens and `cols` along the output
features.
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
    # (token rows, features) CTA tiles the library chooses among per problem, the fastest for each shape;
    # empty: the fixed tiles above (Ampere, Ada: their calibration). See chosen_tile_seconds.
    choices: tuple[tuple[int, int], ...] = ()
    # k per split at least: a split needs a few pipelined k-stages to pay its reduction
    split_k_min: int = 256


# The CTA tiles (token rows, features) a Hopper/Blackwell library picks among: 64-256 on each side up to the
# 128x256 accumulator one warpgroup pair holds (cuBLAS sm90_xmma tilesizes 64x128 ... 256x128; CUTLASS 3
# defaults).
SM90_CHOICES = ((64, 64), (64, 128), (128, 64), (128, 128), (64, 256), (256, 64), (128, 256), (256, 128))

ARCH_TILES: dict[str, ArchTiles] = {
    tiles.arch: tiles
    for tiles in (
        # Ampere (sm80/sm86): cuBLAS picks per problem among many tile shapes (64x64 ... 256x128, the
        # `ampere_*_s16816gemm_*_128x128_*` / `*_256x128_*` kernels, plus split-K), non-persistent. The
        # measured A100 GEMMs show the token-dimension steps of 64-row tiles below 256 tokens and 128-row
        # tiles from 256 (+24% at 128 -> 136, +31% at 256 -> 264), and no wave steps: a wave term on 108 SMs
        # raises the linear-op median error from 4.7% to 7.2% (docs/kernel-validation.md). These are the A100
        # calibration's tiles.
        ArchTiles(
            "ampere",
            small_rows=64,
            rows=128,
            large_from=256,
            cols=128,
            persistent=False,
            source="CUTLASS 2.x sm80 threadblock tiles 128x128/128x256/64x64 (CUTLASS profiler defaults); "
            "steps checked on the measured A100 GEMMs (Vidur profiles)",
        ),
        # Ada (sm89) has no new GEMM instructions: CUTLASS and cuBLAS run the sm80 mma.sync kernels with the
        # same tile shapes, on fewer, faster-clocked SMs with GDDR memory.
        ArchTiles(
            "ada",
            small_rows=64,
            rows=128,
            large_from=256,
            cols=128,
            persistent=False,
            source=(
                "CUTLASS: sm89 runs the sm80 tensor-op kernels (no wgmma/TMA on Ada); same tiles as Ampere"
            ),
        ),
        # Hopper (sm90): warp-specialized persistent kernels (TMA + wgmma). H100 traces of LLM serving show
        # cuBLAS 12 running `sm90_xmma_gemm_*_tilesize128x256x64_..._segment_k_off` (128 features × 256
        # tokens), `tilesize256x128x64` and `tilesize64x128x64_..._segment_k_on` (split-K) for small problems:
        # the library picks a tile per problem. So `choices`: the GEMM runs on the fastest of them, split-K
        # below one wave, whole waves on the SMs (chosen_tile_seconds). A step at a tile boundary is small
        # where another tile shape fills the waves (the database's H100 GEMMs: +3% at 256 -> 257 tokens for
        # 8192 x 8192) and large only where few tiles cover the output (+24% at 128 -> 129 for 4096 x 1024).
        # The fixed 256-row tiles it replaced predicted +96% at 257 there. `rows`/`persistent` below are what
        # grouped (MoE) GEMMs use (roofline_moe.py: Triton grids, not cuBLAS).
        ArchTiles(
            "hopper",
            small_rows=64,
            rows=256,
            large_from=256,
            cols=128,
            persistent=False,
            source="cuBLAS 12 sm90_xmma_gemm tilesize128x256x64 / 256x128x64 (segment_k_off) and 64x128x64 "
            "(segment_k_on) kernels in H100 traces; CUTLASS 3 sm90 KernelTmaWarpSpecialized* "
            "64-256 x 64-256 tiles on persistent CTAs",
            choices=SM90_CHOICES,
        ),
        # Blackwell (sm100): CUTLASS's sm100 tcgen05 kernels, persistent CTAs over 64-256-row tiles chosen per
        # problem as on Hopper (the same choice model; the database's B200 GEMMs: docs/kernel-validation.md).
        ArchTiles(
            "blackwell",
            small_rows=64,
            rows=128,
            large_from=256,
            cols=128,
            persistent=False,
            source="CUTLASS sm100 tcgen05 kernels: 64-256 x 64-256 CTA tiles on persistent CTAs, chosen per "
            "problem; checked on aiconfigurator-core 0.12.0's B200 GEMMs (vllm 0.24.0)",
            choices=SM90_CHOICES,
        ),
    )
}


def arch_tiles(gpu: GPUSpec) -> ArchTiles:
    return ARCH_TILES[gpu.arch]


def padded_rows(tiles: ArchTiles, m) -> np.ndarray:
    """Token rows of tensor-core work: m rounded up to the tile the library uses at that size (at least
    one)."""
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
    """Busy fraction of the SM-waves a GEMM occupies: 1 where the library is not persistent (see
    ARCH_TILES)."""
    if not tiles.persistent:
        return np.ones_like(np.asarray(m, dtype=float))
    t = tile_count(tiles, m, n)
    units = t * np.maximum(1, num_sms // t)
    return units / (waves(tiles, m, n, num_sms) * num_sms)


def padded_flops(tiles: ArchTiles, m, k: int, n: int) -> np.ndarray:
    """2·m·k·n on the padded token rows; persistent kernels also pad the features to whole tiles."""
    cols = math.ceil(n / tiles.cols) * tiles.cols if tiles.persistent else n
    return 2.0 * padded_rows(tiles, m) * k * cols


def chosen_tile_seconds(tiles: ArchTiles, m, k: int, n: int, num_sms: int, flops_per_s: float) -> np.ndarray:
    """Tensor-core time of an (m × k) @ (k × n) GEMM on the fastest of `tiles.choices` (a library picks per
    problem): each choice pads m and n to whole tiles, splits k while its tiles fill fewer than the SMs (each
    split keeping at least `split_k_min` of k), and runs whole waves of tiles on persistent CTAs, one per SM,
    each SM at `flops_per_s` / num_sms. So a GEMM steps at a tile boundary only where no other tile shape
    fills the waves."""
    m = np.maximum(np.asarray(m, dtype=float), 1)
    per_sm = flops_per_s / num_sms
    best = np.full(m.shape, np.inf)
    for rows, cols in tiles.choices:
        count = np.ceil(m / rows) * math.ceil(n / cols)
        split = np.minimum(np.maximum(1, np.floor(num_sms / count)), max(1, k // tiles.split_k_min))
        wave_count = np.ceil(count * split / num_sms)
        best = np.minimum(best, wave_count * 2.0 * rows * cols * (k / split) / per_sm)
    return best


def streaming_tiles(m, n: int) -> np.ndarray:
    """128 × 128 output tiles of an (m × n) GEMM: the CTAs that stream its weights when it is memory-bound."""
    return np.ceil(np.maximum(np.asarray(m, dtype=float), 1) / 128) * math.ceil(n / 128)
