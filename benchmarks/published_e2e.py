"""Published end-to-end vLLM and SGLang runs beside simserve's simulation of the same setup (issue 30 item 4).

The runs are data (benchmarks/data/published_runs.toml, loaded by benchmarks/published_runs.py, which also
holds the regime and fit/report split rules). This script simulates each run with simserve's engine models at
the defaults of the release the run names (`engine_setup`), compares every published metric, and prints
per-run rows and the median |error| per GPU x regime x metric family, separately for the fit and the report
half. Nothing is fitted here; the published numbers are comparison targets only.

    python benchmarks/published_e2e.py                                 # every run
    python benchmarks/published_e2e.py --split report --json out.json  # the report half
    python benchmarks/published_e2e.py --only KEY,KEY
    python benchmarks/published_e2e.py --only KEY,KEY --parts         # one draw each, its step parts (why)

Runs that test something simserve does not model (vLLM's multi-step scheduling) are simulated and listed, but
flagged and left out of the per-cell medians. docs/engines.md § Published end-to-end results reads the output.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import signal
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import published_report as report
import published_runs as pr

from simserve.errors import SimserveError

# Draws per run, the median compared. ShareGPT: simserve's pairs are not the rows the published client drew;
# Poisson: the published arrival draw is unknown. Measured against 20 draws: 10 ShareGPT draws moved a cell's
# median |error| by up to 6.5 points (5 draws: 11.9), 5 Poisson draws by up to 9.0 (TTFT of 50-request runs).
SAMPLES = 20
ARRIVAL_DRAWS = 20
# Wall seconds one run may take (its first draw builds and fits a profile: a few minutes on a busy 2-core
# host). A run past it is reported as skipped, not waited for: simserve's predictor fit does not terminate on
# some generated profiles (docs/engines.md § Published end-to-end results, "Runs simserve could not
# simulate").
RUN_TIMEOUT_S = 900


class RunTimeout(Exception):
    pass


@dataclass(frozen=True)
class Options:
    samples: int = SAMPLES  # ShareGPT draws per run
    arrival_draws: int = ARRIVAL_DRAWS  # Poisson draws per fixed-length run at a finite rate
    async_scheduling: bool = True  # for the CI runs of an unstated release (vLLM 0.33.0's default)
    timeout_s: int = 0  # wall seconds per run (0: no limit)
    host_speed: float | None = None  # Scenario.host_speed (None: engine_cpu.SERVING_HOST_SPEED)


@contextlib.contextmanager
def _time_limit(seconds: int):
    """SIGALRM after `seconds` of wall time (0: no limit); the main thread only, as signals are."""

    def stop(signum, frame):
        raise RunTimeout

    if seconds <= 0:
        yield
        return
    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@dataclass(frozen=True)
class EngineSetup:
    """The closest simserve configuration of a published engine at its release's defaults."""

    policy: str  # vllm-v1 (V1 engine) | vllm (V0: whole prompts, prefills first) | sglang
    budget: int  # --max-num-batched-tokens; sglang: --chunked-prefill-size
    max_batch: int | None  # --max-num-seqs; sglang: --max-running-requests (None: from the KV pool)
    memory_utilization: float  # --gpu-memory-utilization; sglang: --mem-fraction-static
    max_model_len: int | None  # None: the model's context length
    vllm_worker: bool = False  # V1's worker: CUDA-graph padding and its memory profile
    async_scheduling: bool | None = None  # vLLM's --async-scheduling (vllm_worker only)
    reserve_full_isl: bool = True  # vllm-v1's admission (SimConfig.reserve_full_isl): False before vLLM#37307
    overlap_schedule: bool = False  # SGLang's overlap scheduler


def _sglang_mem_fraction(tp: int) -> float:
    """SGLang 0.3/0.4's default --mem-fraction-static by TP (sglang/srt/server_args.py,
    ServerArgs.__post_init__ in 0.4.4.post3: 0.79 at TP >= 16, 0.81 >= 8, 0.85 >= 4, 0.87 >= 2, else 0.88)."""
    return 0.79 if tp >= 16 else 0.81 if tp >= 8 else 0.85 if tp >= 4 else 0.87 if tp >= 2 else 0.88


def engine_setup(run: pr.Run, async_scheduling: bool = True) -> EngineSetup:
    """The release's defaults on the run's GPU, then the settings its published flags change
    (run.overrides)."""
    from simserve.catalog import GPUSpec

    gpu = GPUSpec.from_name(run.gpu)
    big = gpu.memory_gib >= 70 and "a100" not in gpu.name.lower()  # vLLM's H100/H200 tier
    if run.engine == "vllm" and run.release == "not stated" and not run.online:
        # vLLM 0.33.0's LLM class (vllm/engine/arg_utils.py get_batch_defaults, UsageContext.LLM_CLASS: 16384
        # tokens / 1024 sequences on >= 70 GiB non-A100 GPUs, else 8192 / 256; CacheConfig
        # gpu_memory_utilization 0.92); 2048 is the ShareGPT sampler's own limit (prompt + output <= 2048),
        # above every CI request.
        budget, seqs = (16384, 1024) if big else (8192, 256)
        setup = EngineSetup("vllm-v1", budget, seqs, 0.92, 2048, True, async_scheduling)
    elif run.engine == "vllm" and run.release == "0.6.0":
        # V0 (vllm/engine/arg_utils.py of 0.6.0): chunked prefill off below a 32k max length, so
        # max_num_batched_tokens = max(max_model_len, 2048); max_num_seqs 256; gpu_memory_utilization 0.9
        max_len = int(run.overrides.get("max_model_len", 0)) or None
        setup = EngineSetup("vllm", max(max_len or 2048, 2048), 256, 0.90, max_len)
    elif run.engine == "vllm" and run.release == "0.8.2":
        # vLLM 0.8.2 (arg_utils.py EngineArgs._set_default_args_v1): `vllm serve` 8192 tokens on H100/H200,
        # else 2048; max_num_seqs 1024; gpu_memory_utilization 0.90; no async scheduling in this release; a
        # waiting request admitted when its first chunk's KV blocks fit (v1/core/sched/scheduler.py
        # `schedule`: the waiting loop's allocate_slots(request, num_new_tokens), no full-sequence check)
        setup = EngineSetup(
            "vllm-v1", 8192 if big else 2048, 1024, 0.90, None, True, False, reserve_full_isl=False
        )
    elif run.engine == "sglang" and run.release in ("0.3.0", "0.4.4.post1", "0.4.4.post3"):
        # ServerArgs defaults (0.4.4.post3's server_args.py; 0.3.0 had the same values):
        # --chunked-prefill-size 8192 above 25 GB, --mem-fraction-static by TP, max_running_requests from the
        # pool. The overlap scheduler arrived in v0.4 (https://lmsys.org/blog/2024-12-04-sglang-v0-4/): on
        # there, absent in 0.3.
        setup = EngineSetup(
            "sglang",
            8192,
            None,
            _sglang_mem_fraction(run.tp),
            None,
            overlap_schedule=not run.release.startswith("0.3"),
        )
    else:
        raise SimserveError(
            f"{run.key}: no engine setup for {run.engine} {run.release}; add the release's defaults"
        )
    known = {"memory_utilization", "max_model_len", "budget", "max_batch"}
    unknown = sorted(set(run.overrides) - known)
    if unknown:
        raise SimserveError(f"{run.key}: overrides {unknown} are not engine settings; known: {sorted(known)}")
    return replace(setup, **run.overrides)


def _lengths(run: pr.Run, seed: int) -> tuple[np.ndarray, np.ndarray]:
    if run.dataset == "sharegpt":
        from simserve.workload.bench_datasets import sharegpt_lengths

        # vLLM's (and sglang.bench_serving's) sampler: prompt and output >= 4, prompt <= 1024, total <= 2048,
        # the dataset's own output lengths (both clients ignore EOS: every request generates that many)
        return sharegpt_lengths(run.num_prompts, seed, None)
    prompt, output = (int(x) for x in run.dataset.split(":")[1:])
    return np.full(run.num_prompts, prompt), np.full(run.num_prompts, output)


def _write_trace(prompt, output, arrived, folder: Path) -> str:
    path = folder / "requests.csv"
    rows = ["num_prefill_tokens,num_decode_tokens,arrived_at"]
    rows += [f"{int(p)},{int(o)},{float(a)!r}" for p, o, a in zip(prompt, output, arrived, strict=True)]
    path.write_text("\n".join(rows) + "\n")
    return str(path)


def api_endpoint(run: pr.Run) -> str:
    """The endpoint the client called: vLLM's benchmark_serving.py / `vllm bench serve` and
    sglang.bench_serving send /v1/completions with their `vllm` and `openai` backends, /v1/chat/completions
    with `openai-chat`."""
    return "chat" if "openai-chat" in run.client_flags else "completions"


def frontend_of(run: pr.Run, policy: str) -> dict:
    """The front end a run's client saw. Offline (the `LLM` class): none. vLLM served online: its API server
    as a server (sim/api_server.py) at vLLM 0.33.0's measured costs for the endpoint, one process (`vllm
    serve`'s default without data parallelism, in 0.6, 0.8 and 0.33 alike), beside the 10.2 ms of network and
    client (sim/frontend.py). vLLM 0.6.0 and 0.8.2's own API servers were not measured: 0.33.0's stand in.
    SGLang: the constant alone (its tokenizer manager and detokenizer are measured per step,
    predictor/sglang_cpu.py, but not as a server; SWAP POINT when they are)."""
    from simserve.sim.frontend import DEFAULT_FRONTEND_MS

    if not run.online:
        return dict(frontend_ms=0.0)
    if policy == "sglang":
        return dict(frontend_ms=DEFAULT_FRONTEND_MS)
    return dict(frontend_ms=DEFAULT_FRONTEND_MS, api_server_count=1, api_endpoint=api_endpoint(run))


def scenario_of(
    run: pr.Run, seed: int, trace: str, async_scheduling: bool = True, host_speed: float | None = None
):
    from simserve.catalog import ModelSpec
    from simserve.sim.scenario import Scenario

    e = engine_setup(run, async_scheduling)
    max_len = e.max_model_len or ModelSpec.from_name(run.model_path).max_position
    return Scenario(
        model=run.model_path,
        gpu=run.gpu,
        tp=run.tp,
        node=run.node,
        trace=trace,
        num_requests=run.num_prompts,
        arrival="replay",
        policy=e.policy,
        budget=e.budget,
        max_batch=e.max_batch,
        seed=seed,
        max_model_len=max_len,
        memory_utilization=e.memory_utilization,
        stop_when_overloaded=False,
        dtype=run.dtype,
        max_concurrency=run.max_concurrency,
        vllm_worker=e.vllm_worker,
        async_scheduling=e.async_scheduling if e.vllm_worker else None,
        overlap_schedule=e.overlap_schedule,
        reserve_full_isl=e.reserve_full_isl,
        host_speed=host_speed,
        **frontend_of(run, e.policy),
    )


def simulate_once(
    run: pr.Run, seed: int, async_scheduling: bool = True, host_speed: float | None = None
) -> tuple[dict, str, dict] | str:
    """(metric -> simulated value, profile label, details) of one draw, or why it has no answer."""
    from simserve.predictor.load import profile_label
    from simserve.resolve import for_scenario
    from simserve.sim.bench_report import bench_metrics
    from simserve.sim.request import DONE
    from simserve.sim.scenario import simulate_scenario
    from simserve.workload import arrival_times

    prompt, output = _lengths(run, seed)
    # the arrivals written into the trace and replayed: a burst at t = 0, or Poisson at the client's rate
    n = len(prompt)
    arrived = np.zeros(n) if math.isinf(run.qps) else arrival_times(n, run.qps, "poisson", seed)
    with tempfile.TemporaryDirectory() as tmp:
        trace = _write_trace(prompt, output, arrived, Path(tmp))
        scenario = scenario_of(run, seed, trace, async_scheduling, host_speed)
        scenario, _ = for_scenario(
            scenario
        )  # no shipped profile: build one, measured where NVIDIA's tables can
        raw, dep = simulate_scenario(scenario, 1.0)  # replay: the trace's arrival times, not this rate
    r = raw.reqs
    if not (r.status == DONE).all():
        return f"{int((r.status != DONE).sum())} of {r.n} requests not served"
    span = float(r.completed.max() - r.arrived.min())
    if run.online:  # the client's view, vLLM's definitions (sim/bench_report.py): front end on TTFT and E2E
        b = bench_metrics(raw, math.inf if math.isinf(run.qps) else run.qps)
        values = {
            "throughput_rps": b["request_throughput"],
            "median_ttft_ms": b["median_ttft_ms"],
            "median_tpot_ms": b["median_tpot_ms"],
            "median_itl_ms": b["median_itl_ms"],
            "median_e2e_ms": b["median_e2el_ms"],
        }
    else:  # the offline LLM class: the batch's span; requests / span
        values = {"batch_latency_ms": span * 1e3, "throughput_rps": r.n / span}
    detail = {
        "requests": int(r.n),
        "prompt_tokens": int(r.prompt.sum()),
        "output_tokens": int(r.output.sum()),
        "iterations": len(raw.log),
        "frontend_ms": raw.cfg.frontend_s * 1e3,
        "kv_blocks": int(raw.num_blocks),
        "preemptions": int(r.preemptions.sum()),
        "policy": raw.cfg.policy,
    }
    return values, profile_label(dep, scenario.profiles_root), detail


def draws(run: pr.Run, samples: int, arrival_draws: int = ARRIVAL_DRAWS) -> int:
    if run.dataset == "sharegpt":
        return samples
    return 1 if math.isinf(run.qps) else arrival_draws


def error_pct(simulated: float, published: float) -> float:
    return 100.0 * (simulated - published) / published


def simulate(run: pr.Run, opts: Options = Options()) -> dict:
    """The run simulated over its draws: per published metric the median, lowest and highest simulated
    value."""
    got = []
    n = draws(run, opts.samples, opts.arrival_draws)
    try:
        with _time_limit(opts.timeout_s):
            for k in range(n):
                one = simulate_once(run, run.seed + k, opts.async_scheduling, opts.host_speed)
                if isinstance(one, str):
                    return {"key": run.key, "skipped": one}
                got.append(one)
    except RunTimeout:
        return {
            "key": run.key,
            "skipped": f"did not finish in {opts.timeout_s} s ({len(got)} of {n} draws)",
        }
    rows = []
    for metric, published in run.measured.items():
        values = sorted(g[0][metric] for g in got)
        sim = float(np.median(values))
        rows.append(
            {
                "metric": metric,
                "family": pr.METRICS[metric][1],
                "unit": pr.METRICS[metric][0],
                "published": published,
                "simulated": sim,
                "min": values[0],
                "max": values[-1],
                "error_pct": error_pct(sim, published),
            }
        )
    return {
        "key": run.key,
        "split": run.split,
        "gpu": run.gpu,
        "regime": run.regime,
        "engine": run.engine,
        "release": run.release,
        "source": run.source,
        "flagged": run.flagged,
        "rows": rows,
        "profile": got[0][1],
        **got[0][2],
        "draws": len(got),
    }


def compare(runs: tuple[pr.Run, ...], opts: Options = Options()) -> list[dict]:
    out = []
    print(
        f"{'run':46} {'split':6} {'metric':15} {'published':>10} {'simserve':>9} {'error':>7}  draws: "
        "min..max"
    )
    stuck: dict[tuple, str] = {}  # deployments whose run timed out: the next run would wait on the same fit
    for run in runs:
        deployment = (run.model, run.gpu, run.tp, run.dtype)
        if deployment in stuck:
            res = {"key": run.key, "skipped": f"same deployment as {stuck[deployment]}, which did not finish"}
        else:
            res = simulate(run, opts)
            if res.get("skipped", "").startswith("did not finish"):
                stuck[deployment] = run.key
        out.append(res)
        if "skipped" in res:
            print(f"{run.key:46} skipped: {res['skipped']}")
            continue
        for row in res["rows"]:
            lo, hi = (error_pct(row[k], row["published"]) for k in ("min", "max"))
            spread = f"{lo:+.0f}..{hi:+.0f}%" if row["max"] > row["min"] else ""
            flag = "  FLAGGED" if run.flagged else ""
            print(
                f"{run.key:46} {run.split:6} {row['metric']:15} {row['published']:>10.4g} "
                f"{row['simulated']:>9.4g} {row['error_pct']:>+6.1f}%  {spread}{flag}"
            )
    return out


PARTS_KEEP = (
    "steps",
    "mean_step_s",
    "parts_s",
    "cpu_hidden_s",
    "cpu_bound_steps",
    "gemm_fraction_of_peak",
    "hbm_fraction",
    "limited_by",
)


def step_parts(run: pr.Run) -> dict:
    """One draw of a run (its own seed) with summary.json's `step_parts` per step kind
    (sim/step_parts.breakdown): what a simulated step of that setup spends, to say why a cell misses
    (`--parts`)."""
    from simserve.resolve import for_scenario
    from simserve.sim.scenario import scenario_timer, simulate_scenario
    from simserve.sim.step_parts import breakdown
    from simserve.workload import arrival_times

    prompt, output = _lengths(run, run.seed)
    n = len(prompt)
    arrived = np.zeros(n) if math.isinf(run.qps) else arrival_times(n, run.qps, "poisson", run.seed)
    with tempfile.TemporaryDirectory() as tmp:
        s, _ = for_scenario(scenario_of(run, run.seed, _write_trace(prompt, output, arrived, Path(tmp))))
        raw, dep = simulate_scenario(s, 1.0)
    got = breakdown(raw.log, scenario_timer(s), dep, block_tokens=s.sim_config().kv_block_tokens())
    return {
        "preemptions": int(raw.reqs.preemptions.sum()),
        **{kind: {k: v[k] for k in PARTS_KEEP} for kind, v in got.items()},
    }


def print_step_parts(key: str, got: dict) -> None:
    print(f"{key}: {got['preemptions']} preemptions")
    for kind, e in got.items():
        if kind in ("preemptions", "all"):
            continue
        p = " ".join(f"{n} {x * 1e3:.2f}" for n, x in e["parts_s"].items() if x)
        print(
            f"  {kind:12s} {e['steps']:6d} steps, mean {e['mean_step_s'] * 1e3:.2f} ms: {p}; "
            f"GEMMs at {e['gemm_fraction_of_peak']:.0%} of dense peak, HBM {e['hbm_fraction']:.0%}; "
            f"limited by {e['limited_by']}"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--split", choices=("fit", "report", "all"), default="all", help="Which half to run.")
    ap.add_argument("--only", default="", help="Comma-separated run keys (default: every run of --split).")
    ap.add_argument("--samples", type=int, default=SAMPLES, help="ShareGPT draws per run (median compared).")
    ap.add_argument(
        "--arrival-draws", type=int, default=ARRIVAL_DRAWS, help="Poisson arrival draws per fixed-length run."
    )
    ap.add_argument(
        "--no-async-scheduling",
        action="store_true",
        help="CI runs of an unstated release without async scheduling (every CPU step serial).",
    )
    ap.add_argument(
        "--run-timeout-s",
        type=int,
        default=RUN_TIMEOUT_S,
        help="Wall seconds per run before it is skipped (0: none).",
    )
    ap.add_argument(
        "--host-speed",
        type=float,
        default=None,
        help="The serving hosts' speed for vLLM's measured CPU costs (default: simserve's, 2.0).",
    )
    ap.add_argument(
        "--parts",
        action="store_true",
        help=(
            "With --only: one draw per run with its step_parts per step kind (why a cell misses); no "
            "comparison."
        ),
    )
    ap.add_argument("--json", type=Path, default=None, help="Also write runs, cells and disagreements here.")
    ap.add_argument(
        "--markdown", type=Path, default=None, help="Also write the per-run rows as markdown here."
    )
    ap.add_argument(
        "--from-json", type=Path, default=None, help="Report a saved --json run; simulate nothing."
    )
    args = ap.parse_args(argv)
    keys = [k for k in args.only.split(",") if k]
    try:
        runs = pr.load()
        if args.from_json:
            saved = json.loads(args.from_json.read_text())["runs"]
            keys = keys or [r["key"] for r in saved]
        unknown = sorted(set(keys) - {r.key for r in runs})
        if unknown:
            raise SimserveError(
                f"unknown run {unknown}; see benchmarks/data/published_runs.toml for the keys"
            )
        for flag, value in (("--samples", args.samples), ("--arrival-draws", args.arrival_draws)):
            if value < 1:
                raise SimserveError(f"{flag} must be at least 1, got {value}")
        chosen = tuple(r for r in runs if (not keys or r.key in keys) and args.split in ("all", r.split))
        if args.parts:
            if not keys:
                raise SimserveError("--parts needs --only KEY[,KEY...]: each run is simulated once, in full")
            parts = {r.key: step_parts(r) for r in chosen}
            for key, got in parts.items():
                print_step_parts(key, got)
            if args.json:
                args.json.write_text(json.dumps(parts, indent=1))
            return 0
        if args.from_json:
            wanted = {r.key for r in chosen}
            results = [r for r in saved if r["key"] in wanted]
        else:
            opts = Options(
                args.samples,
                args.arrival_draws,
                not args.no_async_scheduling,
                args.run_timeout_s,
                args.host_speed,
            )
            results = compare(chosen, opts)
    except (SimserveError, pr.RunDataError, OSError, ValueError, KeyError) as exc:  # bad key, record or file
        print(f"error: {exc}", file=sys.stderr)
        return 2
    halves = ("fit", "report") if args.split == "all" else (args.split,)
    cells = {half: report.cell_table(results, half) for half in halves}
    for half in halves:
        print(
            f"\nmedian |error| per GPU x regime x metric, {half} half (runs in brackets; flagged runs left "
            "out)"
        )
        print(report.format_cells(cells[half]))
    flagged = [r for r in results if r.get("flagged")]
    if flagged:
        print(f"\nflagged (not in the medians): {', '.join(r['key'] + ': ' + r['flagged'] for r in flagged)}")
    disagree = report.disagreement_rows(runs, {r["key"]: r for r in results})
    if args.json:
        doc = {"runs": results, "cells": cells, "disagreements": disagree}
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    if args.markdown:
        by_key = {r.key: r for r in runs}
        text = report.runs_markdown(results, by_key) + "\n\n" + report.disagreements_markdown(disagree) + "\n"
        args.markdown.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
