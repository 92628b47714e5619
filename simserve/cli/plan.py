"""`simserve plan`: which GPU, TP×PP and number of replicas serve a workload within an SLO at the lowest
cost."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from simserve.cli import app
from simserve.cli import run as options  # the shared options live beside `run`
from simserve.cli.console import table_console
from simserve.cli.options import cache_option, seed_option
from simserve.cli.sweep import DEFAULT_CACHE, _numbers, interruptible
from simserve.errors import SimserveError


@app.command()
def plan(
    model: str = typer.Option(
        "llama-2-70b",
        "--model",
        help="Model to serve: a catalog name (`simserve list models`) or a config.json.",
    ),
    dtype: str = options.DTYPE,
    kv_dtype: str = options.KV_DTYPE,
    moe_skew: float = options.MOE_SKEW,
    allow_long_context: bool = options.ALLOW_LONG_CONTEXT,
    trace: str = typer.Option("sharegpt", "--trace", help="A shipped trace name or a trace file."),
    slo: float = typer.Option(
        0.2,
        "--slo",
        help=(
            "Time-between-tokens SLO in seconds, at --tbt-quantile (0: none; then give --ttft-slo or "
            "--tpot-slo)."
        ),
    ),
    tbt_quantile: float = typer.Option(0.99, "--tbt-quantile", help="Which TBT quantile --slo bounds."),
    ttft_slo: float | None = typer.Option(
        None, "--ttft-slo", help="Also bound time to first token (seconds)."
    ),
    ttft_quantile: float = typer.Option(
        0.99, "--ttft-quantile", help="Which TTFT quantile --ttft-slo bounds."
    ),
    tpot_slo: float | None = options.TPOT_SLO,
    tpot_quantile: float = options.TPOT_QUANTILE,
    delay_slo: float = typer.Option(2.0, "--delay-slo", help="Median scheduling-delay SLO in seconds."),
    gpus: str = typer.Option("a100,h100,h200", "--gpus", help="GPUs to compare (catalog names)."),
    max_gpus: int = typer.Option(8, "--max-gpus", help="The most GPUs a deployment may use, all replicas."),
    qps: float | None = typer.Option(
        None, "--qps", help="Target load: give each deployment the fewest replicas that carry it."
    ),
    min_qps: float = typer.Option(
        0.125, "--min-qps", help="Stop searching a deployment below this capacity per replica."
    ),
    budgets: str = typer.Option(
        "256,512,1024,2048", "--budgets", help="Sarathi token budgets tried per deployment."
    ),
    max_batch: int = typer.Option(128, "--max-batch", help="Resident requests per replica."),
    requests: int = typer.Option(1024, "--requests", help="Requests per simulation."),
    seed: int = seed_option("Seed of the trace sample and arrivals (same seed, same plan)."),
    tolerance: float = typer.Option(0.025, "--tolerance", help="Relative width the bisection stops at."),
    tie_seeds: int = typer.Option(
        2,
        "--tie-seeds",
        help="Search the 3 cheapest deployments again at this many other seeds: the seed "
        "spread that decides ties (0: not measured).",
    ),
    start_qps: float = typer.Option(1.0, "--start-qps", help="Each search's first probe."),
    out: Path = typer.Option(
        Path("plan-out"),
        "--out",
        help="Output directory; each file lands whole, files simserve did not write are kept.",
    ),
    executor: str = typer.Option("local", "--executor", help="local (worker processes) | ray | serial."),
    address: str | None = typer.Option(None, "--address", help="Ray cluster address (with --executor ray)."),
    workers: int | None = typer.Option(None, "--workers", help="Worker processes (default: all cores)."),
    cache: Path = cache_option(DEFAULT_CACHE),
    no_cache: bool = typer.Option(False, "--no-cache", help="Simulate everything; read and write no cache."),
    no_plots: bool = typer.Option(False, "--no-plots", help="Skip pareto.png."),
    force: bool = typer.Option(
        False, "--force", help="Write into an --out directory that holds other files (none is deleted)."
    ),
    all_rows: bool = typer.Option(False, "--all", help="Print every deployment, not only the Pareto ones."),
    frontend_ms: float = options.CAPACITY_FRONTEND_MS,
    sustained_clock: bool | None = options.SUSTAINED_CLOCK,
    layouts: str = typer.Option(
        "agg",
        "--layouts",
        help="agg (replicas that prefill and decode) and/or disagg (prefill and decode pools).",
    ),
    disagg: bool = typer.Option(
        False, "--disagg", help="Also search disaggregated layouts (--layouts agg,disagg)."
    ),
    disagg_layouts: int = typer.Option(
        4,
        "--disagg-layouts",
        help="How many disaggregated layouts to search (a count): the N cheapest the analytic screen keeps.",
    ),
    arrival: str = typer.Option(
        "poisson",
        "--arrival",
        help="poisson: plan at a steady rate; replay: also plan a day of the trace's recorded "
        "arrivals (static vs autoscaled, per router and KV tier: plan/day.py, docs/planner.md).",
    ),
    autoscale: str | None = typer.Option(
        None,
        "--autoscale",
        help="MIN:MAX replicas of the day plan's autoscaled rows (implies --arrival replay; "
        "default 1:the static count).",
    ),
    scale_policy: str = typer.Option(
        "utilization", "--scale-policy", help="Day plan: utilization | queue | slo."
    ),
    routers: str = typer.Option("rr,prefix-aware", "--routers", help="Day plan: the routers tried."),
    kv_offload_gb: float = typer.Option(
        0.0, "--kv-offload-gb", help="Day plan: also try vLLM's CPU KV tier of this many GiB per replica."
    ),
    day_deployments: int = typer.Option(
        2, "--day-deployments", help="Day plan: replay the steady plan's N cheapest deployments."
    ),
    replay_requests: int | None = typer.Option(
        None, "--replay-requests", help="Day plan: replay the trace's first N requests (default: all of it)."
    ),
    attainment: float = typer.Option(
        0.99, "--attainment", help="Day plan: the share of requests that must meet TTFT and TPOT SLOs."
    ),
    no_prune: bool = typer.Option(
        False,
        "--no-prune",
        help="Search every deployment, budget and disaggregated layout whole, even those that cannot reach "
        "the Pareto front (slower; gives every deployment's capacity).",
    ),
    speculative: str | None = typer.Option(
        None,
        "--speculative",
        help="Search each deployment with speculative decoding off and at each K: eagle | eagle3 | mtp | "
        "ngram, on vLLM's V1 scheduler without prefix caching (docs/planner.md, Speculative decoding).",
    ),
    num_speculative_tokens: str | None = typer.Option(
        None,
        "--num-speculative-tokens",
        help="--speculative: the K values to try, e.g. 1,2,3 (default: 1 up to "
        "the positions the acceptance rates give, at most 5; mtp: the model's n_predict).",
    ),
    acceptance: str | None = options.ACCEPTANCE,
    draft_model: str | None = typer.Option(
        None,
        "--draft-model",
        help='--speculative eagle|eagle3: the head\'s checkpoint, printed as "model" in '
        "the command's --speculative-config.",
    ),
) -> None:
    """Capacity, capacity per GPU and cost per million output tokens of every deployment that fits."""
    from simserve.heap import collector_paused

    with collector_paused():  # pandas, matplotlib and the planner: no garbage to collect while they load
        from simserve.io import check_out_dir
        from simserve.plan.command import VLLM_RELEASE
        from simserve.plan.report import (
            APPROXIMATION,
            commands,
            deployment_label,
            disagg_story,
            noise_lines,
            recommendation,
            spread,
            table_rows,
            ties,
            write_outputs,
        )
        from simserve.plan.search import PlanSpec, run_plan
        from simserve.plan.speculation import of as speculation_of
        from simserve.plan.speculation import story as speculation_story
        from simserve.plan.ties import key_label, seed_capacities
        from simserve.sim.config import check_requests
        from simserve.tune.capacity import SLO, impossible_slo

    check_requests(requests)
    check_out_dir(out, force)  # before minutes of work, not after

    spec = PlanSpec(
        model=model,
        gpus=tuple(g.strip() for g in gpus.split(",") if g.strip()),
        max_gpus=max_gpus,
        trace=trace,
        slo=SLO(
            slo or None,
            tbt_quantile,
            delay_slo,
            ttft_s=ttft_slo,
            ttft_quantile=ttft_quantile,
            tpot_s=tpot_slo,
            tpot_quantile=tpot_quantile,
        ),
        budgets=_numbers(budgets, int, "--budgets"),
        max_batch=max_batch,
        num_requests=requests,
        seed=seed,
        tolerance=tolerance,
        tie_seeds=tie_seeds,
        start_qps=start_qps,
        target_qps=qps,
        min_qps=min_qps,
        dtype=dtype,
        kv_dtype=kv_dtype,
        moe_skew=moe_skew,
        allow_long_context=allow_long_context,
        layouts=tuple(
            dict.fromkeys(
                [x.strip() for x in layouts.split(",") if x.strip()] + (["disagg"] if disagg else [])
            )
        ),
        disagg_layouts=disagg_layouts,
        frontend_ms=frontend_ms,
        sustained_clock=sustained_clock,
        speculative=speculative,
        acceptance=acceptance,
        draft_model=draft_model,
        speculative_tokens=None
        if num_speculative_tokens is None
        else _numbers(num_speculative_tokens, int, "--num-speculative-tokens"),
    )
    day_plan = _day_spec(
        spec,
        arrival,
        autoscale,
        scale_policy,
        routers,
        kv_offload_gb,
        day_deployments,
        replay_requests,
        attainment,
    )
    # Ctrl-C or SIGTERM: one line, what is saved, exit 130/143
    with interruptible(None if no_cache else cache):
        result = run_plan(
            spec, executor, workers, address, None if no_cache else cache, progress=True, prune=not no_prune
        )
        day = None  # the day plan's result (plan/day.py), with --arrival replay or --autoscale
        if day_plan is not None and (result.searches["capacity_qps"] > 0).any():
            from simserve.plan.day import run_day
            from simserve.tune.executors import Runner

            with Runner(executor, workers, address) as runner:
                day = run_day(spec, *day_plan, result, runner, progress=True)
    if not (result.searches["capacity_qps"] > 0).any():  # an impossible SLO: no deployment serves any load
        flags = "--slo, --delay-slo, --min-qps" + (", --ttft-slo" if ttft_slo is not None else "")
        flags += ", --tpot-slo" if tpot_slo is not None else ""
        raise impossible_slo(result.searches["message"], "on every deployment searched", flags)
    written = write_outputs(result, out, plots=not no_plots, force=force, day=day)
    table = _table(table_rows(result, all_rows), all_rows)
    console = table_console(table)
    for line in noise_lines(result):  # before the table: what its ranking can and cannot tell apart
        console.print(line, highlight=False)
    console.print(table)
    for line in disagg_story(result) + speculation_story(result):
        console.print(line, highlight=False)
    if frontend_ms:
        from simserve.sim.frontend import frontend_line

        console.print(frontend_line(frontend_ms, "--ttft-slo"), highlight=False)
    best = recommendation(result)
    if best is None:
        need = f" {qps:g} qps" if qps else " any load"
        raise SimserveError(
            f"no deployment within {max_gpus} GPUs carries{need} at {spec.slo.describe()}; "
            f"raise --max-gpus or --slo, or lower --qps"
        )
    why = f"cheapest per hour carrying {qps:g} qps" if qps else "cheapest per million output tokens"
    tied = ties(result)
    console.print(
        f"{'tie, first' if tied else 'buy'}: {deployment_label(best)} at budget "
        f"{int(best['budget'])}{speculation_of(result.spec, best)}: {best['capacity_qps']:.3g} qps, "
        f"{best['goodput_tokens_per_s_per_gpu']:.4g} output tokens/s per GPU paid, "
        f"${best['usd_per_hour']:.2f}/h, ${best['usd_per_million_output_tokens']:.3f} per million output "
        f"tokens ({why}; {best['profile']} profile)",
        highlight=False,
    )
    for t in tied:
        console.print(
            f"  tied: {t.label} +{t.gap:.1%}: {'; '.join(t.reasons)}. Would break it: "
            f"{'; '.join(t.breakers)}",
            highlight=False,
        )
    if tied:
        console.print(
            f"  {len(tied) + 1} deployments tie: the plan cannot rank them; the first is cheapest on the "
            "numbers above",
            highlight=False,
        )
    caps = seed_capacities(result.searches, seed)
    for key, v in spread(result).items():
        per_seed = ", ".join(f"{c:.3g}" for _, c in sorted(caps[key].items()))
        console.print(
            f"seed spread {key_label(key)}: {v:.1%} (capacity per replica {per_seed} qps at seeds "
            f"{', '.join(map(str, sorted(caps[key])))}; (max − min) / mean)",
            highlight=False,
        )
    from simserve.plan.rows import LAYOUT_AGG, layout_of

    if layout_of(best) == LAYOUT_AGG:
        console.print(
            f"start it (vLLM {VLLM_RELEASE}), {int(best['replicas'])} replica(s) behind a round-robin "
            "load balancer:",
            highlight=False,
        )
    else:
        console.print(
            f"start it (vLLM {VLLM_RELEASE}, NixlConnector), one copy of {layout_of(best)} per node "
            f"({int(best['replicas'])} behind a round-robin load balancer):",
            highlight=False,
        )
    for line in commands(result, best):
        console.print(line, highlight=False, markup=False)
    for gpu, p in result.prices.items():
        console.print(f"price {gpu}: {p.describe()}", highlight=False)
    low = result.searches[result.searches["status"] == "below floor"]
    if len(low):
        names = sorted({f"{r.gpu} TP{r.tp} PP{r.pp}" for r in low.itertuples()})
        console.print(
            f"note: {len(low)} searches stayed below --min-qps {min_qps:g} per replica and are left out "
            f"({', '.join(names)}; see searches.csv)"
        )
    from simserve.vllm_loader import RELEASE

    refused = [r for r in result.rejected if f": {RELEASE}" in r]  # vllm_loader's refusals name the release
    if refused:
        console.print(
            f"note: {len(refused)} deployment(s) {RELEASE} refuses to load are not searched (e.g. "
            f"{refused[0]}; all in plan.json 'rejected')",
            highlight=False,
            markup=False,
        )
    s = result.stats
    for note in s.get("disagg_notes", []):
        console.print(f"note: no disaggregated layout for {note}", highlight=False)
    if s["searches_pruned"]:
        console.print(
            f"note: {s['searches_pruned']} searches stopped after one probe: they cannot change the plan (a "
            "deployment off the Pareto front found, or a budget below the deployment's best; status "
            "'pruned' in searches.csv; --no-prune searches them whole)"
        )
    console.print(
        f"{s['tasks']} searches ({s['from_cache']} from cache, {s['probes_simulated']} simulations) in "
        f"{s['elapsed_s']:.1f} s; wrote {', '.join(p.name for p in written)} to {out}/\nnote: {APPROXIMATION}"
    )
    if day is not None:
        _print_day(console, day, spec)


def _day_spec(
    spec, arrival, autoscale, scale_policy, routers, kv_offload_gb, deployments, requests, attainment
):
    """The day plan's spec and the replayed span (plan/day.py), checked before the steady plan starts; None
    without --arrival replay or --autoscale (then its flags are refused)."""
    from simserve.plan.day import DaySpec, check_day

    if arrival not in ("poisson", "replay"):
        raise SimserveError(
            f"plan's --arrival is poisson (a steady rate) or replay (plus a day plan), got {arrival!r}"
        )
    day = DaySpec(
        autoscale,
        scale_policy,
        tuple(r.strip() for r in routers.split(",") if r.strip()),
        kv_offload_gb,
        deployments,
        requests,
        attainment,
    )
    if arrival == "poisson" and autoscale is None:
        given = [
            f
            for f, v, d in (
                ("--scale-policy", scale_policy, "utilization"),
                ("--routers", routers, "rr,prefix-aware"),
                ("--kv-offload-gb", kv_offload_gb, 0.0),
                ("--day-deployments", deployments, 2),
                ("--replay-requests", requests, None),
                ("--attainment", attainment, 0.99),
            )
            if v != d
        ]
        if given:
            raise SimserveError(
                f"{given[0]} belongs to a day plan: add --arrival replay (or --autoscale MIN:MAX), or drop it"
            )
        return None
    # its replays run without a draft: a speculative row would not match
    if getattr(spec, "speculative", None):
        raise SimserveError(
            "the day plan (--arrival replay, --autoscale) replays without speculative decoding; "
            "drop --speculative, or plan the day without it"
        )
    slo = spec.slo
    day = DaySpec(
        **{**day.__dict__, "ttft_slo": slo.ttft_s or day.ttft_slo, "tpot_slo": slo.tpot_s or day.tpot_slo}
    )
    return day, check_day(spec, day)


def _print_day(console, day, spec) -> None:
    from simserve.plan.day import TABLE_COLUMNS, summary_lines, table_rows

    t = Table(title="a day: static vs autoscaled, per router and KV tier (cheapest per day first)")
    for col in TABLE_COLUMNS:
        t.add_column(col, justify="left" if col in ("deployment", "router", "provisioning") else "right")
    for cells in table_rows(day):
        t.add_row(*cells)
    console.print(t)
    for line in summary_lines(day, spec):
        console.print(line, highlight=False, markup=False)


def _table(df, all_rows: bool) -> Table:
    from simserve.plan.report import deployment_label
    from simserve.plan.speculation import COLUMN, cell

    title = "all deployments" if all_rows else "Pareto-optimal deployments (cost vs capacity)"
    off_front = not all_rows and not df.empty and not df["pareto"].astype(bool).all()
    t = Table(title=title + (" (* off the front: the best disaggregated row)" if off_front else ""))
    cols = (
        "deployment",
        "GPUs (paid)",
        "budget",
        "qps",
        "qps/GPU",
        "goodput tok/s/GPU",
        "$/h",
        "$/M out tok",
        "TPOT ms",
        "tok/s/user",
        "profile",
    )
    spec_col = COLUMN in df.columns  # searched with --speculative: each row's K and its gain over off
    if spec_col:
        cols = (*cols[:3], "speculation", *cols[3:])
    for col in cols:
        t.add_column(col, justify="left" if col in ("deployment", "profile") else "right")
    for _, r in df.iterrows():
        star = "" if all_rows or bool(r["pareto"]) else "*"
        t.add_row(
            deployment_label(r) + star,
            f"{int(r['gpus'])} ({int(r['gpus_rented'])})",
            str(int(r["budget"])),
            *([cell(r)] if spec_col else []),
            f"{r['capacity_qps']:.3g}",
            f"{r['capacity_per_gpu_qps']:.3g}",
            f"{r['goodput_tokens_per_s_per_gpu']:.4g}",
            f"{r['usd_per_hour']:.2f}",
            f"{r['usd_per_million_output_tokens']:.3f}",
            _num(1e3 * r.get("tpot_mean_s", float("nan")), ".3g"),
            _num(r.get("user_tokens_per_s", float("nan")), ".3g"),
            r["profile"],
        )
    return t


def _num(v, fmt: str) -> str:
    v = float(v)
    return "—" if v != v else format(v, fmt)
