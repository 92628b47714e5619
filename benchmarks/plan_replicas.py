"""How good is the plan's replica rule? `simserve plan` takes the capacity of R replicas as R × one replica's
capacity. This measures that against a capacity search on the whole R-replica cluster, simulated with its real
request routing (round robin: each replica gets every R-th arrival), and prints one row per (deployment, R).

    python benchmarks/plan_replicas.py --seeds 0 1 2 3       # the table in docs/planner.md
    python benchmarks/plan_replicas.py --replicas 2 --requests 256 --cases mistral-7b:a100:1

A cluster search simulates R × --requests requests, so every replica sees as many requests as the single
replica does. error = (R × single − cluster) / cluster: negative means the plan's rule underestimates. A seed
draws both the request sample and the arrivals, and one 1024-request sample's capacity varies by several
percent between seeds, so the summary compares the means over seeds.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace

from simserve.catalog import GPU
from simserve.catalog.hardware import DEFAULT_NODE
from simserve.plan.candidates import best_box
from simserve.resolve import resolve_profiles
from simserve.sim.scenario import Scenario
from simserve.tune.capacity import SLO
from simserve.tune.jobs import CapacityTask, solve


def plan_scenario(model: str, gpu: str, tp: int, requests: int, budget: int, seed: int, slo: SLO) -> Scenario:
    """The case as `simserve plan` runs it: Sarathi at `budget`, in the box the plan picks for the replica
    (plan/candidates.best_box: A100 TP4 in the NVSwitch dgx-a100, not the GPU's default NVLink-pairs box,
    where the TP all-reduce would cross PCIe and the table would measure a deployment no plan makes)."""
    spec = GPU.get(gpu)
    box = best_box(spec, tp, 1)
    # None for the GPU's default box, as plan/search.py writes it (so plans and this benchmark share probes)
    node = None if box is None or box.name == DEFAULT_NODE.get(spec.name) else box.name
    return Scenario(
        model=model,
        gpu=gpu,
        tp=tp,
        node=node,
        trace="sharegpt",
        num_requests=requests,
        policy="sarathi",
        budget=budget,
        max_batch=128,
        seed=seed,
        stop_tbt=(slo.tbt_s, slo.tbt_quantile),
    )


def with_plan_profile(scenario: Scenario) -> tuple[Scenario, str]:
    """The scenario on the profile a plan would use (the shipped one, else the planner's generated measured or
    roofline one), and that profile's label."""
    choice = resolve_profiles([scenario.deployment()])[scenario.deployment()]
    return replace(scenario, profiles_root=choice.root), choice.label


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
    # Start at the rule's answer: the search brackets from there (any start gives the same capacity ±
    # tolerance).
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
    ap.add_argument(
        "--cases",
        nargs="*",
        default=["mistral-7b:a100:1", "llama-2-70b:a100:4"],
        help="model:gpu:tp deployments",
    )
    ap.add_argument("--replicas", type=int, nargs="*", default=[2, 4])
    ap.add_argument("--requests", type=int, default=1024, help="requests per replica")
    ap.add_argument("--budget", type=int, default=512)
    ap.add_argument("--slo", type=float, default=0.2, help="P99 TBT SLO (s), as in the issue's plan")
    ap.add_argument("--tolerance", type=float, default=0.01)
    ap.add_argument("--seeds", type=int, nargs="*", default=[0])
    args = ap.parse_args()
    slo = SLO(args.slo)
    seeds = " ".join(map(str, args.seeds))
    print(
        f"# {args.requests} requests per replica, sarathi budget {args.budget}, {slo.describe()}, "
        f"tolerance {args.tolerance:g}, seeds {seeds}"
    )
    print(
        "| model | GPU | TP | box | profile | R | seed | 1 replica (qps) | R × 1 replica | R replicas "
        "simulated | error |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    summary = []
    for case in args.cases:
        model, gpu, tp = case.split(":")
        rows = []
        for seed in args.seeds:
            scenario = plan_scenario(model, gpu, int(tp), args.requests, args.budget, seed, slo)
            scenario, label = with_plan_profile(scenario)
            box = getattr(scenario.deployment().node, "name", "none")
            single = None
            for r in args.replicas:
                row = replica_error(scenario, r, slo, args.tolerance, single)
                single = row["single_qps"]
                rows.append(row)
                print(
                    f"| {model} | {gpu} | {tp} | {box} | {label} | {r} | {seed} | {row['single_qps']:.3f} | "
                    f"{row['rule_qps']:.3f} | {row['cluster_qps']:.3f} | {100 * row['error']:+.1f}% |",
                    flush=True,
                )
        for r in args.replicas:
            mine = [x for x in rows if x["replicas"] == r]
            rule = statistics.fmean(x["rule_qps"] for x in mine)
            cluster = statistics.fmean(x["cluster_qps"] for x in mine)
            errors = [100 * x["error"] for x in mine]
            summary.append(
                f"| {model} | {gpu} | {tp} | {r} | {rule:.3f} | {cluster:.3f} | "
                f"{100 * (rule - cluster) / cluster:+.1f}% | {min(errors):+.1f}% to {max(errors):+.1f}% |"
            )
    print(f"\nMeans over seeds {seeds} (CPU {time.process_time():.0f} s):\n")
    print(
        "| model | GPU | TP | R | R × 1 replica, mean qps | R replicas simulated, mean qps | error of the "
        "means | error per seed |"
    )
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(summary))


if __name__ == "__main__":
    main()
