"""Guided capacity search: the bisection's questions answered from fewer simulations.

The bisection (capacity._bisection) asks pass/fail at a sequence of rates, each one depending on the answers
before it. While pass/fail is monotone in the rate, one simulation answers many of those questions: a pass
at rate r answers "pass" for every rate below r, a failure "fail" for every rate above. So instead of
simulating each midpoint on the way down the bisection tree, the search simulates the rate the bisection is
predicted to *end* at, and every question on the path below it (if it passes) or above it (if it fails) is
answered at once. The bisection itself, its questions and its answer are unchanged; only which rates are
simulated differs. A wrong prediction costs one simulation that leaves the open question open; the next one
is then the question itself, and `Guide` keeps an account so that a search never takes more than one
simulation beyond the plain bisection's.

The prediction (`likely_capacity`) is a regula falsi step on the latency curve: each objective's *margin*
(TBT / limit − 1; log(delay / limit) for queueing delays; negative where the objective is met) interpolated
linearly in the rate between the highest passing and the lowest failing probe, once those two are close
enough for a curve to be nearly linear between them (`MAX_SPAN`). Where latencies rise smoothly it lands
within a grid step of the boundary; where they fall off a cliff it misses, and the account stops it. On the
default sweep the searches simulate 58 rates instead of the plain bisection's 68, with the same capacities;
the CPU saved is less (about 10%), since the rates skipped are the cheap ones away from capacity
(docs/tuning.md, "The search").
"""

from __future__ import annotations

import math
from collections.abc import Callable

from simserve.tune.slo import SLO, Probe, Unanswered

# A latency curve is close to linear only locally: across the first bracket, a factor of 2 in load from near
# idle to overload, it is not (queueing delay explodes, TBT can jump when prefills start to stall decodes). So
# the search predicts only once the bracket spans at most this fraction of its passing rate, i.e. after one
# bisection step. Measured (docs/tuning.md): predicting from the first bracket saved fewer simulations on the
# paper's 72 cells (585 against 559; the plain bisection takes 607) and missed more often.
MAX_SPAN = 0.5

# An overloaded run was stopped early, so its latencies cover only the requests served before the queue grew:
# its margin is at least this, so that it counts as a failure in the interpolation.
OVERLOADED_MARGIN = 0.05


class Outcomes:
    """The probes simulated so far, and the answers they imply for rates not simulated."""

    def __init__(self) -> None:
        self.probes: list[Probe] = []

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
    """log(latency / limit) of each objective the probe measured: ≤ 0 where it is met. An overloaded (or
    unsteady) run's scheduling delay counts as missed (its queue grows: a sure miss of that objective)."""
    out = {}
    for key, _, limit in slo.limits():
        value = probe.metrics.get(key)
        if value is not None and value > 0 and math.isfinite(value):
            # TBT is an iteration time, which grows about linearly with the load in the batch; queueing
            # delays (and TTFT, which holds one) grow steeply near saturation: their log is closer to linear.
            out[key] = value / limit - 1 if key.startswith(("tbt", "tpot")) else math.log(value / limit)
    if probe.metrics.get("overloaded") or probe.metrics.get("unsteady"):  # a queue that grows: delay missed
        delay = [key for key in out if key.startswith("scheduling_delay")] or list(out)
        for key in delay:
            out[key] = max(out[key], OVERLOADED_MARGIN)
    return out


def likely_capacity(probes: list[Probe], slo: SLO) -> float | None:
    """Where the first objective to be missed crosses its limit between the highest pass and the lowest
    failure above it (its margin interpolated linearly in the rate), or None without such a pair or when they
    are too far apart. Probes without latencies are passed over: a run that served nothing, and the outcomes
    the scheduler's look-ahead assumes (so that it looks ahead along the same prediction)."""
    measured = [(p, m) for p in probes if (m := margins(p, slo))]
    passes = [(p, m) for p, m in measured if p.passed]
    if not passes:
        return None
    lo, m_lo = max(passes, key=lambda pm: pm[0].qps)
    fails = [(p, m) for p, m in measured if not p.passed and p.qps > lo.qps]
    if not fails:
        return None
    hi, m_hi = min(fails, key=lambda pm: pm[0].qps)
    if min(p.qps for p in probes if not p.passed and p.qps > lo.qps) - lo.qps > MAX_SPAN * lo.qps:
        return None  # a bracket too wide to interpolate in
    crossings = [
        lo.qps + (hi.qps - lo.qps) * (-m_lo[key]) / (m_hi[key] - m_lo[key])
        for key in m_hi
        if key in m_lo and m_lo[key] <= 0 < m_hi[key]
    ]
    return min(crossings) if crossings else None


class Guide:
    """Chooses the rate to simulate for each open question, and keeps the account that bounds its cost.

    The account: the questions its guided simulations answered, minus those simulations. A guided simulation
    that answers nothing (a miss) is followed by the question itself, and once the account is negative the
    search is the plain bisection from there on; so a search takes at most one simulation more than the plain
    bisection, while a prediction that keeps landing pays for itself many times over.
    """

    def __init__(self, slo: SLO):
        self.slo = slo
        self.credit = 0
        self.last: tuple[int, bool] | None = None  # (questions answered before the last simulation, guided)

    def choose(
        self, bisect: Callable[[Callable[[float], Probe]], object], outcomes: Outcomes, question: Unanswered
    ) -> float:
        missed = False
        if self.last is not None and self.last[1]:
            gained = question.answered - self.last[0]
            self.credit += gained - 1
            missed = gained == 0
        rate = question.qps
        if not missed and self.credit >= 0:
            rate = predicted_end(bisect, outcomes, question.qps, likely_capacity(outcomes.probes, self.slo))
        self.last = (question.answered, rate != question.qps)
        return rate


def predicted_end(
    bisect: Callable[[Callable[[float], Probe]], object],
    outcomes: Outcomes,
    question: float,
    guess: float | None,
) -> float:
    """The highest rate on the bisection's path predicted (by `guess`) to pass, if the open `question` is, or
    the lowest predicted to fail; either answers the question when the prediction holds. The question itself
    without a guess."""
    if guess is None:
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
