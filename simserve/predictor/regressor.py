"""One regressor shape for every op family: a physics baseline times a tree-ensemble correction.

    time ≈ baseline(x) · correction(x)

`baseline` is a non-negative linear model on physics features (a constant for the fixed kernel cost plus work
terms such as tokens, FLOPs or bytes), fitted by least squares on *relative* error so small kernels count as
much as large ones (nnls.py: in exactly rounded Python arithmetic, so the fit does not move with scipy or
BLAS). `correction` is an ExtraTrees ensemble (TreeEnsemble) on the raw and tile-aware features, fitted to the
ratio measured / baseline. Why this split:

- The ratio is close to 1 and slowly varying, so piecewise-constant trees approximate it well even where the
  profile grid is sparse (every 256 tokens above 4096); trees fitted to the raw time would show staircase
  errors of a whole grid step there.
- Tiles are discontinuities, which trees represent exactly: a split between 256 and 257 tokens (helped by the
  feature ceil(T/128)·128, which groups 257..384 together) keeps the GEMM tile step.
- Beyond the profiled range the trees hold the last ratio while the baseline keeps growing with the work, so
  the model extrapolates linearly in the physics terms instead of flattening out like a bare tree ensemble.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from simserve import numerics
from simserve.predictor.nnls import nnls

if TYPE_CHECKING:
    from sklearn.tree import ExtraTreeRegressor

# Small enough to pickle quickly (the fit cache), large enough that held-out error stops improving.
N_TREES = 16
MIN_LEAF = 1

Features = Callable[..., tuple[np.ndarray, np.ndarray]]  # columns -> (tree features, baseline features)


def _f(x: np.ndarray | list | int | float) -> np.ndarray:
    return np.atleast_1d(np.asarray(x, dtype=float))


def token_features(num_tokens) -> tuple[np.ndarray, np.ndarray]:
    """Linear and elementwise ops: one GPU, one layer, a function of the token count T.

    Baseline: t0 + a·T + b·Tq with Tq the rows padded to 128-row tiles (max(T, 64) below 128: the smallest
    tiles cuBLAS uses), the compute term of a tiled GEMM. Trees also see 64-row padding (the other common
    tile).
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


RUNS_FROM = 1024  # predictions on this many rows or more look for runs of rows with one answer (TreeEnsemble)
_MAX_INT = np.iinfo(np.int32).max  # sklearn.ensemble._base._set_random_states: the range of each tree's seed


@dataclass(frozen=True)
class TreeEnsemble:
    """scikit-learn's ExtraTreesRegressor(n_trees, min_samples_leaf, random_state=seed) on one output, fitted
    and evaluated without its per-call machinery: the same trees, bit for bit, and the same predictions.

    ExtraTreesRegressor.fit converts X to float32 and y to a float64 column, draws one seed per tree from
    RandomState(seed) (`_set_random_states`) and fits each tree by `_fit(..., check_input=False)`
    (`_parallel_build_trees` without bootstrap); predict sums the trees' outputs in order into a float64 array
    and divides by their number (`_accumulate_prediction`). Doing the same directly skips a clone, a parameter
    validation and a joblib dispatch per tree and per call: ~40% of the fitting and ~30% of the prediction CPU
    (docs/planner.md, Speed). tests/test_predictor.py checks it against ExtraTreesRegressor bit for bit."""

    trees: tuple[ExtraTreeRegressor, ...]

    @classmethod
    def fit(cls, x: np.ndarray, y: np.ndarray, n_trees: int, min_leaf: int, seed: int) -> TreeEnsemble:
        from sklearn.tree import ExtraTreeRegressor

        x32 = np.asarray(x, dtype=np.float32)
        y2 = np.ascontiguousarray(np.reshape(np.asarray(y, dtype=np.float64), (-1, 1)))
        if not (np.isfinite(x32).all() and np.isfinite(y2).all()):  # what the forest's input check refuses
            raise ValueError("the features and targets of a tree fit must be finite")
        draw = np.random.RandomState(seed)
        trees = []
        for _ in range(n_trees):
            tree = ExtraTreeRegressor(min_samples_leaf=min_leaf, random_state=draw.randint(_MAX_INT))
            tree._fit(x32, y2, check_input=False)
            trees.append(tree)
        return cls(tuple(trees))

    def predict(self, x: np.ndarray) -> np.ndarray:
        x32 = np.asarray(x, dtype=np.float32)
        if len(x32) >= RUNS_FROM:
            starts = self._run_starts(x32)
            if len(starts) < 0.8 * len(x32):  # else the repeat costs more than the rows it saves
                lengths = np.diff(np.append(starts, len(x32)))
                return np.repeat(self._predict(x32[starts]), lengths)
        return self._predict(x32)

    def _predict(self, x32: np.ndarray) -> np.ndarray:
        out = np.zeros(len(x32), dtype=np.float64)
        for tree in self.trees:
            out += tree.tree_.predict(x32)[:, 0]
        out /= len(self.trees)
        return out

    def _run_starts(self, x32: np.ndarray) -> np.ndarray:
        """Where a run of consecutive rows that every tree sends to the same leaves starts.

        A tree node sends a row left when its feature, as float32, is <= the node's threshold. Two rows with
        the same number of thresholds below each feature's value (over every node of every tree) take the same
        path in every tree, so the ensemble gives them the same prediction, to the bit. The timers' tables are
        grids whose features grow along a row (tokens 0..16k; a decode row's context), so runs are long: the
        trees are evaluated once per run (a token table's 16k rows are ~3k runs; the decode table's rows, 61%
        of them)."""
        change = np.zeros(len(x32), dtype=bool)
        change[0] = True
        for j in range(x32.shape[1]):
            splits = [t.tree_.threshold[t.tree_.feature == j] for t in self.trees]
            thresholds = np.unique(np.concatenate(splits))
            cell = np.searchsorted(thresholds, x32[:, j].astype(np.float64), side="left")
            change[1:] |= cell[1:] != cell[:-1]
        return np.flatnonzero(change)


@dataclass
class PhysicsTimesTrees:
    """time = baseline · correction; see the module docstring. Deterministic for a given seed."""

    features: Features
    seed: int = 0
    baseline: tuple[float, ...] | None = None  # non-negative coefficients of the baseline features
    correction: TreeEnsemble | None = None

    def fit(self, columns: tuple[np.ndarray, ...], y: np.ndarray) -> PhysicsTimesTrees:
        y = np.asarray(y, dtype=float)
        trees_x, base_x = self.features(*columns)
        floor = max(float(y[y > 0].min()) if (y > 0).any() else 1e-6, 1e-6)
        yy = np.maximum(y, floor)
        # NOTE: no free intercept: the constant column's coefficient is then also kept non-negative, so the
        # baseline can never cross zero and blow up the ratio the trees learn.
        self.baseline = nnls(base_x, yy, 1.0 / yy**2)
        ratio = yy / self._base(base_x)
        # NOTE: scikit-learn is imported at fit time (TreeEnsemble.fit): a warm plan never fits, so never pays
        # for it
        self.correction = TreeEnsemble.fit(trees_x, ratio, N_TREES, MIN_LEAF, self.seed)
        return self

    def _base(self, base_x: np.ndarray) -> np.ndarray:
        assert self.baseline is not None
        # Column by column in a fixed order (not base_x @ coef: BLAS may sum in another order on another
        # build).
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
