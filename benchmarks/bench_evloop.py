"""Event-loop speed: simulated requests per CPU-second of `simulate` alone (issue 11, item 2).

    python benchmarks/bench_evloop.py [--repeats 3] [--requests 2048] [--profile] [--update-docs]
        [--reference] [--policy sglang] [--max-concurrency N]

Mistral-7B on one A100 (TP1), chat trace (sharegpt), Sarathi B=512, at light load (0.5 and 1 QPS: few
residents, many small decode iterations) and near capacity (3.5 QPS). Start-up (imports, trace, predictor,
memory plan) and building the output tables are excluded: the trace, timer and KV pool are prepared once,
then only `simulate(...)` is timed with time.process_time (best of --repeats). `--profile` prints the
cProfile top functions of one run per case instead; `--update-docs` writes the table into docs/simulator.md.
`--policy` swaps Sarathi for another policy (sglang: its default chunk, 8192), `--max-concurrency N` makes the
client a closed loop; both are for comparing the core with `--reference`, so they leave the docs table alone.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import platform
import pstats
import sys
import time
from pathlib import Path

from common import write_block

from simserve.sim.cluster import simulate
from simserve.sim.scenario import Scenario, _num_blocks, _timer, _workload
from simserve.workload import arrival_times

LOADS = (0.5, 1.0, 3.5)
DOC = Path(__file__).resolve().parent.parent / "docs" / "simulator.md"


def prepare(s: Scenario, qps: float):
    cfg, dep = s.sim_config(), s.deployment()
    num_blocks = _num_blocks(dep, cfg.policy, cfg.memory_budget, cfg.batch_limit(dep.pp))
    prompt, output, recorded, _prefix = _workload(s.trace, s.max_len, s.num_requests, s.seed, False)
    arrived = arrival_times(len(prompt), qps, s.arrival, s.seed, s.cv, recorded, s.time_scale)
    return prompt, output, arrived, _timer(dep, s.profiles_root, s.cpu_overhead, s.ray_comm), num_blocks, cfg


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--requests", type=int, default=2048)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument(
        "--reference", action="store_true", help="time the SimPy reference model, not the compiled core"
    )
    ap.add_argument("--update-docs", action="store_true", help=f"write the table into {DOC.name}")
    ap.add_argument("--policy", default="sarathi", help="the batching policy (default sarathi, B = 512)")
    ap.add_argument("--max-concurrency", type=int, default=None, help="a closed-loop client with N slots")
    args = ap.parse_args()
    if args.reference:
        os.environ["SIMSERVE_CORE"] = "reference"
    if args.update_docs and (args.policy != "sarathi" or args.max_concurrency is not None):
        sys.exit("--update-docs writes the Sarathi open-loop table only")
    budget = 512 if args.policy == "sarathi" else None
    s = Scenario(
        model="mistral-7b",
        gpu="a100",
        budget=budget,
        num_requests=args.requests,
        policy=args.policy,
        max_concurrency=args.max_concurrency,
    )
    lines = ["| QPS | CPU s | requests / CPU s | iterations | table rows |", "|---|---|---|---|---|"]
    print("\n".join(lines))
    for qps in LOADS:
        inputs = prepare(s, qps)
        run = simulate(*inputs)  # warm-up
        if args.profile:
            prof = cProfile.Profile()
            prof.enable()
            simulate(*inputs)
            prof.disable()
            print(f"--- {qps} QPS")
            pstats.Stats(prof).sort_stats("tottime").print_stats(18)
            continue
        best = float("inf")
        for _ in range(args.repeats):
            t = time.process_time()
            run = simulate(*inputs)
            best = min(best, time.process_time() - t)
        done = int((run.reqs.status == 2).sum())
        iters = int(run.log.to_frame().query("stage == 0").num_iterations.sum())
        lines.append(f"| {qps:g} | {best:.3f} | {done / best:,.0f} | {iters:,} | {len(run.log):,} |")
        print(lines[-1], flush=True)
    if args.update_docs and not args.profile:
        flags = f" --requests {args.requests}" if args.requests != 2048 else ""
        flags += " --reference" if args.reference else ""
        block = "\n".join(
            [
                f"Measured with `python benchmarks/bench_evloop.py --repeats {args.repeats}{flags} "
                f"--update-docs` (Python {platform.python_version()}, {platform.machine()}, best of "
                f"{args.repeats} CPU times of `simulate` alone, {args.requests} requests):",
                "",
                *lines,
            ]
        )
        write_block(DOC, "<!-- evloop:begin -->", "<!-- evloop:end -->", block)
        print(f"updated {DOC}")


if __name__ == "__main__":
    main()
