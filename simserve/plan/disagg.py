"""Disaggregated layouts in a plan: which xPyD splits to search, their capacity searches, and their plan rows.

A layout is x prefill replicas of one deployment and y decode replicas of another, of one GPU kind in one box
(the KV moves over its NVLink: sim/kvlink.py). Each pool's deployment is a TP degree, with PP > 1 only where
the model needs it (no PP-1 pool of as few GPUs fits: in one NVLink box TP gives the same memory per GPU
without PP's bubbles and stage hops), and for an MoE model each EP degree an aggregated plan tries (experts
TP-sharded or whole over the TP group); attention DP is not searched (a pool has no lockstep model:
sim/disagg_scenario.py refuses it). The search space is every (pool, pool, x, y) that fits the box and
--max-gpus, too many to simulate, so it is screened with what each pool can do alone, from the same BatchTimer
the simulation uses:

  prefill rate per replica  μ_p = 1 / (time to prefill the sample's mean prompt in budget-sized chunks)
  decode rate per replica   μ_d = B / (mean output × t_dec(B)), B = the most requests decoding at once that
                            fit the replica's KV (mean prompt + mean output each) and --max-batch, lowered
                            until one decode iteration t_dec(B) meets the TBT SLO (a decode pool has no
                            prefill to stall it, so its TBT is its iteration time)

A layout serves about min(x·μ_p, y·μ_d): x beyond y·μ_d/μ_p only adds idle prefill GPUs, fewer starves the
decode pool, so per (t_p, t_d, y) only the two x around the balance are kept; then the `disagg_layouts`
layouts of lowest estimated dollars per request are searched (a screen, never a reported number: every
capacity in the plan is simulated). The prefill pool runs the largest --budgets value that fits (prefill-only
batches: a larger chunk is more efficient, and there are no decodes to stall); the decode pool the smallest
(its memory goes to KV).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import pandas as pd

from simserve.catalog import GPU, GPUSpec, NodeSpec
from simserve.catalog.prices import PriceSpec
from simserve.deployment import Deployment
from simserve.errors import SimserveError
from simserve.memory import plan_memory, profile_tokens
from simserve.plan.candidates import best_box, expert_parallelisms, parallelisms
from simserve.plan.prune import front_threshold, halvings_to_floor
from simserve.plan.rows import LAYOUT_AGG, PLAN_COLUMNS, SEARCH_COLUMNS, at_capacity, user_speed
from simserve.plan.ties import TIE_DEPLOYMENTS, contenders, seed_task
from simserve.vllm_loader import refusal


@dataclass(frozen=True)
class Layout:
    gpu: GPUSpec
    node: NodeSpec
    prefill: Deployment
    decode: Deployment
    x: int  # prefill replicas
    y: int  # decode replicas
    prefill_budget: int
    decode_budget: int
    estimate_qps: float  # the screen's min(x·μ_p, y·μ_d)

    @property
    def num_gpus(self) -> int:
        return self.x * self.prefill.num_gpus + self.y * self.decode.num_gpus

    @property
    def label(self) -> str:
        return f"{self.x}x{pool_label(self.prefill)}P+{self.y}x{pool_label(self.decode)}D"


def pool_label(dep: Deployment) -> str:
    """TP2, TP1PP3, TP4EP4: a pool's parallelism as the layout label writes it (command.LAYOUT parses it)."""
    return f"TP{dep.tp}" + (f"PP{dep.pp}" if dep.pp > 1 else "") + (f"EP{dep.ep}" if dep.ep > 1 else "")


def _fitting_budgets(dep: Deployment, budgets, max_batch: int) -> list[int]:
    ok = []
    for b in sorted(budgets):
        try:
            plan_memory(dep, profile_tokens("sarathi", dep.max_model_len, b, max_batch))
        except SimserveError:
            continue
        ok.append(b)
    return ok


def pool_deployments(model, gpu: GPUSpec, node: NodeSpec, room: int, spec) -> dict[tuple, tuple]:
    """(TP, PP, EP) -> (deployment, fitting budgets) of the pools a layout may use in `room` GPUs (the other
    pool needs at least one): every TP and EP that fits, and PP > 1 only below the fewest GPUs a PP-1 pool
    fits in."""
    pools = {}
    for tp, pp in parallelisms(model, room - 1):
        for ep in expert_parallelisms(model, tp):
            dep = Deployment.create(
                model,
                gpu,
                tp,
                pp,
                node,
                None,
                spec.memory_utilization,
                spec.max_len,
                spec.dtype,
                spec.kv_dtype,
                ep,
                spec.moe_skew,
            )
            if refusal(dep):  # vLLM 0.33.0 would not load this pool (simserve/vllm_loader.py)
                continue
            ok = _fitting_budgets(dep, spec.budgets, spec.max_batch)
            if ok:
                pools[(tp, pp, ep)] = (dep, ok)
    fewest = min((dep.num_gpus for (_, pp, _), (dep, _) in pools.items() if pp == 1), default=room)
    return {k: v for k, v in pools.items() if k[1] == 1 or v[0].num_gpus < fewest}


def pool_rates(
    timer,
    blocks: int,
    block_size: int,
    prompt: float,
    output: float,
    budget: int,
    max_batch: int,
    tbt_s: float | None,
) -> tuple[float, float]:
    """(μ_p, μ_d): requests per second one replica prefills, and decodes, alone (module docstring)."""
    p = max(1, round(prompt))
    t, done = 0.0, 0
    while done < p:
        c = min(budget, p - done)
        t += sum(timer([(c, done)], [], s) for s in range(timer.num_stages))
        done += c
    mu_p = 1.0 / t
    ctx = max(1, round(prompt + output / 2))
    b = max(1, min(max_batch, blocks * block_size // max(1, round(prompt + output))))

    def step(n: int) -> float:
        return sum(timer([], [ctx] * n, s) for s in range(timer.num_stages))

    while b > 1 and tbt_s is not None and step(b) > tbt_s:
        b = max(1, b * 3 // 4)
    return mu_p, b / (max(output, 1.0) * step(b))


def enumerate_layouts(
    spec, prices: dict[str, PriceSpec], profiles_for, timer_for, lengths
) -> tuple[list[Layout], list[str]]:  # noqa: E501
    """The screened layouts, cheapest estimated $ per request first, and why a GPU has none."""
    from simserve.catalog.models import resolve_model

    model = resolve_model(spec.model)
    prompt, output = lengths
    kept, notes = [], []
    for gpu in dict.fromkeys(GPU.get(g) for g in spec.gpus):
        node = best_box(gpu, min(spec.max_gpus, 8), 1)
        if node is None or node.kind != "nvswitch":
            notes.append(
                f"{gpu.name}: no NVSwitch box in the catalog for both pools (disaggregation needs one link)"
            )
            continue
        room = min(spec.max_gpus, node.gpus_per_node)
        pools = pool_deployments(model, gpu, node, room, spec)
        if not pools:
            notes.append(f"{gpu.name}: no TP degree fits one pool in {room - 1} GPUs")
            continue
        profiles_for([d for d, _ in pools.values()])
        rates = {}
        for key, (dep, ok) in pools.items():
            timer = timer_for(dep)
            blocks = plan_memory(
                dep, profile_tokens("sarathi", dep.max_model_len, ok[0], spec.max_batch)
            ).num_blocks
            mu_p, _ = pool_rates(
                timer, blocks, dep.block_size, prompt, output, ok[-1], spec.max_batch, spec.slo.tbt_s
            )
            _, mu_d = pool_rates(
                timer, blocks, dep.block_size, prompt, output, ok[0], spec.max_batch, spec.slo.tbt_s
            )
            rates[key] = (mu_p, mu_d)
        for key_p, (dep_p, ok_p) in pools.items():
            for key_d, (dep_d, ok_d) in pools.items():
                mu_p, mu_d = rates[key_p][0], rates[key_d][1]
                g_p, g_d = dep_p.num_gpus, dep_d.num_gpus
                for y in range(1, (room - g_p) // g_d + 1):
                    balance = y * mu_d / mu_p
                    for x in sorted({max(1, math.floor(balance)), max(1, math.ceil(balance))}):
                        if x * g_p + y * g_d > room:
                            continue
                        est = min(x * mu_p, y * mu_d)
                        kept.append(Layout(gpu, node, dep_p, dep_d, x, y, ok_p[-1], ok_d[0], est))
        if not any(lay.gpu == gpu for lay in kept):
            notes.append(f"{gpu.name}: no xPyD split fits {room} GPUs")

    if model.is_moe:
        # the CLI prints each note after "no disaggregated layout for "
        notes.append(
            f"{model.name} with attention-DP pools (a disaggregated pool has no model of DP ranks stepping "
            f"in lockstep yet; its TP and EP pools are searched)"
        )

    def cost(lay: Layout) -> float:
        return prices[lay.gpu.name].usd_per_hour(lay.num_gpus, 1) / lay.estimate_qps

    kept.sort(key=lambda lay: (cost(lay), lay.num_gpus, lay.label, lay.gpu.name))
    return kept[: spec.disagg_layouts], notes


def layout_scenario(spec, lay: Layout, profiles, seed: int | None = None):
    """The layout as a DisaggScenario: each pool the plan's aggregated scenario of its deployment."""
    from simserve.plan.candidates import Candidate
    from simserve.sim.disagg_scenario import DisaggScenario

    def pool(dep: Deployment, budget: int, replicas: int):
        s = spec.scenario(Candidate(dep, (budget,), 0), budget, profiles[dep], seed)
        return replace(s, num_replicas=replicas, node=dep.node.name)

    return DisaggScenario(
        pool(lay.prefill, lay.prefill_budget, lay.x), pool(lay.decode, lay.decode_budget, lay.y), None, "kv"
    )


def search_disagg(
    spec,
    prices: dict[str, PriceSpec],
    runner,
    cache,
    stats: dict,
    out_tokens: float,
    agg_rows: pd.DataFrame | None = None,
    profiles: dict | None = None,
    prune: bool = True,
    speculate: bool = True,
):
    """Screen, then search the kept layouts: (searches, rows, notes). As for aggregated deployments
    (search._seed_searches), the layouts among the plan's cheapest contenders are searched again at other
    seeds.

    With `prune`, as for aggregated deployments (plan/prune.py): the screen's first layout is searched whole
    (the plan's answer to "and disaggregated?"), every other one starts with one probe at the rate it must
    beat to reach the Pareto front of the aggregated rows and that first layout; a failure there proves every
    row of it dominated (pass/fail is monotone in load), so it is not searched further ("pruned" in
    searches.csv). `profiles`: the aggregated searches' profile choices, reused (resolving one reads its
    profile)."""
    from simserve.resolve import resolve_profiles
    from simserve.sim.scenario import _timer, _workload
    from simserve.tune.jobs import CapacityTask, run_tasks

    profiles = dict(profiles or {})

    def profiles_for(deps):
        profiles.update(resolve_profiles([d for d in deps if d not in profiles]))

    def timer_for(dep):  # the screen's estimate, with the GEMMs at the sustained rate the searches use
        clock = dep.gpu.sustained_tflops > 0 if spec.sustained_clock is None else spec.sustained_clock
        return _timer(dep, profiles[dep].root, True, False, (), False, False, clock)

    prompt, output, _, _ = _workload(spec.trace, spec.max_len, spec.num_requests, spec.seed, False)
    layouts, notes = enumerate_layouts(
        spec, prices, profiles_for, timer_for, (float(prompt.mean()), float(output.mean()))
    )

    def whole(lay: Layout) -> CapacityTask:
        start = max(float(f"{lay.estimate_qps:.3g}"), spec.min_qps)
        return CapacityTask(
            layout_scenario(spec, lay, profiles),
            spec.slo,
            spec.tolerance,
            start,
            max_halvings=halvings_to_floor(start, spec.min_qps),
        )

    pruning = prune and spec.target_qps is None and len(layouts) > 1
    head = layouts[:1] if pruning else layouts
    tasks, thresholds = [whole(lay) for lay in head], [0.0] * len(head)
    results = _run(tasks, runner, cache, stats, run_tasks, speculate) if tasks else []
    if pruning:
        found = _found(agg_rows) + _found(_rows(head, results, spec, prices, out_tokens, profiles))
        rest = []
        for lay in layouts[1:]:
            costs = [
                prices[lay.gpu.name].usd_per_hour(lay.num_gpus, k)
                for k in range(1, spec.max_gpus // lay.num_gpus + 1)
            ]
            threshold = front_threshold(found, costs)
            thresholds.append(threshold)
            rest.append(
                CapacityTask(
                    layout_scenario(spec, lay, profiles), spec.slo, spec.tolerance, threshold, max_halvings=0
                )
                if threshold > 0
                else whole(lay)
            )
        tasks += rest
        results += _run(rest, runner, cache, stats, run_tasks, speculate) if rest else []
    rows = [
        _search_row(lay, t, r, spec, profiles, th)
        for lay, t, r, th in zip(layouts, tasks, results, thresholds, strict=True)
    ]
    stats["searches_pruned"] = stats.get("searches_pruned", 0) + sum(r["status"] == "pruned" for r in rows)
    plan = _rows(layouts, results, spec, prices, out_tokens, profiles)
    picked, again = [], []
    for i in _contenders(layouts, plan, agg_rows, spec) if spec.tie_seeds else []:
        lay, start = layouts[i], max(results[i].capacity_qps, spec.min_qps)
        for seed in range(spec.seed + 1, spec.seed + 1 + spec.tie_seeds):
            again.append(seed_task(layout_scenario(spec, lay, profiles, seed), spec, start))
            picked.append(lay)
    for lay, t, r in zip(
        picked, again, _run(again, runner, cache, stats, run_tasks, speculate) if again else [], strict=True
    ):
        row = _search_row(lay, t, r, spec, profiles)
        row["status"] = f"seed spread ({row['status']})"
        rows.append(row)
    searches = pd.DataFrame(rows, columns=[*SEARCH_COLUMNS, "layout"])
    return searches, plan.reindex(columns=[*PLAN_COLUMNS, "layout"]), notes


def _found(rows: pd.DataFrame | None) -> list[tuple[float, float]]:
    """(capacity, $ per hour) of plan rows: what a layout must beat to reach the front
    (prune.front_threshold)."""
    if rows is None or rows.empty:
        return []
    return list(zip(rows["capacity_qps"].astype(float), rows["usd_per_hour"].astype(float), strict=True))


def _contenders(layouts: list[Layout], plan: pd.DataFrame, agg_rows, spec) -> list[int]:
    """Indices of the searched layouts among the plan's TIE_DEPLOYMENTS cheapest deployments, agg ones
    included."""

    if plan.empty:
        return []
    both = (
        plan if agg_rows is None or agg_rows.empty else pd.concat([agg_rows.assign(layout=LAYOUT_AGG), plan])
    )
    objective = "usd_per_hour" if spec.target_qps else "usd_per_million_output_tokens"
    top = contenders(both.reset_index(drop=True), objective).head(TIE_DEPLOYMENTS)
    wanted = {(r["gpu"], r["layout"]) for _, r in top.iterrows() if r["layout"] != LAYOUT_AGG}
    return [i for i, lay in enumerate(layouts) if (lay.gpu.name, lay.label) in wanted]


def _run(tasks, runner, cache, stats, run_tasks, speculate: bool = True):
    round_stats: dict = {}
    results = run_tasks(tasks, runner, cache, runner.shares_filesystem, False, round_stats, speculate)
    for key in ("tasks", "from_cache", "probes_simulated", "probes_speculative", "probes_wasted"):
        stats[key] = stats.get(key, 0) + round_stats.get(key, 0)
    return results


def _search_row(lay: Layout, task, r, spec, profiles, threshold: float = 0.0) -> dict:

    capacity, status, message = r.capacity_qps, "searched", r.message
    if capacity == 0 and threshold > 0:
        status = "pruned"
        message = (
            f"fails at {r.probes[0].qps:.4g} qps per layout, so cannot beat the Pareto front found so far"
        )
    elif capacity < spec.min_qps:
        capacity, status = 0.0, "below floor"
    return {
        "gpu": lay.gpu.name,
        "tp": lay.prefill.tp,
        "pp": lay.prefill.pp,
        "ep": lay.prefill.ep,
        "node": lay.node.name,
        "gpus_per_replica": lay.num_gpus,
        "nodes_per_replica": 1,
        "seed": task.scenario.prefill.seed,
        "budget": lay.prefill_budget,
        "capacity_qps": capacity,
        "status": status,
        "start_qps": task.start_qps,
        "probes": len(r.probes),
        "limited_by": r.limited_by,
        "message": message,
        "kv_blocks": 0,
        "profile": profiles[lay.prefill].label,
        "layout": lay.label,
        **at_capacity(r),
    }


def _rows(layouts, results, spec, prices, out_tokens: float, profiles) -> pd.DataFrame:
    """Plan rows: r copies of each layout (r·capacity, whole rental units), as plan_rows does for replicas."""

    out = []
    for lay, r in zip(layouts, results, strict=True):
        c, g = r.capacity_qps, lay.num_gpus
        if c < spec.min_qps:
            continue
        price = prices[lay.gpu.name]
        for k in range(1, spec.max_gpus // g + 1):
            if spec.target_qps is not None and (
                k * c < spec.target_qps or (k > 1 and (k - 1) * c >= spec.target_qps)
            ):
                continue
            qps, usd, rented = k * c, price.usd_per_hour(g, k), price.gpus_rented(g, k)
            out.append(
                {
                    "gpu": lay.gpu.name,
                    "tp": lay.prefill.tp,
                    "pp": lay.prefill.pp,
                    "ep": lay.prefill.ep,
                    "node": lay.node.name,
                    "replicas": k,
                    "gpus": k * g,
                    "gpus_rented": rented,
                    "budget": lay.prefill_budget,
                    "capacity_qps": qps,
                    "capacity_per_gpu_qps": qps / (k * g),
                    "output_tokens_per_s": qps * out_tokens,
                    "goodput_tokens_per_s_per_gpu": qps * out_tokens / rented,
                    "usd_per_hour": usd,
                    "usd_per_million_output_tokens": usd / (qps * out_tokens * 3600) * 1e6,
                    "profile": profiles[lay.prefill].label,
                    "layout": lay.label,
                    **user_speed(r.metrics_at_capacity.get("tpot_mean_s", math.nan)),
                }
            )
    return pd.DataFrame(out)
