"""Reading a measured table between its grid points: log-log interpolation, and a count of how each value was
got.

Kernel times are close to power laws of their sizes between neighbouring grid points (a GEMM's time grows
linearly in the token count once compute-bound and is flat while weight-bound; attention grows linearly or
quadratically in the context), so values are interpolated linearly in (log size, log time): exact for any
local power law, and it never invents a step the table does not show. Where the table measured both sides of a
tile boundary (the package measures m = 256 and 257, 512 and 513, …), both points are kept, so the step
survives. Beyond the grid, the end segment's log-log slope continues (clamped to [0, 2]: nothing in a kernel
grows faster than quadratically in one size, nor gets faster with more work), and the value is counted as
extrapolated.

Every value comes with a kind: MEASURED (on the grid), INTERPOLATED, EXTRAPOLATED; callers add DERIVED (a
measured value put through a stated identity, e.g. attention heads folded into the batch) and MODELLED (no
table: the analytic model). A row's kind is the worst of its inputs'.
"""

from __future__ import annotations

import numpy as np

MEASURED, INTERPOLATED, DERIVED, EXTRAPOLATED, MODELLED = 0, 1, 2, 3, 4
KIND_NAMES = ("measured", "interpolated", "derived", "extrapolated", "modelled")
MAX_SLOPE = 2.0


def loglog(xs, ys, x) -> tuple[np.ndarray, np.ndarray]:
    """Interpolate y(x) from points (xs, ys), NaN ys skipped; returns (values, kinds) shaped like x."""
    xs, ys = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    ok = np.isfinite(ys) & (ys > 0)
    xs, ys = xs[ok], ys[ok]
    if len(np.unique(xs)) < len(xs):  # repeated measurements of one size: their median
        uniq = np.unique(xs)
        ys = np.array([np.median(ys[xs == u]) for u in uniq])
        xs = uniq
    order = np.argsort(xs)
    xs, ys = xs[order], ys[order]
    x = np.atleast_1d(np.asarray(x, dtype=float))
    if len(xs) == 0:
        raise ValueError("no measured points to interpolate")
    if len(xs) == 1:
        kinds = np.where(x == xs[0], MEASURED, EXTRAPOLATED)
        return np.full(x.shape, ys[0]), kinds
    lx, ly, lq = np.log(xs), np.log(ys), np.log(x)
    out = np.interp(lq, lx, ly)
    lo, hi = lq < lx[0], lq > lx[-1]
    slope_lo = np.clip((ly[1] - ly[0]) / (lx[1] - lx[0]), 0.0, MAX_SLOPE)
    slope_hi = np.clip((ly[-1] - ly[-2]) / (lx[-1] - lx[-2]), 0.0, MAX_SLOPE)
    out = np.where(lo, ly[0] + slope_lo * (lq - lx[0]), out)
    out = np.where(hi, ly[-1] + slope_hi * (lq - lx[-1]), out)
    kinds = np.where(np.isin(x, xs), MEASURED, INTERPOLATED)
    kinds = np.where(lo | hi, EXTRAPOLATED, kinds)
    return np.exp(out), kinds


def bracket(grid, value: float) -> list[float]:
    """The grid points that interpolating at `value` needs: itself, its two neighbours, or the two end
    points."""
    grid = np.unique(np.asarray(grid, dtype=float))
    if value in grid:
        return [float(value)]
    i = int(np.searchsorted(grid, value))
    if i == 0:
        return [float(g) for g in grid[:2]]
    if i == len(grid):
        return [float(g) for g in grid[-2:]]
    return [float(grid[i - 1]), float(grid[i])]


def point_kind(grid, value: float) -> int:
    grid = np.asarray(grid, dtype=float)
    if value in grid:
        return MEASURED
    return INTERPOLATED if grid.min() < value < grid.max() else EXTRAPOLATED


def names(kinds: np.ndarray) -> np.ndarray:
    return np.array(KIND_NAMES, dtype=object)[np.asarray(kinds, dtype=int)]


def counts(kinds) -> dict[str, int]:
    kinds = np.asarray(kinds, dtype=int)
    return {name: int((kinds == i).sum()) for i, name in enumerate(KIND_NAMES)}
