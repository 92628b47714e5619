"""A plan for a day: `simserve plan --arrival replay` or `--autoscale MIN:MAX` on a trace with recorded
arrivals.

The steady-rate plan (search.py) ranks deployments by capacity at a constant Poisson rate. A day is not
constant: it peaks, and a fleet sized for the peak idles the rest of the time. For the cheapest few
deployments of the steady plan, each with every router (--routers) and KV tier (off, and --kv-offload-gb N)
tried, the day plan replays the trace's own arrivals (the whole trace, or its first --replay-requests) and
finds

  - static provisioning: the fewest replicas whose replay meets the SLO (bisection on the replica count, each
    probe a full replay), held all day;
  - autoscaled: the same deployment under `--autoscale MIN:MAX --scale-policy P` (sim/autoscale.py; MIN:MAX
    defaults to 1:the static count, the peak), the GPU-hours its replicas were held; where the day misses the
    SLO (a burst shorter than a cold start, a policy slow to react), MIN is raised by bisection to the fewest
    that meet it (MIN = MAX is the static fleet), so every row that meets the SLO is priced at the SLO.

The SLO is per request, the autoscaler's (sim/scale_report.py, DistServe's definition): TTFT <= --ttft-slo and
TPOT <= --tpot-slo, met by at least --attainment of the requests (unfinished requests miss). The replayed span
(t = 0 to the last completion) is taken as a sample of the day: GPU-hours per day are the run's GPU-seconds
scaled by 24 h / span. Dollars per day: GPU-hours per day at the catalog's GPU-hour price, static and
autoscaled alike (a GPU rented only by the node, catalog/prices.py, is noted: a fleet smaller than a node pays
the node).

Each replay runs the scenario `simserve run --engine vllm --arrival replay` runs (vLLM 0.33.0's scheduler and
worker, prefix caching on, the plan's token budget as --max-num-batched-tokens): the same Scenario, profile
resolution, autoscaler configuration (tune/autoscaling.configure) and simulate_scenario as `run`.
Disaggregated layouts are not replayed: the autoscaler, prefix caching and the KV tier are not modelled for
them (cli/autoscale.check_flags, sim/disagg_scenario.DisaggScenario.check), so a day plan would compare them
on different engines; the plan says so instead.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from simserve.errors import SimserveError
from simserve.sim.scale_report import TPOT_SLO_S, TTFT_SLO_S

DAY_S = 86400.0
DEFAULT_ROUTERS = ("rr", "prefix-aware")
DAY_COLUMNS = [
    "gpu",
    "tp",
    "pp",
    "ep",
    "budget",
    "router",
    "kv_offload_gb",
    "provisioning",
    "replicas",
    "gpus_per_replica",
    "span_s",
    "gpu_hours_per_day",
    "usd_per_day",
    "slo_attainment",
    "meets_slo",
    "ttft_p99_s",
    "tpot_p99_s",
    "cold_start_s",
    "scale_events",
    "status",
]


@dataclass(frozen=True)
class DaySpec:
    autoscale: str | None = None  # MIN:MAX; None: 1:the static count of the same deployment, router and tier
    scale_policy: str = "utilization"
    routers: tuple[str, ...] = DEFAULT_ROUTERS
    kv_offload_gb: float = 0.0  # 0: the tier off only; N: off and N GiB per replica
    deployments: int = 2  # the cheapest N deployments of the steady plan
    requests: int | None = None  # replay the first N requests; None: the whole trace
    attainment: float = 0.99
    ttft_slo: float = TTFT_SLO_S
    tpot_slo: float = TPOT_SLO_S
    weights_from: str = "s3"

    @property
    def tiers(self) -> tuple[float, ...]:
        return (0.0, self.kv_offload_gb) if self.kv_offload_gb else (0.0,)


@dataclass(frozen=True)
class DayResult:
    day: DaySpec
    rows: pd.DataFrame  # day.csv
    span_s: float  # the trace window's recorded span (first to last arrival)
    commands: list[str] = field(default_factory=list)  # the winner's `simserve run` line
    notes: list[str] = field(default_factory=list)
    stats: dict = field(default_factory=dict)

    def winner(self) -> pd.Series | None:
        """The cheapest row per day that meets the SLO (ties: fewer GPU-hours, then the table's order)."""
        ok = self.rows[self.rows["meets_slo"].astype(bool)]
        if ok.empty:
            return None
        return ok.sort_values(["usd_per_day", "gpu_hours_per_day"], kind="stable").iloc[0]


def check_day(spec, day: DaySpec) -> float:
    """Everything about a day plan that can fail on bad input, before the steady plan's searches start;
    returns the replayed window's recorded span in seconds."""
    from simserve.sim.autoscale import AutoscaleConfig, parse_autoscale
    from simserve.sim.config import ROUTER_NAMES
    from simserve.sim.scenario import _workload
    from simserve.tune.autoscaling import check_slos

    for r in day.routers:
        if r not in ROUTER_NAMES:
            raise SimserveError(f"unknown router {r!r} in --routers; choose from {', '.join(ROUTER_NAMES)}")
    if not day.routers:
        raise SimserveError("--routers is empty; name at least one router, e.g. --routers rr,prefix-aware")
    if not (day.kv_offload_gb >= 0 and math.isfinite(day.kv_offload_gb)):
        raise SimserveError(
            f"--kv-offload-gb must be 0 (no tier) or a positive size in GiB, got {day.kv_offload_gb}"
        )
    if not 0 < day.attainment <= 1:
        raise SimserveError(f"--attainment is a share of requests in (0, 1], e.g. 0.99; got {day.attainment}")
    if day.deployments < 1:
        raise SimserveError(f"--day-deployments must be at least 1, got {day.deployments}")
    check_slos(day.ttft_slo, day.tpot_slo)
    # MIN > MAX, MIN < 1, an unknown policy: refused by the autoscaler's own check
    if day.autoscale is not None:
        lo, hi = parse_autoscale(day.autoscale)
        AutoscaleConfig(lo, hi, day.scale_policy, lo, capacity_qps=1.0).validate()
    else:
        AutoscaleConfig(1, 1, day.scale_policy, 1, capacity_qps=1.0).validate()
    n = day.requests if day.requests is not None else _whole(spec)
    if n < 2:
        raise SimserveError(f"--replay-requests must be at least 2 (a day needs a span), got {n}")
    recorded = _workload(spec.trace, spec.max_len, n, spec.seed, True)[2]
    if recorded is None:
        raise SimserveError(
            "a day plan (--arrival replay, --autoscale) replays recorded arrival times, but trace "
            f"{spec.trace!r} has none; use a trace with timestamps (e.g. --trace mooncake-conversation), or "
            "drop --arrival replay and --autoscale for the steady-rate plan"
        )
    span = float(recorded[:n].max() - recorded[:n].min())
    if not span > 0:
        raise SimserveError(
            f"the first {n} requests of {spec.trace} arrive at one instant: no span to plan a day "
            "over; raise --replay-requests"
        )
    _check_cold_start(spec, day, span)
    return span


def _whole(spec) -> int:
    """The whole trace's request count, as `run --arrival replay` without --requests replays it."""
    from simserve.sim.scenario import Scenario, whole_trace

    return whole_trace(Scenario(model=spec.model, trace=spec.trace, max_model_len=spec.max_len)).num_requests


def _check_cold_start(spec, day: DaySpec, span: float) -> None:
    """A replica whose cold start outlasts the replayed span never serves in it: the autoscaler could not
    act."""
    from simserve.plan.search import prepare
    from simserve.resolve import ProfileChoice
    from simserve.sim.cold_start import cold_start

    cands, _, _ = prepare(spec)
    starts = [
        cold_start(_replay_scenario(spec, c, c.budgets[0], ProfileChoice(None, ""), day), day.weights_from)
        for c in cands
    ]
    fastest = min(s.total_s for s in starts)
    if fastest >= span:
        raise SimserveError(
            f"a new replica's cold start ({fastest:.0f} s at the fastest deployment, weights from "
            f"{day.weights_from}) is longer than the replayed span ({span:.0f} s of {spec.trace}): no "
            "replica the autoscaler adds could serve in it; replay more of the trace (raise "
            "--replay-requests) or use a longer trace"
        )


def _replay_scenario(spec, cand, budget: int, profile, day: DaySpec, n: int | None = None):
    """The scenario `simserve run --engine vllm --arrival replay` runs for a plan deployment: the plan's own
    scenario (model, GPU, TP, PP, node, budget, batch, precision, profile) on vLLM 0.33.0's scheduler and
    worker with prefix caching, replaying the trace's recorded arrivals, serving every request."""
    s = spec.scenario(cand, budget, profile)
    return replace(
        s,
        arrival="replay",
        policy="vllm-v1",
        vllm_worker=True,
        prefix_caching=True,
        stop_tbt=None,
        stop_when_overloaded=False,
        num_requests=n or s.num_requests,
    )


def day_run(scenario, ttft_slo: float, tpot_slo: float) -> dict:
    """One replay (a worker job): GPU-seconds held, span, SLO attainment and tail latencies."""
    from simserve.sim.scale_report import client_latencies, scaling_summary
    from simserve.sim.scenario import simulate_scenario

    raw, dep = simulate_scenario(scenario, 1.0)  # replay keeps the recorded times: the rate is not read
    end = float(raw.end_time)
    _, ttft, tpot = client_latencies(raw)
    met = (ttft <= ttft_slo) & (tpot <= tpot_slo)  # NaN (unfinished) is a miss
    out = {
        "span_s": end,
        "slo_attainment": float(met.mean()),
        "ttft_p99_s": _p99(ttft),
        "tpot_p99_s": _p99(tpot),
        "scale_events": 0,
        "gpus_per_replica": dep.num_gpus,
    }
    if raw.scaler is not None:
        section = scaling_summary(raw, dep.num_gpus, ttft_slo, tpot_slo)
        out.update(gpu_s=section["gpu_hours"] * 3600.0, scale_events=section["scale_events"])
    else:
        out["gpu_s"] = scenario.num_replicas * dep.num_gpus * end
    return out


def _p99(a: np.ndarray) -> float:
    a = np.where(np.isnan(a), np.inf, a)  # an unfinished request is slower than any finished one
    return float(np.quantile(a, 0.99)) if len(a) else math.nan


@dataclass
class _Bisection:
    """The fewest of a count (replicas, or the autoscaler's MIN) in [low, high] whose replay meets the SLO,
    assuming more never meets it less; each probe a full replay."""

    low: int
    high: int
    first: int  # the first probe
    passing: int | None = None  # the fewest found to pass
    failing: int = 0  # the most found to fail
    probes: dict = field(default_factory=dict)  # count -> day_run's answer

    def __post_init__(self) -> None:
        self.failing = self.low - 1

    def next_probe(self) -> int | None:
        top = self.passing if self.passing is not None else self.high + 1
        if top - self.failing <= 1:
            return None
        if not self.probes:
            return min(max(self.first, self.failing + 1), top - 1)
        return (self.failing + top) // 2

    def record(self, n: int, answer: dict, attainment: float) -> None:
        self.probes[n] = answer
        if answer["slo_attainment"] >= attainment:
            self.passing = n if self.passing is None else min(self.passing, n)
        else:
            self.failing = max(self.failing, n)


@dataclass
class _Config:
    """One (deployment, router, tier): its static count's search, then its autoscaler's."""

    key: tuple  # (gpu, tp, pp, ep)
    budget: int
    router: str
    tier: float
    base: object  # the replay Scenario
    price: object
    static: _Bisection
    scaled: _Bisection | None = None  # the autoscaler's MIN, once the static count is known
    max_replicas: int = 0
    cold_start_s: float = math.nan


def _rounds(configs, stage: str, probe, day: DaySpec, runner, stats, bar, tid) -> None:
    """Every configuration's next probe of `stage` side by side (runner.map), until every search ends."""
    while True:
        todo = [(c, getattr(c, stage)) for c in configs if getattr(c, stage) is not None]
        todo = [(c, b, b.next_probe()) for c, b in todo]
        todo = [t for t in todo if t[2] is not None]
        if not todo:
            return
        jobs = [(probe(c, k), day.ttft_slo, day.tpot_slo) for c, _, k in todo]
        for i, answer in sorted(runner.map(day_run, jobs), key=lambda x: x[0]):
            _, b, k = todo[i]
            b.record(k, answer, day.attainment)
        stats["replays"] += len(jobs)
        bar.update(tid, description=f"day replays: {stats['replays']}")


def run_day(spec, day: DaySpec, span_s: float, plan, runner, progress: bool = False) -> DayResult:
    """The day plan for the cheapest `day.deployments` aggregated deployments of the steady plan `plan`."""
    import time

    from simserve.plan.search import prepare
    from simserve.resolve import resolve_profiles
    from simserve.sim.autoscale import parse_autoscale
    from simserve.sim.scale_report import WINDOW_S
    from simserve.sim.scenario import check_scenario
    from simserve.tune.autoscaling import configure as configure_autoscaling
    from simserve.tune.jobs import progress_bar

    t0 = time.perf_counter()
    picks = _cheapest(plan, day.deployments)
    cands, _, prices = prepare(spec)
    by_key = {(c.deployment.gpu.name, c.deployment.tp, c.deployment.pp, c.deployment.ep): c for c in cands}
    n = day.requests if day.requests is not None else _whole(spec)
    configs: list[_Config] = []
    skipped: list[str] = []
    for _, row in picks.iterrows():
        key = (row["gpu"], int(row["tp"]), int(row["pp"]), int(row["ep"]))
        cand = by_key[key]
        profile = resolve_profiles([cand.deployment])[cand.deployment]
        base = _replay_scenario(spec, cand, int(row["budget"]), profile, day, n)
        try:  # vLLM's worker holds CUDA graphs and its own activations: a steady-plan row may not fit in it
            check_scenario(base)
        except SimserveError as exc:
            skipped.append(f"{key[0]} TP{key[1]} PP{key[2]} is not replayed: {exc}")
            continue
        # the first probe: the steady plan's count for the trace's busiest minute
        first = max(1, math.ceil(_peak_rate(base, WINDOW_S) / float(row["capacity_qps"]) - 1e-9))
        hi = max(1, spec.max_gpus // cand.num_gpus)
        for router in day.routers:
            for tier in day.tiers:
                s = replace(base, router=router, kv_offload_gb=tier)
                configs.append(
                    _Config(
                        key,
                        int(row["budget"]),
                        router,
                        tier,
                        s,
                        prices[key[0]],
                        _Bisection(1, hi, min(first, hi)),
                    )
                )

    def autoscaled(c: _Config, lo: int):
        s, _ = configure_autoscaling(
            replace(c.base, num_replicas=lo),
            f"{lo}:{c.max_replicas}",
            day.scale_policy,
            None,
            None,
            None,
            day.weights_from,
            None,
            day.ttft_slo,
            day.tpot_slo,
        )
        return s

    stats = {"replays": 0}
    with progress_bar(progress) as bar:
        tid = bar.add_task("day replays", total=None)
        _rounds(configs, "static", lambda c, k: replace(c.base, num_replicas=k), day, runner, stats, bar, tid)
        for c in configs:  # the autoscaler: MAX from --autoscale, else the static count (the peak)
            given_lo, given_hi = parse_autoscale(day.autoscale) if day.autoscale else (1, None)
            c.max_replicas = given_hi or (c.static.passing or c.static.high)
            c.cold_start_s = autoscaled(c, min(given_lo, c.max_replicas)).autoscale.cold_start_s
            if c.cold_start_s < span_s:  # else no replica it adds could serve in the span: not run
                # MIN from --autoscale's, raised until the day meets the SLO (MIN = MAX is a static fleet)
                c.scaled = _Bisection(
                    min(given_lo, c.max_replicas), c.max_replicas, min(given_lo, c.max_replicas)
                )
        _rounds(configs, "scaled", autoscaled, day, runner, stats, bar, tid)
    rows = [_static_row(c, day) for c in configs] + [r for c in configs for r in _scaled_rows(c, day)]
    df = pd.DataFrame(rows, columns=DAY_COLUMNS)
    stats["elapsed_s"] = time.perf_counter() - t0
    result = DayResult(day, df, span_s, notes=_notes(spec, plan) + skipped, stats=stats)
    best = result.winner()
    return replace(result, commands=[] if best is None else start_commands(spec, day, best, n))


def _cheapest(plan, k: int) -> pd.DataFrame:
    """The steady plan's k cheapest aggregated deployments (per million output tokens, or per hour with
    --qps), each at its best budget."""
    rows = plan.rows
    if "layout" in rows:
        rows = rows[rows["layout"].fillna("agg") == "agg"]
    if rows.empty:
        raise SimserveError(
            f"no aggregated deployment within {plan.spec.max_gpus} GPUs meets {plan.spec.slo.describe()} at "
            "a steady rate: nothing to plan a day for; raise --max-gpus or --slo"
        )
    rows = rows.sort_values([plan.objective, "gpus"], kind="stable")
    return rows.drop_duplicates(["gpu", "tp", "pp", "ep"]).head(k)


def _peak_rate(scenario, window_s: float) -> float:
    """The busiest window's request rate in the replayed window (requests/s)."""
    from simserve.sim.scenario import _workload

    t = _workload(scenario.trace, scenario.max_len, scenario.num_requests, scenario.seed, True)[2]
    t = (t - t.min()) * scenario.time_scale
    counts = np.bincount((t // window_s).astype(int))
    return float(counts.max()) / window_s


def _static_row(c: _Config, day: DaySpec) -> dict:
    b, row = c.static, _row_key(c, "static")
    if b.passing is None:
        worst = b.probes.get(b.high, {})
        return {
            **row,
            "replicas": str(b.high),
            "meets_slo": False,
            **_metrics(worst, c),
            "status": f"no count within --max-gpus meets the SLO ({b.high} replicas: "
            f"{worst.get('slo_attainment', math.nan):.1%})",
        }
    return {
        **row,
        "replicas": str(b.passing),
        "meets_slo": True,
        **_metrics(b.probes[b.passing], c),
        "status": f"fewest that meet the SLO ({len(b.probes)} replays)",
    }


def _scaled_rows(c: _Config, day: DaySpec) -> list[dict]:
    """The autoscaler at the fewest MIN that meets the SLO, and, when that is above the MIN asked for, the MIN
    asked for too (what it would have saved, and missed)."""
    b = c.scaled
    if b is None:
        row = {**_row_key(c, f"autoscaled {day.scale_policy}"), "cold_start_s": c.cold_start_s}
        return [
            {
                **row,
                "replicas": f"?:{c.max_replicas}",
                "meets_slo": False,
                "status": "not run: a cold start longer than the replayed span",
            }
        ]
    rows = [_scaled_row(c, day, b.passing if b.passing is not None else b.high)]
    if b.passing is None or b.passing > b.low:
        rows.append(_scaled_row(c, day, b.low))
    return rows


def _scaled_row(c: _Config, day: DaySpec, lo: int) -> dict:
    row = {**_row_key(c, f"autoscaled {day.scale_policy}"), "cold_start_s": c.cold_start_s}
    b = c.scaled
    answer = b.probes.get(lo, {})
    met = b.passing is not None and lo >= b.passing
    if not met and lo == b.low:
        status = f"misses the SLO ({answer.get('slo_attainment', math.nan):.1%} < {day.attainment:.1%})"
    elif not met:
        status = f"misses the SLO even at MIN = MAX ({answer.get('slo_attainment', math.nan):.1%})"
    elif lo > b.low:
        status = f"MIN raised from {b.low} to {lo} to meet the SLO ({len(b.probes)} replays)"
    else:
        status = f"meets the SLO ({len(b.probes)} replays)"
    return {
        **row,
        **_metrics(answer, c),
        "replicas": f"{lo}:{c.max_replicas}",
        "cold_start_s": c.cold_start_s,
        "meets_slo": met,
        "status": status,
    }


def _row_key(c: _Config, provisioning: str) -> dict:
    gpu, tp, pp, ep = c.key
    return {
        "gpu": gpu,
        "tp": tp,
        "pp": pp,
        "ep": ep,
        "budget": c.budget,
        "router": c.router,
        "kv_offload_gb": c.tier,
        "provisioning": provisioning,
        "cold_start_s": math.nan,
    }


def _metrics(answer: dict, c: _Config) -> dict:
    """Per-day GPU-hours and dollars of one replay: its GPU-seconds scaled from its span to 24 h."""
    if not answer:
        return {}
    gpu_h = answer["gpu_s"] * DAY_S / answer["span_s"] / 3600.0
    g = answer["gpus_per_replica"]
    # both at the GPU-hour price: a static fleet rented in whole nodes against an autoscaled one billed by the
    # GPU-hour would credit the autoscaler with the node's idle GPUs (summary_lines says what a node costs)
    usd = gpu_h * c.price.usd_per_gpu_hour
    return {
        "span_s": answer["span_s"],
        "gpu_hours_per_day": gpu_h,
        "usd_per_day": usd,
        "gpus_per_replica": g,
        **{k: answer[k] for k in ("slo_attainment", "ttft_p99_s", "tpot_p99_s", "scale_events")},
    }


def _notes(spec, plan) -> list[str]:
    notes = []
    for gpu, p in plan.prices.items():
        if p.gpus_per_rental > 1:
            notes.append(
                f"{gpu} is rented by the {p.gpus_per_rental}-GPU node (price lines above): $/day is the "
                f"GPU-hours' share; a fleet smaller than a node pays the whole node, "
                f"${24 * p.usd_per_hour(1, p.gpus_per_rental):,.0f}/day"
            )
    if "disagg" in spec.layouts:
        notes.append(
            "disaggregated layouts are in the steady plan above but not replayed: the autoscaler, prefix "
            "caching and the KV tier are not modelled for them (cli/autoscale.py, sim/disagg_scenario.py), "
            "so a day of them would run a different engine than the aggregated rows"
        )
    return notes


def start_commands(spec, day: DaySpec, row: pd.Series, n: int) -> list[str]:
    """The `simserve run` line that replays the winner (its summary.json and replicas.csv say the rest), and
    the `vllm serve` line of each of its replicas (plan/command.py's, with the KV tier's flags)."""
    from simserve.plan.command import vllm_serve

    serve = vllm_serve(
        spec.model,
        int(row["tp"]),
        int(row["pp"]),
        int(row["budget"]),
        spec.max_batch,
        spec.max_len,
        spec.memory_utilization,
        spec.dtype,
        spec.kv_dtype,
        int(row["ep"]),
    )
    if row["kv_offload_gb"]:  # as tune/engine.py writes vLLM 0.33.0's CPU KV tier
        serve += [
            "--kv-offloading-size",
            f"{float(row['kv_offload_gb']):g}",
            "--kv-offloading-backend",
            "native",
        ]
    how = (
        f"{row['replicas']} under an autoscaler ({row['provisioning']})"
        if ":" in str(row["replicas"])
        else f"{row['replicas']} of them"
    )
    return [
        _run_command(spec, day, row, n),
        f"# each replica (vLLM 0.33.0), {how}, behind --router {row['router']}:",
        shlex.join(serve),
    ]


def _run_command(spec, day: DaySpec, row: pd.Series, n: int) -> str:
    args = [
        "simserve",
        "run",
        "--model",
        spec.model,
        "--gpu",
        str(row["gpu"]),
        "--tp",
        str(int(row["tp"])),
        "--pp",
        str(int(row["pp"])),
        "--trace",
        spec.trace,
        "--arrival",
        "replay",
        "--engine",
        "vllm",
        "--budget",
        str(int(row["budget"])),
        "--max-batch",
        str(spec.max_batch),
        "--memory-utilization",
        f"{spec.memory_utilization:g}",
        "--router",
        str(row["router"]),
    ]
    if int(row["ep"]) > 1:
        args += ["--ep", str(int(row["ep"]))]
    if row["kv_offload_gb"]:
        args += ["--kv-offload-gb", f"{float(row['kv_offload_gb']):g}"]
    if day.requests is not None:
        args += ["--requests", str(n)]
    # the plan's front end (engine-side unless --frontend-ms), not run's default API-server model
    args += (
        ["--frontend", "constant", "--frontend-ms", f"{spec.frontend_ms:g}"]
        if spec.frontend_ms
        else ["--frontend", "off"]
    )
    if str(row["provisioning"]).startswith("autoscaled"):
        lo = str(row["replicas"]).split(":")[0]
        args += [
            "--replicas",
            lo,
            "--autoscale",
            str(row["replicas"]),
            "--scale-policy",
            day.scale_policy,
            "--ttft-slo",
            f"{day.ttft_slo:g}",
            "--tpot-slo",
            f"{day.tpot_slo:g}",
        ]
    else:
        args += ["--replicas", str(row["replicas"])]
    return shlex.join(args)


def table_rows(result: DayResult) -> list[list[str]]:
    """The printed table's cells, cheapest per day first."""
    df = result.rows.sort_values(["usd_per_day", "gpu_hours_per_day"], kind="stable", na_position="last")
    out = []
    for _, r in df.iterrows():
        tier = f"{float(r['kv_offload_gb']):g} GiB" if r["kv_offload_gb"] else "off"
        ep = f" EP{int(r['ep'])}" if int(r["ep"]) > 1 else ""
        out.append(
            [
                f"{r['gpu']} TP{int(r['tp'])}{ep} PP{int(r['pp'])}",
                str(int(r["budget"])),
                str(r["router"]),
                tier,
                str(r["provisioning"]),
                str(r["replicas"]),
                _num(r["gpu_hours_per_day"], ".4g"),
                _num(r["usd_per_day"], ",.0f"),
                _num(r["slo_attainment"], ".1%"),
                _num(r["ttft_p99_s"], ".3g"),
                _num(r["tpot_p99_s"], ".3g"),
                "yes" if bool(r["meets_slo"]) else "no",
            ]
        )
    return out


TABLE_COLUMNS = (
    "deployment",
    "budget",
    "router",
    "KV tier",
    "provisioning",
    "replicas",
    "GPU-h/day",
    "$/day",
    "SLO met",
    "TTFT p99 s",
    "TPOT p99 s",
    "meets",
)


def _num(v, fmt: str) -> str:
    v = float(v)
    return "—" if v != v else format(v, fmt)


def summary_lines(result: DayResult, spec) -> list[str]:
    """What the CLI prints below the day table: the scaling to 24 h, the winner and how to start it."""
    d = result.day
    span = (
        float(result.rows["span_s"].dropna().max()) if result.rows["span_s"].notna().any() else result.span_s
    )
    lines = [
        f"day plan: {spec.trace} replayed ({_count(d)}, recorded span {result.span_s:,.0f} s; replays end at "
        f"up to {span:,.0f} s), GPU-hours and $ scaled from each replay's span to 24 h; SLO: TTFT <= "
        f"{d.ttft_slo:g} s and TPOT <= {d.tpot_slo:g} s for >= {d.attainment:.0%} of requests; static: the "
        f"fewest replicas that meet it, held 24 h; autoscaled: --scale-policy {d.scale_policy}, the "
        "GPU-hours its replicas were held; $ = GPU-hours at the GPU-hour price"
    ]
    lines += [f"note: {n}" for n in result.notes]
    best = result.winner()
    if best is None:
        lines.append(
            "no row meets the SLO for the day: raise --max-gpus, loosen --ttft-slo/--tpot-slo/--attainment"
        )
        return lines
    static = result.rows[(result.rows["provisioning"] == "static") & result.rows["meets_slo"].astype(bool)]
    vs = ""
    if len(static) and str(best["provisioning"]) != "static":
        s = static.sort_values("usd_per_day", kind="stable").iloc[0]
        vs = (
            f" ({1 - float(best['usd_per_day']) / float(s['usd_per_day']):.0%} below the cheapest static, "
            f"${float(s['usd_per_day']):,.0f}/day)"
        )
    tier = f"{float(best['kv_offload_gb']):g} GiB" if best["kv_offload_gb"] else "off"
    lines.append(
        f"day winner: {best['gpu']} TP{int(best['tp'])} PP{int(best['pp'])}, --router {best['router']}, KV "
        f"tier {tier}, {best['provisioning']} {best['replicas']}: {float(best['gpu_hours_per_day']):.4g} "
        f"GPU-h/day, ${float(best['usd_per_day']):,.0f}/day{vs}, SLO met by "
        f"{float(best['slo_attainment']):.1%}"
    )
    lines.append("replay it, then start it:")
    lines += result.commands
    lines.append(f"{result.stats['replays']} replays in {result.stats['elapsed_s']:.1f} s")
    return lines


def _count(d: DaySpec) -> str:
    return "the whole trace" if d.requests is None else f"its first {d.requests} requests"


def summarize(result: DayResult) -> dict:
    """plan.json's `day` section."""
    d = result.day
    best = result.winner()
    return {
        "routers": list(d.routers),
        "kv_offload_gb": list(d.tiers),
        "scale_policy": d.scale_policy,
        "autoscale": d.autoscale,
        "replay_requests": d.requests,
        "recorded_span_s": result.span_s,
        "slo": {"ttft_s": d.ttft_slo, "tpot_s": d.tpot_slo, "attainment": d.attainment},
        "scaling": "each replay's GPU-seconds x 86400 / its span (t = 0 to the last completion)",
        "winner": None
        if best is None
        else {k: (v.item() if hasattr(v, "item") else v) for k, v in best.items()},
        "commands": result.commands,
        "notes": result.notes,
        "stats": result.stats,
    }
