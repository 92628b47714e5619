"""Guided capacity search: the bisection's questions answered from fewer simulations.

The bisection (capacity._bisection) asks pass/fail at a sequence of rates, each one depending on the answers
before it. While pass/fail is monotone in the rate, one simulation answers many of those questions: a pass
at rate r answers "pass" for every rate below r, a failure "fail" for every rate above. So instead of
simulating each midpoint on the way down the bisection tree, the search simulates the rate the bisection is
predicted to *end* at, and every question on the path below it (if it passes) or above it (if it fails) is
answered at once. The bisection itself, its questions and its answer are unchanged; only which rates are
simulated differs. A wrong prediction costs one simulation that leaves the open question open; the next one
is then the question itself, so a search never takes more than twice the plain bisection's simulations.

The prediction (`likely_capacity`) interpolates each probe's *margin*, the log of its worst latency over the
SLO's limit (negative when it passes), linearly between the highest passing and the lowest failing probe: a
regula falsi step on the latency curve. Near capacity latencies grow smoothly with load (TBT) or steeply
(scheduling delay), and either way the interpolation lands within a grid step or two of the boundary: on the
default sweep the searches simulate 50 rates instead of 77 (docs/tuning.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from simserve.tune.capacity import SLO, Probe, Unanswered

# An overloaded run was stopped early, so its latencies cover only the requests served before the queue grew:
# its margin is at least this, so that it counts as a failure in the interpolation.
OVERLOADED_MARGIN = 0.05


class Outcomes:
    """The probes simulated so far, and the answers they imply for rates not simulated."""

    def __init__(self) -> None:
        self.probes: list[Probe] = []
        self.missed = False  # the last guided probe left its question open: ask the question itself next

    def add(self, probe: Probe, question: float) -> None:
        self.probes.append(probe)
        self.missed = probe.qps != question and self.implied(question) is None

    def implied(self, qps: float) -> Probe | None:
        """The probe that decides `qps`: its own, a pass at or above it, or a failure at or below it. None
        when no probe does, or when probes disagree (a pass above a failure: not monotone there)."""
        for p in self.probes:
            if p.qps == qps:
                return p
        above = [p for p in self.probes if p.passed and p.qps >= qps]
        below = [p for p in self.probes if not p.passed and p.qps <= qps]
        if above and not below:
            return min(above, key=lambda p: p.qps)
        if below and not above:
            return max(below, key=lambda p: p.qps)
        return None

    def answer(self, qps: float) -> Probe:
        p = self.implied(qps)
        if p is None:
            raise Unanswered(qps)
        return p


def margins(probe: Probe, slo: SLO) -> dict[str, float]:
    """log(latency / limit) of each objective the probe measured: ≤ 0 where it is met. An overloaded run's
    scheduling delay counts as missed (the overload rule is a sure miss of that objective)."""
    out = {}
    for key, _, limit in slo.limits():
        value = probe.metrics.get(key)
        if value is not None and value > 0 and math.isfinite(value):
            # TBT is an iteration time, which grows about linearly with the load in the batch; queueing
            # delays (and TTFT, which holds one) grow steeply near saturation: their log is closer to linear.
            out[key] = value / limit - 1 if key.startswith("tbt") else math.log(value / limit)
    if probe.metrics.get("overloaded"):
        delay = [key for key in out if key.startswith("scheduling_delay")] or list(out)
        for key in delay:
            out[key] = max(out[key], OVERLOADED_MARGIN)
    return out


def likely_capacity(probes: list[Probe], slo: SLO) -> float | None:
    """Where the first objective to be missed crosses its limit between the highest pass and the lowest
    failure above it (its margin interpolated linearly in the rate), or None without such a pair. Probes with
    no latency to go by are passed over (a run that served nothing; the scheduler's look-ahead, which assumes
    an outcome without metrics, so that it looks ahead along this same prediction)."""
    measured = [(p, m) for p in probes if (m := margins(p, slo))]
    passes = [(p, m) for p, m in measured if p.passed]
    if not passes:
        return None
    lo, m_lo = max(passes, key=lambda pm: pm[0].qps)
    fails = [(p, m) for p, m in measured if not p.passed and p.qps > lo.qps]
    if not fails:
        return None
    hi, m_hi = min(fails, key=lambda pm: pm[0].qps)
    crossings = [
        lo.qps + (hi.qps - lo.qps) * (-m_lo[key]) / (m_hi[key] - m_lo[key])
        for key in m_hi
        if key in m_lo and m_lo[key] <= 0 < m_hi[key]
    ]
    return min(crossings) if crossings else None


def next_probe(
    bisect: Callable[[Callable[[float], Probe]], object], outcomes: Outcomes, question: float, slo: SLO
) -> float:
    """The rate to simulate for the bisection's open `question`: the highest rate on the predicted path that is
    predicted to pass (if the question is) or the lowest predicted to fail; the question itself when there is
    no prediction or the last guess missed."""
    guess = likely_capacity(outcomes.probes, slo)
    if guess is None or outcomes.missed:
        return question
    opened: list[tuple[float, bool]] = []

    def predicted(qps: float) -> Probe:
        known = outcomes.implied(qps)
        if known is not None:
            return known
        opened.append((qps, qps <= guess))
        return Probe(qps, qps <= guess, "predicted", {})

    bisect(predicted)
    passes = question <= guess
    same = [q for q, p in opened if p == passes]
    return (max(same) if passes else min(same)) if same else question
