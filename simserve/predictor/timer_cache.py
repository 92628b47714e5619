"""On-disk cache of compiled BatchTimers: a warm `simserve run` loads its timer without scikit-learn.

Location: $SIMSERVE_CACHE/timer/<key>.pkl. The key hashes the profile's content hash, the deployment (its repr
lists every field: model, GPU, TP, PP, node, network, memory settings), the CPU-overhead model, the fit seed,
this format number and the numpy version. A compiled timer holds only numpy arrays, lists and catalog
dataclasses, so unpickling it imports neither scikit-learn nor pandas (tests/test_startup.py checks this in a
fresh interpreter). Anything that goes wrong reading an entry means "not cached": the caller fits and compiles
again.
"""

from __future__ import annotations

import hashlib
import pickle
from pathlib import Path

import numpy as np

from simserve.io import atomic_path
from simserve.predictor.cache import cache_root

# bump when BatchTimer's attributes or the arithmetic that fills them change (3: own NNLS, libm curves;
FORMAT = 6
# 4: attention DP's lockstep tables; 5: CPU work by role and launch costs, predictor/step.py; 6: CPU work per
# prefill chunk, `_cpu_pre`)


def _root() -> Path:
    return cache_root() / "timer"


def key(profile_digest: str, dep, overhead, seed: int) -> str:
    text = f"{profile_digest}|{dep!r}|{overhead!r}|seed{seed}|v{FORMAT}|np{np.__version__}"
    return f"{profile_digest}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def has(cache_key: str) -> bool:
    return (_root() / f"{cache_key}.pkl").is_file()


def load(cache_key: str):
    f = _root() / f"{cache_key}.pkl"
    if not f.is_file():
        return None
    try:
        with f.open("rb") as fh:
            return pickle.load(fh)
    except Exception:  # truncated, corrupt, or from an incompatible version: rebuild
        return None


def store(cache_key: str, timer) -> None:
    """Write atomically; an unwritable cache is skipped, not fatal."""
    try:
        with atomic_path(_root() / f"{cache_key}.pkl") as tmp, tmp.open("wb") as fh:
            pickle.dump(timer, fh, protocol=pickle.HIGHEST_PROTOCOL)
    except OSError:
        return
