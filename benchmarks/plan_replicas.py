"""How good is the plan's replica rule? `simserve plan` takes the capacity of R replicas as R × one replica's
capacity. This measures that against a capacity search on the whole R-replica cluster, simulated with its real
request routing (round robin: each replica gets every R-th arrival), and prints one row per (deployment, R).

    python benchmarks/plan_replicas.py                       # the table in docs/planner.md
    python benchmarks/plan_replicas.py --replicas 2 --requests 256 --cases mistral-7b:a100:1

A cluster search simulates R × --requests requests, so every replica sees as many requests as the single
replica does. error = (R × single − cluster) / cluster: negative means the plan's rule underestimates.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

from simserve.plan.profiles import resolve_profiles
from simserve.sim.scenario import Scenario
from simserve.tune.capacity import SLO
from simserve.tune.jobs import CapacityTask, solve


def replica_error(
    scenario: Scenario, replicas: int, slo: SLO, tolerance: float = 0.01, single: float | None = None
) -> dict:
    """R × the single replica's capacity against the capacity of R replicas behind the round-robin router.
    `single`: the single replica's capacity when already searched (it does not depend on R)."""
    if single is None:
        single = solve(CapacityTask(scenario, slo, tolerance)).capacity_qps
    cluster_scenario = replace(
        scenario, num_replicas=replicas, router="rr", num_requests=scenario.num_requests * replicas
    )
    # Start at the rule's answer: the search brackets from there (any start gives the same capacity ± tolerance).
    start = max(single * replicas, 0.01)
    cluster = solve(CapacityTask(cluster_scenario, slo, tolerance, start_qps=start)).capacity_qps
    approx = single * replicas
    return {
        "model": scenario.model,
        "gpu": scenario.gpu,
        "tp": scenario.tp,
        "replicas": replicas,
        "single_qps": single,
        "rule_qps": approx,
        "cluster_qps": cluster,
        "error": (approx - cluster) / cluster if cluster > 0 else float("nan"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="*", default=["mistral-7b:a100:1", "llama-2-70b:a100:4"],
                    help="model:gpu:tp deployments (shipped profiles)")  # fmt: skip
    ap.add_argument("--replicas", type=int, nargs="*", default=[2, 4])
    ap.add_argument("--requests", type=int, default=1024, help="requests per replica")
    ap.add_argument("--budget", type=int, default=512)
    ap.add_argument("--slo", type=float, default=0.2, help="P99 TBT SLO (s), as in the issue's plan")
    ap.add_argument("--tolerance", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    slo = SLO(args.slo)
    print(f"# {args.requests} requests per replica, sarathi budget {args.budget}, {slo.describe()}, "
          f"tolerance {args.tolerance:g}, seed {args.seed}")  # fmt: skip
    print(
        "| model | GPU | TP | profile | R | 1 replica (qps) | R × 1 replica | R replicas simulated | error | CPU s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for case in args.cases:
        model, gpu, tp = case.split(":")
        scenario = Scenario(model=model, gpu=gpu, tp=int(tp), trace="sharegpt", num_requests=args.requests,
                            policy="sarathi", budget=args.budget, max_batch=128, seed=args.seed,
                            stop_tbt=(slo.tbt_s, slo.tbt_quantile))  # fmt: skip
        # The profile a plan would use: the shipped one, else the planner's generated roofline profile.
        choice = resolve_profiles([scenario.deployment()])[scenario.deployment()]
        scenario = replace(scenario, profiles_root=choice.root)
        single = None
        for r in args.replicas:
            t0 = time.process_time()
            row = replica_error(scenario, r, slo, args.tolerance, single)
            single = row["single_qps"]
            print(f"| {model} | {gpu} | {tp} | {choice.label} | {r} | {row['single_qps']:.3f} | {row['rule_qps']:.3f} | "
                  f"{row['cluster_qps']:.3f} | {100 * row['error']:+.1f}% | {time.process_time() - t0:.0f} |",
                  flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
