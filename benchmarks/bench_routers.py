"""Routers' cost and effect: CPU seconds of `simulate` per router on several replicas with prefix caching.

    python benchmarks/bench_routers.py [--routers rr,lor,kv,prefix-aware] [--replicas 8] [--requests 4096]
        [--qps 40] [--trace prefix-repetition] [--repeats 3]

Mistral-7B on A100s (TP1), vllm-v1 with prefix caching, Poisson arrivals, the shipped prefix-repetition trace
(vLLM's `PrefixRepetitionRandomDataset`: requests share one of a few long prefixes). As bench_evloop.py: the
trace, timer and KV pool are prepared once, then only `simulate(...)` is timed with time.process_time (best of
--repeats, after a warm-up run). Also printed, from the last run: the prefix-cache hit rate, TTFT p50/p99 and
the spread of requests over the replicas, to show what each router does. Runs on a checkout without the kv and
prefix-aware routers too (only rr and lor), for before/after timings.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from simserve.sim import build_result
from simserve.sim.cluster import simulate
from simserve.sim.scenario import Scenario, _num_blocks, _timer, _workload
from simserve.workload import arrival_times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--routers", default="rr,lor,kv,prefix-aware")
    ap.add_argument("--replicas", type=int, default=8)
    ap.add_argument("--requests", type=int, default=4096)
    ap.add_argument("--qps", type=float, default=40.0)
    ap.add_argument("--trace", default="prefix-repetition")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    print(
        f"{args.replicas} replicas, {args.requests} requests of {args.trace} at {args.qps:g} QPS, vllm-v1 "
        f"with prefix caching; best of {args.repeats} CPU times of simulate"
    )
    print(
        "| router | CPU s | requests / CPU s | prefix-cache hit rate | TTFT p50 (s) | TTFT p99 (s) | "
        "requests per replica (min-max) |"
    )
    print("|---|---|---|---|---|---|---|")
    for name in args.routers.split(","):
        s = Scenario(
            model="mistral-7b",
            gpu="a100",
            policy="vllm-v1",
            prefix_caching=True,
            trace=args.trace,
            num_requests=args.requests,
            num_replicas=args.replicas,
            router=name,
        )
        cfg, dep = s.sim_config(), s.deployment()
        num_blocks = _num_blocks(dep, cfg.policy, cfg.memory_budget, cfg.batch_limit(dep.pp))
        prompt, output, recorded, prefix = _workload(s.trace, s.max_len, s.num_requests, s.seed, False)
        arrived = arrival_times(len(prompt), args.qps, s.arrival, s.seed, s.cv, recorded, s.time_scale)
        timer = _timer(dep, s.profiles_root, s.cpu_overhead, s.ray_comm)
        inputs = (prompt, output, arrived, timer, num_blocks, cfg)
        simulate(*inputs, prefix=prefix)  # warm-up
        best = float("inf")
        for _ in range(args.repeats):
            t = time.process_time()
            run = simulate(*inputs, prefix=prefix)
            best = min(best, time.process_time() - t)
        summary = build_result(run).summary
        counts = np.bincount(run.reqs.replica[run.reqs.replica >= 0], minlength=args.replicas)
        print(
            f"| {name} | {best:.3f} | {run.reqs.n / best:,.0f} | {summary.prefix_cache_hit_rate:.1%} | "
            f"{summary.ttft_p50_s:.3f} | {summary.ttft_p99_s:.3f} | {counts.min()}-{counts.max()} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
