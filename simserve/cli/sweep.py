"""`simserve sweep` (capacity per policy and token budget) and `simserve regress` (capacity regression
check)."""

from __future__ import annotations

import math
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import typer

from simserve.cachedir import cache_root
from simserve.cli import app
from simserve.cli import run as options  # the shared options live beside `run`
from simserve.cli.console import console as make_console
from simserve.cli.console import note, styled, table_console
from simserve.cli.options import cache_option, seed_option
from simserve.errors import Reported, SimserveError, Terminated

# Requests per simulation in the default sweep: the paper's trial size. Shorter trials are optimistic and
# noisier (docs/tuning.md measures it); --requests 1024 halves the time with the same mean capacities.
DEFAULT_REQUESTS = 2048
# Beside the predictor cache: $SIMSERVE_CACHE/probes (default ~/.cache/simserve/probes).
DEFAULT_CACHE = cache_root() / "probes"


def _numbers(text: str, kind: type, option: str) -> tuple:
    parts = [p.strip() for p in text.split(",") if p.strip()]
    try:
        values = tuple(kind(p) for p in parts)
    except ValueError:
        raise SimserveError(f"{option} takes a comma-separated list of numbers, got {text!r}") from None
    if kind is float and not all(math.isfinite(v) for v in values):  # 1e400 parses as inf: not a number given
        raise SimserveError(f"{option} takes finite numbers, got {text!r}; give values such as 0.05,0.1")
    if not values:
        example = "0.05,0.1" if kind is float else "128,256"
        raise SimserveError(f"{option} is empty; give at least one value, e.g. {option} {example}")
    return values


def _with_frontend(base, frontend_ms: float, toy: bool, paper_setup: bool):
    """The base scenario with the front end's latency on every TTFT (0: engine-side, the default here)."""
    from simserve.sim.frontend import check_frontend_ms

    if not frontend_ms:
        return base
    check_frontend_ms(frontend_ms)
    if toy:
        raise SimserveError("--toy has no serving front end: drop --frontend-ms")
    if paper_setup:
        raise SimserveError(
            "--paper-setup reports engine-side latencies, as the paper did; drop --frontend-ms"
        )
    return replace(base, frontend_ms=frontend_ms)


def base_scenario(toy: bool = False, delay_slo_s: float = 2.0, **given: object) -> object:
    """The sweep's base scenario: simulator defaults, overridden by the options the user gave."""
    given = {k: v for k, v in given.items() if v is not None}
    if toy:
        from simserve.tune.toy import ToyScenario

        return ToyScenario(num_requests=int(given.get("num_requests", 256)))
    from simserve.sim.scenario import Scenario

    # The simulator stops a run once its median scheduling delay must exceed this bound: keep it the user's.
    given["sched_delay_slo_s"] = delay_slo_s
    return Scenario(**given)


def _precision_fields(
    dtype: str,
    kv_dtype: str,
    ep: int,
    moe_skew: float,
    allow_long_context: bool,
    dp_attention: int = 1,
    all2all_backend: str = "allgather_reducescatter",
) -> dict:
    """The Scenario fields of the shared options, left out at their defaults (probe-cache keys stay as they
    were)."""
    given = {
        "dtype": dtype,
        "kv_dtype": kv_dtype,
        "ep": ep,
        "moe_skew": moe_skew,
        "allow_long_context": allow_long_context,
        "dp_attention": dp_attention,
        "all2all_backend": all2all_backend,
    }
    defaults = {
        "dtype": "bf16",
        "kv_dtype": "bf16",
        "ep": 1,
        "moe_skew": 0.0,
        "allow_long_context": False,
        "dp_attention": 1,
        "all2all_backend": "allgather_reducescatter",
    }
    return {k: v for k, v in given.items() if v != defaults[k]}


@contextmanager
def interruptible(cache: Path | None) -> Iterator[None]:
    """Ctrl-C or SIGTERM during a search (simserve.cli turns SIGTERM into `Terminated`): the Runner has
    stopped the workers by the time this sees it; print one line (no output written — outputs are written
    after the search —, what the cache kept, how to resume) and exit 130 (SIGINT) or 143 (SIGTERM)."""
    from simserve.tune.probe import ProbeCache

    # Count what the cache gained, not what the driver had received: a worker writes its probe itself, and
    # several may finish (and write) in the moment between the signal and the driver reading their results.
    before = len(ProbeCache(cache)) if cache is not None else 0
    try:
        yield
    except KeyboardInterrupt as exc:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C while this line prints changes nothing
        what = "terminated" if isinstance(exc, Terminated) else "interrupted"
        if cache is None:
            line = f"{what}: no output was written, and nothing was saved (--no-cache); rerun to start again"
        else:
            saved = len(ProbeCache(cache)) - before
            line = (
                f"{what}: no output was written; the {saved} probe(s) simulated so far are saved in {cache}; "
                "rerun the same command to resume (cached probes are reused)"
            )
        print(line, file=sys.stderr, flush=True)
        raise Reported(143 if isinstance(exc, Terminated) else 130) from None


@app.command()
def sweep(
    slo: float = typer.Option(0.1, "--slo", help="P99 time-between-tokens SLO in seconds."),
    slo_grid: str | None = typer.Option(
        None,
        "--slo-grid",
        help="Several TBT SLOs (e.g. 0.05,0.1,0.2,0.5,1.0): the latency–throughput tradeoff.",
    ),
    tbt_quantile: float = typer.Option(0.99, "--tbt-quantile", help="Which TBT quantile the SLO bounds."),
    delay_slo: float = typer.Option(2.0, "--delay-slo", help="Scheduling-delay SLO in seconds."),
    delay_quantile: float = typer.Option(0.5, "--delay-quantile", help="Which scheduling-delay quantile."),
    ttft_slo: float | None = typer.Option(None, "--ttft-slo", help="Also bound TTFT (seconds)."),
    ttft_quantile: float = typer.Option(
        0.99, "--ttft-quantile", help="Which TTFT quantile --ttft-slo bounds."
    ),
    tpot_slo: float | None = options.TPOT_SLO,
    tpot_quantile: float = options.TPOT_QUANTILE,
    model: str = typer.Option("mistral-7b", "--model", help="Model name (see `simserve list models`)."),
    gpu: str = typer.Option("a100", "--gpu", help="GPU name (see `simserve list gpus`)."),
    tp: int = typer.Option(1, "--tp", help="Tensor-parallel degree (GPUs per pipeline stage)."),
    pp: int = typer.Option(1, "--pp", help="Pipeline-parallel degree (stages per replica)."),
    node: str | None = typer.Option(None, "--node", help="The GPU box (default: the GPU's paper testbed)."),
    network: str | None = typer.Option(
        None, "--network", help="Between nodes, when a replica spans several."
    ),
    trace: str = typer.Option("sharegpt", "--trace", help="A shipped trace name or a trace file."),
    requests: int = typer.Option(DEFAULT_REQUESTS, "--requests", help="Requests per simulation."),
    policies: str = typer.Option(
        "fcfs,orca,vllm,sarathi",
        "--policies",
        help="Any of fcfs, orca, vllm (the paper's prefill-first vLLM baseline), sarathi, chunked, hybrid, "
        "slo-aware, pressure, equal-cost, vllm-v1 (vLLM 0.33.0's V1 scheduler; --engine vllm searches its "
        "flags).",
    ),
    budgets: str = typer.Option(
        "256,257,512,513,1024,2048",
        "--budgets",
        help="Token budgets for sarathi/chunked; 'tiles' = 128…2049 with +1 neighbours.",
    ),
    max_batch: str = typer.Option(
        "128", "--max-batch", help="Max batch for sarathi/chunked/hybrid (a list)."
    ),
    vllm_max_batch: str | None = typer.Option(
        None,
        "--vllm-max-batch",
        help="Max batch for vllm (a list; default --max-batch, or 32,64,128 with --slo-grid).",
    ),
    orca_max_batch: int | None = typer.Option(
        None,
        "--orca-max-batch",
        help="Max batch for orca and fcfs (default: the paper's 16, or 8 with --pp > 1).",
    ),
    seeds: int = typer.Option(1, "--seeds", help="Seeds per point (capacity reported as mean ± spread)."),
    seed: int = seed_option("The first seed."),
    tolerance: float = typer.Option(0.025, "--tolerance", help="Relative width the bisection stops at."),
    start_qps: float = typer.Option(
        1.0,
        "--start-qps",
        help=(
            "Anchor of the search's rate grid (start·2^k); the first probe is the grid rate just below the "
            "throughput bound."
        ),
    ),
    out: Path = typer.Option(Path("sweep-out"), "--out", help="Output directory; each file lands whole."),
    force: bool = typer.Option(
        False, "--force", help="Write into an --out directory that holds other files (none is deleted)."
    ),
    executor: str = typer.Option("local", "--executor", help="local (worker processes) | ray | serial."),
    address: str | None = typer.Option(None, "--address", help="Ray cluster address (with --executor ray)."),
    workers: int | None = typer.Option(None, "--workers", help="Worker processes (default: all cores)."),
    cache: Path = cache_option(DEFAULT_CACHE),
    no_cache: bool = typer.Option(False, "--no-cache", help="Simulate everything; read and write no cache."),
    no_plots: bool = typer.Option(
        False, "--no-plots", help="Skip the PNG plots (faster; tables and summary only)."
    ),
    toy: bool = typer.Option(
        False, "--toy", hidden=True, help="Closed-form test model instead of the simulator."
    ),
    search: str | None = typer.Option(
        None,
        "--search",
        help=(
            "simserve (bisection guided by the probes' latencies) | bisect (simulate every midpoint) | "
            "paper (with --paper-setup, its default)."
        ),
    ),
    dtype: str = options.DTYPE,
    kv_dtype: str = options.KV_DTYPE,
    ep: int = options.EP,
    moe_skew: float = options.MOE_SKEW,
    dp_attention: int = options.DP_ATTENTION,
    all2all_backend: str = options.ALL2ALL_BACKEND,
    allow_long_context: bool = options.ALLOW_LONG_CONTEXT,
    speculative: str | None = options.SPECULATIVE,
    num_speculative_tokens: int | None = options.NUM_SPECULATIVE_TOKENS,
    acceptance: str | None = options.ACCEPTANCE,
    paper_setup: bool = typer.Option(
        False,
        "--paper-setup",
        help="The paper's trials and search: clipped Poisson, Ray round trip, 30-minute cap, 0.01 qps rates.",
    ),
    engine: str | None = typer.Option(
        None,
        "--engine",
        help="Search a real engine's flags instead of --policies (vllm: vLLM 0.33.0; sglang: SGLang 0.5.23): "
        "engine.csv + the command.",
    ),
    engine_grid: str | None = typer.Option(
        None,
        "--engine-grid",
        help="Override flag values, e.g. 'max-num-batched-tokens=1024,2048;max-num-seqs=128,256' (vllm), "
        "'chunked-prefill-size=4096,8192;max-running-requests=256;enable-mixed-chunk=0,1' (sglang).",
    ),
    no_prefix_caching: bool = typer.Option(
        False,
        "--no-prefix-caching",
        help=(
            "--engine vllm: simulate and print the engine with automatic prefix caching off (on in vLLM V1)."
        ),
    ),
    kv_offload_gb: float = typer.Option(
        0.0,
        "--kv-offload-gb",
        help="--engine vllm: a CPU KV tier of this many GiB per replica (vLLM's --kv-offloading-size).",
    ),
    frontend_ms: float = options.CAPACITY_FRONTEND_MS,
    sustained_clock: bool | None = options.SUSTAINED_CLOCK,
    launch_gaps: bool | None = options.LAUNCH_GAPS,
) -> None:
    """Capacity of each policy over a grid of token budgets: table, sweep.csv, summary.json and plots."""
    from simserve.io import check_out_dir
    from simserve.sim.config import check_requests
    from simserve.sim.frontend import frontend_line
    from simserve.tune.capacity import SLO, impossible_slo
    from simserve.tune.report import budget_story, summary_table, write_outputs
    from simserve.tune.sweep import TILE_BUDGETS, SweepSpec, run_sweep

    check_requests(requests)
    check_out_dir(out, force)
    if engine is not None or engine_grid is not None:
        # the policy grid's flags: an engine sweep searches the engine's own flags and would ignore them
        ignored = {
            "--policies": policies != "fcfs,orca,vllm,sarathi",
            "--budgets": budgets != "256,257,512,513,1024,2048",
            "--max-batch": max_batch != "128",
            "--vllm-max-batch": vllm_max_batch is not None,
            "--orca-max-batch": orca_max_batch is not None,
        }
        given = [flag for flag, set_ in ignored.items() if set_]
        if given:
            raise SimserveError(
                f"{given[0]} sets simserve's policy grid, which --engine does not search (it searches the "
                "engine's own flags): give the values with --engine-grid, or drop --engine"
            )
    if seeds < 1:
        raise SimserveError(f"--seeds must be at least 1, got {seeds}")
    slos_s = _numbers(slo_grid, float, "--slo-grid") if slo_grid is not None else (slo,)
    # The first SLO is the primary one (the table's order, the latency CDFs): --slo when the grid has it.
    slos_s = tuple(sorted(set(slos_s), key=lambda s: (s != slo, s)))
    slos = tuple(
        SLO(s, tbt_quantile, delay_slo, delay_quantile, ttft_slo, ttft_quantile, tpot_slo, tpot_quantile)
        for s in slos_s
    )
    budget_list = (
        TILE_BUDGETS
        if budgets.strip() == "tiles"
        else (_numbers(budgets, int, "--budgets") if budgets.strip() else ())
    )
    batches = _numbers(max_batch, int, "--max-batch")
    vllm_batches = _numbers(vllm_max_batch, int, "--vllm-max-batch") if vllm_max_batch is not None else None
    if slo_grid is not None and vllm_batches is None:
        vllm_batches = (32, 64, 128)
    base = base_scenario(
        toy,
        delay_slo,
        model=model,
        gpu=gpu,
        tp=tp,
        pp=pp,
        node=node,
        network=network,
        trace=trace,
        num_requests=requests,
        **_precision_fields(dtype, kv_dtype, ep, moe_skew, allow_long_context, dp_attention, all2all_backend),
    )
    if search == "paper" and not paper_setup:
        raise SimserveError(
            "--search paper judges the paper's trials (no overload stop, a 30-minute cap): add "
            "--paper-setup, which selects it"
        )
    if paper_setup:
        if toy or engine is not None or engine_grid is not None:
            raise SimserveError(
                "--paper-setup simulates the paper's engine; drop --toy, --engine and --engine-grid"
            )
        from simserve.sim.scenario import paper_setup as paper

        base = paper(base)
    base = _with_frontend(base, frontend_ms, toy, paper_setup)
    if sustained_clock is not None or launch_gaps is not None:  # the step's parts (predictor/step.py)
        if toy:
            raise SimserveError("--sustained-clock and --launch-gaps shape the simulator's steps; drop --toy")
        base = replace(base, sustained_clock=sustained_clock, launch_gaps=launch_gaps)
    if not toy:  # no shipped profile covers the deployment: build one (measured if it can), as `plan` does
        from simserve.resolve import for_scenario

        base, generated = for_scenario(base)
        if generated:
            make_console(soft_wrap=True).print(generated, highlight=False)
    if kv_offload_gb and engine is None and engine_grid is None:
        raise SimserveError("--kv-offload-gb is vLLM's CPU KV tier: use it with --engine vllm")
    if speculative is not None or num_speculative_tokens is not None or acceptance is not None:
        if engine != "vllm":
            raise SimserveError(
                "sweep --speculative is modelled for vLLM's V1 scheduler: add --engine vllm (SGLang's "
                "EAGLE: simserve run --engine sglang --speculative eagle|eagle3)"
            )
        if not no_prefix_caching:
            raise SimserveError(
                "--speculative with prefix caching is not modelled yet (vLLM's EAGLE block drop and "
                "lookahead block hashes): add --no-prefix-caching"
            )
        base = replace(
            base,
            speculative=speculative,
            num_speculative_tokens=num_speculative_tokens,
            acceptance=acceptance,
        )
        base.speculation()  # vLLM's refusals and the acceptance file, before any search
    if no_prefix_caching and engine is None and engine_grid is None:
        raise SimserveError(
            "--no-prefix-caching switches the engine's prefix cache off; use it with --engine vllm"
        )
    if engine is not None or engine_grid is not None:
        from simserve.cli.engine import engine_sweep

        if engine == "sglang" and no_prefix_caching:
            raise SimserveError(
                "--no-prefix-caching switches vLLM's prefix cache off; --engine sglang sweeps with SGLang's "
                "radix cache off already (docs/engines.md, SGLang): drop it"
            )
        # vLLM V1's default: on (the sglang sweep runs without the radix cache: docs/engines.md, SGLang)
        base = replace(base, prefix_caching=not no_prefix_caching and engine != "sglang")
        if kv_offload_gb:
            if engine == "sglang" or no_prefix_caching:
                raise SimserveError(
                    "--kv-offload-gb is vLLM's CPU offloading of prefix-cached blocks: use it with "
                    "--engine vllm and prefix caching on"
                )
            base = replace(base, kv_offload_gb=kv_offload_gb)
            # checked now (the engine sweep runs vllm-v1): one line
            replace(base, policy="vllm-v1").sim_config()
        engine_sweep(
            engine or "vllm",
            engine_grid,
            base,
            slos,
            seed,
            seeds,
            tolerance,
            start_qps,
            out,
            lambda spec: run_sweep(
                spec, executor, workers, address, None if no_cache else cache, progress=True
            ),
            search or "simserve",
        )
        if frontend_ms:
            make_console(soft_wrap=True).print(
                frontend_line(frontend_ms, "engine.csv's ttft columns, --ttft-slo"), highlight=False
            )
        return None
    spec = SweepSpec(
        base,
        policies=tuple(p.strip() for p in policies.split(",") if p.strip()),
        budgets=budget_list,
        max_batches=batches,
        reserving_max_batch=orca_max_batch or (8 if pp > 1 else 16),
        vllm_max_batches=vllm_batches,
        seeds=tuple(range(seed, seed + seeds)),
        slos=slos,
        tolerance=tolerance,
        start_qps=start_qps,
        search=search or ("paper" if paper_setup else "simserve"),
    )
    with interruptible(None if no_cache else cache):
        result = run_sweep(spec, executor, workers, address, None if no_cache else cache, progress=True)
    if not (result.rows["capacity_qps"] > 0).any():  # an impossible SLO: an answer of all zeros is no answer
        flags = "--slo, --delay-slo" + (", --ttft-slo" if ttft_slo is not None else "")
        flags += ", --tpot-slo" if tpot_slo is not None else ""
        raise impossible_slo(result.rows["message"], "in every configuration searched", flags)
    written = write_outputs(result, out, plots=not no_plots, force=force)
    table = summary_table(result)
    console = table_console(table)
    console.print(table)
    if frontend_ms:
        console.print(frontend_line(frontend_ms, "sweep.csv's ttft columns, --ttft-slo"), highlight=False)
    for line in budget_story(result):
        console.print(line)
    s = result.stats
    console.print(
        f"{s['tasks']} searches ({s['from_cache']} from cache, {s['probes_simulated']} simulations) "
        f"in {s['elapsed_s']:.1f} s; wrote {', '.join(p.name for p in written)} to {out}/"
    )
    for msg in sorted(set(result.rows["message"]) - {""}):
        console.print(note(msg))


@app.command()
def regress(
    baseline: Path | None = typer.Option(
        None,
        "--baseline",
        help=(
            "The baseline file (default: the project's committed regress/baseline.json, wherever you run it)."
        ),
    ),
    update: bool = typer.Option(False, "--update", help="Recompute and rewrite the baseline (deliberately)."),
    executor: str = typer.Option("local", "--executor", help="local (worker processes) | ray | serial."),
    workers: int | None = typer.Option(None, "--workers", help="Worker processes (default: all cores)."),
    cache: Path = cache_option(DEFAULT_CACHE),
    no_cache: bool = typer.Option(False, "--no-cache", help="Simulate everything; read and write no cache."),
) -> None:
    """Recompute the capacities of a few fixed configurations and compare them with the baseline."""
    from simserve.tune.regress import check, default_baseline, update_command, write_baseline

    if baseline is None:
        baseline = default_baseline()
    if baseline is None:
        raise SimserveError(
            "the committed baseline (regress/baseline.json) is in simserve's source checkout, which this "
            "install does not have; run it from an editable install of the checkout, or pass --baseline "
            "PATH (create one with `simserve regress --update --baseline PATH`)"
        )
    cache_dir = None if no_cache else cache
    console = make_console(soft_wrap=True)
    if update:
        doc = write_baseline(baseline, executor, workers, cache_dir)
        for name, case in doc["cases"].items():
            console.print(f"{name}: {case['capacity_qps']:.4g} qps")
        console.print(f"wrote {baseline}")
        return
    report = check(baseline, executor, workers, cache_dir)
    for line in report.lines:
        console.print(line, highlight=False)
    if report.failed:
        console.print(
            styled(
                (f"capacity moved beyond tolerance in {len(report.failed)} case(s)", "red"),
                f"; if intended, run `{update_command(baseline)}` and commit {baseline}",
            )
        )
        raise typer.Exit(1)
