"""Published end-to-end vLLM and SGLang results beside simserve's simulation of the same setup (issue 23 item 6).

Each `Published` entry holds what a vLLM or SGLang run published (the numbers, with the address they were read from), the
setup it states, and the closest setup simserve can express. The published numbers are comparison targets
only: nothing in simserve is fitted or tuned to them, and no run here reads them. The script prints measured
vs simulated and the error; docs/engines.md § Published end-to-end results says what each cannot express.

    python benchmarks/published_e2e.py                     # every entry
    python benchmarks/published_e2e.py --only KEY,KEY --json out.json

Three sources, each with the setup stated on the page:

* vLLM's own CI performance benchmark (`.buildkite/nightly-benchmarks`, buildkite's vllm/performance-benchmark
  pipeline): `vllm bench latency` (8 prompts of 32 tokens, 128 outputs each, one batch) and `vllm bench
  throughput` (200 ShareGPT prompts at once). Both drive the offline `LLM` engine (no HTTP front end,
  `ignore_eos`). The page names no release: simulated as vLLM 0.33.0's V1 engine with the `LLM` class's defaults.
* SGLang's reproduction of vLLM 0.6.0 (`benchmark/benchmark_vllm_060/README.md`): `vllm serve` (0.6.0 defaults,
  `--num-scheduler-steps 10`, `--max-model-len 4096`) driven by `sglang.bench_serving` on ShareGPT at 4 and 8
  requests/s (Poisson) and all at once. Simulated with simserve's V0 `vllm` policy, the scheduler 0.6.0 ran
  (whole prompts, prefills first; chunked prefill is off at a 4096 max length).
* The same page's SGLang 0.3.0 runs (`sglang.launch_server --disable-radix-cache`, the same client, models, GPUs
  and rates). Simulated with the `sglang` policy (`--engine sglang`: SGLang 0.5.23's scheduler) at its defaults
  (chunk 8192, max_prefill_tokens 16384, mixed chunk off, fcfs, max_running_requests from the pool; 0.3.0 had the
  same values) and the memory fraction the page states (0.88 at TP 1, 0.85 at TP 4, 0.88 where it was set).

ShareGPT workloads use vLLM's ShareGPT pairs and sampler (`--trace sharegpt-bench`: workload/bench_datasets.py,
traces/sharegpt_bench.csv.gz). V1 entries run vLLM's worker (`--engine vllm`: CUDA-graph padding, async
scheduling, its memory profile); online entries add the front end's published 10.2 ms to TTFT and E2E
(sim/frontend.py). Results and their reading: docs/engines.md § Published end-to-end results.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from simserve.errors import SimserveError

# vLLM's CI performance-benchmark report with H200 numbers (build 9515; the stored copy names no commit or date).
H200_PAGE = "https://buildkite.com/vllm/performance-benchmark/builds/9515"
# The same report with 8xH100 numbers. NOTE: the stored copy sits under an unrelated pipeline's address
# (elastic/enterprise-search-ruby); its text is vLLM's report (same test names, same descriptions). Kept, and
# flagged in the docs, because it is the only H100 copy found.
H100_PAGE = "https://buildkite.com/elastic/enterprise-search-ruby/builds/571"
# SGLang's reproduction of vLLM 0.6.0, beside SGLang 0.3.0 on the same setups (both engines' numbers on one page)
SGLANG_060 = "https://github.com/sgl-project/sglang/blob/main/benchmark/benchmark_vllm_060/README.md"

SAMPLES = 20  # ShareGPT draws per entry: the page's draw is not reproducible here (see Workload.seed)


@dataclass(frozen=True)
class Engine:
    """The closest simserve configuration of the published engine."""

    policy: str  # vllm-v1 (V1 engine) | vllm (V0: whole prompts, prefills first) | sglang
    budget: int  # --max-num-batched-tokens; sglang: --chunked-prefill-size
    max_batch: int | None  # --max-num-seqs; sglang: --max-running-requests (None: its default from the pool)
    memory_utilization: float  # sglang: --mem-fraction-static
    max_model_len: int  # sglang: --context-length


# vLLM 0.33.0's LLM class on a >= 70 GiB non-A100 GPU (vllm/engine/arg_utils.py, get_batch_defaults,
# UsageContext.LLM_CLASS: 16384 tokens, 1024 sequences; CacheConfig.gpu_memory_utilization 0.92).
V1_OFFLINE = Engine("vllm-v1", 16384, 1024, 0.92, 2048)
# vLLM 0.6.0's server with --max-model-len 4096: chunked prefill off below 32k, so max_num_batched_tokens =
# max(max_model_len, 2048) = 4096; max_num_seqs 256; gpu_memory_utilization 0.9 (EngineArgs defaults of 0.6.0).
V0_SERVER_060 = Engine("vllm", 4096, 256, 0.90, 4096)
# SGLang 0.3.0's server as the page ran it: --disable-radix-cache, everything else at its defaults, which are
# 0.5.23's on these GPUs too (--chunked-prefill-size 8192, --max-prefill-tokens 16384, no mixed chunk, fcfs,
# max_running_requests from the pool), the context length the model's (Llama-3.1: 131072). --mem-fraction-static
# as the page states it: 0.88 at TP 1 and 0.85 at TP 4 by default, 0.88 set by hand for the TP 4 offline run.
SGLANG_030_TP1 = Engine("sglang", 8192, None, 0.88, 131072)
SGLANG_030_TP4 = Engine("sglang", 8192, None, 0.85, 131072)
SGLANG_030_TP4_088 = Engine("sglang", 8192, None, 0.88, 131072)


@dataclass(frozen=True)
class Workload:
    dataset: str  # "fixed": every prompt `prompt` tokens, every output `output`; "sharegpt": the bench pairs
    num_prompts: int
    qps: float | None  # Poisson rate; None: every request at t = 0
    prompt: int = 0
    output: int = 0
    # The client's sampler seed (vLLM 0, sglang.bench_serving 1). simserve's pairs come from a truncated copy of
    # the ShareGPT file, so the same seed draws other rows: each entry runs SAMPLES draws from this seed on.
    seed: int = 0
    online: bool = False  # through the HTTP server: the client's TTFT and E2E include the front end


@dataclass(frozen=True)
class Published:
    key: str
    source: str
    release: str  # the engine release the page ran, as it states it ("sglang 0.3.0" for SGLang's)
    gpu: str
    model: str  # simserve's catalog name
    tp: int
    engine: Engine
    workload: Workload
    measured: dict = field(default_factory=dict)  # metric (METRICS) -> the published value


METRICS = {  # metric -> unit
    "batch_latency_ms": "ms",
    "throughput_rps": "req/s",
    "median_ttft_ms": "ms",
    "median_tpot_ms": "ms",
    "median_e2e_ms": "ms",
}

LATENCY_8x32x128 = Workload("fixed", 8, None, prompt=32, output=128)
SHAREGPT_200 = Workload("sharegpt", 200, None, seed=0)
PUBLISHED: tuple[Published, ...] = (
    Published("latency-llama3-8b-h200", H200_PAGE, "not stated", "h200", "llama-3-8b", 1, V1_OFFLINE,
              LATENCY_8x32x128, {"batch_latency_ms": 833.421}),
    Published("latency-llama3-70b-tp4-h200", H200_PAGE, "not stated", "h200", "llama-3-70b", 4, V1_OFFLINE,
              LATENCY_8x32x128, {"batch_latency_ms": 2077.53}),
    Published("latency-llama3-8b-h100", H100_PAGE, "not stated", "h100", "llama-3-8b", 1, V1_OFFLINE,
              LATENCY_8x32x128, {"batch_latency_ms": 997.542}),
    Published("latency-llama3-70b-tp4-h100", H100_PAGE, "not stated", "h100", "llama-3-70b", 4, V1_OFFLINE,
              LATENCY_8x32x128, {"batch_latency_ms": 2444.47}),
    Published("throughput-llama3-8b-h200", H200_PAGE, "not stated", "h200", "llama-3-8b", 1, V1_OFFLINE,
              SHAREGPT_200, {"throughput_rps": 22.5674}),
    Published("throughput-llama3-70b-tp4-h200", H200_PAGE, "not stated", "h200", "llama-3-70b", 4, V1_OFFLINE,
              SHAREGPT_200, {"throughput_rps": 9.83905}),
    Published("throughput-llama3-8b-h100", H100_PAGE, "not stated", "h100", "llama-3-8b", 1, V1_OFFLINE,
              SHAREGPT_200, {"throughput_rps": 19.5005}),
    Published("throughput-llama3-70b-tp4-h100", H100_PAGE, "not stated", "h100", "llama-3-70b", 4, V1_OFFLINE,
              SHAREGPT_200, {"throughput_rps": 8.86239}),
    # Mixture of experts (bf16): docs/models.md § Published end-to-end results
    Published("latency-mixtral-8x7b-tp2-h200", H200_PAGE, "not stated", "h200", "mixtral-8x7b", 2, V1_OFFLINE,
              LATENCY_8x32x128, {"batch_latency_ms": 1917.44}),
    Published("latency-mixtral-8x7b-tp2-h100", H100_PAGE, "not stated", "h100", "mixtral-8x7b", 2, V1_OFFLINE,
              LATENCY_8x32x128, {"batch_latency_ms": 2326.97}),
    Published("throughput-mixtral-8x7b-tp2-h200", H200_PAGE, "not stated", "h200", "mixtral-8x7b", 2, V1_OFFLINE,
              SHAREGPT_200, {"throughput_rps": 8.06251}),
    Published("throughput-mixtral-8x7b-tp2-h100", H100_PAGE, "not stated", "h100", "mixtral-8x7b", 2, V1_OFFLINE,
              SHAREGPT_200, {"throughput_rps": 8.15186}),
    Published("v060-llama31-8b-a100-rps4", SGLANG_060, "0.6.0", "a100", "llama-3.1-8b", 1, V0_SERVER_060,
              Workload("sharegpt", 1200, 4.0, seed=1, online=True),
              {"median_ttft_ms": 100.48, "median_tpot_ms": 14.14, "median_e2e_ms": 1691.97}),
    Published("v060-llama31-8b-a100-rps8", SGLANG_060, "0.6.0", "a100", "llama-3.1-8b", 1, V0_SERVER_060,
              Workload("sharegpt", 2400, 8.0, seed=1, online=True),
              {"median_ttft_ms": 120.39, "median_tpot_ms": 17.09, "median_e2e_ms": 2137.16}),
    Published("v060-llama31-70b-tp4-h100-rps4", SGLANG_060, "0.6.0", "h100", "llama-3.1-70b", 4, V0_SERVER_060,
              Workload("sharegpt", 1200, 4.0, seed=1, online=True),
              {"median_ttft_ms": 179.15, "median_tpot_ms": 23.58, "median_e2e_ms": 2915.60}),
    Published("v060-llama31-70b-tp4-h100-rps8", SGLANG_060, "0.6.0", "h100", "llama-3.1-70b", 4, V0_SERVER_060,
              Workload("sharegpt", 2400, 8.0, seed=1, online=True),
              {"median_ttft_ms": 207.12, "median_tpot_ms": 29.15, "median_e2e_ms": 3752.38}),
    Published("v060-llama31-8b-a100-offline", SGLANG_060, "0.6.0", "a100", "llama-3.1-8b", 1, V0_SERVER_060,
              Workload("sharegpt", 5000, None, seed=1, online=True), {"throughput_rps": 21.27}),
    Published("v060-llama31-70b-tp4-h100-offline", SGLANG_060, "0.6.0", "h100", "llama-3.1-70b", 4,
              V0_SERVER_060, Workload("sharegpt", 5000, None, seed=1, online=True), {"throughput_rps": 19.04}),
    # SGLang 0.3.0 on the same page, the same client and workloads
    Published("sglang030-llama31-8b-a100-rps4", SGLANG_060, "sglang 0.3.0", "a100", "llama-3.1-8b", 1,
              SGLANG_030_TP1, Workload("sharegpt", 1200, 4.0, seed=1, online=True),
              {"median_ttft_ms": 31.98, "median_tpot_ms": 13.17, "median_e2e_ms": 1564.17}),
    Published("sglang030-llama31-8b-a100-rps8", SGLANG_060, "sglang 0.3.0", "a100", "llama-3.1-8b", 1,
              SGLANG_030_TP1, Workload("sharegpt", 2400, 8.0, seed=1, online=True),
              {"median_ttft_ms": 35.68, "median_tpot_ms": 17.85, "median_e2e_ms": 2175.02}),
    Published("sglang030-llama31-70b-tp4-h100-rps4", SGLANG_060, "sglang 0.3.0", "h100", "llama-3.1-70b", 4,
              SGLANG_030_TP4, Workload("sharegpt", 1200, 4.0, seed=1, online=True),
              {"median_ttft_ms": 53.94, "median_tpot_ms": 25.03, "median_e2e_ms": 3005.24}),
    Published("sglang030-llama31-70b-tp4-h100-rps8", SGLANG_060, "sglang 0.3.0", "h100", "llama-3.1-70b", 4,
              SGLANG_030_TP4, Workload("sharegpt", 2400, 8.0, seed=1, online=True),
              {"median_ttft_ms": 58.11, "median_tpot_ms": 33.07, "median_e2e_ms": 4064.98}),
    Published("sglang030-llama31-8b-a100-offline", SGLANG_060, "sglang 0.3.0", "a100", "llama-3.1-8b", 1,
              SGLANG_030_TP1, Workload("sharegpt", 5000, None, seed=1, online=True), {"throughput_rps": 22.03}),
    Published("sglang030-llama31-70b-tp4-h100-offline", SGLANG_060, "sglang 0.3.0", "h100", "llama-3.1-70b", 4,
              SGLANG_030_TP4_088, Workload("sharegpt", 5000, None, seed=1, online=True), {"throughput_rps": 19.84}),
)  # fmt: skip


def _scenario_extras(p: Published, async_scheduling: bool) -> dict:
    """vLLM's worker model for V1 entries (it models V1's worker only), the front end for online clients."""
    from simserve.sim.frontend import DEFAULT_FRONTEND_MS

    extras = (
        {"vllm_worker": True, "async_scheduling": async_scheduling} if p.engine.policy == "vllm-v1" else {}
    )
    if p.workload.online:
        extras["frontend_ms"] = DEFAULT_FRONTEND_MS
    return extras


def _lengths(w: Workload, seed: int) -> tuple[np.ndarray, np.ndarray]:
    if w.dataset == "fixed":
        return np.full(w.num_prompts, w.prompt), np.full(w.num_prompts, w.output)
    from simserve.workload.bench_datasets import sharegpt_lengths

    # vLLM's (and sglang.bench_serving's) sampler: prompt and output >= 4, prompt <= 1024, total <= 2048, the
    # dataset's own output lengths (both benchmarks ignore EOS: every request generates exactly that many)
    return sharegpt_lengths(w.num_prompts, seed, None)


def _write_trace(prompt, output, arrived, folder: Path) -> str:
    path = folder / "requests.csv"
    rows = ["num_prefill_tokens,num_decode_tokens,arrived_at"]
    rows += [f"{int(p)},{int(o)},{float(a)!r}" for p, o, a in zip(prompt, output, arrived, strict=True)]
    path.write_text("\n".join(rows) + "\n")
    return str(path)


def simulate_once(p: Published, seed: int, async_scheduling: bool = True) -> tuple[dict, str, dict] | str:
    """(metric -> simulated value, profile label, details) of one run, or why it has no answer."""
    from simserve.predictor.load import profile_label
    from simserve.profiling.generated import for_scenario
    from simserve.sim.request import DONE
    from simserve.sim.scenario import Scenario, simulate_scenario
    from simserve.workload import arrival_times

    w, e = p.workload, p.engine
    prompt, output = _lengths(w, seed)
    # the arrivals written into the trace and replayed: a burst at t = 0, or Poisson at the client's rate
    arrived = np.zeros(len(prompt)) if w.qps is None else arrival_times(len(prompt), w.qps, "poisson", seed)
    with tempfile.TemporaryDirectory() as tmp:
        scenario = Scenario(
            model=p.model, gpu=p.gpu, tp=p.tp, trace=_write_trace(prompt, output, arrived, Path(tmp)),
            num_requests=len(prompt), arrival="replay", policy=e.policy, budget=e.budget, max_batch=e.max_batch,
            seed=seed, max_model_len=e.max_model_len, memory_utilization=e.memory_utilization,
            stop_when_overloaded=False, **_scenario_extras(p, async_scheduling),
        )  # fmt: skip
        # no shipped profile (Llama-3-70B, Llama-3.1): build one, measured where NVIDIA's tables have the GPU
        scenario, _ = for_scenario(scenario)
        raw, dep = simulate_scenario(scenario, 1.0)  # replay: the trace's arrival times, not this rate
    r = raw.reqs
    if not (r.status == DONE).all():
        return f"{int((r.status != DONE).sum())} of {r.n} requests not served"
    front = raw.cfg.frontend_s  # the client's view; TPOT is the same either way
    span = float(r.completed.max() - r.arrived.min())
    many = r.output > 1
    tpot = (r.completed[many] - r.first_token[many]) / (r.output[many] - 1)
    values = {
        "batch_latency_ms": span * 1e3,
        "throughput_rps": r.n / span,
        "median_ttft_ms": (float(np.median(r.first_token - r.arrived)) + front) * 1e3,
        "median_tpot_ms": float(np.median(tpot)) * 1e3,
        "median_e2e_ms": (float(np.median(r.completed - r.arrived)) + front) * 1e3,
    }
    detail = {"requests": int(r.n), "prompt_tokens": int(r.prompt.sum()), "output_tokens": int(r.output.sum()),
              "longest_output": int(r.output.max()), "iterations": len(raw.log), "frontend_ms": front * 1e3,
              "kv_blocks": int(raw.num_blocks), "preemptions": int(r.preemptions.sum()),
              "policy": raw.cfg.policy}  # fmt: skip
    return values, profile_label(dep, scenario.profiles_root), detail


@dataclass(frozen=True)
class Outcome:
    entry: Published
    skipped: str | None
    rows: list  # per published metric: (metric, published, simulated median, lowest, highest over the draws)
    profile: str
    detail: dict


def simulate(p: Published, samples: int = SAMPLES, async_scheduling: bool = True) -> Outcome:
    """The entry simulated; a ShareGPT entry over `samples` draws (the median is compared, the range shown)."""
    draws = []
    for k in range(samples if p.workload.dataset == "sharegpt" else 1):
        one = simulate_once(p, p.workload.seed + k, async_scheduling)
        if isinstance(one, str):
            return Outcome(p, one, [], "", {})
        draws.append(one)
    rows = []
    for metric, published in p.measured.items():
        got = sorted(d[0][metric] for d in draws)
        rows.append((metric, published, float(np.median(got)), got[0], got[-1]))
    return Outcome(p, None, rows, draws[0][1], {**draws[0][2], "draws": len(draws)})


def error_pct(simulated: float, published: float) -> float:
    return 100.0 * (simulated - published) / published


def compare(keys: set[str], samples: int, async_scheduling: bool = True) -> list[dict]:
    out = []
    print(f"{'entry':34} {'metric':16} {'published':>10} {'simserve':>9} {'error':>7}  draws: min..max error")
    for p in PUBLISHED:
        if keys and p.key not in keys:
            continue
        o = simulate(p, samples, async_scheduling)
        if o.skipped:
            print(f"{p.key:34} skipped: {o.skipped}")
            out.append({"key": p.key, "source": p.source, "skipped": o.skipped})
            continue
        for metric, published, sim, lo, hi in o.rows:
            spread = f"{error_pct(lo, published):+.0f}..{error_pct(hi, published):+.0f}%" if hi > lo else ""
            print(
                f"{p.key:34} {metric:16} {published:>10.4g} {sim:>9.4g} {error_pct(sim, published):>+6.1f}%  {spread}"
            )
            out.append({"key": p.key, "source": p.source, "release": p.release, "metric": metric,
                        "unit": METRICS[metric], "published": published, "simulated": sim, "min": lo, "max": hi,
                        "error_pct": error_pct(sim, published), "profile": o.profile, **o.detail})  # fmt: skip
    errors = sorted(abs(r["error_pct"]) for r in out if "error_pct" in r)
    if errors:
        print(
            f"|error| median {float(np.median(errors)):.1f}%, max {errors[-1]:.1f}% over {len(errors)} numbers"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="Comma-separated entry keys (default: all).")
    ap.add_argument(
        "--samples", type=int, default=SAMPLES, help="ShareGPT draws per entry (median compared)."
    )
    ap.add_argument(
        "--no-async-scheduling",
        action="store_true",
        help="V1 entries without async scheduling (every CPU step on the critical path, as older releases ran).",
    )
    ap.add_argument("--json", type=Path, default=None, help="Also write the rows to this JSON file.")
    args = ap.parse_args(argv)
    keys = {k for k in args.only.split(",") if k}
    try:
        unknown = sorted(keys - {p.key for p in PUBLISHED})
        if unknown:
            raise SimserveError(f"unknown entry {unknown}; known: {', '.join(p.key for p in PUBLISHED)}")
        if args.samples < 1:
            raise SimserveError(f"--samples must be at least 1, got {args.samples}")
        rows = compare(keys, args.samples, not args.no_async_scheduling)
    except SimserveError as exc:  # a bad key, a profile that cannot be built: one line
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
