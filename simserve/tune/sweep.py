"""The token-budget sweep: capacity for every (policy, budget, max batch, SLO) point of a grid, over seeds.

Each (point, seed) is one capacity search, driven probe by probe on an executor (scheduler.py, executors.py).
The driver replays every search from the probe cache (probe.py); only probes not simulated yet go to
workers, so a rerun is instant and an interrupted sweep resumes where it stopped.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from simserve.errors import SimserveError
from simserve.sim.config import ADAPTIVE_POLICIES, POLICY_NAMES
from simserve.tune.capacity import SEARCHES, SLO, CapacityResult, SeedSpread
from simserve.tune.cdfs import latency_cdfs
from simserve.tune.executors import Runner
from simserve.tune.first_probe import first_qps
from simserve.tune.jobs import CapacityTask, run_tasks
from simserve.tune.probe import MemoryCache, ProbeCache, scenario_fields  # noqa: F401  (re-exported)
from simserve.tune.toy import TOY_POLICIES

# policies whose token budget is swept (equal-cost: its first chunk; vllm-v1: --max-num-batched-tokens;
# sglang: --chunked-prefill-size)
BUDGETED = ("sarathi", "chunked", "equal-cost", "vllm-v1", "sglang")
RESERVING = ("fcfs", "orca")  # reserve max_model_len per request: the paper ran them with a small batch
# Tile-aligned budgets and their +1 neighbours: a budget one past a GEMM tile pays for a whole extra tile.
TILE_BUDGETS = (128, 129, 256, 257, 384, 512, 513, 768, 1024, 1025, 1536, 2048, 2049)
DEFAULT_BUDGETS = (256, 257, 512, 513, 1024, 2048)
DEFAULT_POLICIES = ("fcfs", "orca", "vllm", "sarathi")


@dataclass(frozen=True)
class SweepSpec:
    """The grid. `base` carries the deployment, trace and request count; the sweep varies the rest."""

    base: Any
    policies: tuple[str, ...] = DEFAULT_POLICIES
    budgets: tuple[int, ...] = DEFAULT_BUDGETS
    max_batches: tuple[int, ...] = (128,)  # Sarathi, chunked and hybrid (and vLLM unless vllm_max_batches)
    reserving_max_batch: int = 16  # Orca and request-level FCFS (the paper's Orca batch for 7B/34B)
    vllm_max_batches: tuple[int, ...] | None = None  # the paper's Figure 12 compares vLLM at 32/64/128
    seeds: tuple[int, ...] = (0,)
    slos: tuple[SLO, ...] = (SLO(),)
    tolerance: float = 0.025
    start_qps: float = 1.0
    # capacity.SEARCHES: "bisect" simulates every midpoint; "paper" (paper_setup base)
    search: str = "simserve"

    def __post_init__(self) -> None:
        known = POLICY_NAMES if not hasattr(self.base, "record") else TOY_POLICIES
        unknown = [p for p in self.policies if p not in known]
        if unknown:
            raise SimserveError(f"unknown policy {unknown[0]!r}; known policies: {', '.join(known)}")
        if not self.policies:
            raise SimserveError("--policies is empty; name at least one, e.g. --policies vllm,sarathi")
        if any(p in BUDGETED for p in self.policies) and not self.budgets:
            raise SimserveError("--budgets is empty; give token budgets, e.g. --budgets 256,512,1024")
        if any(b < 1 for b in self.budgets):
            raise SimserveError(f"token budgets must be positive integers, got {list(self.budgets)}")
        batches = (*self.max_batches, *(self.vllm_max_batches or ()), self.reserving_max_batch)
        if not self.max_batches or self.vllm_max_batches == () or any(m < 1 for m in batches):
            raise SimserveError("max batch sizes must be positive integers, e.g. --max-batch 128")
        if self.search not in SEARCHES:
            raise SimserveError(f"unknown --search {self.search!r}; choose one of {', '.join(SEARCHES)}")
        if not self.seeds:
            raise SimserveError("give at least one seed")
        if not self.slos:
            raise SimserveError("give at least one SLO")
        if not self.start_qps > 0:  # find_capacity checks these too; here they fail before any work starts
            raise SimserveError(f"--start-qps must be a positive rate, got {self.start_qps}")
        if not 0 < self.tolerance < 1:
            raise SimserveError(f"--tolerance must be in (0, 1), e.g. 0.025; got {self.tolerance}")

    def configs(self) -> list[tuple[str, int | None, int]]:
        """(policy, budget, max batch) points; budget None means the policy has no budget (or max length)."""
        out: list[tuple[str, int | None, int]] = []
        for policy in self.policies:
            if policy in RESERVING:
                out.append((policy, None, self.reserving_max_batch))
                continue
            budgets: Sequence[int | None] = self.budgets if policy in BUDGETED else (None,)
            batches = (
                self.vllm_max_batches if policy == "vllm" and self.vllm_max_batches else self.max_batches
            )
            out += [(policy, b, m) for b in budgets for m in batches]
        return out

    def scenario(
        self, policy: str, budget: int | None, max_batch: int, seed: int, slo: SLO | None = None
    ) -> Any:
        s = replace(self.base, policy=policy, budget=budget, max_batch=max_batch, seed=seed)
        if (
            policy in ADAPTIVE_POLICIES
        ):  # their TBT target is the SLO searched for (the primary one by default)
            s = replace(s, tbt_target_s=(slo or self.slos[0]).tbt_s)
        return s

    def search_scenario(self, policy: str, budget: int | None, max_batch: int, seed: int, slo: SLO) -> Any:
        """The scenario a search probes: with one SLO, a probe stops as soon as it surely misses the TBT
        objective (SimConfig.stop_tbt); a pass/fail is the same as a run to the end, and a failure's reason
        says "(stopped early)". With several SLOs the probes run to the end, so every SLO reuses them."""
        s = self.scenario(policy, budget, max_batch, seed, slo)
        # (The paper's search judges full trials: no early stop there.)
        if (
            len(self.slos) == 1
            and slo.tbt_s is not None
            and hasattr(s, "stop_tbt")
            and self.search != "paper"
        ):
            s = replace(s, stop_tbt=(slo.tbt_s, slo.tbt_quantile))
        return s

    def tasks(self) -> list[tuple[tuple[str, int | None, int, SLO], int, CapacityTask]]:
        out = []
        for slo in self.slos:
            for policy, budget, mb in self.configs():
                for seed in self.seeds:
                    s = self.search_scenario(policy, budget, mb, seed, slo)
                    # Start above capacity, where failing probes are cheap; the capacity is the same.
                    # (The paper's search has its own start: [0, 2 × start_qps].)
                    first = first_qps(s, self.start_qps) if self.search != "paper" else None
                    task = CapacityTask(
                        s, slo, self.tolerance, self.start_qps, first_qps=first, search=self.search
                    )
                    out.append(((policy, budget, mb, slo), seed, task))
        return out


def label(policy: str, budget: int | None, max_batch: int) -> str:
    if policy in BUDGETED:
        return f"{policy}-{budget}" + ("" if max_batch == 128 else f"-bs{max_batch}")
    plain = policy in ("hybrid", *ADAPTIVE_POLICIES) and max_batch == 128
    return policy if plain else f"{policy}-bs{max_batch}"


@dataclass(frozen=True)
class SweepResult:
    spec: SweepSpec
    rows: pd.DataFrame  # one row per (policy, budget, max batch, SLO): the content of sweep.csv
    results: dict[tuple, list[CapacityResult]]  # (policy, budget, max batch, SLO) → one result per seed
    cdfs: dict[str, dict[str, list[float]]]  # config label → metric → quantile values on probe.CDF_GRID
    cdf_qps: float  # the load the CDFs were taken at
    cdf_reference: str  # whose capacity that load is
    stats: dict[str, float]


def _rows(spec: SweepSpec, results: dict[tuple, list[CapacityResult]]) -> pd.DataFrame:
    rows = []
    for (policy, budget, mb, slo), per_seed in results.items():
        spread = SeedSpread(tuple(r.capacity_qps for r in per_seed))
        at = per_seed[0].metrics_at_capacity
        rows.append(
            {
                "policy": policy,
                "budget": budget,
                "max_batch": mb,
                "label": label(policy, budget, mb),
                "slo_s": slo.tbt_s,
                "tbt_quantile": slo.tbt_quantile,
                "scheduling_delay_slo_s": slo.scheduling_delay_s,
                "ttft_slo_s": slo.ttft_s,
                "tpot_slo_s": slo.tpot_s,
                "capacity_qps": spread.mean,
                "capacity_std": spread.std,
                "capacity_min": spread.min,
                "capacity_max": spread.max,
                "seeds": len(per_seed),
                "probes": sum(len(r.probes) for r in per_seed),
                **{
                    k: at.get(k, math.nan)
                    for k in (
                        "tbt_p99_s",
                        "scheduling_delay_p50_s",
                        "ttft_p50_s",
                        "ttft_p99_s",
                        "throughput_rps",
                        "tpot_mean_s",
                    )
                },
                "limited_by": per_seed[0].limited_by,
                "message": "; ".join(sorted({r.message for r in per_seed if r.message})),
            }
        )
    df = pd.DataFrame(rows)
    df["budget"] = df["budget"].astype("Int64")
    return df


def best_per_policy(rows: pd.DataFrame, slo_s: float | None = None) -> pd.DataFrame:
    """Each policy's best configuration (highest capacity; ties go to the smaller budget, then the larger
    batch: the smaller budget has the lower TBT, and 128 is the paper's default batch)."""
    df = rows if slo_s is None else rows[rows["slo_s"] == slo_s]
    df = df.sort_values(
        ["capacity_qps", "budget", "max_batch"], ascending=[False, True, False], na_position="first"
    )
    return df.groupby(["slo_s", "policy"], sort=False, dropna=False).head(1).sort_values(["slo_s", "policy"])


def cdf_load(rows: pd.DataFrame, slo_s: float | None) -> tuple[float, str]:
    """The load for the latency CDFs: vLLM's capacity when there is one (where vLLM just meets the SLO),
    else the smallest positive capacity in the sweep, so every policy is compared at a load it can carry."""
    best = best_per_policy(rows, slo_s)
    vllm = best[best["policy"] == "vllm"]
    if len(vllm) and vllm["capacity_qps"].iloc[0] > 0:
        return float(vllm["capacity_qps"].iloc[0]), f"{vllm['label'].iloc[0]} capacity"
    positive = best[best["capacity_qps"] > 0]
    if positive.empty:
        return 0.0, "no configuration has a positive capacity"
    low = positive.sort_values("capacity_qps").iloc[0]
    return float(low["capacity_qps"]), f"{low['label']} capacity"


def run_sweep(
    spec: SweepSpec,
    executor: str = "local",
    workers: int | None = None,
    address: str | None = None,
    cache_dir: str | Path | None = None,
    progress: bool = False,
    stats: dict | None = None,
) -> SweepResult:
    """Every search of the grid, then the latency CDFs. `stats` (probes simulated so far, ...) is filled as
    the sweep goes, so a caller interrupted half-way knows how far it got."""
    t0 = time.perf_counter()
    check_fits(spec)
    cache = ProbeCache(cache_dir) if cache_dir is not None else MemoryCache()
    keyed = spec.tasks()
    stats = {} if stats is None else stats
    if executor == "local" and not hasattr(spec.base, "record"):
        from simserve.tune.simadapter import preload

        # the sweep's first point: the timer depends on the policy (its engine's CPU costs, the overlap
        # scheduler only SGLang's), so a stand-in policy would load another timer, or be refused
        preload([spec.scenario(*spec.configs()[0], seed) for seed in spec.seeds])
    with Runner(executor, workers, address) as runner:
        solved = run_tasks([t for _, _, t in keyed], runner, cache, runner.shares_filesystem, progress, stats)
        results: dict[tuple, dict[int, CapacityResult]] = {}
        for (key, seed, _), result in zip(keyed, solved, strict=True):
            results.setdefault(key, {})[seed] = result
        ordered = {key: [per[s] for s in sorted(per)] for key, per in results.items()}
        rows = _rows(spec, ordered)
        primary = spec.slos[0].tbt_s
        qps, reference = cdf_load(rows, primary)
        shared = str(cache.root) if cache_dir is not None and runner.shares_filesystem else None
        best = best_per_policy(rows, primary)
        cdfs = latency_cdfs(spec, best, qps, runner, cache, shared, progress) if qps > 0 else {}
    stats["elapsed_s"] = time.perf_counter() - t0
    return SweepResult(spec, rows, ordered, cdfs, qps, reference, stats)


def check_fits(spec: SweepSpec) -> None:
    """Fail before any simulation when a configuration cannot hold one max-length request in memory."""
    if hasattr(spec.base, "record"):  # the closed-form test model has no memory
        return
    from simserve.tune.simadapter import check_fits as fits

    for policy, budget, mb in spec.configs():
        fits(spec.scenario(policy, budget, mb, spec.seeds[0]))


def iter_probes(result: SweepResult) -> Iterator[dict[str, Any]]:
    """Every probe of every search, flat (for probes.csv and for checking the search by hand)."""
    for (policy, budget, mb, slo), per_seed in result.results.items():
        for seed, r in zip(result.spec.seeds, per_seed, strict=True):
            for p in r.probes:
                yield {
                    "policy": policy,
                    "budget": budget,
                    "max_batch": mb,
                    "slo_s": slo.tbt_s,
                    "seed": seed,
                    "qps": p.qps,
                    "passed": p.passed,
                    "reason": p.reason,
                    **dict(sorted(p.metrics.items())),  # a cached record's keys come back sorted
                }
