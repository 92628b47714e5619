"""The points a profile samples. Every backend uses the same grid, so profiles compare row by row.

Token counts are dense where GEMM tiles step (every 8, plus the +1 neighbours of multiples of 64, so
256 → 257 shows its ~30% step) and sparser beyond 4096, up to the largest batch a policy can form.
"""

from __future__ import annotations

import numpy as np


def token_counts(max_tokens: int = 16384) -> list[int]:
    dense = set(range(1, 65)) | set(range(64, 4097, 8)) | {m + 1 for m in range(64, 4097, 64)}
    sparse = set(range(4096, max_tokens + 1, 256)) | {m + 1 for m in range(4096, max_tokens + 1, 1024)}
    big = {32768, 65536, 131072} if max_tokens >= 32768 else set()
    return sorted(t for t in dense | sparse | big if t <= max(max_tokens, 4096) or t in big)


def token_grid(max_tokens: int, quick: bool) -> np.ndarray:
    """The token counts the analytic and measured backends profile; `quick` thins them but keeps the tile
    neighbours (multiples of 64 and their +1) so the GEMM steps stay visible."""
    tokens = token_counts(max_tokens)
    if quick:
        tokens = [t for t in tokens if t <= 64 or t % 64 in (0, 1) or t > 4096]
    return np.array(tokens)


def decode_batch_sizes(max_batch: int = 256) -> list[int]:
    sizes = {1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256}
    return sorted(b for b in sizes if b <= max_batch)


def kv_lengths(max_len: int = 16384) -> list[int]:
    """Context lengths for decode and prefix lengths for chunked prefill: log-spaced, block aligned."""
    pts = np.unique(np.round(np.geomspace(16, max_len, 24) / 16).astype(int) * 16)
    return sorted({0, *pts.tolist(), max_len} - {0}) if max_len else [16]


def prefill_chunks(max_chunk: int = 16384) -> list[int]:
    pts = {
        16,
        32,
        64,
        128,
        192,
        256,
        257,
        384,
        512,
        513,
        768,
        1024,
        1536,
        2048,
        3072,
        4096,
        6144,
        8192,
        12288,
        16384,
    }
    return sorted(c for c in pts if c <= max_chunk)


def prefill_prefixes(max_len: int = 16384) -> list[int]:
    return [0, *[p for p in kv_lengths(max_len) if p < max_len]]


def collective_sizes(max_bytes: int = 2**30) -> list[int]:
    """Message sizes in bytes: powers of two from 2 KiB, plus midpoints."""
    sizes = set()
    s = 2048
    while s <= max_bytes:
        sizes |= {s, s + s // 2}
        s *= 2
    return sorted(x for x in sizes if x <= max_bytes)
