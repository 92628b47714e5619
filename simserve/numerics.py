"""Arithmetic whose last bits must not depend on the numpy release or the CPU it runs on.

numpy's transcendental functions (log, exp, power) use SIMD implementations chosen at run time by CPU and
changed between releases, its reductions (sum, percentile, interp) may change their order or formula, and both
can move a result in the last bit. Where such a bit decides something simserve reports — a GEMM time in a
compiled table, the histogram bucket of a token gap, a percentile at an SLO boundary — it is computed here:
with Python's `math` (the platform C library, one function per value), `math.fsum` (exactly rounded, so any
order), and numpy only for what is exact everywhere (elementwise + − × ÷, comparisons, sorting and selection).
Each helper is a few microseconds per thousand values slower than numpy's; they run at compile and report
time, not per simulated iteration.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np


def _map(fn, values) -> np.ndarray:
    a = np.asarray(values, dtype=float)
    return np.fromiter(map(fn, a.ravel().tolist()), dtype=float, count=a.size).reshape(a.shape)


def log(values) -> np.ndarray:
    return _map(math.log, values)


def log2(values) -> np.ndarray:
    return _map(math.log2, values)


def exp(values) -> np.ndarray:
    return _map(math.exp, values)


def geomspace(lo: float, hi: float, n: int) -> np.ndarray:
    """n points from lo to hi (both exact), evenly spaced in log."""
    step = (math.log(hi) - math.log(lo)) / (n - 1)
    inner = [math.exp(math.log(lo) + i * step) for i in range(1, n - 1)]
    return np.array([lo, *inner, hi], dtype=float)


def interp(x, xp: np.ndarray, fp: np.ndarray) -> np.ndarray:
    """Piecewise-linear interpolation like np.interp (clamped at both ends), by one fixed formula."""
    x = np.asarray(x, dtype=float)
    j = np.clip(np.searchsorted(xp, x, side="right") - 1, 0, len(xp) - 2)
    x0, x1, y0, y1 = xp[j], xp[j + 1], fp[j], fp[j + 1]
    y = y0 + (x - x0) * ((y1 - y0) / (x1 - x0))
    return np.where(x <= xp[0], fp[0], np.where(x >= xp[-1], fp[-1], y))


def parse_float(value) -> float:
    """A cell as a float, NaN when it is not a number: Python's correctly rounded parser, the same on every
    pandas release (pandas' own parsers have rounded the last bit differently between releases)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def parse_floats(values: Iterable) -> np.ndarray:
    values = list(values)
    try:  # NOTE: the common case, every cell a number, in one map over float(): the same parser, ~3x faster
        return np.array(list(map(float, values)), dtype=np.float64)
    except (TypeError, ValueError):
        return np.array([parse_float(v) for v in values], dtype=np.float64)


def fsum(values: Iterable[float]) -> float:
    return math.fsum(values)


def percentiles(values: np.ndarray, qs: Sequence[float]) -> list[float]:
    """Percentiles (q in 0..100) by linear interpolation between order statistics (numpy's default method,
    with its formula: a + (b − a)·t below the midpoint, b − (b − a)·(1 − t) from it); NaN when empty."""
    x = np.asarray(values, dtype=float)
    n = x.size
    if n == 0:
        return [math.nan] * len(qs)
    ranks = [q / 100.0 * (n - 1) for q in qs]
    kth = sorted({int(math.floor(r)) for r in ranks} | {min(int(math.floor(r)) + 1, n - 1) for r in ranks})
    part = np.partition(x, kth)  # selection is exact: the order statistics themselves, no arithmetic
    out = []
    for r in ranks:
        lo = int(math.floor(r))
        hi = min(lo + 1, n - 1)
        a, b, t = float(part[lo]), float(part[hi]), r - lo
        diff = b - a
        out.append(a + diff * t if t < 0.5 else b - diff * (1.0 - t))
    return out
