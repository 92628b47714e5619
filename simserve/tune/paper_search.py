"""The Sarathi-Serve paper's capacity search, step for step, for paper-comparable capacities.

Sarathi-Serve's `CapacitySearch.search` (sarathi/benchmark/capacity_search/capacity_search.py, microsoft/
sarathi-serve at 96f9911) is a binary search over [0, 2·start_qps] whose probe rates are rounded to 0.01 qps
(`round(qps, 2)`), that widens its upper bound after a pass with a low scheduling delay and stops when the
bracket is narrower than `--min-search-granularity` (2.5 %) of the last rate probed, when rounding repeats a
rate, or after `--max-iterations` (20) probes. Its pass/fail is the metrics alone: the paper's trials have no
overload stop, so a simulator's `overloaded` note is not a failure here (paper_setup runs every trial in
full).

It differs from simserve's own search (capacity.find_capacity) in ways that move capacities by a few percent:
rates on a 0.01 qps grid (coarse for the slow PP deployments: 0.01 of 0.3 qps is 3 %), a start bracket tied to
the paper's per-deployment start rate, and a stopping rule relative to the last probe, not to the passing one.
"""

from __future__ import annotations

import math

from simserve.errors import SimserveError
from simserve.tune.slo import SLO, CapacityResult, Probe, Simulate, quantile_key

MAX_ITERATIONS = 20  # capacity_search/main.py --max-iterations
PAPER_DELAY_SLO_S = 2.0  # --scheduling-delay-slo-value: the widening thresholds scale with it


def verdict(slo: SLO, metrics: dict[str, float]) -> tuple[bool, str]:
    """(passed, reason) as the paper judged a trial: by its latency metrics alone."""
    judged = {k: v for k, v in metrics.items() if k != "overloaded"}
    if any(key not in judged for key, _, _ in slo.limits()):
        # NOTE: only a stand-in outcome has no latencies (the scheduler's look-ahead assumes a failure so)
        return False, "overloaded: requests queue without bound"
    return slo.check(judged)


def paper_search(
    simulate: Simulate,
    slo: SLO,
    start_qps: float = 1.0,
    tolerance: float = 0.025,
    max_probes: int = MAX_ITERATIONS,
) -> CapacityResult:
    """The capacity the paper's search reports for `slo`: its *last* passing rate (0 when none passed).

    NOTE: as in the paper's code, which overwrites `max_qps_under_sla` at every pass. That is not always the
    highest passing rate: a failure with a median delay above 500 s halves the upper bound, which can drop it
    below an earlier pass, and the passes that follow are lower."""
    if not start_qps > 0:
        raise SimserveError(f"--start-qps must be a positive rate, got {start_qps}")
    if not 0 < tolerance < 1:
        raise SimserveError(f"--tolerance must be in (0, 1), e.g. 0.025; got {tolerance}")
    delay_slo = slo.scheduling_delay_s or PAPER_DELAY_SLO_S
    delay_key = quantile_key("scheduling_delay", slo.scheduling_delay_quantile)
    probes: list[Probe] = []
    left, right = 0.0, start_qps * 2
    qps = last_qps = 0.0
    best = 0.0
    min_over = float(2**32)
    for _ in range(max_probes):
        if abs(left - right) < tolerance * qps:  # the paper: < min_search_granularity * qps / 100
            break
        qps = round((left + right) / 2, 2)
        if qps == last_qps or qps <= 0:  # rounding repeats a rate (or reaches 0: nothing passes)
            break
        last_qps = qps
        metrics = {k: float(v) for k, v in simulate(qps).items()}
        passed, reason = verdict(slo, metrics)
        probes.append(Probe(qps, passed, reason, metrics))
        delay = metrics.get(delay_key, math.inf)
        if passed:
            best = qps  # the paper's max_qps_under_sla: the last pass (see the docstring)
            if delay < delay_slo / 8:  # a very low delay: raise the bound more aggressively
                right = min(right * 4, min_over)
            elif delay < delay_slo / 4 or qps > 0.8 * right:
                right = min(right * 2, min_over)
            left = qps
        else:
            # NOTE: the paper's code has a second branch (delay > 1000 s: qps / 4) after this one; it can
            # never be taken, so it is left out.
            right = qps / 2 if delay > 500 else qps
            min_over = min(min_over, qps)
    message = "" if best else f"no probed rate meets {slo.describe()} (the paper's search)"
    return CapacityResult(best, tuple(probes), slo, tolerance, message)
