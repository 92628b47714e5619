"""Capacity search: the highest request rate a configuration serves within its latency SLOs.

The search sees the simulator only as a `simulate(qps) -> metrics` callable (a flat mapping of floats), so it
runs against the real simulator, a cached replay of earlier runs, or a closed-form test model alike.

Algorithm (docs/tuning.md): ask about `start_qps` (or `first_qps`, a rate on the same grid); if it passes,
double until a rate fails, otherwise halve until one passes (or the rate falls below
`start_qps / 2**max_halvings`: then no load meets the SLO and capacity is 0); then bisect the bracket
[passing, failing] until its width is at most `tolerance` × the passing rate. The capacity is the highest
passing rate. An overloaded run (the simulator gave up on it) is a failure. Which rates are simulated to
answer those questions is guided.py's choice: fewer than the questions, with the same answers while pass/fail
is monotone in the rate.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from simserve.errors import SimserveError
from simserve.tune.slo import OBJECTIVES as OBJECTIVES
from simserve.tune.slo import SLO as SLO
from simserve.tune.slo import CapacityResult as CapacityResult
from simserve.tune.slo import Metrics as Metrics
from simserve.tune.slo import Probe as Probe
from simserve.tune.slo import Simulate as Simulate
from simserve.tune.slo import Unanswered as Unanswered
from simserve.tune.slo import quantile_key as quantile_key


def _round_qps(qps: float) -> float:
    # Six significant digits: probe rates (and so cache keys) are the same on every machine.
    return float(f"{qps:.6g}")


def impossible_slo(messages: Iterable[str], where: str, flags: str) -> SimserveError:
    """The one-line error for a grid in which every search found capacity 0: the SLO is out of reach at any
    load (each search's own message says which objective failed even at its lowest rate)."""
    why = next((m for m in messages if m), "no load meets the SLO")
    return SimserveError(f"{why}, {where}; loosen that objective ({flags})")


def find_capacity(
    simulate: Simulate,
    slo: SLO,
    start_qps: float = 1.0,
    tolerance: float = 0.025,
    max_probes: int = 30,
    max_halvings: int = 10,
    first_qps: float | None = None,
    guided: bool = True,
    step: float = 2.0,
) -> CapacityResult:
    """The highest QPS meeting `slo`, by bracketing and bisection to a relative `tolerance`.

    Assumes pass/fail is monotone in load (true of a fixed-seed replay up to simulation noise). The bisection
    asks at most `max_probes` questions; an SLO that fails even at `start_qps / 2**max_halvings` gives
    capacity 0. `first_qps` (a rate start_qps · 2^k, see first_probe.py) is asked first instead of start_qps:
    the bracket, and so the capacity, is the same; only the probes taken to reach it differ.

    `guided` (the default) answers the bisection's questions from fewer simulations: a pass at a rate answers
    every question below it, a failure every question above it, so the search simulates the rate the
    bisection is predicted to end at (guided.py) rather than each midpoint on the way. The bisection, and so
    the capacity, is the same while pass/fail is monotone; `guided=False` simulates every question.

    `step` is the bracketing factor (2: doubling and halving). A search that starts near its answer (the
    plan's searches of another seed, from the first seed's capacity) brackets in smaller steps, so it neither
    walks down to half the rate (a long run of the whole trace at light load) nor bisects back up from there;
    `max_halvings` then counts its steps down.
    """
    if not start_qps > 0:
        raise SimserveError(f"--start-qps must be a positive rate, got {start_qps}")
    if not 0 < tolerance < 1:
        raise SimserveError(f"--tolerance must be in (0, 1), e.g. 0.025; got {tolerance}")
    if not step > 1:
        raise ValueError(f"the bracketing step must exceed 1, got {step}")
    from simserve.tune.guided import Guide, Outcomes

    outcomes, guide = Outcomes(), Guide(slo) if guided else None
    qps = _round_qps(start_qps if first_qps is None else first_qps)
    # The floor stays at start_qps / 2**max_halvings wherever on the grid the search starts.
    max_halvings += round(math.log2(qps / start_qps))

    def bisect(answer: Callable[[float], Probe]) -> tuple[float, str]:
        return _bisection(answer, slo, qps, tolerance, max_probes, max_halvings, step)

    while True:
        try:
            capacity, message = bisect(outcomes.answer)
        except Unanswered as question:
            rate = guide.choose(bisect, outcomes, question) if guide else question.qps
            metrics = {k: float(v) for k, v in simulate(rate).items()}
            outcomes.probes.append(Probe(rate, *slo.check(metrics), metrics))
            continue
        return CapacityResult(capacity, tuple(outcomes.probes), slo, tolerance, message)


def _bisection(
    answer: Callable[[float], Probe],
    slo: SLO,
    qps: float,
    tolerance: float,
    max_questions: int,
    max_halvings: int,
    step: float = 2.0,
) -> tuple[float, str]:
    """(capacity, message) of bracketing from `qps` and bisecting, asking `answer(rate)` for each rate's
    probe (or the probe whose outcome implies it); `answer` raises Unanswered where it cannot tell yet."""
    asked = 0

    def ask(rate: float) -> Probe:
        nonlocal asked
        try:
            probe = answer(rate)
        except Unanswered as open_question:
            open_question.answered = asked
            raise
        asked += 1
        return probe

    last = ask(qps)
    if last.passed:
        lo = qps
        while True:  # bracket upwards
            qps = _round_qps(lo * step)
            if asked >= max_questions:
                return lo, f"still meeting the SLO at {lo:g} qps after {max_questions} probes"
            if ask(qps).passed:
                lo = qps
            else:
                hi = qps
                break
    else:
        hi = qps
        halvings = 0
        while True:  # bracket downwards
            qps = _round_qps(hi / step)
            halvings += 1
            if halvings > max_halvings:
                return 0.0, (
                    f"no load meets {slo.describe()}: even at {last.qps:.3g} qps {last.reason}; "
                    f"the SLO is below what one request alone gets (e.g. one decode iteration)"
                )
            last = ask(qps)
            if last.passed:
                lo = qps
                break
            hi = qps
    while hi - lo > tolerance * lo and asked < max_questions:
        qps = _round_qps((lo + hi) / 2)
        if qps in (lo, hi):  # rounding has met the bracket: it is as narrow as rates get
            break
        if ask(qps).passed:
            lo = qps
        else:
            hi = qps
    return lo, ""


SEARCHES = ("simserve", "bisect", "paper")


def search_capacity(
    simulate: Simulate,
    slo: SLO,
    start_qps: float = 1.0,
    tolerance: float = 0.025,
    max_probes: int = 30,
    max_halvings: int = 10,
    search: str = "simserve",
    first_qps: float | None = None,
    step: float = 2.0,
) -> CapacityResult:
    """find_capacity (guided); with search="bisect" the same bisection simulating every rate it asks about
    (the search before guided.py: the same capacity while pass/fail is monotone, more simulations); with
    search="paper" the Sarathi-Serve paper's own search (paper_search.py, which starts from its own bracket
    [0, 2 × start_qps] and has no halving floor)."""
    if search == "paper":
        from simserve.tune.paper_search import MAX_ITERATIONS, paper_search

        return paper_search(simulate, slo, start_qps, tolerance, min(max_probes, MAX_ITERATIONS))
    if search not in SEARCHES:
        raise SimserveError(f"unknown capacity search {search!r}; choose one of {', '.join(SEARCHES)}")
    guided = search == "simserve"
    return find_capacity(
        simulate, slo, start_qps, tolerance, max_probes, max_halvings, first_qps, guided, step
    )


@dataclass(frozen=True)
class SeedSpread:
    """Capacity over simulation seeds: its mean and how far single seeds fall from it."""

    capacities: tuple[float, ...]
    mean: float = field(init=False)
    std: float = field(init=False)
    min: float = field(init=False)
    max: float = field(init=False)

    def __post_init__(self) -> None:
        c = self.capacities
        if not c:
            raise ValueError("SeedSpread needs at least one capacity")
        object.__setattr__(self, "mean", statistics.fmean(c))
        object.__setattr__(self, "std", statistics.stdev(c) if len(c) > 1 else 0.0)
        object.__setattr__(self, "min", min(c))
        object.__setattr__(self, "max", max(c))


def capacity_over_seeds(
    simulate_for_seed: Callable[[int], Simulate], seeds: Sequence[int], slo: SLO, **search: float
) -> tuple[SeedSpread, list[CapacityResult]]:
    """One search per seed (each its own arrival and request sample); the spread says how much to trust
    one."""
    if not seeds:
        raise SimserveError("give at least one seed")
    results = [find_capacity(simulate_for_seed(s), slo, **search) for s in seeds]  # type: ignore[arg-type]
    return SeedSpread(tuple(r.capacity_qps for r in results)), results
