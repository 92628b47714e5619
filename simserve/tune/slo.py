"""What a capacity search is asked and answers (tune/capacity.py, guided.py, paper_search.py): the latency SLO
a rate must meet, one probe's verdict, the search's result, and the question a search left unanswered.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass

from simserve.errors import SimserveError

Metrics = Mapping[str, float]
Simulate = Callable[[float], Metrics]


def quantile_key(metric: str, q: float) -> str:
    """The metrics key of a quantile: ("tbt", 0.99) → "tbt_p99_s", ("ttft", 0.999) → "ttft_p99.9_s"."""
    return f"{metric}_p{100 * q:.10g}_s"


_LABEL = {"tbt": "TBT", "scheduling_delay": "scheduling delay", "ttft": "TTFT", "tpot": "TPOT"}
# The objectives an SLO may bound, in the order they are checked. TPOT is `vllm bench serve`'s per-request
# time per output token, (completion − first token) / (output − 1), its quantile taken over requests
# (vllm/benchmarks/serve.py, calculate_metrics, vLLM 0.33.0); TBT is every gap between tokens (vLLM's ITL).
OBJECTIVES = ("tbt", "scheduling_delay", "ttft", "tpot")


@dataclass(frozen=True)
class SLO:
    """Latency objectives a load must meet; the paper's capacity is P99 TBT ≤ SLO and median delay ≤ 2 s."""

    tbt_s: float | None = 0.1
    tbt_quantile: float = 0.99
    scheduling_delay_s: float | None = 2.0
    scheduling_delay_quantile: float = 0.5
    ttft_s: float | None = None
    ttft_quantile: float = 0.99
    tpot_s: float | None = None
    tpot_quantile: float = 0.99

    def __post_init__(self) -> None:
        for name in OBJECTIVES:
            limit, q = getattr(self, f"{name}_s"), getattr(self, f"{name}_quantile")
            if limit is not None and not (limit > 0 and math.isfinite(limit)):
                raise SimserveError(
                    f"the {_LABEL[name]} SLO must be a positive number of seconds, got {limit}"
                )
            if not 0 < q < 1:
                raise SimserveError(f"the {_LABEL[name]} quantile must be in (0, 1), e.g. 0.99; got {q}")
        if self.tbt_s is None and self.ttft_s is None and self.tpot_s is None:
            raise SimserveError("give at least one latency SLO: --slo (P99 TBT), --ttft-slo or --tpot-slo")

    def limits(self) -> list[tuple[str, str, float]]:
        """(metrics key, human label, limit in seconds) for every objective that is set."""
        out = []
        for name in OBJECTIVES:
            limit, q = getattr(self, f"{name}_s"), getattr(self, f"{name}_quantile")
            if limit is not None:
                out.append((quantile_key(name, q), f"P{100 * q:.10g} {_LABEL[name]}", limit))
        return out

    def check(self, metrics: Metrics) -> tuple[bool, str]:
        """(passed, reason): the reason names the first objective missed and by how much."""
        if metrics.get("overloaded"):
            return False, "overloaded: requests queue without bound"
        if metrics.get("unsteady"):  # the probe's steady-state check (simadapter.steady_growth)
            return False, (
                f"unsustainable: requests in the system grew by {metrics.get('growth', math.nan):.1%} of the "
                f"arrivals over the run's second half, at {metrics.get('requests_simulated', math.nan):.0f} "
                "requests"
            )
        for key, label, limit in self.limits():
            value = metrics.get(key)
            if value is None:
                raise KeyError(f"the simulation did not report {key!r}, which the SLO {label} needs")
            value = float(value)
            # NaN: no request reached that point (e.g. none completed), so the objective is not met.
            if math.isnan(value) or value > limit:
                # A probe stopped at a sure miss measured only part of the run: say so beside its value.
                early = " (stopped early)" if metrics.get("stopped_early") else ""
                return False, f"{label} {value:.4g} s > {limit:.4g} s{early}"
        return True, ""

    def describe(self) -> str:
        return " and ".join(f"{label} ≤ {limit:g} s" for _, label, limit in self.limits())


@dataclass(frozen=True)
class Probe:
    qps: float
    passed: bool
    reason: str  # "" when passed
    metrics: dict[str, float]


@dataclass(frozen=True)
class CapacityResult:
    capacity_qps: float
    probes: tuple[Probe, ...]
    slo: SLO
    tolerance: float
    message: str = ""  # why the capacity is 0, or why the search stopped early

    @property
    def metrics_at_capacity(self) -> dict[str, float]:
        """The metrics of the highest passing probe (empty when nothing passed)."""
        passing = [p for p in self.probes if p.passed and p.qps == self.capacity_qps]
        return dict(passing[-1].metrics) if passing else {}

    @property
    def limited_by(self) -> str:
        """What stopped the load from rising: the objective missed by the lowest failing probe above
        capacity."""
        above = [p for p in self.probes if not p.passed and p.qps > self.capacity_qps]
        return min(above, key=lambda p: p.qps).reason if above else ""

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> CapacityResult:
        probes = tuple(Probe(**p) for p in d["probes"])
        return cls(d["capacity_qps"], probes, SLO(**d["slo"]), d["tolerance"], d.get("message", ""))


class Unanswered(Exception):
    """The bisection asked about a rate no simulation has answered yet, after `answered` questions that
    were."""

    def __init__(self, qps: float, answered: int = 0):
        super().__init__(qps)
        self.qps, self.answered = qps, answered
