"""The plan: capacity searches per (deployment, token budget), the best budget per deployment, then replicas.

Deployments are searched cheapest replica first; a search that cannot change the Pareto front stops after one
probe (plan/prune.py). Capacity of R replicas is taken as R × the capacity of one replica (each replica
simulated alone at its share of the load). That is an approximation: a round-robin router sends each replica
every R-th request, more evenly spaced than a Poisson 1/R, so the real cluster queues less and the rule
underestimates it or matches it (0-3% on the mean of four seeds: benchmarks/plan_replicas.py,
docs/planner.md).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from simserve.catalog import GPU
from simserve.catalog.hardware import DEFAULT_NODE
from simserve.catalog.models import resolve_model
from simserve.catalog.prices import PriceSpec, price_of
from simserve.errors import SimserveError
from simserve.plan import speculation
from simserve.plan.candidates import Candidate, enumerate_candidates, nothing_fits_message
from simserve.plan.prune import front_threshold, halvings_to_floor
from simserve.plan.rows import LAYOUTS, PLAN_COLUMNS, SEARCH_COLUMNS, at_capacity, user_speed
from simserve.plan.ties import TIE_DEPLOYMENTS, contenders, seed_task
from simserve.resolve import ProfileChoice, resolve_profiles
from simserve.sim.scenario import MAX_MODEL_LEN, Scenario, context_limit
from simserve.tune.capacity import SLO, CapacityResult
from simserve.tune.executors import Runner
from simserve.tune.first_probe import first_qps
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
    dtype: str = "bf16"
    kv_dtype: str = "bf16"
    moe_skew: float = 0.0
    allow_long_context: bool = False
    # The cheapest deployments are searched again at this many other seeds (seed+1, …): the seed spread that
    # decides ties (plan/ties.py) is measured, not assumed. 0: not measured, and ties ignore it.
    tie_seeds: int = 2
    # Which layouts to search: "agg" (replicas that prefill and decode) and/or "disagg" (a prefill pool and a
    # decode pool, plan/disagg.py), and how many screened disaggregated layouts to search.
    layouts: tuple[str, ...] = ("agg",)
    disagg_layouts: int = 4
    # The serving front end's latency on every TTFT (sim/frontend.py; --frontend-ms): 0, engine-side, by
    # default.
    frontend_ms: float = 0.0
    # GEMMs at the GPU's sustained rate (predictor/step.py; --sustained-clock/--no-sustained-clock): None is
    # on where the catalog has the rate
    sustained_clock: bool | None = None
    # Speculative decoding (plan/speculation.py; --speculative, --num-speculative-tokens, --acceptance,
    # --draft-model): each deployment searched off and at each K on vLLM's V1 scheduler. None: off, the
    # Sarathi plan. speculative_tokens None: K from 1 to what the acceptance rates cover.
    speculative: str | None = None
    speculative_tokens: tuple[int, ...] | None = None
    acceptance: str | None = None
    draft_model: str | None = None

    def __post_init__(self) -> None:
        if self.speculative is None and (
            self.speculative_tokens is not None or self.acceptance or self.draft_model
        ):
            raise SimserveError(
                "--num-speculative-tokens, --acceptance and --draft-model configure speculative "
                "decoding: add --speculative eagle|eagle3|mtp|ngram, or drop them"
            )
        if self.speculative is not None and "disagg" in self.layouts:
            raise SimserveError(
                "--speculative is not modelled for disaggregated layouts yet: drop --disagg "
                "(--layouts agg) or --speculative"
            )
        if self.sustained_clock:  # the step's parts: refused for a GPU the model has no sustained rate for
            from simserve.catalog import GPUSpec

            lacking = [g for g in self.gpus if not GPUSpec.from_name(g).sustained_tflops]
            if lacking:
                raise SimserveError(
                    f"--sustained-clock needs the GPU's sustained GEMM rate, which the catalog lacks for "
                    f"{', '.join(lacking)} (sustained_tflops); drop --sustained-clock or those GPUs"
                )

        if not self.layouts or any(x not in LAYOUTS for x in self.layouts):
            raise SimserveError(
                f"--layouts takes {' and/or '.join(LAYOUTS)}, comma-separated; got {','.join(self.layouts)}"
            )
        if self.frontend_ms:
            from simserve.sim.frontend import check_frontend_ms

            check_frontend_ms(self.frontend_ms)
        if self.disagg_layouts < 1:
            raise SimserveError(f"--disagg-layouts must be at least 1, got {self.disagg_layouts}")
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
        if self.tie_seeds < 0:
            raise SimserveError(f"--tie-seeds must be 0 or more, got {self.tie_seeds}")
        if self.target_qps is not None and not (self.target_qps > 0 and math.isfinite(self.target_qps)):
            raise SimserveError(f"--qps must be a positive request rate, got {self.target_qps}")

    def task(self, scenario: Scenario) -> CapacityTask:
        """The whole search from --start-qps, down to the floor (the unpruned plan's search)."""
        halvings = halvings_to_floor(self.start_qps, self.min_qps)
        return CapacityTask(scenario, self.slo, self.tolerance, self.start_qps, max_halvings=halvings)

    @property
    def max_len(self) -> int:
        """The trace's max length, capped at the model's context limit unless --allow-long-context."""
        default = MAX_MODEL_LEN.get(self.trace, 8192)
        return default if self.allow_long_context else min(default, context_limit(self.model))

    def precision_fields(self) -> dict:
        """Scenario fields for the non-default precision options (defaults are left out of probe-cache
        keys)."""
        given = {
            "dtype": self.dtype,
            "kv_dtype": self.kv_dtype,
            "moe_skew": self.moe_skew,
            "allow_long_context": self.allow_long_context,
        }
        defaults = {"dtype": "bf16", "kv_dtype": "bf16", "moe_skew": 0.0, "allow_long_context": False}
        return {k: v for k, v in given.items() if v != defaults[k]}

    def scenario(
        self, cand: Candidate, budget: int, profile: ProfileChoice, seed: int | None = None, k: int = 0
    ) -> Scenario:
        dep = cand.deployment
        ep = {"ep": dep.ep} if dep.ep > 1 else {}
        if dep.dp > 1:  # attention DP: the scenario simulates all the deployment's ranks in lockstep
            ep["dp_attention"] = dep.dp
        from simserve.catalog.hf_config import is_config_path

        # a config.json path resolves in any worker process; a catalog entry by its canonical name
        model = self.model if is_config_path(self.model) else dep.model.name
        return Scenario(
            model=model,
            gpu=dep.gpu.name,
            tp=dep.tp,
            pp=dep.pp,
            trace=self.trace,
            # None for the GPU's default box, as a sweep names it: plan and sweep then share probes
            node=None
            if dep.node is None or dep.node.name == DEFAULT_NODE.get(dep.gpu.name)
            else dep.node.name,
            num_requests=self.num_requests,
            policy=self.policy,
            budget=budget,
            max_batch=self.max_batch,
            seed=self.seed if seed is None else seed,
            memory_utilization=self.memory_utilization,
            profiles_root=profile.root,
            sched_delay_slo_s=self.slo.scheduling_delay_s or 2.0,
            stop_tbt=self._stop_tbt,
            **ep,
            **self.precision_fields(),
            **({"frontend_ms": self.frontend_ms} if self.frontend_ms else {}),
            sustained_clock=self.sustained_clock,
            **self._speculation(k),
        )

    @property
    def policy(self) -> str:
        """Sarathi's scheduler; with --speculative, vLLM's V1 for every search (plan/speculation.py says
        why)."""
        return "vllm-v1" if self.speculative else "sarathi"

    def _speculation(self, k: int) -> dict:
        if not k:
            return {}
        return dict(speculative=self.speculative, num_speculative_tokens=k, acceptance=self.acceptance)

    @property
    def _stop_tbt(self) -> tuple[float, float] | None:
        """A probe stops as soon as it surely misses the TBT SLO (as a sweep with one SLO does): the same
        pass/fail as a run to the end, in a fraction of the time at the failing rates."""
        return None if self.slo.tbt_s is None else (self.slo.tbt_s, self.slo.tbt_quantile)


@dataclass(frozen=True)
class PlanResult:
    spec: PlanSpec
    searches: pd.DataFrame  # one row per (deployment, budget): searches.csv
    rows: pd.DataFrame  # one row per (deployment at its best budget, replica count): plan.csv
    prices: dict[str, PriceSpec]
    rejected: list[str]  # (GPU, TP, PP) that do not fit, and why
    mean_output_tokens: float
    stats: dict = field(default_factory=dict)

    @property
    def objective(self) -> str:
        """The column the plan ranks by: dollars per hour when it was asked to carry a --qps target, else per
        million output tokens."""
        return "usd_per_hour" if self.spec.target_qps else "usd_per_million_output_tokens"


def mean_output_tokens(trace: str, max_len: int, n: int, seed: int) -> float:
    """Mean output length of the simulated request sample: output tokens per request served. The searches'
    own sample (scenario._workload): a bench dataset generated as vLLM's client draws it, a multi-turn trace's
    first n rounds in file order, any other trace's seeded sample."""
    from simserve.sim.scenario import _workload

    return float(_workload(trace, max_len, n, seed, False)[1].mean())


def prepare(spec: PlanSpec) -> tuple[list[Candidate], list[str], dict[str, PriceSpec]]:
    """Everything that can fail on bad input, before any simulation: names, prices, memory."""
    model = resolve_model(spec.model)
    gpus = list(dict.fromkeys(GPU.get(g) for g in spec.gpus))
    prices = {g.name: price_of(g) for g in gpus}
    cands, rejected = enumerate_candidates(
        model,
        gpus,
        spec.max_gpus,
        spec.budgets,
        spec.max_batch,
        spec.max_len,
        spec.memory_utilization,
        spec.dtype,
        spec.kv_dtype,
        spec.moe_skew,
    )
    if not cands:
        raise SimserveError(nothing_fits_message(model, gpus, spec.max_gpus, spec.dtype))
    return cands, rejected, prices


# deployments searched side by side: fixed, not the worker count, so the plan is the same on any machine
ROUND = 4


@dataclass
class _Deployment:
    """One deployment's searches, one token budget at a time (each starts from what the others found)."""

    cand: Candidate
    price: PriceSpec
    order: list[tuple[int, int]]  # (token budget, K) in search order; K 0: speculation off
    rows: list[dict] = field(default_factory=list)
    best: float = 0.0  # capacity per replica at the best budget searched so far

    def usd_per_hour(self, replicas: int) -> float:
        """What `replicas` of it cost per hour, in whole rental units (catalog/prices.py)."""
        return self.price.usd_per_hour(self.cand.num_gpus, replicas)

    @property
    def key(self) -> tuple[str, int, int, int]:
        d = self.cand.deployment
        return d.gpu.name, d.tp, d.pp, d.ep


def run_plan(
    spec: PlanSpec,
    executor: str = "local",
    workers: int | None = None,
    address: str | None = None,
    cache_dir: str | Path | None = None,
    progress: bool = False,
    prune: bool = True,
    speculate: bool = False,
) -> PlanResult:
    """Search every deployment that fits, cheapest replica first, ROUND deployments at a time.

    With `prune` (plan/prune.py), a search whose deployment cannot reach the Pareto front, or whose budget
    cannot beat the deployment's best one, stops after one failing probe, and searches start from a related
    answer (the next budget from the best so far; a deeper pipeline from the shallower one). Without it,
    every (deployment, budget) is searched whole from --start-qps: the reference the pruned plan is tested
    against (tests/test_plan.py).

    `speculate` (off): let idle workers simulate the probes a search may ask next. With ROUND deployments side
    by side the workers seldom idle, so speculation mostly cost CPU: on one plan (fixed:1700:400, agg +
    disagg, 2 workers) 26-29 speculative probes of 134-136, 14.4-16.0 CPU-s against 13.5-14.6 without them,
    wall time no longer (docs/planner.md, Speed). The answer is the same either way (speculative probes only
    fill the cache)."""
    from simserve.tune.jobs import progress_bar

    t0 = time.perf_counter()
    cands, rejected, prices = prepare(spec)
    # a bad trace fails here, in one line, before the progress bar and the searches start
    out_tokens = mean_output_tokens(spec.trace, spec.max_len, spec.num_requests, spec.seed)
    profiles = resolve_profiles([c.deployment for c in cands])
    orders, notes = speculation.orders(spec, cands, profiles)
    queue = [_Deployment(c, prices[c.deployment.gpu.name], o) for c, o in zip(cands, orders, strict=True)]
    if "agg" not in spec.layouts:
        queue = []
    queue.sort(key=lambda d: (d.usd_per_hour(1), d.cand.num_gpus * d.price.usd_per_gpu_hour, *d.key))
    cache = ProbeCache(cache_dir) if cache_dir is not None else MemoryCache()
    total = sum(len(d.order) for d in queue)
    stats: dict = dict(tasks=0, from_cache=0, probes_simulated=0, probes_speculative=0, probes_wasted=0)
    stats.update(searches_pruned=0, deployments=len(queue), **notes)
    seen: list[_Deployment] = []
    active: list[_Deployment] = []
    with Runner(executor, workers, address) as runner, progress_bar(progress) as bar:
        if runner.shares_filesystem:
            _build_timers(runner, queue, spec, profiles)
        tid = bar.add_task("plan searches", total=total)
        while queue or active:
            while queue and len(active) < ROUND:
                active.append(queue.pop(0))
                seen.append(active[-1])
            steps = [_next_step(d, seen, spec, prune, profiles) for d in active]
            round_stats: dict = {}
            results = run_tasks(
                [t for t, _ in steps], runner, cache, runner.shares_filesystem, False, round_stats, speculate
            )
            for key in ("tasks", "from_cache", "probes_simulated", "probes_speculative", "probes_wasted"):
                stats[key] += round_stats.get(key, 0)
            for d, (task, threshold), r in zip(active, steps, results, strict=True):
                row = _search_row(d, task, threshold, r, spec, profiles)
                stats["searches_pruned"] += row["status"] == "pruned"
                d.rows.append(row)
                d.best = max(d.best, row["capacity_qps"])
            active = [d for d in active if len(d.rows) < len(d.order)]
            bar.update(
                tid,
                completed=sum(len(d.rows) for d in seen),
                description=f"plan searches, {stats['probes_simulated']} probes simulated, "
                f"{stats['searches_pruned']} pruned",
            )
        searches = pd.DataFrame([row for d in seen for row in d.rows], columns=search_columns(spec))
        rows = plan_rows(searches, prices, spec.max_gpus, out_tokens, spec.target_qps)
        again = _seed_searches(rows, seen, spec, profiles, runner, cache, stats, speculate)
        searches = pd.concat([searches, again], ignore_index=True) if len(again) else searches
        if "disagg" in spec.layouts:
            from simserve.plan.disagg import search_disagg

            d_searches, d_rows, notes = search_disagg(
                spec, prices, runner, cache, stats, out_tokens, rows, profiles, prune, speculate
            )
            stats["disagg_notes"] = notes
            searches = _with_layouts(searches, d_searches)
            rows = _with_layouts(rows, d_rows)
            rows["pareto"] = pareto_mask(rows)
            rows = rows.sort_values(["usd_per_hour", "capacity_qps"], ascending=[True, False], kind="stable")
            rows = rows.reset_index(drop=True)
    stats["elapsed_s"] = time.perf_counter() - t0
    return PlanResult(spec, searches, rows, prices, rejected, out_tokens, stats)


def search_columns(spec: PlanSpec) -> list[str]:
    """searches.csv's columns: with --speculative, also each search's K."""
    return SEARCH_COLUMNS + ([speculation.COLUMN] if spec.speculative else [])


def _build_timers(runner: Runner, queue: list[_Deployment], spec: PlanSpec, profiles) -> None:
    """Compile the timers no cache holds yet, one job per profile, before the searches start.

    Every deployment gets at least one probe, so every timer is needed; built inside the probes, each worker
    fitted the models of whichever deployments its probes met (the same model in both workers, and again for
    each PP degree of a TP degree after the in-process cache had evicted it). One job per profile fits each of
    its models once (fit.py's in-process reuse) and leaves the timers in the on-disk cache the probes read.
    Timers only: the searches and their answers are unchanged."""
    from simserve.sim.scenario import build_timers, timer_cached

    groups: dict[tuple, list[Scenario]] = {}
    for d in queue:
        dep = d.cand.deployment
        scenario = spec.scenario(d.cand, d.order[0][0], profiles[dep])
        if not timer_cached(scenario):
            groups.setdefault((scenario.profiles_root, dep.gpu.name, dep.profile_model), []).append(scenario)
    jobs = sorted(groups.values(), key=len, reverse=True)  # the biggest first: the workers end together
    if len(jobs) > 1 and runner.kind == "local" and runner.parallel > 1:
        # NOTE: the local workers fork from this process at their first job: import the fitting code here,
        # once, so that they share it, instead of each importing scikit-learn and SciPy (~0.8 CPU-s a process)
        from simserve.predictor.fit import import_fitting

        import_fitting()
    for _ in runner.map(build_timers, [(g,) for g in jobs]):
        pass


def _with_layouts(agg: pd.DataFrame, disagg: pd.DataFrame) -> pd.DataFrame:
    """Aggregated and disaggregated rows in one table, a `layout` column telling them apart ('agg' or
    xPyD)."""
    agg = agg.assign(layout="agg")
    parts = [df for df in (agg, disagg) if len(df)]
    if not parts:
        return agg
    return pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0].reset_index(drop=True)


def _seed_searches(
    rows, seen: list[_Deployment], spec: PlanSpec, profiles, runner, cache, stats, speculate: bool = True
) -> pd.DataFrame:
    """The cheapest TIE_DEPLOYMENTS deployments (by the plan's objective) searched again, at their best
    budget, at seeds seed+1 … seed+tie_seeds, each search starting from the capacity found at the plan's
    seed."""
    if not spec.tie_seeds or rows.empty:
        return pd.DataFrame(columns=search_columns(spec))
    objective = "usd_per_hour" if spec.target_qps else "usd_per_million_output_tokens"
    top = contenders(rows, objective).head(TIE_DEPLOYMENTS)
    by_key = {d.key: d for d in seen}
    picked, tasks = [], []
    for _, row in top.iterrows():
        d = by_key[(row["gpu"], int(row["tp"]), int(row["pp"]), int(row["ep"]))]
        start, k = max(d.best, spec.min_qps), int(row.get(speculation.COLUMN, 0))  # K: the row's (0: off)
        for seed in range(spec.seed + 1, spec.seed + 1 + spec.tie_seeds):
            scenario = spec.scenario(d.cand, int(row["budget"]), profiles[d.cand.deployment], seed, k)
            tasks.append(seed_task(scenario, spec, start))
            picked.append(d)
    round_stats: dict = {}
    results = run_tasks(tasks, runner, cache, runner.shares_filesystem, False, round_stats, speculate)
    for key in ("tasks", "from_cache", "probes_simulated", "probes_speculative", "probes_wasted"):
        stats[key] += round_stats.get(key, 0)
    out = []
    for d, task, r in zip(picked, tasks, results, strict=True):
        row = _search_row(d, task, 0.0, r, spec, profiles)
        row["status"] = f"seed spread ({row['status']})"
        out.append(row)
    stats["seed_searches"] = len(out)
    return pd.DataFrame(out, columns=search_columns(spec))


def _next_step(d: _Deployment, seen: list[_Deployment], spec: PlanSpec, prune: bool, profiles):
    """The next budget's capacity task, and the rate it must beat (0: none; its first probe is there)."""
    budget, k = d.order[len(d.rows)]
    scenario = spec.scenario(d.cand, budget, profiles[d.cand.deployment], k=k)
    if not prune:
        return spec.task(scenario), 0.0
    threshold = d.best
    if spec.target_qps is None:  # with a target each deployment gets one row: no front to beat
        found = [
            (r * o.best, o.usd_per_hour(r))
            for o in seen
            if o is not d and o.best > 0
            for r in range(1, spec.max_gpus // o.cand.num_gpus + 1)
        ]
        costs = [d.usd_per_hour(r) for r in range(1, spec.max_gpus // d.cand.num_gpus + 1)]
        threshold = max(threshold, front_threshold(found, costs))
    if threshold > 0:  # one probe at the threshold; below it nothing this search finds matters
        task = CapacityTask(scenario, spec.slo, spec.tolerance, threshold, max_halvings=0)
        return task, threshold
    related = _related_start(d, seen)
    start = related or spec.start_qps
    # No related answer: the first probe at the grid rate just below the deployment's throughput bound, as a
    # sweep's (tune/first_probe.py): the same bracket, and so the same capacity, while pass/fail is monotone,
    # reached through cheap failures above capacity instead of whole runs at light load.
    first = None if related else first_qps(scenario, start)
    return CapacityTask(
        scenario,
        spec.slo,
        spec.tolerance,
        start,
        max_halvings=halvings_to_floor(start, spec.min_qps),
        first_qps=first,
    ), 0.0


def _related_start(d: _Deployment, seen: list[_Deployment]) -> float | None:
    """The best capacity of the same GPU and TP at the deepest shallower pipeline searched: a deeper pipeline
    of the same stages usually serves more, so it is a near start for the bracket (any start is correct)."""
    gpu, tp, pp, ep = d.key
    related = [o for o in seen if (o.key[:2], o.key[3]) == ((gpu, tp), ep) and o.key[2] < pp and o.best > 0]
    return max(related, key=lambda o: o.key[2]).best if related else None


def _search_row(
    d: _Deployment, task: CapacityTask, threshold: float, r: CapacityResult, spec: PlanSpec, profiles
) -> dict:
    dep = d.cand.deployment
    capacity, status, message = r.capacity_qps, "searched", r.message
    if capacity == 0 and threshold > 0:
        status = "pruned"
        best = "the deployment's best budget" + (" and speculation" if spec.speculative else "")
        why = best if threshold == d.best else "the Pareto front found so far"
        message = f"fails at {r.probes[0].qps:.4g} qps per replica, so cannot beat {why}"
    elif capacity < spec.min_qps:  # the same floor whatever the search's start
        capacity, status = 0.0, "below floor"
        lowest = min(r.probes, key=lambda p: p.qps)
        message = (
            f"below the plan's floor: fails at {lowest.qps:.3g} qps per replica ({lowest.reason}; "
            f"--min-qps {spec.min_qps:g})"
        )
        if r.capacity_qps > 0:
            message = (
                f"below the plan's floor: {r.capacity_qps:.3g} qps per replica (--min-qps {spec.min_qps:g})"
            )
    return {
        "gpu": dep.gpu.name,
        "tp": dep.tp,
        "pp": dep.pp,
        "ep": dep.ep,
        "node": getattr(dep.node, "name", ""),
        "gpus_per_replica": d.cand.num_gpus,
        "nodes_per_replica": dep.num_nodes,
        "seed": task.scenario.seed,
        "budget": task.scenario.budget,
        "capacity_qps": capacity,
        "status": status,
        "start_qps": task.start_qps,
        "probes": len(r.probes),
        "limited_by": r.limited_by,
        "message": message,
        "kv_blocks": d.cand.kv_blocks,
        "profile": profiles[dep].label,
        **at_capacity(r),
        **({speculation.COLUMN: task.scenario.num_speculative_tokens or 0} if spec.speculative else {}),
    }


def best_budgets(searches: pd.DataFrame) -> pd.DataFrame:
    """Each deployment at its best budget (highest capacity; a tie goes to the smaller budget: lower TBT), at
    the plan's seed (searches at other seeds only measure the seed spread). Searched with speculation: at its
    best (budget, K), a tie going to speculation off, then the smaller K, with the gain over off
    (plan/speculation.py)."""
    if "status" in searches:
        searches = searches[~searches["status"].astype(str).str.startswith("seed spread")]
    spec_k = [speculation.COLUMN] if speculation.COLUMN in searches.columns else []
    df = searches.sort_values(
        ["capacity_qps", *spec_k, "budget"], ascending=[False, *[True] * len(spec_k), True], kind="stable"
    )
    keys = [k for k in ("gpu", "tp", "pp", "ep") if k in df.columns]  # ep: absent in tables from before EP
    best = df.groupby(keys, sort=False).head(1).reset_index(drop=True)
    return speculation.with_gain(best, searches, keys) if spec_k else best


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
            need = max(1, math.ceil(target_qps / per_replica - 1e-9))  # at least one, however fast
            counts = range(need, need + 1) if need * g <= max_gpus else range(0)
        price = prices[s["gpu"]]
        for r in counts:
            qps, usd_h, rented = r * per_replica, price.usd_per_hour(g, r), price.gpus_rented(g, r)
            rows.append(
                {
                    "gpu": s["gpu"],
                    "tp": int(s["tp"]),
                    "pp": int(s["pp"]),
                    "ep": int(s.get("ep", 1)),
                    "node": s.get("node", ""),
                    "replicas": r,
                    "gpus": r * g,
                    "gpus_rented": rented,
                    "budget": int(s["budget"]),
                    "capacity_qps": qps,
                    "capacity_per_gpu_qps": qps / (r * g),
                    "output_tokens_per_s": qps * out_tokens,
                    # goodput: output tokens per second per GPU paid for, at the load that meets every SLO
                    "goodput_tokens_per_s_per_gpu": qps * out_tokens / rented,
                    "usd_per_hour": usd_h,
                    "usd_per_million_output_tokens": usd_h / (qps * out_tokens * 3600) * 1e6,
                    "profile": s["profile"],
                    **user_speed(s.get("tpot_mean_s", math.nan)),
                    **{c: s[c] for c in (speculation.COLUMN, speculation.GAIN) if c in s},
                }
            )
    spec_cols = [speculation.COLUMN, speculation.GAIN] if speculation.COLUMN in searches.columns else []
    df = pd.DataFrame(rows, columns=PLAN_COLUMNS + spec_cols)
    df["pareto"] = pareto_mask(df)
    return df.sort_values(
        ["usd_per_hour", "capacity_qps"], ascending=[True, False], kind="stable"
    ).reset_index(drop=True)


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
