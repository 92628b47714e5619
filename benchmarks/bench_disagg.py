"""Disaggregated-run speed: simulated requests per CPU-second of `run_disagg` alone, core against reference.

    python benchmarks/bench_disagg.py [--repeats 3] [--requests 1024] [--qps 4 12] [--reference]

LLaMA2-70B on eight H200s, 2xTP2 prefill + 1xTP4 decode over NVLink (docs/disaggregation.md's layout), chat
trace (sharegpt), Sarathi B=512. The timers and the workload are prepared by one untimed run; then each timed
run is `run_disagg(...)` with time.process_time, best of --repeats. `--reference` times the SimPy reference
(SIMSERVE_CORE=reference); without it, the compiled core. Also prints a digest of the run's first tokens, so
the two can be seen to give the same answers.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import time

from simserve.sim.disagg_scenario import DisaggScenario, PoolSpec, run_disagg
from simserve.sim.scenario import Scenario, _timer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--requests", type=int, default=1024)
    ap.add_argument("--qps", type=float, nargs="+", default=[4.0, 12.0])
    ap.add_argument(
        "--reference", action="store_true", help="time the SimPy reference model, not the compiled core"
    )
    args = ap.parse_args()
    if args.reference:
        os.environ["SIMSERVE_CORE"] = "reference"
    base = Scenario(model="llama-2-70b", gpu="h200", budget=512, num_requests=args.requests)
    ds = DisaggScenario.create(base, PoolSpec(2, 2), PoolSpec(1, 4))
    timers = tuple(
        _timer(x.deployment(), x.profiles_root, x.cpu_overhead, x.ray_comm) for x in (ds.prefill, ds.decode)
    )
    print(f"{'reference' if args.reference else 'compiled core'}: {ds.label()}, {args.requests} requests")
    print(f"| QPS | CPU s (best of {args.repeats}) | requests / CPU s | iterations | first-token digest |")
    print("|---|---|---|---|---|")
    for qps in args.qps:
        run_disagg(ds, qps, timers)  # warm: trace cache, imports
        best = float("inf")
        for _ in range(args.repeats):
            t0 = time.process_time()
            run = run_disagg(ds, qps, timers)
            best = min(best, time.process_time() - t0)
        digest = hashlib.sha256(run.raw.reqs.first_token.tobytes()).hexdigest()[:12]
        print(f"| {qps:g} | {best:.3f} | {args.requests / best:,.0f} | {len(run.raw.log):,} | {digest} |")


if __name__ == "__main__":
    main()
