"""A log-bucket histogram with 0.1% relative accuracy (the DDSketch idea Sarathi-Serve's metrics use).

Bucket i holds values in (γ^(i-1), γ^i] with γ = (1+α)/(1-α); reporting 2γ^i/(γ+1) for a bucket is within
α of every value in it. Buckets span 1 ns to 10^6 s in a fixed array (about 16k floats), so memory does not
grow with the number of samples, and samples can carry weights (a compressed decode stretch adds n samples
per iteration at once). Exact zeros are counted apart.
"""

from __future__ import annotations

import math

import numpy as np

RELATIVE_ACCURACY = 0.001
_GAMMA = (1 + RELATIVE_ACCURACY) / (1 - RELATIVE_ACCURACY)
_LOG_GAMMA = math.log(_GAMMA)
_MIN, _MAX = 1e-9, 1e6
_OFFSET = math.ceil(math.log(_MIN) / _LOG_GAMMA)
_NUM = math.ceil(math.log(_MAX) / _LOG_GAMMA) - _OFFSET + 1
# Bound ufunc methods: a fraction of ndarray.min/max's call overhead on the small arrays of one batch.
_amin, _amax = np.minimum.reduce, np.maximum.reduce
_FEW = 16  # add_each: up to this many values, one Python loop is cheaper than the vectorised path


def _buckets(values: np.ndarray) -> np.ndarray:
    """The buckets `add` (math.log) puts positive values in, vectorised with numpy's log.

    numpy's log may differ from math.log in the last bit (it differs between numpy releases and CPUs), which
    can only move a value whose bucket coordinate log(v)/log(γ) lies within rounding of an integer; those few
    are redone with math.log, so the buckets are math.log's on every machine — and the compiled core's, which
    takes libm's log per value.
    """
    x = np.log(values) / _LOG_GAMMA
    idx = np.ceil(x)
    near = np.flatnonzero(np.abs(x - np.rint(x)) < 1e-6)
    for p in near.tolist():
        idx[p] = math.ceil(math.log(float(values[p])) / _LOG_GAMMA)
    return np.minimum(np.maximum(idx.astype(np.int64) - _OFFSET, 0), _NUM - 1)


class LogHistogram:
    def __init__(self) -> None:
        self.counts = np.zeros(_NUM)
        self.zeros = 0.0

    @property
    def total(self) -> float:
        return float(self.counts.sum()) + self.zeros

    def add(self, value: float, weight: float = 1.0) -> None:
        if value <= 0.0:
            assert value > -1e-9, f"negative sample {value}"
            self.zeros += weight
            return
        i = math.ceil(math.log(value) / _LOG_GAMMA) - _OFFSET
        self.counts[min(max(i, 0), _NUM - 1)] += weight

    @staticmethod
    def bucket(value: float) -> int:
        """The bucket `add` puts a positive value in (zeros, counted apart, are in none: -1)."""
        if value <= 0.0:
            return -1
        return min(max(math.ceil(math.log(value) / _LOG_GAMMA) - _OFFSET, 0), _NUM - 1)

    def add_many(self, values: np.ndarray, weight: float = 1.0) -> None:
        if not len(values):
            return
        lo, hi = _amin(values), _amax(values)
        if lo == hi:  # the common case: every decode in the batch waited the same iteration
            self.add(float(lo), weight * len(values))
            return
        pos = values > 0.0
        if not pos.all():
            self.zeros += weight * (len(values) - int(np.count_nonzero(pos)))
            values = values[pos]
        idx = _buckets(np.asarray(values, dtype=np.float64))
        if len(idx) > 32:
            np.add.at(self.counts, idx, weight)
        else:  # NOTE: the same additions in the same order as np.add.at, without its overhead
            counts = self.counts
            for i in idx.tolist():
                counts[i] += weight

    def add_each(self, values, weight: float = 1.0) -> None:
        """The same as `add(v, weight)` for each v (math.log's buckets, see `_buckets`), vectorised.

        NOTE: counts only ever receive integer weights, so adding a bucket's weights at once gives the
        same float as adding them one by one (integer sums below 2**53 are exact in any order).
        """
        if len(values) <= _FEW:  # NOTE: add() per value beats ~20 numpy calls on a short list
            counts, log, ceil = self.counts, math.log, math.ceil
            for x in values.tolist() if isinstance(values, np.ndarray) else values:
                if x <= 0.0:
                    self.add(x, weight)
                    continue
                i = ceil(log(x) / _LOG_GAMMA) - _OFFSET
                counts[min(max(i, 0), _NUM - 1)] += weight
            return
        v = np.asarray(values, dtype=np.float64)
        if _amin(v) <= 0.0:
            for x in v.tolist():
                self.add(x, weight)
            return
        idx = _buckets(v)
        lo = int(_amin(idx))
        per_bucket = np.bincount(idx - lo)  # a stretch's gaps span a few neighbouring buckets
        self.counts[lo : lo + len(per_bucket)] += weight * per_bucket

    def quantile(self, q: float) -> float:
        """The value at rank q·(count − 1), within 0.1% (NaN when empty)."""
        return self.quantiles([q])[0]

    def quantiles(self, qs) -> list[float]:
        """quantile(q) for each q, summing the buckets once (a probe record asks for ~70 of them)."""
        total = self.total
        if total <= 0:
            return [math.nan] * len(qs)
        cum = None
        out = []
        for q in qs:
            rank = q * (total - 1)
            if rank < self.zeros:
                out.append(0.0)
                continue
            if cum is None:
                cum = np.cumsum(self.counts) + self.zeros
            i = int(np.searchsorted(cum, rank, side="right"))
            i = min(i, _NUM - 1)
            out.append(2.0 * _GAMMA ** (i + _OFFSET) / (_GAMMA + 1.0))
        return out

    def first_bucket_above(self, limit: float) -> int:
        """The lowest bucket whose reported value exceeds `limit`: quantile() > limit iff its rank falls at or
        past this bucket."""
        i = max(math.ceil(math.log(limit) / _LOG_GAMMA) - _OFFSET - 1, 0)
        while i < _NUM and 2.0 * _GAMMA ** (i + _OFFSET) / (_GAMMA + 1.0) <= limit:
            i += 1
        return i

    def count_from(self, bucket: int) -> float:
        return float(self.counts[bucket:].sum())

    def mean(self) -> float:
        total = self.total
        if total <= 0:
            return math.nan
        # NOTE: math.fsum over the occupied buckets, not (counts * mids).sum(): numpy's power and summation
        # order differ between releases and would move the last bit of the mean (simserve.numerics).
        counts = self.counts
        occupied = np.flatnonzero(counts).tolist()
        return (
            math.fsum(counts[i] * (2.0 * _GAMMA ** (i + _OFFSET) / (_GAMMA + 1.0)) for i in occupied) / total
        )

    def merge(self, other: LogHistogram) -> None:
        self.counts += other.counts
        self.zeros += other.zeros
