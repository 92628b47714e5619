"""How far does another seed move a plan's capacity, against the requests per simulation? One deployment
searched as the plan searches it (its scenario, its SLO, its first probe below the throughput bound), at seeds
0..N-1, for each request count; prints the capacities and (max − min) / mean, the spread the plan's ties use.

    python benchmarks/plan_seed_spread.py                              # docs/planner.md, "Seed spread"
    python benchmarks/plan_seed_spread.py --trace sharegpt
    python benchmarks/plan_seed_spread.py --requests 1024 2048 --seeds 3 --tp 2 --pp 1 --budget 1024

The profile is the one the plan uses (resolve_profiles: a shipped one, else one written into $SIMSERVE_CACHE).
"""

from __future__ import annotations

import argparse
import statistics
import time

from simserve.catalog import GPU
from simserve.deployment import Deployment
from simserve.plan.candidates import best_box
from simserve.resolve import resolve_profiles
from simserve.sim.scenario import Scenario
from simserve.tune.capacity import SLO
from simserve.tune.first_probe import first_qps
from simserve.tune.jobs import CapacityTask, solve


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama-2-70b")
    ap.add_argument("--gpu", default="h200")
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--pp", type=int, default=2)
    ap.add_argument("--budget", type=int, default=256)
    ap.add_argument("--trace", default="fixed:1700:400")
    ap.add_argument("--slo", type=float, default=0.2, help="P99 TBT bound (s), the plan's default")
    ap.add_argument("--requests", type=int, nargs="+", default=[512, 1024, 2048, 4096])
    ap.add_argument("--seeds", type=int, default=5)
    args = ap.parse_args()
    gpu = GPU.get(args.gpu)
    box = best_box(gpu, args.tp, args.pp)
    dep = Deployment.create(args.model, gpu, args.tp, args.pp, box, max_model_len=4096)
    root = resolve_profiles([dep])[dep].root
    slo = SLO(args.slo)
    print(
        f"{args.model} on {gpu.name} TP{args.tp} PP{args.pp} ({box.name}), budget {args.budget}, "
        f"{args.trace}, {slo.describe()}, seeds 0-{args.seeds - 1}"
    )
    for n in args.requests:
        t0 = time.process_time()
        caps = []
        for seed in range(args.seeds):
            s = Scenario(
                model=args.model,
                gpu=gpu.name,
                tp=args.tp,
                pp=args.pp,
                node=box.name,
                trace=args.trace,
                num_requests=n,
                policy="sarathi",
                budget=args.budget,
                max_batch=128,
                seed=seed,
                profiles_root=root,
                stop_tbt=(args.slo, slo.tbt_quantile),
            )
            caps.append(solve(CapacityTask(s, slo, 0.025, 1.0, first_qps=first_qps(s, 1.0))).capacity_qps)
        mean = statistics.fmean(caps)
        print(
            f"{n:5d} requests: capacity per replica {', '.join(f'{c:.3g}' for c in caps)} qps; spread "
            f"(max − min) / mean {(max(caps) - min(caps)) / mean:.1%}; {time.process_time() - t0:.1f} CPU-s"
        )


if __name__ == "__main__":
    main()
