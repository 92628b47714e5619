"""On-disk cache of fitted predictors, keyed by the profile's content hash.

Location: $SIMSERVE_CACHE/predictor/ (default ~/.cache/simserve/predictor/). Entries are pickles written
atomically; the key includes the fit format and the numpy/scikit-learn versions, since a pickled tree ensemble
is only readable by the library version that wrote it. Anything that goes wrong reading an entry means "not
cached": the caller refits and overwrites it.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np

from simserve.cachedir import cache_root
from simserve.io import atomic_path

FORMAT = 4  # bump when the fitted models change shape or meaning (3: own NNLS baseline; 4: TreeEnsemble)


def key(content_hash: str, seed: int) -> str:
    import sklearn  # only when fitting or reading a fit: the compiled-timer cache path must not load it

    return f"{content_hash}-seed{seed}-v{FORMAT}-np{np.__version__}-sk{sklearn.__version__}"


def path_for(cache_key: str) -> Path:
    return cache_root() / "predictor" / f"{cache_key}.pkl"


def load(cache_key: str) -> Any | None:
    f = path_for(cache_key)
    if not f.is_file():
        return None
    try:
        with f.open("rb") as fh:
            return pickle.load(fh)
    except Exception:  # truncated, corrupt, or written by an incompatible version: refit
        return None


def store(cache_key: str, obj: Any) -> Path | None:
    """Write atomically; a cache that cannot be written (read-only home, full disk) is skipped, not fatal."""
    f = path_for(cache_key)
    try:
        with atomic_path(f) as tmp, tmp.open("wb") as fh:
            pickle.dump(obj, fh, protocol=pickle.HIGHEST_PROTOCOL)
    except OSError:
        return None
    # Entries for the same profile written by another fit format or library version are dead weight (tens
    # of MB each): drop them.
    digest = cache_key.split("-", 1)[0]
    for stale in f.parent.glob(f"{digest}-*.pkl"):
        if stale != f:
            stale.unlink(missing_ok=True)
    return f
