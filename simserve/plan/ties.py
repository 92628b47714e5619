"""Ties: rows the plan cannot rank, and what would rank them.

A plan's numbers are known only so far: a capacity to the search's tolerance (the bisection stops when the
bracket is that narrow, so the true capacity may be up to `tolerance` above the one reported), to the spread
between seeds (another sample of the trace and the arrivals moves a capacity by more than the tolerance:
measured here, by searching the cheapest deployments again at other seeds), and a price to its source's range.
A row whose objective ($ per million output tokens, or $ per hour with --qps) is within one of those of the
best row's is reported as tied with it, with each reason and the change that would break it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from simserve.catalog.prices import PriceSpec
from simserve.plan.rows import deployment_label
from simserve.tune.jobs import CapacityTask

DEPLOYMENT = ("gpu", "tp", "pp", "ep", "layout")  # layout: 'agg' or a disaggregated xPyD (plan/disagg.py)


def keys(df: pd.DataFrame) -> list[str]:
    """The columns that name a deployment (ep: absent in tables from before expert parallelism)."""
    return [k for k in DEPLOYMENT if k in df.columns]


def key_label(key: tuple) -> str:
    """("H200", 2, 1, 1) → "H200 TP2 PP1"; an EP above 1 is named; a disaggregated layout by its xPyD."""
    if len(key) > 4 and key[4] not in (None, "agg") and isinstance(key[4], str):
        return f"{key[0]} {key[4]}"
    ep = f" EP{key[3]}" if len(key) > 3 and int(key[3]) > 1 else ""
    # EP = DP × TP
    dp = f"DP{int(key[3]) // int(key[1])}×" if len(key) > 3 and int(key[3]) > int(key[1]) else ""
    return f"{key[0]} {dp}TP{key[1]}{ep} PP{key[2]}"


@dataclass(frozen=True)
class Tie:
    label: str  # e.g. "2×(A100-80GB TP2 PP2)"
    objective: float
    gap: float  # relative to the best row: (objective − best) / best, ≥ 0
    reasons: tuple[str, ...]  # why it cannot be ranked below the best
    breakers: tuple[str, ...]  # what would rank it

    def as_dict(self) -> dict:
        return {
            "row": self.label,
            "objective": self.objective,
            "gap": self.gap,
            "reasons": list(self.reasons),
            "would_break_it": list(self.breakers),
        }


def contenders(rows: pd.DataFrame, objective: str) -> pd.DataFrame:
    """Each deployment's best row by the objective (ties: fewer GPUs), cheapest first."""
    df = rows.sort_values([objective, "gpus"], kind="stable")
    return df.groupby(keys(df), sort=False).head(1).reset_index(drop=True)


def seed_capacities(searches: pd.DataFrame, base_seed: int) -> dict[tuple, dict[int, float]]:
    """Per deployment searched at several seeds: its capacity per seed, at its best budget at `base_seed` (the
    highest capacity there; ties: the smaller budget)."""
    # NOTE: plain lists, not a groupby of frames: the report asks for this several times (23 ms a call, as
    # frames)
    rows = list(searches[keys(searches)].itertuples(index=False, name=None))
    seeds, budgets = searches["seed"].tolist(), searches["budget"].tolist()
    caps = searches["capacity_qps"].tolist()
    by_key: dict[tuple, list[int]] = {}
    for i, key in enumerate(rows):  # in first-appearance order, as groupby(sort=False)
        by_key.setdefault(key, []).append(i)
    out = {}
    for key, idx in by_key.items():
        base = [i for i in idx if seeds[i] == base_seed]
        if not base or len({seeds[i] for i in idx}) < 2:
            continue
        best = min(base, key=lambda i: (-_number(caps[i]), budgets[i]))
        per_seed: dict[int, float] = {}
        for i in idx:
            if budgets[i] == budgets[best] and caps[i] == caps[i]:  # the seed's best capacity at that budget
                per_seed[int(seeds[i])] = max(per_seed.get(int(seeds[i]), caps[i]), caps[i])
        if len(per_seed) >= 2:
            out[tuple(key)] = {k: float(per_seed[k]) for k in sorted(per_seed)}
    return out


def _number(x: float) -> float:
    return x if x == x else -math.inf  # NaN sorts last, as in sort_values


def seed_spread(searches: pd.DataFrame, base_seed: int) -> dict[tuple, float]:
    """(max − min) / mean of each deployment's capacities over the seeds it was searched at: how far another
    sample of the trace and the arrivals moves it. Empty when no deployment was searched at another seed."""
    out = {}
    for key, caps in seed_capacities(searches, base_seed).items():
        mean = sum(caps.values()) / len(caps)
        if mean > 0:
            out[key] = (max(caps.values()) - min(caps.values())) / mean
    return out


# How the seed spread of a capacity shrinks with the requests per simulation: spread ∝
# requests^-SPREAD_EXPONENT. Measured (docs/planner.md, "Seed spread"): LLaMA2-70B on H200 TP1 PP2 at P99 TBT
# 0.2 s, seeds 0-4, (max − min) / mean: ShareGPT 12.9% at 1024 requests, 4.8% at 2048, 2.4% at 4096;
# fixed:1700:400 12.2%, 3.5%, 3.5% (the floor there is the search's grid, steps of ~1.7-3.4%). An exponent of
# 1 fits both within their scatter.
SPREAD_EXPONENT = 1.0


def requests_to_resolve(requests: int, spread: float, gap: float) -> int:
    """Requests per simulation at which a seed spread of `spread` (measured at `requests`) would shrink below
    `gap`, rounded up to requests · 2^k (a gap under 0.1% is taken as 0.1%)."""
    need = requests * (spread / max(gap, 1e-3)) ** (1 / SPREAD_EXPONENT)
    out = requests
    while out < need:
        out *= 2
    return out


def _tolerance_to_break(gap: float) -> str:
    """A search tolerance that resolves `gap`: half of it, to one significant digit."""
    t = gap / 2
    t = math.floor(t / 10 ** math.floor(math.log10(t))) * 10 ** math.floor(math.log10(t)) if t > 0 else 0
    return f"a tighter search: --tolerance {max(t, 0.001):.1g}"


def find_ties(
    rows: pd.DataFrame,
    best: pd.Series,
    objective: str,
    prices: dict[str, PriceSpec],
    tolerance: float,
    spread: dict[tuple, float],
    requests: int,
    capacity_based: bool = True,
) -> list[Tie]:
    """The contenders tied with `best`. `capacity_based`: the objective moves with the capacity ($ per million
    output tokens), so the tolerance and the seed spread apply; with --qps the objective is a price per hour
    and only the price ranges do."""
    b_obj, b_gpu = float(best[objective]), best["gpu"]
    b_key = tuple(best[k] for k in keys(rows))
    plan_spread = max(spread.values(), default=None)
    ties = []
    for _, row in contenders(rows, objective).iterrows():
        if tuple(row[k] for k in keys(rows)) == b_key:
            continue
        obj = float(row[objective])
        gap = (obj - b_obj) / b_obj
        reasons, breakers = [], []
        if capacity_based and gap < tolerance:
            reasons.append(f"within the search tolerance ({tolerance:.3g})")
            breakers.append(_tolerance_to_break(gap if gap > 0 else tolerance / 5))
        if capacity_based and plan_spread is not None and gap < plan_spread:
            reasons.append(
                f"within the seed spread ({plan_spread:.1%}, measured over {len(spread)} deployments)"
            )
            more = requests_to_resolve(requests, plan_spread, gap)
            breakers.append(f"a plan over more requests per simulation (about --requests {more})")
        if row["gpu"] != b_gpu:  # objectives scale with each GPU's price; equal GPUs share one
            p, q = prices[row["gpu"]], prices[b_gpu]
            if obj * p.low / p.usd_per_gpu_hour < b_obj * q.high / q.usd_per_gpu_hour:
                reasons.append(
                    f"within the price ranges ({row['gpu']} ${p.low:g}–{p.high:g}, {b_gpu} "
                    f"${q.low:g}–{q.high:g})"
                )
                breakers.append(
                    f"firm prices: {row['gpu']} below ${p.usd_per_gpu_hour * b_obj / obj:.3g}/GPU-h (or "
                    f"{b_gpu} above ${q.usd_per_gpu_hour * obj / b_obj:.3g}) makes it the cheaper, else the "
                    "first stays"
                )
        if not capacity_based and gap == 0 and not reasons:
            reasons.append("the same cost per hour")
            breakers.append("the capacity margin over --qps (plan.csv)")
        if reasons:
            ties.append(Tie(deployment_label(row), obj, gap, tuple(reasons), tuple(breakers)))
    return ties


TIE_DEPLOYMENTS = 3  # the cheapest deployments searched again at other seeds: the contenders for a tie


SEED_STEP = 1.125  # another seed's search brackets in steps of 1/8 from the first seed's capacity


def seed_task(scenario, spec, start: float) -> CapacityTask:
    """A search at another seed, from the capacity found at the plan's seed: bracketing in SEED_STEP steps
    (seeds move a capacity by ~5-15%, docs/planner.md), down to the same floor (--min-qps)."""
    steps = max(0, math.ceil(math.log(start / spec.min_qps) / math.log(SEED_STEP) - 1e-9))
    return CapacityTask(scenario, spec.slo, spec.tolerance, start, max_halvings=steps, step=SEED_STEP)
