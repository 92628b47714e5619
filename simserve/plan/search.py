"""The plan: one capacity search per (deployment, token budget), the best budget per deployment, then replicas.

Capacity of R replicas is taken as R × the capacity of one replica (each replica simulated alone at its share
of the load). That is an approximation: a round-robin router sends each replica an exact 1/R of the requests,
but not a Poisson 1/R, so the cluster's queues differ; benchmarks/plan_replicas.py measures the error against a
simulation of the whole multi-replica cluster (docs/planner.md).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from simserve.catalog import GPU, MODELS
from simserve.catalog.prices import PriceSpec, price_of
from simserve.errors import SimserveError
from simserve.plan.candidates import Candidate, enumerate_candidates, nothing_fits_message
from simserve.plan.profiles import ProfileChoice, resolve_profiles
from simserve.sim.scenario import MAX_MODEL_LEN, Scenario
from simserve.tune.capacity import SLO, CapacityResult
from simserve.tune.executors import Runner
from simserve.tune.jobs import CapacityTask, run_tasks
from simserve.tune.probe import MemoryCache, ProbeCache

DEFAULT_BUDGETS = (256, 512, 1024, 2048)


@dataclass(frozen=True)
class PlanSpec:
    model: str
    gpus: tuple[str, ...]
    max_gpus: int = 8
    trace: str = "sharegpt"
    slo: SLO = field(default_factory=lambda: SLO(0.2))
    budgets: tuple[int, ...] = DEFAULT_BUDGETS
    max_batch: int = 128
    num_requests: int = 1024
    seed: int = 0
    tolerance: float = 0.025
    start_qps: float = 1.0
    target_qps: float | None = None  # when set: each deployment gets the fewest replicas that carry it
    # Deployments below this capacity per replica are not searched further: a search at a tiny rate simulates
    # hours of traffic (a deployment at 0.03 qps costs ~80 CPU-s per search, one at 3 qps ~1 s), and a
    # deployment that slow is not one to buy.
    min_qps: float = 0.125
    memory_utilization: float = 0.85

    def __post_init__(self) -> None:
        if not self.gpus:
            raise SimserveError("--gpus is empty; name at least one GPU, e.g. --gpus a100,h100")
        if self.max_gpus < 1:
            raise SimserveError(f"--max-gpus must be at least 1, got {self.max_gpus}")
        if not self.budgets or any(b < 1 for b in self.budgets):
            raise SimserveError(
                f"--budgets needs positive token budgets, e.g. 256,512,1024; got {self.budgets}"
            )
        if self.max_batch < 1:
            raise SimserveError(f"--max-batch must be at least 1, got {self.max_batch}")
        if self.num_requests < 1:
            raise SimserveError(f"--requests must be at least 1, got {self.num_requests}")
        if not (self.min_qps > 0 and self.min_qps <= self.start_qps):
            raise SimserveError(
                f"--min-qps must be positive and at most --start-qps ({self.start_qps:g}), got {self.min_qps}"
            )
        if self.target_qps is not None and not (self.target_qps > 0 and math.isfinite(self.target_qps)):
            raise SimserveError(f"--qps must be a positive request rate, got {self.target_qps}")

    @property
    def max_halvings(self) -> int:
        """Halvings from start_qps that reach min_qps: the search's lowest probe is at or below min_qps."""
        return max(0, math.ceil(math.log2(self.start_qps / self.min_qps) - 1e-9))

    def task(self, scenario: Scenario) -> CapacityTask:
        return CapacityTask(
            scenario, self.slo, self.tolerance, self.start_qps, max_halvings=self.max_halvings
        )

    @property
    def max_len(self) -> int:
        return MAX_MODEL_LEN.get(self.trace, 8192)

    def scenario(self, cand: Candidate, budget: int, profile: ProfileChoice) -> Scenario:
        dep = cand.deployment
        return Scenario(
            model=dep.model.name, gpu=dep.gpu.name, tp=dep.tp, pp=dep.pp, trace=self.trace,
            num_requests=self.num_requests, policy="sarathi", budget=budget, max_batch=self.max_batch,
            seed=self.seed, memory_utilization=self.memory_utilization, profiles_root=profile.root,
            sched_delay_slo_s=self.slo.scheduling_delay_s or 2.0,
        )  # fmt: skip


@dataclass(frozen=True)
class PlanResult:
    spec: PlanSpec
    searches: pd.DataFrame  # one row per (deployment, budget): searches.csv
    rows: pd.DataFrame  # one row per (deployment at its best budget, replica count): plan.csv
    prices: dict[str, PriceSpec]
    rejected: list[str]  # (GPU, TP, PP) that do not fit, and why
    mean_output_tokens: float
    stats: dict = field(default_factory=dict)


def mean_output_tokens(trace: str, max_len: int, n: int, seed: int) -> float:
    """Mean output length of the simulated request sample: output tokens per request served."""
    from simserve.workload import load_trace

    return float(load_trace(trace, max_total_tokens=max_len).sample(n, seed).output_tokens.mean())


def prepare(spec: PlanSpec) -> tuple[list[Candidate], list[str], dict[str, PriceSpec]]:
    """Everything that can fail on bad input, before any simulation: names, prices, memory."""
    model = MODELS.get(spec.model)
    gpus = list(dict.fromkeys(GPU.get(g) for g in spec.gpus))
    prices = {g.name: price_of(g) for g in gpus}
    cands, rejected = enumerate_candidates(
        model, gpus, spec.max_gpus, spec.budgets, spec.max_batch, spec.max_len, spec.memory_utilization
    )
    if not cands:
        raise SimserveError(nothing_fits_message(model, gpus, spec.max_gpus))
    return cands, rejected, prices


def run_plan(
    spec: PlanSpec,
    executor: str = "local",
    workers: int | None = None,
    address: str | None = None,
    cache_dir: str | Path | None = None,
    progress: bool = False,
) -> PlanResult:
    t0 = time.perf_counter()
    cands, rejected, prices = prepare(spec)
    profiles = resolve_profiles([c.deployment for c in cands])
    keyed = [(c, b) for c in cands for b in c.budgets]
    tasks = [spec.task(spec.scenario(c, b, profiles[c.deployment])) for c, b in keyed]
    cache = ProbeCache(cache_dir) if cache_dir is not None else MemoryCache()
    stats: dict = {}
    with Runner(executor, workers, address) as runner:
        results = run_tasks(tasks, runner, cache, runner.shares_filesystem, progress, stats)
    out_tokens = mean_output_tokens(spec.trace, spec.max_len, spec.num_requests, spec.seed)
    searches = _search_rows(keyed, results, profiles, spec)
    rows = plan_rows(searches, prices, spec.max_gpus, out_tokens, spec.target_qps)
    stats["elapsed_s"] = time.perf_counter() - t0
    return PlanResult(spec, searches, rows, prices, rejected, out_tokens, stats)


def _search_rows(keyed, results: list[CapacityResult], profiles, spec: PlanSpec) -> pd.DataFrame:
    rows = []
    for (c, b), r in zip(keyed, results, strict=True):
        dep = c.deployment
        message = r.message
        if r.capacity_qps == 0 and r.probes:
            lowest = min(p.qps for p in r.probes)
            message = (
                f"below the plan's floor: fails at {lowest:.3g} qps per replica (--min-qps {spec.min_qps:g})"
            )
        rows.append(
            {
                "gpu": dep.gpu.name, "tp": dep.tp, "pp": dep.pp, "gpus_per_replica": dep.num_gpus,
                "nodes_per_replica": dep.num_nodes, "budget": b, "capacity_qps": r.capacity_qps,
                "probes": len(r.probes), "limited_by": r.limited_by, "message": message,
                "kv_blocks": c.kv_blocks, "profile": profiles[dep].label,
            }
        )  # fmt: skip
    return pd.DataFrame(rows)


def best_budgets(searches: pd.DataFrame) -> pd.DataFrame:
    """Each deployment at its best budget (highest capacity; a tie goes to the smaller budget: lower TBT)."""
    df = searches.sort_values(["capacity_qps", "budget"], ascending=[False, True], kind="stable")
    return df.groupby(["gpu", "tp", "pp"], sort=False).head(1).reset_index(drop=True)


def plan_rows(
    searches: pd.DataFrame,
    prices: dict[str, PriceSpec],
    max_gpus: int,
    out_tokens: float,
    target_qps: float | None = None,
) -> pd.DataFrame:
    """Replica counts per deployment (all that fit in max_gpus, or the fewest that carry target_qps), with
    capacity, capacity per GPU, dollars per hour and per million output tokens, and the Pareto flag."""
    rows = []
    for _, s in best_budgets(searches).iterrows():
        per_replica, g = float(s["capacity_qps"]), int(s["gpus_per_replica"])
        if per_replica <= 0:
            continue
        if target_qps is None:
            counts = range(1, max_gpus // g + 1)
        else:
            need = math.ceil(target_qps / per_replica - 1e-9)
            counts = range(need, need + 1) if need * g <= max_gpus else range(0)
        price = prices[s["gpu"]].usd_per_gpu_hour
        for r in counts:
            qps, usd_h = r * per_replica, r * g * price
            rows.append(
                {
                    "gpu": s["gpu"], "tp": int(s["tp"]), "pp": int(s["pp"]), "replicas": r,
                    "gpus": r * g, "budget": int(s["budget"]), "capacity_qps": qps,
                    "capacity_per_gpu_qps": qps / (r * g), "output_tokens_per_s": qps * out_tokens,
                    "usd_per_hour": usd_h,
                    "usd_per_million_output_tokens": usd_h / (qps * out_tokens * 3600) * 1e6,
                    "profile": s["profile"],
                }
            )  # fmt: skip
    df = pd.DataFrame(rows, columns=_PLAN_COLUMNS)
    df["pareto"] = pareto_mask(df)
    return df.sort_values(
        ["usd_per_hour", "capacity_qps"], ascending=[True, False], kind="stable"
    ).reset_index(drop=True)


_PLAN_COLUMNS = [
    "gpu", "tp", "pp", "replicas", "gpus", "budget", "capacity_qps", "capacity_per_gpu_qps",
    "output_tokens_per_s", "usd_per_hour", "usd_per_million_output_tokens", "profile",
]  # fmt: skip


def pareto_mask(df: pd.DataFrame) -> list[bool]:
    """True for rows no other row beats: none has at least the capacity for at most the hourly cost, with
    one of the two strictly better."""
    cap, usd = df["capacity_qps"].to_numpy(), df["usd_per_hour"].to_numpy()
    return [
        not any(
            (cap[j] >= cap[i] and usd[j] <= usd[i]) and (cap[j] > cap[i] or usd[j] < usd[i])
            for j in range(len(df))
        )
        for i in range(len(df))
    ]
