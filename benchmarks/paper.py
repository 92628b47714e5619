"""The Sarathi-Serve (OSDI'24) evaluation, run on simserve: capacities, decode iteration times, Table 6
ablation.

    python benchmarks/paper.py          # full: 4 deployments × 2 traces × 2 SLOs × 3 policies, 2048 requests
                                        # → docs/paper-reproduction.{md,json}
    python benchmarks/paper.py --quick  # CI-sized: Mistral-7B and LLaMA2-70B (PP), chat, strict SLO,
                                        # 256 requests, 10% tolerance → a temporary folder (or --out)

Capacity = the highest Poisson rate with P99 TBT ≤ SLO and median scheduling delay ≤ 2 s
(simserve.tune.capacity), each cell one search, in two columns: simserve's default, and paper-comparable
(simserve.sim.scenario.paper_setup: clipped Poisson, the Ray round trip, the 30-minute trial cap; the paper's
own search, tune/paper_search.py), whose capped trials are also run uncapped to count the pass/fail verdicts
the cap decides; the searches run on the sweep's executor (local processes by default) and every simulation is
kept in the probe cache (--cache), so a rerun replays in seconds and an interrupted run resumes. Strict-SLO
searches run first: vLLM and Orca do not depend on the SLO, so the relaxed searches then replay their shared
probes from the cache. When ../shared/reference holds the paper's own chat trace, the chat cells are also run
on it (read at run time, never copied). The configuration tables and the paper's claims live in
paper_cells.py; the markdown is rendered by paper_report.py.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import paper_cells as pc  # noqa: E402
import paper_report  # noqa: E402
import paper_results as pr  # noqa: E402

import simserve  # noqa: E402
from simserve.errors import SimserveError  # noqa: E402
from simserve.io import write_text_atomic  # noqa: E402
from simserve.sim.scenario import check_scenario  # noqa: E402
from simserve.tune.capacity import CapacityResult  # noqa: E402
from simserve.tune.executors import Runner  # noqa: E402
from simserve.tune.jobs import CapacityTask, probe_job, progress_bar, run_tasks  # noqa: E402
from simserve.tune.paper_search import verdict  # noqa: E402
from simserve.tune.probe import ProbeCache, probe_key, quantiles_for, source_digest  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
DEFAULT_CACHE = Path(os.environ.get("SIMSERVE_CACHE", Path.home() / ".cache" / "simserve")) / "probes"


@dataclass(frozen=True)
class RunConfig:
    deployments: tuple[str, ...] = tuple(d.key for d in pc.DEPLOYMENTS)
    traces: tuple[str, ...] = ("chat", "arxiv")
    slos: tuple[str, ...] = pc.SLO_KINDS
    num_requests: int = 2048
    tolerance: float = 0.025  # the paper's --min-search-granularity 2.5 %
    arrival: str = "poisson"
    seed: int = 0
    ablation_traces: tuple[str, ...] = ("chat", "arxiv")
    ablation_seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    # Deployments whose chat/strict cells are searched again under the paper's clipped Poisson arrivals, and
    # again with other seeds (another request sample and arrival sequence) to show the seed-to-seed spread.
    clipped_check: tuple[str, ...] = ("mistral-7b",)
    spread_check: tuple[str, ...] = ("mistral-7b", "llama2-70b")
    spread_seeds: tuple[int, ...] = (1, 2)
    paper_setup: bool = True  # also the paper-comparable column (every main cell searched again)
    mode: str = "full"


QUICK = RunConfig(
    deployments=("mistral-7b", "llama2-70b"),
    traces=("chat",),
    slos=("strict",),
    num_requests=256,
    tolerance=0.1,
    ablation_traces=("chat",),
    ablation_seeds=(0,),
    clipped_check=(),
    spread_check=(),
    mode="quick",
)


def with_paper_chat(cfg: RunConfig) -> RunConfig:
    """Add the paper's own chat trace as a second chat column when the shared reference copy is present."""
    if "chat" in cfg.traces and "chat-paper" not in cfg.traces and pc.PAPER_CHAT_TRACE.is_file():
        return replace(cfg, traces=(*cfg.traces, "chat-paper"))
    return cfg


Job = tuple[pc.Cell, str, int, str]  # (cell, arrival process, seed, setup: "simserve" | "paper")


def phases(cfg: RunConfig) -> list[list[Job]]:
    """The capacity searches in phases. Strict first: vLLM and Orca do not depend on the SLO, so the relaxed
    searches then replay their shared probes from the cache. Then the same cells paper-comparable, then the
    clipped-arrival and seed checks."""
    setups = ("simserve", "paper") if cfg.paper_setup else ("simserve",)
    out = [
        [(c, cfg.arrival, cfg.seed, setup) for c in pc.cells(cfg.deployments, cfg.traces, (slo,))]
        for setup in setups
        for slo in cfg.slos
    ]
    if "chat" not in cfg.traces or "strict" not in cfg.slos:
        return out
    clipped = tuple(d for d in cfg.clipped_check if d in cfg.deployments)
    if clipped and cfg.arrival != "poisson-clipped":
        out.append(
            [(c, "poisson-clipped", cfg.seed, "simserve") for c in pc.cells(clipped, ("chat",), ("strict",))]
        )
    spread = tuple(d for d in cfg.spread_check if d in cfg.deployments)
    seeds = [s for s in cfg.spread_seeds if s != cfg.seed]
    if spread and seeds:
        out.append(
            [(c, cfg.arrival, s, "simserve") for s in seeds for c in pc.cells(spread, ("chat",), ("strict",))]
        )
    return out


def run_capacities(
    cfg: RunConfig, runner: Runner, cache: ProbeCache, progress: bool
) -> tuple[list[dict], dict, list[tuple[pc.Cell, CapacityTask, CapacityResult]]]:
    """Rows of every search, the search statistics, and the paper-comparable searches themselves."""
    stats: dict = {"tasks": 0, "from_cache": 0, "probes_simulated": 0}
    rows: list[dict] = []
    paper_searches = []
    for jobs in phases(cfg):
        tasks = [
            c.task(cfg.num_requests, arrival, seed, cfg.tolerance, setup == "paper")
            for c, arrival, seed, setup in jobs
        ]
        phase: dict = {}
        results = run_tasks(tasks, runner, cache, runner.shares_filesystem, progress, phase)
        for k in stats:
            stats[k] += phase[k]
        for (c, _arrival, seed, setup), task, r in zip(jobs, tasks, results, strict=True):
            rows.append({**pr.cell_row(c, r), "arrival": task.scenario.arrival, "seed": seed, "setup": setup})
            if setup == "paper":
                paper_searches.append((c, task, r))
    order = {k: i for i, k in enumerate(pc.BY_KEY)}
    rows.sort(key=lambda r: (order[r["deployment"]], list(pc.TRACES).index(r["trace"]), r["slo"] != "strict"))
    return rows, stats, paper_searches


def run_cap_check(
    searches: list[tuple[pc.Cell, CapacityTask, CapacityResult]],
    runner: Runner,
    cache: ProbeCache,
    progress: bool,
) -> list[dict]:
    """Every paper-comparable trial the 30-minute cap cut, run again without the cap: per search, its trials,
    how many the cap cut, and the verdicts that differ (the trial passes only with the cap, or fails only
    with it). Same scenario, rate and seed: only the cap differs."""
    twins: dict[str, tuple] = {}  # probe key → (uncapped scenario, qps, quantiles): each simulated once
    for _, task, result in searches:
        quantiles = quantiles_for(task.slo)
        for p in result.probes:
            if p.metrics.get("capped"):
                s = replace(task.scenario, time_limit_s=None)
                twins.setdefault(probe_key(s, p.qps, quantiles), (s, p.qps, quantiles))
    records = run_probes(list(twins.values()), runner, cache, progress, "uncapped twins of capped trials")
    by_key = dict(zip(twins, records, strict=True))
    out = []
    for cell, task, result in searches:
        quantiles = quantiles_for(task.slo)
        capped = only_with = only_without = 0
        capacity_by_cap = False
        for p in result.probes:
            if not p.metrics.get("capped"):
                continue
            capped += 1
            key = probe_key(replace(task.scenario, time_limit_s=None), p.qps, quantiles)
            uncapped, _ = verdict(task.slo, by_key[key]["metrics"])
            only_with += p.passed and not uncapped
            only_without += uncapped and not p.passed
            capacity_by_cap |= p.passed and not uncapped and p.qps == result.capacity_qps
        out.append(
            {
                **asdict(cell),
                "trials": len(result.probes),
                "capped": capped,
                "pass_only_with_cap": only_with,
                "fail_only_with_cap": only_without,
                "capacity_passes_only_with_cap": capacity_by_cap,
            }
        )
    return out


def run_probes(
    jobs: list[tuple], runner: Runner, cache: ProbeCache, progress: bool, label: str
) -> list[dict]:
    """The records of (scenario, qps, quantiles) jobs, simulated on the runner (or replayed), all cached."""
    records: list[dict | None] = [None] * len(jobs)
    root = str(cache.root) if runner.shares_filesystem else None
    with progress_bar(progress) as bar:
        tid = bar.add_task(label, total=len(jobs))
        for i, record in runner.map(probe_job, [(s, q, quantiles, root) for s, q, quantiles in jobs]):
            records[i] = record
            bar.advance(tid)
    if root is None:  # the workers could not write our cache (a remote Ray cluster): do it here
        for (scenario, qps, quantiles), record in zip(jobs, records, strict=True):
            cache.put(probe_key(scenario, qps, quantiles), record)
    return records  # type: ignore[return-value]


def run_ablation(cfg: RunConfig, runner: Runner, cache: ProbeCache, progress: bool) -> list[dict]:
    """Table 6: P50 TTFT and P99 TBT of each variant, mean and range over seeds (128 requests are few)."""
    quantiles = quantiles_for(None)
    jobs, keys = [], []
    for trace in cfg.ablation_traces:
        for label, policy, budget in pc.ABLATION_VARIANTS:
            for seed in cfg.ablation_seeds:
                jobs.append(
                    (pc.ablation_scenario(trace, policy, budget, seed), pc.ABLATION_QPS[trace], quantiles)
                )
                keys.append((trace, label))
    records = run_probes(jobs, runner, cache, progress, "Table 6 ablation runs")
    out = []
    for trace, label in dict.fromkeys(keys):
        ms = [r["metrics"] for r, k in zip(records, keys, strict=True) if k == (trace, label)]
        ttft = [m["ttft_p50_s"] for m in ms]
        tbt = [m["tbt_p99_s"] for m in ms]
        paper = pc.PAPER_TABLE6[label][trace]
        out.append(
            {
                "trace": trace,
                "variant": label,
                "seeds": len(ms),
                "ttft_p50_s": sum(ttft) / len(ttft),
                "ttft_p50_range_s": [min(ttft), max(ttft)],
                "tbt_p99_s": sum(tbt) / len(tbt),
                "tbt_p99_range_s": [min(tbt), max(tbt)],
                "paper_ttft_p50_s": paper[0],
                "paper_tbt_p99_s": paper[1],
            }
        )
    return out


def run(
    cfg: RunConfig,
    cache_dir: str | Path | None = None,
    executor: str = "local",
    workers: int | None = None,
    progress: bool = False,
    command: str = "",
) -> dict:
    """The whole evaluation as one JSON-able document (what paper-reproduction.json holds)."""
    t0 = time.perf_counter()
    for c in pc.cells(cfg.deployments, cfg.traces, cfg.slos):  # fail fast: names, memory fit
        check_scenario(c.scenario(cfg.num_requests, cfg.arrival, cfg.seed))
    with tempfile.TemporaryDirectory(prefix="paper-probes-") as tmp:
        cache = ProbeCache(cache_dir if cache_dir is not None else tmp)
        with Runner(executor, workers) as runner:
            rows, stats, paper_searches = run_capacities(cfg, runner, cache, progress)
            cap_check = run_cap_check(paper_searches, runner, cache, progress)
            ablation = run_ablation(cfg, runner, cache, progress) if cfg.ablation_traces else []
    decode = pr.decode_iteration(cfg.deployments)
    default = [r for r in rows if r["setup"] == "simserve"]
    main_rows = [r for r in default if r["arrival"] == cfg.arrival and r["seed"] == cfg.seed]
    clipped_rows = [r for r in default if r["arrival"] != cfg.arrival]
    paper_rows = [r for r in rows if r["setup"] == "paper"]
    ratio_rows = pr.ratios(main_rows)
    stats_by_trace = pr.trace_stats(cfg.traces, cfg.num_requests, cfg.seed)
    return {
        "command": command,
        "mode": cfg.mode,
        "config": asdict(cfg),
        "simserve_version": simserve.__version__,
        "simserve_source_digest": source_digest(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "executor": executor,
        "workers": workers or os.cpu_count(),
        "elapsed_s": time.perf_counter() - t0,
        "searches": stats,
        "traces": {
            k: {"label": pc.TRACES[k].label, "max_model_len": pc.TRACES[k].max_model_len} for k in cfg.traces
        },
        "trace_stats": stats_by_trace,
        "cells": main_rows,
        "ratios": ratio_rows,
        "clipped_arrivals": pr.ratios(clipped_rows),
        "seed_spread": pr.seed_spread([r for r in default if r["arrival"] == cfg.arrival]),
        "headlines": pr.headlines(ratio_rows, pr.ratios(paper_rows)),
        "paper_setup": {
            "cells": paper_rows,
            "ratios": pr.ratios(paper_rows),
            "trial_cap": cap_check,
            "trial_cap_totals": pr.cap_totals(cap_check),
        },
        "batch_cap": pr.batch_cap_diagnostics(main_rows, cfg.num_requests, cfg.arrival, cfg.seed),
        "decode_iteration": decode,
        "ablation": ablation,
        "ablation_prefill": pr.ablation_prefill(
            {t: v for t, v in stats_by_trace.items() if t in cfg.ablation_traces}
        ),
        "table6_provenance": pc.TABLE6_PROVENANCE,
    }


def write(doc: dict, out: Path) -> tuple[Path, Path]:
    js, md = out / "paper-reproduction.json", out / "paper-reproduction.md"
    write_text_atomic(js, json.dumps(doc, indent=1, sort_keys=False, allow_nan=False, default=_nan) + "\n")
    write_text_atomic(md, paper_report.render(doc))
    return js, md


def _nan(x: object) -> object:
    raise TypeError(f"not JSON serializable: {x!r}")


def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="CI-sized subset (see the module docstring)")
    ap.add_argument(
        "--out", type=Path, help="output folder (default: docs/ for a full run, a temp folder for --quick)"
    )
    ap.add_argument("--requests", type=int, help="requests per trial (default 2048; quick 256)")
    ap.add_argument("--tolerance", type=float, help="relative search tolerance (default 0.025; quick 0.1)")
    ap.add_argument(
        "--arrival",
        choices=("poisson", "poisson-clipped"),
        default="poisson",
        help="poisson-clipped reproduces the paper's generator (gaps clipped at 3/qps)",
    )
    ap.add_argument("--deployments", help=f"comma-separated subset of {','.join(pc.BY_KEY)}")
    ap.add_argument("--traces", help=f"comma-separated subset of {','.join(pc.TRACES)}")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-paper-chat", action="store_true", help="skip the paper's chat trace column")
    ap.add_argument(
        "--no-paper-setup",
        action="store_true",
        help="skip the paper-comparable column (simserve's default only)",
    )
    ap.add_argument("--executor", choices=("local", "serial", "ray"), default="local")
    ap.add_argument("--workers", type=int, help="worker processes (default: all cores)")
    ap.add_argument(
        "--cache", type=Path, default=DEFAULT_CACHE, help="probe cache folder ($SIMSERVE_CACHE/probes)"
    )
    ap.add_argument("--no-cache", action="store_true", help="simulate everything (a throw-away cache)")
    return ap.parse_args(argv)


def config_from(args: argparse.Namespace) -> RunConfig:
    """The run's configuration from the command line; SimserveError (one line) on a bad option."""
    cfg = replace(
        QUICK if args.quick else RunConfig(),
        arrival=args.arrival,
        seed=args.seed,
        paper_setup=not args.no_paper_setup,
    )
    if args.requests is not None:
        cfg = replace(cfg, num_requests=args.requests)
    if args.tolerance is not None:
        cfg = replace(cfg, tolerance=args.tolerance)
    if cfg.num_requests < 1 or not 0 < cfg.tolerance < 1:
        raise SimserveError("--requests must be at least 1 and --tolerance in (0, 1), e.g. 0.025")
    for name, given, known in (
        ("deployments", args.deployments, pc.BY_KEY),
        ("traces", args.traces, pc.TRACES),
    ):
        unknown = [g for g in (given or "").split(",") if g not in known]
        if given is not None and unknown:
            raise SimserveError(
                f"unknown {name[:-1]} {unknown[0]!r} in --{name}; choose from {', '.join(known)}"
            )
    if args.deployments:
        keep = set(args.deployments.split(","))
        cfg = replace(cfg, deployments=tuple(k for k in pc.BY_KEY if k in keep))
    if args.traces:
        keep = set(args.traces.split(","))
        cfg = replace(
            cfg,
            traces=tuple(k for k in pc.TRACES if k in keep),
            ablation_traces=tuple(t for t in cfg.ablation_traces if t in keep),
        )
    return cfg if args.no_paper_chat or args.quick else with_paper_chat(cfg)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse(argv)
    command = shlex.join(["python", "benchmarks/paper.py", *argv])
    try:
        cfg = config_from(args)
        cache = None if args.no_cache else args.cache
        doc = run(cfg, cache, args.executor, args.workers, progress=True, command=command)
        out = args.out or (DOCS if not args.quick else Path(tempfile.mkdtemp(prefix="paper-quick-")))
        paths = write(doc, out)
    except SimserveError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(paper_report.summary_lines(doc))
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
