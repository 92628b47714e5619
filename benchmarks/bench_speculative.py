"""Speculative decoding's cost to the simulator: CPU seconds of `simulate` with and without it (issue 32, item
6).

    python benchmarks/bench_speculative.py [--repeats 7] [--requests 8192] [--reference]

Mistral-7B on one A100, chat trace (sharegpt), the vllm-v1 policy without prefix caching (what speculation is
modelled with), at 0.5, 1 and 2 QPS; the same run with EAGLE-3, K = 3 (cumulative acceptance 0.75, 0.5, 0.3:
the vLLM per-position convention, docs/speculative.md) and with n-gram, K = 5. Start-up (trace, timer, memory
plan) is excluded; `simulate(...)` alone is timed with time.process_time on the compiled core (--reference:
the SimPy model). A load's three runs take turns, --repeats rounds of them, so a change in the machine's load
between rounds reaches all three alike; each run's figure is its best round (the least disturbed one: on a
shared machine the disturbances only add), after a gc.collect() so no run pays for another's garbage. Prints
one markdown row per load: CPU seconds, steps (iterations) and CPU per step in µs, the ratio to the plain run.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import time
from dataclasses import replace

from simserve.catalog.models import resolve_model
from simserve.sim.cluster import simulate
from simserve.sim.scenario import Scenario, _num_blocks, _timer, _workload
from simserve.speculative import draft_fraction
from simserve.workload import arrival_times

LOADS = (0.5, 1.0, 2.0)
CASES = {"eagle3 K=3": ("eagle3", (0.75, 0.5, 0.3)), "ngram K=5": ("ngram", (0.5, 0.3, 0.2, 0.1, 0.05))}


def best_of_rounds(repeats: int, runs: list[tuple]) -> list[tuple[float, int]]:
    """(best CPU seconds, steps) of each of `runs` (simulate's arguments), timed in turn, `repeats` rounds."""
    best = [float("inf")] * len(runs)
    steps = [0] * len(runs)
    for _ in range(repeats):
        for i, args in enumerate(runs):
            gc.collect()
            t0 = time.process_time()
            raw = simulate(*args)
            best[i] = min(best[i], time.process_time() - t0)
            steps[i] = len(raw.log)
    return list(zip(best, steps, strict=True))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--requests", type=int, default=8192)
    ap.add_argument("--reference", action="store_true", help="time the SimPy reference model")
    args = ap.parse_args()
    if args.reference:
        os.environ["SIMSERVE_CORE"] = "reference"
    s = Scenario(model="mistral-7b", gpu="a100", policy="vllm-v1", num_requests=args.requests)
    cfg, dep = s.sim_config(), s.deployment()
    blocks = _num_blocks(dep, cfg.policy, cfg.memory_budget, cfg.batch_limit(dep.pp))
    timer = _timer(dep, s.profiles_root, s.cpu_overhead, s.ray_comm)
    prompt, output, _, _ = _workload(s.trace, s.max_len, s.num_requests, s.seed, False)
    model = resolve_model(s.model)
    configs = [cfg]
    for method, acc in CASES.values():
        k = len(acc)
        configs.append(
            replace(
                cfg,
                spec_k=k,
                spec_lookahead=0 if method == "ngram" else k,
                spec_acceptance=acc,
                spec_fraction=draft_fraction(method, model),
                spec_passes=0 if method == "ngram" else k,
            )
        )
    print(
        f"host {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load "
        f"{os.getloadavg()[0]:.1f}; {args.requests} requests; best of {args.repeats} rounds"
    )
    print(
        "| QPS | plain: CPU s (steps), µs/step | "
        + " | ".join(f"{c}: CPU s (steps), µs/step, ratio" for c in CASES)
        + " |"
    )
    print("|---|---|" + "---|" * len(CASES))
    for qps in LOADS:
        arrived = arrival_times(len(prompt), qps, s.arrival, s.seed, s.cv, None, s.time_scale)
        timed = best_of_rounds(args.repeats, [(prompt, output, arrived, timer, blocks, c) for c in configs])
        base = timed[0][0]
        row = [f"{qps:g}"]
        for i, (t, n) in enumerate(timed):
            row.append(f"{t:.3f} ({n:,}), {t / n * 1e6:.2f}" + (f", {t / base:.2f}x" if i else ""))
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
