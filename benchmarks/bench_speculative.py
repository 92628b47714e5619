"""Speculative decoding's cost to the simulator: CPU seconds of `simulate` with and without it (issue 32, item 6).

    python benchmarks/bench_speculative.py [--repeats 3] [--requests 2048] [--reference]

Mistral-7B on one A100, chat trace (sharegpt), the vllm-v1 policy without prefix caching (what speculation is
modelled with), at 0.5, 1 and 2 QPS; the same run with EAGLE-3, K = 3 (cumulative acceptance 0.75, 0.5, 0.3: the
vLLM per-position convention, docs/speculative.md) and with n-gram, K = 5. Start-up (trace, timer, memory
plan) is excluded; `simulate(...)` alone is timed with time.process_time, best of --repeats, on the compiled
core (--reference: the SimPy model). Prints one markdown row per load.
"""

from __future__ import annotations

import argparse
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


def best(repeats: int, args) -> tuple[float, int]:
    times = []
    for _ in range(repeats):
        t0 = time.process_time()
        raw = simulate(*args)
        times.append(time.process_time() - t0)
    return min(times), len(raw.log)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--requests", type=int, default=2048)
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
    print(f"host {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load "
          f"{os.getloadavg()[0]:.1f}; {args.requests} requests; best of {args.repeats}")  # fmt: skip
    print("| QPS | plain: CPU s (steps) | " + " | ".join(f"{c}: CPU s (steps), ratio" for c in CASES) + " |")
    print("|---|---|" + "---|" * len(CASES))
    for qps in LOADS:
        arrived = arrival_times(len(prompt), qps, s.arrival, s.seed, s.cv, None, s.time_scale)
        base, steps = best(args.repeats, (prompt, output, arrived, timer, blocks, cfg))
        row = [f"{qps:g}", f"{base:.3f} ({steps})"]
        for method, acc in CASES.values():
            k = len(acc)
            spec = replace(cfg, spec_k=k, spec_lookahead=0 if method == "ngram" else k, spec_acceptance=acc,
                           spec_fraction=draft_fraction(method, model), spec_passes=0 if method == "ngram" else k)  # fmt: skip
            t, n = best(args.repeats, (prompt, output, arrived, timer, blocks, spec))
            row.append(f"{t:.3f} ({n}), {t / base:.2f}x")
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
