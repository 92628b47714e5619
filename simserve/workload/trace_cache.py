"""On-disk cache of parsed traces: a warm `simserve run` loads three arrays instead of parsing a CSV/JSONL.

Parsing goes through pandas (importing it alone costs a warm run about 0.3 CPU-s) and validates every row;
the result is just the token counts and optional arrival times. So they are kept, validated, in
$SIMSERVE_CACHE/trace/<hash>.npz (uncompressed numpy arrays, read without pickle). The hash is of the
source file's bytes (SHA-256: 0.2 ms for the shipped chat trace), not its name or modification time, so an
edited file is a miss even when rewritten within one timestamp tick, and a stale entry is never read.
Anything that goes wrong reading an entry means "not cached" (the caller parses the file again); an
unwritable cache is skipped.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from simserve.cachedir import cache_root
from simserve.io import atomic_path

# Bump when the parsed arrays change meaning (2: prefix groups and tokens) — and when read_trace refuses
# something it accepted before: a file parsed once is served from here without being checked again.
FORMAT = 3  # 3: chained prefix-block ids (hash_ids) as CSR rows


def key(source: Path) -> str:
    """The cache key of the source file's current content."""
    return hashlib.sha256(f"trace-v{FORMAT}|".encode() + source.read_bytes()).hexdigest()[:32]


def _entry(cache_key: str) -> Path:
    return cache_root() / "trace" / f"{cache_key}.npz"


def load(cache_key: str):
    """(prompt tokens, output tokens, arrival times or None, prefix groups or None, prefix tokens or None,
    hash offsets or None, hash ids or None) parsed earlier, or None."""
    try:
        with np.load(_entry(cache_key), allow_pickle=False) as z:
            prompt, output = z["prompt"], z["output"]
            arrived = z["arrived"] if "arrived" in z.files else None
            group = z["group"] if "group" in z.files else None
            shared = z["shared"] if "shared" in z.files else None
            hoff = z["hoff"] if "hoff" in z.files else None
            hids = z["hids"] if "hids" in z.files else None
    except Exception:  # missing, truncated, corrupt or foreign: not cached
        return None
    for a in (group, shared):
        if a is not None and (a.dtype != np.int64 or a.shape != prompt.shape):
            return None
    if (group is None) != (shared is None) or (hoff is None) != (hids is None):
        return None
    if hoff is not None and (
        hoff.dtype != np.int64
        or hids.dtype != np.int64
        or hoff.shape != (len(prompt) + 1,)
        or hids.ndim != 1
        or hoff[-1] != len(hids)
    ):
        return None
    if (
        prompt.dtype != np.int64
        or output.dtype != np.int64
        or prompt.ndim != 1
        or output.shape != prompt.shape
    ):
        return None
    if arrived is not None and (arrived.dtype != np.float64 or arrived.shape != prompt.shape):
        return None
    return prompt, output, arrived, group, shared, hoff, hids


def store(
    cache_key: str,
    prompt: np.ndarray,
    output: np.ndarray,
    arrived: np.ndarray | None,
    group: np.ndarray | None = None,
    shared: np.ndarray | None = None,
    hoff: np.ndarray | None = None,
    hids: np.ndarray | None = None,
) -> None:
    arrays = {"prompt": prompt, "output": output}
    if arrived is not None:
        arrays["arrived"] = arrived
    if group is not None:
        arrays["group"], arrays["shared"] = group, shared
    if hoff is not None:
        arrays["hoff"], arrays["hids"] = hoff, hids
    try:
        with atomic_path(_entry(cache_key)) as tmp, tmp.open("wb") as fh:
            np.savez(fh, **arrays)
    except OSError:
        return
