"""Request arrival times: seeded synthetic processes, or replay of recorded times.

All synthetic processes draw inter-arrival gaps with `np.random.default_rng(seed)` and put the first request
at the first gap (not at 0), so the same seed gives identical arrivals and the mean rate is `qps` from the
start.

* `poisson`: exponential gaps with mean 1/qps (exact Poisson process).
* `poisson-clipped`: the Sarathi-Serve benchmark's generator, which clips every gap at 3/qps
  (`min(-ln(1-U)/qps, 3/qps)`). The mean gap becomes (1 - e^-3)/qps = 0.9502/qps, so the real rate is about
  5.2% higher than the nominal qps. Use it only to reproduce the paper's numbers.
* `gamma`: gamma gaps with mean 1/qps and coefficient of variation `cv` (cv = 1 is Poisson; cv > 1 is
  burstier).
* `vllm-bench`: `vllm bench serve`'s request generator (vLLM 0.33.0, `vllm/benchmarks/serve.py`,
  `get_request`): gamma gaps of shape `burstiness` = 1/cv² and mean 1/qps drawn one by one from numpy's legacy
  global generator as `main_async` seeds it (`np.random.seed(seed)`; `np.random.RandomState(seed)` here, whose
  stream NumPy keeps fixed), summed, then rescaled so that the last request is sent at exactly n/qps ("to
  close the gap" between seeds). With the same --seed the send times are the ones vLLM's client computes.
* `qps = inf` (any synthetic process): every request at t = 0, as `vllm bench serve --request-rate inf`.
* `replay`: the first n recorded arrival times, shifted so the first request arrives at 0 and multiplied by
  `time_scale` (0.5 replays twice as fast). `replay_time_scale` gives the scale for a target rate.
* `conversation`: the replayed times of a multi-turn trace, of which the simulator keeps only each
  conversation's first round as an arrival; later rounds wait for the answer before them
  (sim/conversation.py).
"""

from __future__ import annotations

import numpy as np

from simserve.errors import SimserveError

PROCESSES = ("poisson", "poisson-clipped", "gamma", "vllm-bench", "replay", "conversation")
CLIP_GAPS_AT = 3.0  # in units of the mean gap 1/qps, as in Sarathi-Serve's PoissonRequestIntervalGenerator


def arrival_times(
    n: int,
    qps: float,
    process: str = "poisson",
    seed: int = 0,
    cv: float = 1.0,
    recorded: np.ndarray | None = None,
    time_scale: float = 1.0,
) -> np.ndarray:
    """n non-decreasing arrival times in seconds (float64).

    qps is the nominal request rate of the synthetic processes (inf: all at t = 0); `replay` ignores it (it
    keeps the recorded rate, scaled by time_scale) but still requires it to be positive, so one call site
    serves every process.
    """
    if process not in PROCESSES:
        raise SimserveError(f"unknown arrival process {process!r}; choose one of {', '.join(PROCESSES)}")
    if n < 0:
        raise SimserveError(f"cannot generate {n} arrivals; n must be >= 0")
    if np.isnan(qps) or qps <= 0:
        raise SimserveError(f"qps must be a positive request rate (or inf: all at once), got {qps}")
    if not np.isfinite(time_scale) or time_scale <= 0:  # every process: a bad flag is an error, not ignored
        raise SimserveError(f"--time-scale must be positive, got {time_scale}")
    if process in ("replay", "conversation"):
        if np.isinf(qps):  # the recorded times set the rate: inf would be silently ignored
            raise SimserveError(
                f"--qps inf sends every request at t = 0, but --arrival {process} keeps the trace's recorded "
                "times; use a synthetic --arrival (poisson, gamma, vllm-bench) with --qps inf, or "
                "--time-scale to compress the recorded times"
            )
        return _replay(n, recorded, time_scale)
    if np.isinf(qps):  # vLLM's get_request: `delay_ts.append(0)` when the rate is inf
        return np.zeros(n)
    if process in ("gamma", "vllm-bench") and (not np.isfinite(cv) or cv <= 0):
        raise SimserveError(f"gamma arrivals need a positive coefficient of variation, got cv={cv}")
    if process == "vllm-bench":
        # NOTE: vLLM takes the gamma shape (--burstiness B) where simserve takes cv = 1/sqrt(B); 12
        # significant digits undo the round trip (cv = 1/sqrt(0.5) gives back 0.5, not 0.4999999999999999).
        return _vllm_bench(n, qps, seed, float(f"{1.0 / cv**2:.12g}"))
    rng = np.random.default_rng(seed)
    mean_gap = 1.0 / qps
    if process == "poisson":
        gaps = rng.exponential(mean_gap, size=n)
    elif process == "poisson-clipped":
        gaps = np.minimum(rng.exponential(mean_gap, size=n), CLIP_GAPS_AT * mean_gap)
    else:
        shape = 1.0 / cv**2  # gamma CV = 1/sqrt(shape); scale keeps the mean at 1/qps
        gaps = rng.gamma(shape, mean_gap / shape, size=n)
    return np.cumsum(gaps)


def _vllm_bench(n: int, qps: float, seed: int, burstiness: float) -> np.ndarray:
    """vLLM 0.33.0's `get_request` send times (no ramp-up): per request `np.random.gamma(shape=burstiness,
    scale=1/(rate·burstiness))`, a running sum, then every time scaled by (n/rate)/last."""
    if n == 0:
        return np.zeros(0)
    # NOTE: main_async's np.random.seed(seed); nothing draws from it before
    legacy = np.random.RandomState(seed)
    theta = 1.0 / (qps * burstiness)
    delays = [float(legacy.gamma(shape=burstiness, scale=theta)) for _ in range(n)]
    for i in range(1, n):  # vLLM's loop, in Python floats: the same sums bit for bit
        delays[i] += delays[i - 1]
    if delays[-1] != 0:
        factor = (n / qps) / delays[-1]
        delays = [d * factor for d in delays]
    return np.array(delays, dtype=np.float64)


def _replay(n: int, recorded: np.ndarray | None, time_scale: float) -> np.ndarray:
    if recorded is None:
        raise SimserveError(
            "replay arrivals need recorded times; load a trace with an arrived_at/timestamp column"
        )
    times = np.asarray(recorded, dtype=np.float64)
    _check_recorded(times)
    if n > len(times):
        raise SimserveError(
            f"replay asked for {n} arrivals but only {len(times)} are recorded; request at most {len(times)}"
        )
    times = times[:n]
    return (times - times[0]) * time_scale if n else times


def _check_recorded(times: np.ndarray) -> None:
    if times.ndim != 1:
        raise SimserveError("recorded arrival times must be a 1-D array")
    bad = np.flatnonzero(~np.isfinite(times) | (times < 0))
    if len(bad):
        raise SimserveError(
            f"recorded arrival {bad[0] + 1} is {times[bad[0]]}; arrival times must be finite and >= 0"
        )
    back = np.flatnonzero(np.diff(times) < 0)
    if len(back):
        i = back[0] + 1
        raise SimserveError(
            f"recorded arrival {i + 1} ({times[i]}) is earlier than arrival {i} ({times[i - 1]}); sort them "
            "first"
        )


def replay_time_scale(recorded: np.ndarray, qps: float) -> float:
    """The time_scale that makes a replay of `recorded` run at qps on average (its span over its gaps)."""
    times = np.asarray(recorded, dtype=np.float64)
    _check_recorded(times)
    if len(times) < 2 or times[-1] <= times[0]:
        raise SimserveError("need at least two distinct recorded arrival times to derive a rate")
    if qps <= 0:
        raise SimserveError(f"qps must be a positive request rate, got {qps}")
    recorded_qps = (len(times) - 1) / (times[-1] - times[0])
    return recorded_qps / qps
