"""`simserve run`: simulate one deployment, policy and workload; print a summary, write the tables."""

from __future__ import annotations

import contextlib
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import typer

from simserve.cli import app
from simserve.cli.options import seed_option
from simserve.cli.outputs import check_served as _check_served
from simserve.cli.outputs import jsonable as _jsonable

# Options `run`, `sweep`, `plan` and `profile` share: precision, expert parallelism, the context limit. (Here,
# not in a module of their own: a warm `simserve run` imports no other command module.)
DTYPE = typer.Option(
    "bf16",
    "--dtype",
    help="Weights of the linear layers: bf16 | fp8 (fp8 on Ampere: weight-only, bf16 math).",
)
KV_DTYPE = typer.Option("bf16", "--kv-dtype", help="KV cache: bf16 | fp8.")
# `sweep` and `plan`: the serving front end's latency (sim/frontend.py), 0 by default there so that a search's
# results and its cached probes stay engine-side unless asked (`run` below defaults to 10.2 ms).
CAPACITY_FRONTEND_MS = typer.Option(
    0.0,
    "--frontend-ms",
    help="Add the serving front end's latency (HTTP, tokenization, streaming) to every TTFT, and so to "
    "--ttft-slo and the printed and written TTFT, e.g. 10.2 (vLLM's, measured; simserve run's default); "
    "0 (default): engine-side. TBT and scheduling delay never include it.",
)
# The step's parts (predictor/step.py, docs/execution-model.md): on by default where they apply.
SUSTAINED_CLOCK = typer.Option(
    None,
    "--sustained-clock/--no-sustained-clock",
    help=(
        "GEMMs no faster than the GPU sustains at its power limit (default: on where the catalog has the "
        "rate)."
    ),
)
LAUNCH_GAPS = typer.Option(
    None,
    "--launch-gaps/--no-launch-gaps",
    help="--engine vllm: charge CUDA-graph and eager kernel launches by launch mode (default: on with it).",
)
# `sweep` and `plan`: a TPOT bound beside the TBT (ITL) one, TPOT as `vllm bench serve` computes it per
# request, (completion − first token) / (output − 1), its quantile over requests (tune/capacity.py,
# OBJECTIVES).
TPOT_SLO = typer.Option(
    None,
    "--tpot-slo",
    help="Also bound TPOT (seconds): a request's (completion − first token) / (output − 1), as vllm bench "
    "serve reports it, at --tpot-quantile over requests.",
)
TPOT_QUANTILE = typer.Option(0.99, "--tpot-quantile", help="Which TPOT quantile --tpot-slo bounds.")
EP = typer.Option(
    1, "--ep", help="Expert parallelism of a MoE model: whole experts over EP GPUs of each stage's TP group."
)
MOE_SKEW = typer.Option(
    0.0, "--moe-skew", help="Router token spread: 0 balanced; s > 0 Zipf(s) expert popularity (busiest GPU)."
)
DP_ATTENTION = typer.Option(
    1,
    "--dp-attention",
    help="Attention data parallelism of a MoE model (vLLM --data-parallel-size with "
    "--enable-expert-parallel): DP ranks of --tp GPUs, each with its own requests and KV cache, sharing "
    "experts over --ep = DP x TP GPUs.",
)
SPECULATIVE = typer.Option(
    None,
    "--speculative",
    help="vllm-v1: speculative decoding as vLLM 0.33.0 runs it (--speculative-config method): eagle | "
    "eagle3 | mtp | ngram; sglang: eagle | eagle3 as SGLang 0.5.23 runs it (--speculative-algorithm "
    "EAGLE|EAGLE3, --speculative-eagle-topk 1) (docs/speculative.md).",
)
NUM_SPECULATIVE_TOKENS = typer.Option(
    None,
    "--num-speculative-tokens",
    help="--speculative: draft tokens per step, K (vLLM's num_speculative_tokens; SGLang's "
    "--speculative-num-steps, with --speculative-num-draft-tokens K+1).",
)
ACCEPTANCE = typer.Option(
    None,
    "--acceptance",
    help="--speculative: cumulative acceptance per draft position, a CSV position,acceptance or a JSON list "
    "(default: the catalog's published rates for the model and trace).",
)
ALL2ALL_BACKEND = typer.Option(
    "allgather_reducescatter",
    "--all2all-backend",
    help="With --dp-attention: how ranks exchange expert tokens, vLLM's --all2all-backend: "
    "allgather_reducescatter (its default; NCCL model/all-reduce rows) | deepep_low_latency | "
    "deepep_high_throughput (measured profiles only).",
)
ALLOW_LONG_CONTEXT = typer.Option(
    False,
    "--allow-long-context",
    help="Allow --max-model-len (or the trace's default) beyond the model's context limit, as the paper did.",
)
# The autoscaler's options (cli/autoscale.py, imported only when they are used)
AUTOSCALE = typer.Option(
    None,
    "--autoscale",
    help="MIN:MAX replicas: an autoscaler adds and removes replicas during the run (--replicas is the count "
    "at the start); each new one pays a cold start; writes replicas.csv and replicas.png.",
)
SCALE_POLICY = typer.Option(
    "utilization",
    "--scale-policy",
    help="utilization (Kubernetes HPA on KV-cache usage) | queue (Dynamo's load planner: queued prompt "
    "tokens) | slo (Dynamo's SLA planner: predicted rate / one replica's capacity at the SLO).",
)
SCALE_INTERVAL = typer.Option(
    None,
    "--scale-interval",
    help="Seconds between decisions (default: HPA 15, Dynamo load 5, Dynamo SLA 180).",
)
SCALE_TARGET = typer.Option(
    None, "--scale-target", help="utilization: the KV-cache usage to hold (default 0.5)."
)
COLD_START = typer.Option(
    None,
    "--cold-start-s",
    help="A new replica's start-up in seconds (default: weights from --weights-from + torch.compile + CUDA "
    "graphs + engine start, vLLM 0.33.0's).",
)
WEIGHTS_FROM = typer.Option(
    "s3", "--weights-from", help="Where a new replica loads weights: gp3 | io2 | s3 | weka | vast."
)
REPLICA_CAPACITY = typer.Option(
    None,
    "--replica-capacity",
    help=(
        "slo: one replica's capacity in requests/s at the SLO (default: simserve's capacity search, cached)."
    ),
)
SCALE_TTFT_SLO = typer.Option(
    None, "--ttft-slo", help="With --autoscale: the TTFT bound of SLO attainment (default 0.5 s)."
)
SCALE_TPOT_SLO = typer.Option(
    None, "--tpot-slo", help="With --autoscale: the TPOT bound of SLO attainment (default 0.05 s)."
)
NO_PLOTS = typer.Option(False, "--no-plots", help="With --autoscale: skip replicas.png.")


def _default_out(
    model: str, gpu: str, tp: int, pp: int, policy: str, budget: int | None, trace: str, qps: float, seed: int
) -> Path:
    b = f"-b{budget}" if budget else ""
    from simserve.catalog.hf_config import is_config_path

    if is_config_path(model):  # a config.json path: the model's folder name, not the path, names the run
        p = Path(model).expanduser()
        model = (p if p.is_dir() else p.parent).name or "model"
    from simserve.workload.bench_datasets import is_spec

    # a bench dataset spec (random:1024:128:0.1) names the run with dashes: no colons or dots in a folder name
    name = trace.replace(":", "-").replace(".", "p") if is_spec(trace) else Path(trace).name.split(".")[0]
    return Path("runs") / f"{model}-{gpu}-tp{tp}-pp{pp}-{policy}{b}-{name}-qps{qps:g}-s{seed}"


# The engine release a policy follows, named in the summary's title (simserve/tune/engine.py, sglang.py).
RELEASE_OF = {"sglang": "SGLang 0.5.23"}


@app.command("run")
def run_command(
    model: str = typer.Option("mistral-7b", "--model", help="Model name (see `simserve list models`)."),
    gpu: str = typer.Option("a100", "--gpu", help="GPU name (see `simserve list gpus`)."),
    tp: int = typer.Option(1, "--tp", help="Tensor-parallel degree (GPUs per pipeline stage)."),
    pp: int = typer.Option(1, "--pp", help="Pipeline-parallel degree (stages per replica)."),
    node: str | None = typer.Option(None, "--node", help="The GPU box (default: the GPU's paper testbed)."),
    network: str | None = typer.Option(
        None, "--network", help="Between nodes, when a replica spans several."
    ),
    policy: str | None = typer.Option(
        None,
        "--policy",
        help="fcfs | orca | vllm (the paper's prefill-first vLLM baseline, 2023) | sarathi | chunked | "
        "hybrid | slo-aware | pressure | equal-cost | vllm-v1 (vLLM 0.33.0's V1 scheduler, what --engine "
        "vllm runs) | sglang (SGLang 0.5.23's scheduler). Default: sarathi; vllm-v1 with --engine vllm, "
        "sglang with --engine sglang.",
        show_default=False,
    ),
    budget: int | None = typer.Option(
        None,
        "--budget",
        help="Token budget: sarathi/chunked chunk (512); vllm prefill tokens (max length); adaptive "
        "policies: largest chunk (2048); vllm-v1: --max-num-batched-tokens (2048); sglang: "
        "--chunked-prefill-size (8192).",
    ),
    max_batch: int | None = typer.Option(
        None,
        "--max-batch",
        help="Resident requests (128; orca/fcfs 16, 8 with PP; vllm-v1 256 = --max-num-seqs; sglang: "
        "--max-running-requests, default from the KV pool).",
    ),
    tbt_target: float = typer.Option(
        0.1, "--tbt-target", help="slo-aware/pressure: predicted iteration time to stay under (seconds)."
    ),
    min_budget: int | None = typer.Option(
        None, "--min-budget", help="pressure: the budget with no queue (default a quarter of --budget)."
    ),
    long_prefill_token_threshold: int = typer.Option(
        0, "--long-prefill-token-threshold", help="vllm-v1: cap on one request's chunk (0: off)."
    ),
    long_prefill_token_threshold_adaptive: bool = typer.Option(
        False,
        "--long-prefill-token-threshold-adaptive",
        help=(
            "vllm-v1: floor the threshold at the budget's fair share (budget / running and waiting requests)."
        ),
    ),
    prefix_caching: bool | None = typer.Option(
        None,
        "--prefix-caching/--no-prefix-caching",
        help="vllm-v1: automatic prefix caching as vLLM V1 does it (default: on, as in vLLM); sglang: "
        "SGLang's radix cache (default: off; SGLang's own default is on).",
    ),
    kv_offload_gb: float = typer.Option(
        0.0,
        "--kv-offload-gb",
        help="vllm-v1 with prefix caching: a CPU KV tier of this many GiB per replica (vLLM's "
        "--kv-offloading-size, native backend): blocks stored to host memory as computed, loaded back over "
        "PCIe instead of recomputed.",
    ),
    max_num_partial_prefills: int = typer.Option(
        1,
        "--max-num-partial-prefills",
        help="Removed in vLLM 0.27 (V0 only): only 1 is accepted.",
        hidden=True,
    ),
    max_long_partial_prefills: int = typer.Option(
        1,
        "--max-long-partial-prefills",
        help="Removed in vLLM 0.27 (V0 only): only 1 is accepted.",
        hidden=True,
    ),
    enable_mixed_chunk: bool = typer.Option(
        False, "--enable-mixed-chunk", help="sglang: decodes ride along with prefill batches (SGLang's flag)."
    ),
    schedule_policy: str = typer.Option(
        "fcfs",
        "--schedule-policy",
        help="sglang: the waiting queue's order, fcfs | lof | lpm (SGLang's flag).",
    ),
    schedule_conservativeness: float = typer.Option(
        1.0, "--schedule-conservativeness", help="sglang: scales new_token_ratio's start (SGLang's flag)."
    ),
    page_size: int = typer.Option(1, "--page-size", help="sglang: KV page size in tokens (SGLang's flag)."),
    ignore_eos: bool = typer.Option(
        True,
        "--ignore-eos/--no-ignore-eos",
        help="sglang: the client sends ignore_eos (sglang.bench_serving's default), so admission reserves "
        "each running request's remaining output; without it SGLang's new_token_ratio estimate.",
    ),
    trace: str = typer.Option(
        "sharegpt",
        "--trace",
        help="A shipped trace name, a trace file, or a `vllm bench serve` dataset: "
        "random[:IN[:OUT[:RATIO]]], fixed:IN:OUT, sharegpt-bench[:OUT].",
    ),
    qps: float = typer.Option(1.0, "--qps", help="Request rate (requests per second); inf: all at t = 0."),
    max_concurrency: int | None = typer.Option(
        None,
        "--max-concurrency",
        help="Closed-loop client (vllm bench serve's flag): at most N requests in flight; the next is sent "
        "when one finishes (and not before its --qps time).",
    ),
    requests: int | None = typer.Option(
        None,
        "--requests",
        help="Requests to simulate: sampled from the trace (default 2048); with --arrival replay or "
        "conversation the first N in the trace's order (default: the whole trace).",
    ),
    seed: int = seed_option("Seeds the request sample and the arrivals."),
    replicas: int = typer.Option(1, "--replicas", help="Independent replicas behind the router."),
    router: str = typer.Option(
        "rr",
        "--router",
        help="rr (round robin) | lor (least outstanding requests) | kv (least KV usage) | prefix-aware "
        "(llm-d's default scorers: queue, KV usage, cached prefix blocks by its routing index). "
        "docs/traffic.md.",
    ),
    router_weights: str = typer.Option(
        "2,2,3",
        "--router-weights",
        help="prefix-aware: the weights of its queue, KV-usage and prefix scores (llm-d's defaults 2,2,3).",
    ),
    arrival: str = typer.Option(
        "poisson",
        "--arrival",
        help="poisson | poisson-clipped | gamma | vllm-bench (its client's gaps) | replay | conversation (a "
        "multi-turn trace's rounds, each sent its recorded gap after the previous round's answer).",
    ),
    time_scale: float = typer.Option(
        1.0,
        "--time-scale",
        help="replay / conversation: multiply the recorded times (and think times) by this.",
    ),
    load_curve: Path | None = typer.Option(
        None,
        "--load-curve",
        help="CSV time_s,multiplier: the request rate multiplied by a step curve over time "
        "(synthetic arrivals warped in time; --arrival replay thinned or duplicated with --seed).",
    ),
    cv: float = typer.Option(
        1.0,
        "--cv",
        help="Coefficient of variation of gamma / vllm-bench gaps (vLLM's --burstiness is 1/cv²).",
    ),
    max_model_len: int | None = typer.Option(
        None, "--max-model-len", help="Default 8192 (sharegpt), 16384 (arxiv)."
    ),
    memory_utilization: float | None = typer.Option(
        None,
        "--memory-utilization",
        help="Fraction of GPU memory the engine may use (0.85; with --engine vllm 0.92, vLLM 0.33.0's "
        "default; for sglang SGLang 0.5.23's --mem-fraction-static default on the GPU).",
    ),
    profiles: str | None = typer.Option(None, "--profiles", help="Profiles root (default: profiles/)."),
    out: Path | None = typer.Option(
        None, "--out", help="Output directory (default runs/<scenario>/); each file lands whole."
    ),
    force: bool = typer.Option(
        False, "--force", help="Write into an --out directory that holds other files (none is deleted)."
    ),
    fmt: str = typer.Option("csv", "--format", help="csv | parquet (needs pyarrow) for the two tables."),
    iterations: str = typer.Option(
        "all",
        "--iterations",
        help="all | sampled (at most 200,000 evenly spaced rows) | none: the iterations table.",
    ),
    exact: bool = typer.Option(
        False, "--exact", help="No effect (kept for old scripts): every run has one event per iteration now."
    ),
    stop_when_overloaded: bool = typer.Option(
        False,
        "--stop-when-overloaded",
        help=(
            "Stop at the first sign of unbounded queueing, as capacity probes do (default: serve every "
            "request)."
        ),
    ),
    cpu_overhead: bool = typer.Option(
        True,
        "--cpu-overhead/--no-cpu-overhead",
        help="Charge the engine's per-iteration CPU work (schedule, inputs, sampling, outputs).",
    ),
    ray_comm: bool = typer.Option(
        False, "--ray-comm", help="Also charge the driver → worker Ray round trip of a Ray-actor engine."
    ),
    dtype: str = DTYPE,
    kv_dtype: str = KV_DTYPE,
    ep: int = EP,
    moe_skew: float = MOE_SKEW,
    dp_attention: int = DP_ATTENTION,
    all2all_backend: str = ALL2ALL_BACKEND,
    allow_long_context: bool = ALLOW_LONG_CONTEXT,
    speculative: str | None = SPECULATIVE,
    num_speculative_tokens: int | None = NUM_SPECULATIVE_TOKENS,
    acceptance: str | None = ACCEPTANCE,
    engine: str | None = typer.Option(
        None,
        "--engine",
        help="vllm: run as vLLM 0.33.0's worker does (the vllm-v1 policy): its memory profile, CUDA graphs; "
        "sglang: SGLang 0.5.23 (the sglang policy).",
    ),
    enforce_eager: bool = typer.Option(
        False,
        "--enforce-eager",
        help="--engine vllm: no CUDA graphs (vLLM's flag): no padding, no graph memory.",
    ),
    async_scheduling: bool | None = typer.Option(
        None,
        "--async-scheduling/--no-async-scheduling",
        help="--engine vllm: schedule the next step while this one runs (vLLM 0.33.0's default without PP).",
    ),
    launch_gaps: bool | None = LAUNCH_GAPS,
    sustained_clock: bool | None = SUSTAINED_CLOCK,
    disable_overlap_schedule: bool = typer.Option(
        False,
        "--disable-overlap-schedule",
        help=(
            "--engine sglang: charge every step's CPU work (SGLang's flag; its overlap scheduler is on by "
            "default)."
        ),
    ),
    frontend: str | None = typer.Option(
        None,
        "--frontend",
        help="server: the API server as a FIFO queue of CPU work per request and streamed token (default; "
        "SGLang and disaggregated runs: constant); constant: --frontend-ms alone; off: engine-side "
        "latencies (--paper-setup).",
    ),
    api_server_count: int | None = typer.Option(
        None,
        "--api-server-count",
        help="--frontend server: vLLM's API-server processes per deployment (default: its own, the DP size).",
    ),
    api_endpoint: str = typer.Option(
        "completions",
        "--api-endpoint",
        help=(
            "--frontend server: the endpoint clients call, completions or chat (vLLM 0.33.0's measured "
            "costs of each)."
        ),
    ),
    host_speed: float | None = typer.Option(
        None,
        "--host-speed",
        help="The serving host's single-thread speed relative to the host vLLM 0.33.0's CPU costs were "
        "measured on (tools/engine_cpu_refbench.py's ratio); scales --engine vllm's and --engine sglang's "
        "engine CPU and --frontend server's. Default 2.0 (a DGX H100/H200 host's Xeon 8480C at its all-core "
        "turbo: docs/step-anatomy.md).",
    ),
    frontend_ms: float | None = typer.Option(
        None,
        "--frontend-ms",
        help="Latency added to TTFT and e2e: default 10.2 ms, vLLM's client minus server TTFT, measured "
        "(with --frontend server: the network and client beside the API server's CPU); 0: none.",
    ),
    paper_setup: bool = typer.Option(
        False,
        "--paper-setup",
        help="Run as the paper's trials were: clipped Poisson arrivals, the Ray round trip, a 30-minute cap.",
    ),
    prefill: str | None = typer.Option(
        None,
        "--prefill",
        help="Disaggregated: the prefill pool, replicas x TP (2xTP2, 1xTP4PP2, 2xTP2EP2, 2xTP2@h100).",
    ),
    decode: str | None = typer.Option(
        None, "--decode", help="Disaggregated: the decode pool (as --prefill)."
    ),
    kv_link: str | None = typer.Option(
        None,
        "--kv-link",
        help="Disaggregated: nvlink | pcie | a network (default: the node's own, if one holds both).",
    ),
    decode_router: str = typer.Option(
        "kv",
        "--decode-router",
        help="Disaggregated: rr | lor | kv (most free KV blocks); --router is the prefill's.",
    ),
    autoscale: str | None = AUTOSCALE,
    scale_policy: str = SCALE_POLICY,
    scale_interval: float | None = SCALE_INTERVAL,
    scale_target: float | None = SCALE_TARGET,
    cold_start_s: float | None = COLD_START,
    weights_from: str = WEIGHTS_FROM,
    replica_capacity: float | None = REPLICA_CAPACITY,
    ttft_slo: float | None = SCALE_TTFT_SLO,
    tpot_slo: float | None = SCALE_TPOT_SLO,
    no_plots: bool = NO_PLOTS,
) -> None:
    """Simulate serving a trace; writes requests, iterations, summary.json and a Perfetto trace.json."""
    from rich.table import Table

    from simserve.cli.console import console as make_console
    from simserve.errors import SimserveError
    from simserve.io import check_out_dir, output_dir
    from simserve.sim.config import check_requests
    from simserve.sim.metrics import summarize
    from simserve.sim.perfetto import write_chrome_trace
    from simserve.sim.scenario import (
        Scenario,
        scenario_fields,
        simulate_scenario,
        workload_drops,
        workload_notes,
    )
    from simserve.sim.scenario import paper_setup as paper
    from simserve.sim.writers import check_options, write_tables

    if requests is not None:
        check_requests(requests)  # before the profile and the trace are loaded
    check_options(fmt, iterations)
    policy = _policy(policy, engine)
    sglang_flags = {
        "--enable-mixed-chunk": enable_mixed_chunk,
        "--schedule-policy": schedule_policy != "fcfs",
        "--schedule-conservativeness": schedule_conservativeness != 1.0,
        "--page-size": page_size != 1,
        "--no-ignore-eos": not ignore_eos,
    }
    if disable_overlap_schedule and engine != "sglang":
        raise SimserveError("--disable-overlap-schedule is SGLang's flag: add --engine sglang")
    given = [flag for flag, set_ in sglang_flags.items() if set_]
    if given and policy != "sglang":
        raise SimserveError(f"{given[0]} is an SGLang flag: use it with --policy sglang, or drop it")
    # vLLM V1's scheduler flags: another policy would run without them, silently (SimConfig keeps them for
    # vllm-v1)
    vllm_flags = {
        "--long-prefill-token-threshold": long_prefill_token_threshold != 0,
        "--long-prefill-token-threshold-adaptive": long_prefill_token_threshold_adaptive,
    }
    given = [flag for flag, set_ in vllm_flags.items() if set_]
    if given and policy != "vllm-v1":
        raise SimserveError(
            f"{given[0]} is a vLLM flag: use it with --policy vllm-v1 (or --engine vllm), or drop it"
        )
    if budget is not None and policy in ("fcfs", "orca", "hybrid"):  # SimConfig.token_budget: they have none
        raise SimserveError(
            f"--policy {policy} has no token budget (orca/fcfs: whole prompts, no token limit; hybrid: "
            f"the max model length): drop --budget, or use --policy sarathi"
        )
    # the adaptive policies' knobs, and the disaggregated layout's: without them they would change nothing
    knobs = {
        "--tbt-target": (tbt_target != 0.1, ("slo-aware", "pressure")),
        "--min-budget": (min_budget is not None, ("pressure",)),
    }
    for flag, (set_, users) in knobs.items():
        if set_ and policy not in users:
            raise SimserveError(
                f"{flag} is a knob of --policy {' or '.join(users)}; --policy {policy} does not "
                f"read it: drop it, or use --policy {users[0]}"
            )
    if prefill is None and decode is None:
        given = [
            f
            for f, set_ in (("--kv-link", kv_link is not None), ("--decode-router", decode_router != "kv"))
            if set_
        ]
        if given:
            raise SimserveError(
                f"{given[0]} belongs to a disaggregated run: add --prefill and --decode (e.g. 2xTP2 "
                f"and 1xTP4), or drop it"
            )
    elif kv_offload_gb:
        raise SimserveError(
            "--kv-offload-gb is modelled for aggregated replicas; drop it, or drop --prefill/--decode"
        )
    # the arrival processes' own knobs: another process would draw its times without them
    if time_scale != 1.0 and arrival not in ("replay", "conversation"):
        raise SimserveError(
            f"--time-scale scales recorded arrival times (--arrival replay or conversation); "
            f"--arrival {arrival} draws its own: drop --time-scale, or set the rate with --qps"
        )
    if load_curve is not None:  # read and checked before the profile and the trace are loaded
        from simserve.workload.load_curve import load_curve as read_curve

        read_curve(str(load_curve))
        if prefill is not None or decode is not None:
            raise SimserveError(
                "--load-curve shapes an aggregated run's arrivals; drop it, or --prefill/--decode"
            )
        if arrival == "conversation":
            raise SimserveError(
                "--load-curve cannot reshape --arrival conversation (its rounds follow their "
                "answers); use --arrival replay, or a synthetic --arrival"
            )
    if cv != 1.0 and arrival not in ("gamma", "vllm-bench"):
        raise SimserveError(
            f"--cv shapes the gaps of --arrival gamma or vllm-bench; --arrival {arrival} has no such "
            f"knob: drop --cv, or add --arrival gamma"
        )
    scale_flags = {
        "--scale-policy": scale_policy != "utilization",
        "--scale-interval": scale_interval is not None,
        "--scale-target": scale_target is not None,
        "--cold-start-s": cold_start_s is not None,
        "--weights-from": weights_from != "s3",
        "--replica-capacity": replica_capacity is not None,
        "--ttft-slo": ttft_slo is not None,
        "--tpot-slo": tpot_slo is not None,
        "--no-plots": no_plots,
    }
    if autoscale is not None or any(scale_flags.values()):
        from simserve.cli import autoscale as scaling
        from simserve.sim.scale_report import TPOT_SLO_S, TTFT_SLO_S
        from simserve.tune.autoscaling import configure as configure_autoscaling

        scaling.check_flags(autoscale, prefill is not None or decode is not None, scale_flags)
        ttft_slo = TTFT_SLO_S if ttft_slo is None else ttft_slo
        tpot_slo = TPOT_SLO_S if tpot_slo is None else tpot_slo
    _, frontend_ms, api_server_count = _frontend(
        frontend,
        frontend_ms,
        api_server_count,
        paper_setup,
        policy,
        prefill is not None or decode is not None,
        dp_attention,
    )
    scenario = Scenario(
        model=model,
        gpu=gpu,
        tp=tp,
        pp=pp,
        node=node,
        network=network,
        trace=trace,
        num_requests=2048 if requests is None else requests,
        arrival=arrival,
        cv=cv,
        time_scale=time_scale,
        load_curve=None if load_curve is None else str(load_curve),
        policy=policy,
        budget=budget,
        max_batch=max_batch,
        num_replicas=replicas,
        router=router,
        router_weights=_router_weights(router_weights, router),
        seed=seed,
        max_model_len=max_model_len,
        memory_utilization=_memory_utilization(
            memory_utilization, engine, policy, model, gpu, tp, pp, budget, dp_attention
        ),
        profiles_root=profiles,
        stretch=not exact,
        stop_when_overloaded=stop_when_overloaded,
        cpu_overhead=cpu_overhead,
        ray_comm=ray_comm,
        tbt_target_s=tbt_target,
        min_budget=min_budget,
        long_prefill_token_threshold=long_prefill_token_threshold,
        long_prefill_token_threshold_adaptive=long_prefill_token_threshold_adaptive,
        prefix_caching=policy == "vllm-v1" if prefix_caching is None else prefix_caching,
        kv_offload_gb=kv_offload_gb,
        max_num_partial_prefills=max_num_partial_prefills,
        max_long_partial_prefills=max_long_partial_prefills,
        dtype=dtype,
        kv_dtype=kv_dtype,
        ep=ep,
        moe_skew=moe_skew,
        dp_attention=dp_attention,
        all2all_backend=all2all_backend,
        allow_long_context=allow_long_context,
        enable_mixed_chunk=enable_mixed_chunk,
        schedule_policy=schedule_policy,
        schedule_conservativeness=schedule_conservativeness,
        page_size=page_size,
        ignore_eos=ignore_eos,
        max_concurrency=max_concurrency,
        vllm_worker=_engine(engine, enforce_eager),
        enforce_eager=enforce_eager,
        async_scheduling=async_scheduling,
        launch_gaps=launch_gaps,
        sustained_clock=sustained_clock,
        overlap_schedule=engine == "sglang" and not disable_overlap_schedule,
        frontend_ms=frontend_ms,
        api_server_count=api_server_count,
        host_speed=host_speed,
        api_endpoint=api_endpoint,
        speculative=speculative,
        num_speculative_tokens=num_speculative_tokens,
        acceptance=acceptance,
    )
    if speculative is not None and (prefill is not None or decode is not None):
        raise SimserveError(
            "--speculative is not modelled for disaggregated runs yet: drop --prefill/--decode or it"
        )
    spec = scenario.speculation()  # vLLM's refusals and the acceptance file, before anything is simulated
    if policy == "sglang":  # what SGLang's flags cannot say (PP, EP outside the TP group, DeepEP)
        from simserve.tune.sglang import check_sglang_scenario

        check_sglang_scenario(scenario)
    if paper_setup:
        if stop_when_overloaded:
            raise SimserveError("--paper-setup runs every trial in full; drop --stop-when-overloaded")
        scenario = paper(scenario)
    if requests is None and arrival in ("replay", "conversation"):  # a recorded trace: all of it, in order
        from simserve.sim.scenario import whole_trace

        scenario = whole_trace(scenario)
    if prefill is not None or decode is not None:
        from simserve.cli.disagg import run_disaggregated

        run_disaggregated(scenario, prefill, decode, kv_link, decode_router, qps, out, force, fmt, iterations)
        return
    if out is None:
        out = _default_out(model, gpu, tp, pp, policy, budget, trace, qps, seed)
        if autoscale is not None:  # an autoscaled run of the same scenario lands beside the fixed one
            out = out.with_name(f"{out.name}-autoscale-{scale_policy}")
    out = check_out_dir(out, force)
    from simserve.resolve import for_scenario

    # no shipped profile covers it: build one (measured if it can)
    scenario, generated = for_scenario(scenario)
    if generated:
        make_console().print(generated, highlight=False, soft_wrap=True)
    cold = None
    if autoscale is not None:  # its replicas' cold start, and (slo) one replica's capacity: before the run
        scenario, cold = configure_autoscaling(
            scenario,
            autoscale,
            scale_policy,
            scale_interval,
            scale_target,
            cold_start_s,
            weights_from,
            replica_capacity,
            ttft_slo,
            tpot_slo,
        )
    with _progress_bar(scenario.num_requests) as progress:
        raw, dep = simulate_scenario(scenario, qps, progress=progress)
    summary = summarize(raw, dep).as_dict()
    _check_served(summary, scenario)  # before anything is written
    from simserve.sim.bench_report import bench_metrics, format_bench

    bench = bench_metrics(raw, qps)
    # the send times
    arrivals = _Arrivals.of(scenario, qps, raw.reqs.arrived if raw.api is None else raw.api.sent)
    notes = workload_notes(scenario)
    printed = []  # notes for the terminal only (summary.json holds these numbers as fields)
    if engine == "sglang":
        printed.append(
            "SGLang 0.5.23 overlap scheduler: "
            + (
                "on (schedule, inputs and output processing hidden "
                "behind the GPU step; --disable-overlap-schedule)"
                if scenario.overlap_schedule
                else "off"
            )
            + "; engine CPU per step: its scheduler's, measured, at host speed "
            f"{scenario.serving_host_speed():g} (--host-speed; the GPU worker's: Vidur's stand-in, "
            "docs/step-anatomy.md § SGLang)"
        )
    # the title names the release, whose default is the overlap scheduler: say it is not run
    elif policy == "sglang":
        printed.append(
            "SGLang 0.5.23 overlap scheduler: off (--policy sglang is its scheduler alone, every step's CPU "
            "work charged; --engine sglang runs it as the release does by default)"
        )
    if raw.api is not None:
        api = summary["api_server"]
        use = ", ".join(f"{u:.0%}" for u in api["utilization"])
        printed.append(
            f"API server: {api['processes']} process(es), {api['request_cpu_ms']:.3g} ms CPU per request + "
            f"{api['prompt_token_cpu_ms'] * 1e3:.3g} µs per prompt token + {api['output_token_cpu_ms']:.3g} "
            f"ms per streamed token (vLLM 0.33.0's {scenario.api_endpoint}, measured, at host speed "
            f"{scenario.serving_host_speed():g}: --host-speed), busy {use}; TTFT and end-to-end are the "
            f"client's, plus {scenario.frontend_ms:g} ms of network (--frontend-ms); --frontend off for "
            "engine-side latencies"
        )
    elif scenario.frontend_ms:
        printed.append(
            f"TTFT and end-to-end include {scenario.frontend_ms:g} ms of serving front end (HTTP, "
            "tokenization, streaming; --frontend-ms, 0 for engine-side latencies)"
        )
    memory = scenario.worker_memory()
    if memory is not None:
        sizes = scenario.cudagraph_sizes()
        graphs = (
            f"CUDA graphs for batches of 1–{sizes[-1]} tokens ({len(sizes)} sizes)"
            if sizes
            else "no CUDA graphs"
        )
        sched = (
            "async scheduling (schedule, inputs and outputs overlap the GPU step)"
            if scenario.scheduling_is_async()
            else "sync scheduling"
        )
        cpu = (
            f"engine CPU per step: vLLM 0.33.0's, measured, at host speed {scenario.serving_host_speed():g} "
            "(--host-speed; the model runner's: Vidur's stand-in, docs/step-anatomy.md)"
        )
        printed.append(f"vLLM 0.33.0 worker: {graphs}; {sched}; {cpu}; {memory.describe()}")
    if scenario.router == "prefix-aware" and not scenario.prefix_caching:
        printed.append(
            "--router prefix-aware routes by its own index of the prompts it routed (llm-d's approximate "
            "mode); the replicas do not cache prefixes here (add --prefix-caching), so nothing is served "
            "from cache: only its load terms and its affinity shape the routing"
        )
    if spec is not None:
        rates = ", ".join(f"{a:.3g}" for a in spec.acceptance)
        # SGLang's flags, and its KV reserve per request (sglang.spec_reserve)
        if scenario.policy == "sglang":
            from simserve.sim.sglang import spec_reserve

            how = (
                f"K = {spec.k} (SGLang's --speculative-algorithm {spec.method.upper()} "
                f"--speculative-num-steps {spec.k} --speculative-eagle-topk 1 --speculative-num-draft-tokens "
                f"{spec.k + 1}), {spec_reserve(spec.k)} KV tokens reserved per request past its committed "
                "ones"
            )
        else:
            how = f"K = {spec.k} (vLLM's num_speculative_tokens), lookahead {spec.lookahead} KV slots"
        printed.append(
            f"speculative decoding: {spec.method}, {how}; cumulative acceptance per position {rates} from "
            f"{spec.source}, drawn per request and step with seed {scenario.seed} "
            "(docs/speculative.md)"
        )
    parts = _step_parts(scenario, raw, dep)
    if parts.get("all"):
        printed.append(_parts_line(scenario, parts))
    from simserve.predictor.load import profile_label

    profile = profile_label(dep, scenario.profiles_root)
    with output_dir(out, force) as tmp:
        write_tables(raw, tmp, fmt, iterations)  # streamed in chunks: no whole-table DataFrames
        write_chrome_trace(tmp / "trace.json", raw.log)
        echo = scenario_fields(scenario)
        doc = {
            "scenario": echo if autoscale is None else scaling.scenario_echo(echo),
            "qps": qps,
            "summary": summary,
            "notes": notes,
            "trace_dropped": workload_drops(scenario),
            "profile": profile,
            "vllm_bench_serve": bench,
        }
        if scenario.policy in RELEASE_OF:
            doc["release"] = RELEASE_OF[scenario.policy]
        if memory is not None:
            doc["vllm_worker"] = {
                **memory.as_dict(),
                "cudagraph_capture_sizes": list(scenario.cudagraph_sizes()),
            }
        doc["step_parts"] = {"switches": scenario.step_parts(), **parts}
        # replicas.csv, replicas.png and the section's GPU-hours and SLO attainment
        if raw.scaler is not None:
            doc["autoscale"] = scaling.write_outputs(
                tmp, raw, scenario, dep, cold, ttft_slo, tpot_slo, not no_plots
            )
            printed.append(scaling.describe(doc["autoscale"]))
        if spec is not None:
            doc["speculative"] = {
                "method": spec.method,
                "num_speculative_tokens": spec.k,
                "lookahead": spec.lookahead,
                "acceptance": list(spec.acceptance),
                "acceptance_source": spec.source,
            }
        (tmp / "summary.json").write_text(json.dumps(_jsonable(doc), indent=2, sort_keys=True) + "\n")
    _print_summary(
        make_console(),
        Table,
        scenario,
        dep,
        arrivals,
        summary,
        out,
        notes + printed + [f"op times from a {profile} profile"],
    )
    if _bench_client(scenario, qps):  # a `vllm bench serve` workload or client: its own printout, to compare
        make_console().print(format_bench(bench), highlight=False, soft_wrap=True)


def _step_parts(scenario, raw, dep) -> dict:
    """summary.json's step breakdown (sim/step_parts.py); {} where the timer is not a profiled one."""
    from simserve.sim.scenario import scenario_timer
    from simserve.sim.step_parts import breakdown

    if scenario.dp_attention > 1:  # lockstep ranks: their steps are not one timer's
        return {}
    return breakdown(raw.log, scenario_timer(scenario), dep, block_tokens=raw.cfg.kv_block_tokens())


def _parts_line(scenario, parts: dict) -> str:
    on = [k.replace("_", " ") for k, v in scenario.step_parts().items() if v]
    kinds = ", ".join(
        f"{k.replace('_', '-')} {v['mean_step_s'] * 1e3:.2f} ms at {v['gemm_fraction_of_peak']:.0%} of "
        f"dense peak, limited by {v['limited_by']}"
        for k, v in parts.items()
        if k != "all"
    )
    return f"step parts ({', '.join(on) or 'kernels only'}): {kinds} (summary.json step_parts)"


def _router_weights(text: str, router: str) -> tuple[float, float, float]:
    """--router-weights QUEUE,KV,PREFIX as numbers (SimConfig.validate checks their range)."""
    from simserve.errors import SimserveError
    from simserve.sim.config import DEFAULT_ROUTER_WEIGHTS

    try:
        weights = tuple(float(x) for x in text.split(","))
    except ValueError:
        weights = ()
    if len(weights) != 3:
        raise SimserveError(
            f"--router-weights takes three numbers QUEUE,KV,PREFIX (llm-d's default 2,2,3), got {text!r}"
        )
    if router != "prefix-aware" and weights != DEFAULT_ROUTER_WEIGHTS:
        raise SimserveError(
            f"--router-weights weighs the prefix-aware router's scores; --router {router} has none: "
            f"add --router prefix-aware, or drop --router-weights"
        )
    return weights


def _frontend(
    mode: str | None,
    ms: float | None,
    count: int | None,
    paper_setup: bool,
    policy: str,
    disaggregated: bool,
    dp: int,
) -> tuple[str, float, int]:
    """(--frontend, --frontend-ms, API-server processes per deployment; 0: no server model), checked."""
    from simserve.errors import SimserveError
    from simserve.sim.frontend import (
        DEFAULT_FRONTEND_MS,
        FRONTENDS,
        check_api_server_count,
        check_frontend_ms,
    )

    if mode is not None and mode not in FRONTENDS:
        raise SimserveError(f"unknown --frontend {mode!r}; choose server, constant or off")
    if paper_setup:
        if mode not in (None, "off") or ms or count is not None:
            given = (
                "--frontend" if mode not in (None, "off") else "--frontend-ms" if ms else "--api-server-count"
            )
            raise SimserveError(
                f"--paper-setup reports engine-side latencies, as the paper did; drop {given}"
            )
        return "off", 0.0, 0
    if mode == "server" and policy == "sglang":
        raise SimserveError(
            "--frontend server has vLLM's API-server costs; SGLang's are not measured yet: use "
            "--frontend constant (its default) or off"
        )
    if mode == "server" and disaggregated:
        raise SimserveError(
            "--frontend server is not modelled for disaggregated runs yet: use --frontend constant or off"
        )
    if mode is None:
        mode = "constant" if policy == "sglang" or disaggregated else "server"
    if count is not None and mode != "server":
        raise SimserveError(
            f"--api-server-count sizes --frontend server's API servers; --frontend {mode} has none: "
            "drop it, or use --frontend server"
        )
    if mode == "off":
        if ms:
            raise SimserveError("--frontend off reports engine-side latencies; drop --frontend-ms")
        return mode, 0.0, 0
    ms = DEFAULT_FRONTEND_MS if ms is None else check_frontend_ms(ms)
    if mode == "constant":
        return mode, ms, 0
    # vLLM's default: the DP size
    return mode, ms, check_api_server_count(max(dp, 1) if count is None else count)


def _policy(policy: str | None, engine: str | None) -> str:
    """--policy, else the engine's own scheduler (vllm-v1 for --engine vllm, sglang for --engine sglang), else
    sarathi. An engine runs only its own scheduler: another --policy beside it is refused, not replaced."""
    from simserve.errors import SimserveError

    if engine not in (None, "vllm", "sglang"):
        raise SimserveError(
            f"unknown --engine {engine!r}; choose vllm (vLLM 0.33.0) or sglang (SGLang 0.5.23, the sglang "
            "policy)"
        )
    own = {"vllm": "vllm-v1", "sglang": "sglang"}.get(engine or "")
    if policy is None:
        return own or "sarathi"
    if own and policy != own:
        raise SimserveError(f"--engine {engine} runs the {own} policy: drop --policy {policy}")
    return policy


def _engine(engine: str | None, enforce_eager: bool) -> bool:
    from simserve.errors import SimserveError

    if enforce_eager and engine != "vllm":
        raise SimserveError("--enforce-eager is a vLLM worker flag: use it with --engine vllm, or drop it")
    return engine == "vllm"


def _bench_client(scenario, qps: float) -> bool:
    from simserve.workload.bench_datasets import is_spec

    return (
        is_spec(scenario.trace)
        or scenario.max_concurrency is not None
        or math.isinf(qps)
        or scenario.arrival == "vllm-bench"
    )


def _memory_utilization(
    given: float | None,
    engine: str | None,
    policy: str,
    model: str,
    gpu: str,
    tp: int,
    pp: int,
    budget: int | None,
    dp: int = 1,
) -> float:
    """--memory-utilization, else 0.85 (the paper's); with --engine vllm vLLM 0.33.0's default; for sglang the
    pinned release's default --mem-fraction-static for the GPU and chunk size (weights + KV; activations set
    aside)."""
    if given is not None:
        return given
    if engine == "vllm":
        from simserve.tune.engine import VLLM_GPU_MEMORY_UTILIZATION

        return VLLM_GPU_MEMORY_UTILIZATION
    if policy != "sglang":
        return 0.85
    from simserve.catalog import GPUSpec, ModelSpec
    from simserve.tune.sglang import sglang_defaults

    hf_id = ModelSpec.from_name(model).hf_id
    return sglang_defaults(
        GPUSpec.from_name(gpu).memory_gib, tp, pp, hf_id, budget, max(dp, 1)
    ).mem_fraction_static


@contextlib.contextmanager
def _progress_bar(total: int):
    """A rich progress bar on a terminal for runs long enough to want one; nothing otherwise."""
    if total < 20_000 or not sys.stderr.isatty():
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("simulating"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, transient=True) as bar:
        task = bar.add_task("requests", total=total)
        yield lambda done, _: bar.update(task, completed=done)


@dataclass(frozen=True)
class _Arrivals:
    """How the requests arrived, in words: a rate, a recorded replay, or one burst."""

    load: str  # what the title says after the trace
    burst: bool  # every request arrived at once: a finite queue that drains, never an unbounded one
    replay: bool

    @classmethod
    def of(cls, scenario, qps: float, arrived) -> _Arrivals:
        # NOTE: replay ignores --qps (it keeps the trace's recorded times), so a title "at 1 QPS" was false.
        closed = "" if scenario.max_concurrency is None else f", at most {scenario.max_concurrency} in flight"
        replayed = scenario.arrival in ("replay", "conversation")  # both keep the trace's own times
        if not replayed and math.isinf(qps):
            return cls(f"all sent at t = 0{closed}", burst=scenario.max_concurrency is None, replay=False)
        if not replayed:
            return cls(f"at {qps:g} QPS{closed}", burst=False, replay=False)
        n, span = len(arrived), float(arrived.max() - arrived.min()) if len(arrived) else 0.0
        if span == 0:
            return cls(f"replayed: a burst of {n} requests at once", burst=True, replay=True)
        return cls(f"replayed: {n} requests over {span:.1f} s ({(n - 1) / span:.3g} req/s)", False, True)


def _parallelism(scenario, dep) -> str:
    """The deployment's parallelism as its GPUs are used: DP×TP and EP under attention DP, replicas."""
    if dep.dp > 1:  # one of dp attention ranks of TP GPUs, the experts over all dp x tp GPUs (PP 1)
        par = f"DP{dep.dp}×TP{dep.tp} EP{dep.ep}"
    else:
        par = f"TP{dep.tp} PP{dep.pp}" + (f" EP{dep.ep}" if dep.ep > 1 else "")
    return f"{scenario.num_replicas}×({par})" if scenario.num_replicas > 1 else par


def _print_replicas(console, Table, scenario, rows: list[dict]) -> None:
    """Per replica (or DP rank): requests routed, mean outstanding, prefix-cache hit rate (summary.json's
    per_replica)."""
    table = Table(title=f"per replica, --router {scenario.router}")
    cached = any(row["prefix_cache_hit_rate"] is not None for row in rows)
    columns = ("replica", "requests", "mean outstanding", *(("prefix-cache hit rate",) if cached else ()))
    for col in columns:
        table.add_column(col, justify="right")
    for row in rows:
        rate = row["prefix_cache_hit_rate"]
        cells = [str(row["replica"]), str(row["requests"]), f"{row['mean_outstanding']:.3g}"]
        table.add_row(*cells, *((f"{rate:.1%}",) if cached else ()))
    console.print(table)


def _tier_line(t: dict) -> str:
    """The KV tiers' hits (summary.json's kv_offload), one line."""
    return (
        f"KV tiers: GPU prefix hits {t['gpu_prefix_hits']} tokens ({t['gpu_hit_rate']:.1%} of prompt "
        f"tokens); CPU tier hits {t['cpu_hits']} tokens ({t['cpu_hit_rate']:.1%} of the rest), "
        f"{t['tokens_loaded']} tokens loaded in {t['loads']} loads ({t['load_s']:.3g} s over PCIe); "
        f"{t['stores']} blocks stored, {t['evictions']} evicted, {t['store_failures']} stores dropped; "
        f"{t['cpu_blocks']} CPU blocks per replica"
    )


def _print_summary(
    console, Table, scenario, dep, arrivals: _Arrivals, s: dict, out: Path, notes: list[str]
) -> None:
    from simserve.cli.console import note, styled

    policy = scenario.policy
    if policy in RELEASE_OF:
        policy = f"{policy} ({RELEASE_OF[policy]})"
    table = Table(
        title=f"{policy} on {dep.model.name}/{dep.gpu.name} {_parallelism(scenario, dep)}, "
        f"{scenario.trace} {arrivals.load}"
    )
    for col in ("metric", "p50", "p90", "p99"):
        table.add_column(col, justify="right" if col != "metric" else "left")
    for label, key in (
        ("TTFT (s)", "ttft"),
        ("TBT (s)", "tbt"),
        ("scheduling delay (s)", "scheduling_delay"),
        ("end-to-end (s)", "e2e"),
        ("normalized latency (s/token)", "normalized_latency"),
    ):
        table.add_row(label, *(f"{s[f'{key}_p{q}_s']:.4g}" for q in (50, 90, 99)))
    console.print(table)
    busy = ", ".join(f"{b:.0%}" for b in s["stage_busy"])
    bubble = ", ".join(f"{b:.0%}" for b in s["stage_bubble"])
    if s["overloaded"] and scenario.stop_when_overloaded:
        status = (("OVERLOADED (stopped early)", "red"), " ")
    elif arrivals.burst:
        # a finite burst always queues, and always drains: say how long that took, not "without bound"
        status = (
            (f"a burst of {s['num_requests']} requests drained in {s['duration_s']:.1f} s", "yellow"),
            "; ",
        )
    # a closed loop cannot queue without bound
    elif not s["overloaded"] or scenario.max_concurrency is not None:
        status = ()
    elif arrivals.replay:
        status = (
            ("the recorded arrivals outpaced service (the queue grew while they played)", "yellow"),
            "; ",
        )
    else:
        status = (("OVERLOADED (the queue grew without bound; latencies include the backlog)", "red"), " ")
    console.print(
        styled(
            *status,
            f"{s['completed']}/{s['num_requests']} completed, {s['ignored']} ignored (too long), "
            f"{s['preemptions']} preemptions; {s['throughput_rps']:.3g} req/s, {s['throughput_tps']:.4g} "
            f"tokens/s over {s['duration_s']:.1f} s\nstage busy {busy}; pipeline bubble {bubble}; MFU ≈ "
            f"{s['mfu']:.1%}, MBU ≈ {s['mbu']:.1%} (estimates); {s['num_iterations']} iterations, "
            f"{s['kv_blocks_per_replica']} KV blocks per replica\nwrote {out}/",
        )
    )
    if s.get("per_replica"):
        _print_replicas(console, Table, scenario, s["per_replica"])
    if s.get("kv_offload"):
        console.print(_tier_line(s["kv_offload"]))
    if s.get("capped"):
        console.print(
            note(
                f"the trial cap ({scenario.time_limit_s:g} s) ended the run: "
                f"{s['num_requests'] - s['completed'] - s['ignored']} requests unfinished; the latencies "
                f"cover the {s['completed']} completed"
            )
        )
    for line in notes:
        console.print(note(line))
