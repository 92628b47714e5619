"""A load curve (`--load-curve FILE`): request-rate multipliers over time, to shape any workload into a day.

The file is a CSV `time_s,multiplier`: row i's multiplier holds from its time (seconds from the run's start;
the first row is at 0) until the next row's, and the last one holds on. It is applied two ways:

* **Synthetic arrivals** (poisson, gamma, vllm-bench, ...): time is warped so that the rate at t is
  qps·m(t). An arrival the process draws at u (at its constant rate qps) is sent at M⁻¹(u), where
  M(t) = ∫₀ᵗ m. For Poisson arrivals this is exactly the inhomogeneous Poisson process of rate qps·m(t) (the
  time-rescaling theorem); for the others, their gaps stretched by the same warp.
* **Recorded arrivals** (`--arrival replay`): each request recorded at t is sent ⌊m(t)⌋ times, plus once more
  with probability m(t) − ⌊m(t)⌋ (thinning below 1, duplication above), drawn with the run's seed. The
  request itself keeps its time; each extra copy is sent at a uniformly drawn time before the next recorded
  arrival (so a doubled hour stays a smooth doubled hour, not pairs of simultaneous requests).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from simserve.errors import SimserveError
from simserve.numerics import parse_floats

COLUMNS = ("time_s", "multiplier")
_SEED_SALT = (
    0x10AD  # the thinning draws' own stream: independent of the arrival process's draws with the seed
)


@dataclass(frozen=True)
class LoadCurve:
    times: np.ndarray  # float64, starts at 0, strictly increasing
    multipliers: np.ndarray  # float64, finite, >= 0, the last > 0

    def __post_init__(self) -> None:
        if self.times[0] != 0 or (np.diff(self.times) <= 0).any():
            raise SimserveError("a load curve's times start at 0 and increase strictly")
        if (
            not np.isfinite(self.multipliers).all()
            or (self.multipliers < 0).any()
            or self.multipliers[-1] <= 0
        ):
            raise SimserveError("a load curve's multipliers are finite, >= 0, and the last one > 0")

    def at(self, t: np.ndarray) -> np.ndarray:
        """m(t) at each time."""
        return self.multipliers[np.searchsorted(self.times, t, side="right") - 1]

    def warp(self, u: np.ndarray) -> np.ndarray:
        """M⁻¹(u): the first time at which the curve's integral reaches each u (>= 0)."""
        u = np.asarray(u, dtype=np.float64)
        area = np.concatenate([[0.0], np.cumsum(np.diff(self.times) * self.multipliers[:-1])])
        j = np.searchsorted(area, u, side="left")  # the first breakpoint whose integral is >= u
        exact = (j < len(area)) & (area[np.minimum(j, len(area) - 1)] == u)
        i = np.maximum(j - 1, 0)  # else u lies inside segment i, whose multiplier is > 0
        inside = self.times[i] + (u - area[i]) / np.where(exact, 1.0, self.multipliers[i])
        return np.where(exact, self.times[np.minimum(j, len(area) - 1)], inside)

    def thin(self, arrived: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """(rows, times): the recorded requests each sent ⌊m⌋ or ⌈m⌉ times, sorted by time (stable)."""
        arrived = np.asarray(arrived, dtype=np.float64)
        rng = np.random.default_rng([seed, _SEED_SALT])
        m = self.at(arrived)
        copies = np.floor(m).astype(np.int64) + (rng.random(len(m)) < m - np.floor(m))
        rows = np.repeat(np.arange(len(arrived)), copies)
        # the first copy keeps the recorded time; the others are spread over the gap to the next arrival
        first = np.ones(len(rows), dtype=bool)
        first[1:] = rows[1:] != rows[:-1]
        nxt = np.append(arrived[1:], arrived[-1:]) if len(arrived) else arrived
        spread = rng.random(len(rows))
        times = np.where(first, arrived[rows], arrived[rows] + spread * (nxt[rows] - arrived[rows]))
        order = np.argsort(times, kind="stable")
        return rows[order], times[order]


@lru_cache(maxsize=4)
def load_curve(path: str) -> LoadCurve:
    """Read and check a load curve file; a bad row is one line naming the file, the row and the fix."""
    from simserve.workload.formats import read_table

    file = Path(path)
    if not file.is_file():
        raise SimserveError(f"--load-curve {path}: no such file; give a CSV with columns time_s,multiplier")
    table = read_table(file)
    missing = [c for c in COLUMNS if c not in table.columns]
    if missing:
        found = ", ".join(map(str, table.columns))
        raise SimserveError(
            f"{path}: no {missing[0]} column (found: {found}); a load curve has columns time_s,multiplier"
        )
    times = parse_floats(table["time_s"].tolist())
    mult = parse_floats(table["multiplier"].tolist())
    for i in range(len(times)):
        row = f"{path}: data row {i + 1}"
        cells = table.iloc[i]
        if not np.isfinite(times[i]):
            raise SimserveError(
                f"{row}: time_s is {str(cells['time_s'])!r:.40}, not a finite number of seconds"
            )
        if not np.isfinite(mult[i]) or mult[i] < 0:
            raise SimserveError(
                f"{row}: multiplier is {str(cells['multiplier'])!r:.40}; rate multipliers must be "
                f"finite and >= 0 (1 is the run's --qps or the trace's own rate)"
            )
        if i == 0 and times[i] != 0:
            raise SimserveError(f"{row}: the first time_s is {times[i]:g}; a load curve starts at time_s 0")
        if i and times[i] <= times[i - 1]:
            raise SimserveError(
                f"{row}: time_s {times[i]:g} is not after the previous row's {times[i - 1]:g}; "
                f"sort the rows by time and give each time once"
            )
    if mult[-1] <= 0:
        raise SimserveError(
            f"{path}: data row {len(mult)}: the last multiplier is 0, so requests after "
            f"{times[-1]:g} s would never be sent; end the curve with a positive multiplier"
        )
    return LoadCurve(times, mult)
