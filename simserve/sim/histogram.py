"""A log-bucket histogram with 0.1% relative accuracy (the DDSketch idea Sarathi-Serve's metrics use).

Bucket i holds values in (γ^(i-1), γ^i] with γ = (1+α)/(1-α); reporting 2γ^i/(γ+1) for a bucket is within
α of every value in it. Buckets span 1 ns to 10^6 s in a fixed array (about 16k floats), so memory does not
grow with the number of samples, and samples can carry weights (a compressed decode stretch adds n samples
per iteration at once). Exact zeros are counted apart.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

RELATIVE_ACCURACY = 0.001
_GAMMA = (1 + RELATIVE_ACCURACY) / (1 - RELATIVE_ACCURACY)
_LOG_GAMMA = math.log(_GAMMA)
_MIN, _MAX = 1e-9, 1e6
_OFFSET = math.ceil(math.log(_MIN) / _LOG_GAMMA)
_NUM = math.ceil(math.log(_MAX) / _LOG_GAMMA) - _OFFSET + 1
# Bound ufunc methods: a fraction of ndarray.min/max's call overhead on the small arrays of one batch.
_amin, _amax = np.minimum.reduce, np.maximum.reduce


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
        idx = np.ceil(np.log(values) / _LOG_GAMMA).astype(np.int64) - _OFFSET
        idx = np.minimum(np.maximum(idx, 0), _NUM - 1)
        if len(idx) > 32:
            np.add.at(self.counts, idx, weight)
        else:  # NOTE: the same additions in the same order as np.add.at, without its overhead
            counts = self.counts
            for i in idx.tolist():
                counts[i] += weight

    def add_each(self, values: list[float], weight: float = 1.0) -> None:
        """The same as `add(v, weight)` for each v (same math.log buckets), at a fraction of the calls.

        NOTE: counts only ever receive integer weights, so summing a bucket's weights first gives the
        same float as adding them one by one (integer sums below 2**53 are exact in any order).
        """
        if not values:
            return
        if min(values) <= 0.0:
            for v in values:
                self.add(v, weight)
            return
        log, lg, off, top = math.log, _LOG_GAMMA, _OFFSET, _NUM - 1
        counts = self.counts
        for i, c in Counter([math.ceil(log(v) / lg) - off for v in values]).items():
            counts[min(max(i, 0), top)] += weight * c

    def quantile(self, q: float) -> float:
        """The value at rank q·(count − 1), within 0.1% (NaN when empty)."""
        total = self.total
        if total <= 0:
            return math.nan
        rank = q * (total - 1)
        if rank < self.zeros:
            return 0.0
        cum = np.cumsum(self.counts) + self.zeros
        i = int(np.searchsorted(cum, rank, side="right"))
        i = min(i, _NUM - 1)
        return 2.0 * _GAMMA ** (i + _OFFSET) / (_GAMMA + 1.0)

    def mean(self) -> float:
        total = self.total
        if total <= 0:
            return math.nan
        mids = 2.0 * _GAMMA ** (np.arange(_NUM) + _OFFSET) / (_GAMMA + 1.0)
        return float((self.counts * mids).sum() / total)

    def merge(self, other: LogHistogram) -> None:
        self.counts += other.counts
        self.zeros += other.zeros
