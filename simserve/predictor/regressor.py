"""One regressor shape for every op family: a physics baseline times a tree-ensemble correction.

    time ≈ baseline(x) · correction(x)

`baseline` is a non-negative linear model on physics features (a constant for the fixed kernel cost plus work
terms such as tokens, FLOPs or bytes), fitted by least squares on *relative* error so small kernels count as much
as large ones (nnls.py: in exactly rounded Python arithmetic, so the fit does not move with scipy or BLAS).
`correction` is an ExtraTrees ensemble on the raw and tile-aware features, fitted to the ratio measured /
baseline. Why this split:

- The ratio is close to 1 and slowly varying, so piecewise-constant trees approximate it well even where the
  profile grid is sparse (every 256 tokens above 4096); trees fitted to the raw time would show staircase errors
  of a whole grid step there.
- Tiles are discontinuities, which trees represent exactly: a split between 256 and 257 tokens (helped by the
  feature ceil(T/128)·128, which groups 257..384 together) keeps the GEMM tile step.
- Beyond the profiled range the trees hold the last ratio while the baseline keeps growing with the work, so the
  model extrapolates linearly in the physics terms instead of flattening out like a bare tree ensemble.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from simserve import numerics
from simserve.predictor.nnls import nnls

if TYPE_CHECKING:
    from sklearn.ensemble import ExtraTreesRegressor

# Small enough to pickle quickly (the fit cache), large enough that held-out error stops improving.
N_TREES = 16
MIN_LEAF = 1

Features = Callable[..., tuple[np.ndarray, np.ndarray]]  # columns -> (tree features, baseline features)


def _f(x: np.ndarray | list | int | float) -> np.ndarray:
    return np.atleast_1d(np.asarray(x, dtype=float))


def token_features(num_tokens) -> tuple[np.ndarray, np.ndarray]:
    """Linear and elementwise ops: one GPU, one layer, a function of the token count T.

    Baseline: t0 + a·T + b·Tq with Tq the rows padded to 128-row tiles (max(T, 64) below 128: the smallest
    tiles cuBLAS uses), the compute term of a tiled GEMM. Trees also see 64-row padding (the other common tile).
    """
    t = _f(num_tokens)
    tq = np.where(t < 128, np.maximum(t, 64), np.ceil(t / 128) * 128)
    trees = np.c_[t, np.ceil(t / 128) * 128, np.ceil(t / 64) * 64]
    base = np.c_[np.ones_like(t), t, tq]
    return trees, base


def decode_features(batch_size, kv_len) -> tuple[np.ndarray, np.ndarray]:
    """Decode attention: b requests each reading L cached tokens; memory bound, bytes ∝ b·L."""
    b, kv = _f(batch_size), _f(kv_len)
    trees = np.c_[b, kv, b * kv]
    base = np.c_[np.ones_like(b), b * kv, b]
    return trees, base


def prefill_features(chunk, prefix) -> tuple[np.ndarray, np.ndarray]:
    """Chunked prefill attention: c new tokens over p cached ones; causal FLOPs ∝ c·(p + (c+1)/2)."""
    c, p = _f(chunk), _f(prefix)
    flops = c * (p + (c + 1) / 2)
    cq = np.ceil(c / 128) * 128  # query rows padded to FlashAttention's 128-row tiles
    trees = np.c_[c, p, flops, cq]
    # Kernels that compute whole tiles do work ∝ padded rows × all keys, not the causal triangle: both terms.
    base = np.c_[np.ones_like(c), flops, cq * (p + c), c, p + c]
    return trees, base


def collective_features(size_bytes) -> tuple[np.ndarray, np.ndarray]:
    """Alpha-beta baseline (t = α + S/β); trees on log size see NCCL's protocol and algorithm switches."""
    s = _f(size_bytes)
    trees = np.c_[numerics.log2(np.maximum(s, 1.0))]
    base = np.c_[np.ones_like(s), s]
    return trees, base


@dataclass
class PhysicsTimesTrees:
    """time = baseline · correction; see the module docstring. Deterministic for a given seed."""

    features: Features
    seed: int = 0
    baseline: tuple[float, ...] | None = None  # non-negative coefficients of the baseline features
    correction: ExtraTreesRegressor | None = None

    def fit(self, columns: tuple[np.ndarray, ...], y: np.ndarray) -> PhysicsTimesTrees:
        y = np.asarray(y, dtype=float)
        trees_x, base_x = self.features(*columns)
        floor = max(float(y[y > 0].min()) if (y > 0).any() else 1e-6, 1e-6)
        yy = np.maximum(y, floor)
        # NOTE: no free intercept: the constant column's coefficient is then also kept non-negative, so the
        # baseline can never cross zero and blow up the ratio the trees learn.
        self.baseline = nnls(base_x, yy, 1.0 / yy**2)
        ratio = yy / self._base(base_x)
        # NOTE: imported at fit time: a warm plan never fits, so it never pays for importing scikit-learn
        from sklearn.ensemble import ExtraTreesRegressor

        self.correction = ExtraTreesRegressor(
            n_estimators=N_TREES, min_samples_leaf=MIN_LEAF, random_state=self.seed, n_jobs=1
        )
        self.correction.fit(trees_x, ratio)
        return self

    def _base(self, base_x: np.ndarray) -> np.ndarray:
        assert self.baseline is not None
        # Column by column in a fixed order (not base_x @ coef: BLAS may sum in another order on another build).
        total = np.zeros(len(base_x))
        for j, coef in enumerate(self.baseline):
            total += coef * base_x[:, j]
        # Guard against an all-zero baseline (a degenerate profile): a tiny floor keeps the ratio finite.
        return np.maximum(total, 1e-9)

    def predict(self, *columns) -> np.ndarray:
        if self.correction is None:
            raise RuntimeError("PhysicsTimesTrees.predict called before fit")
        trees_x, base_x = self.features(*columns)
        return self._base(base_x) * self.correction.predict(trees_x)
