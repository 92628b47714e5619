"""What a plan need not search: the rate a deployment must beat to matter, and the order that makes it high
early.

A deployment with capacity c per replica gives the rows (r·c, cost(r)), r = 1, 2, …, cost(r) being what r
replicas cost per hour (r·g·p for g GPUs at $p per GPU-hour, or whole nodes where clouds rent by the node).
Row r is dominated (not on the Pareto front) as soon as some row already found carries at least r·c for at
most cost(r) dollars per hour. So the deployment can reach the front only if c beats

    threshold = min over r of  front(cost(r)) / r,
    front(x)  = the most capacity any row found offers for ≤ $x/h.

One probe at the threshold settles it: a failure means c < threshold (pass/fail is monotone in load, as the
capacity search already assumes), so every row of the deployment is dominated and it is not searched further;
a pass means c ≥ threshold and the search goes on upwards from there. Likewise a second token budget matters
only if it beats the deployment's best budget so far, so its search starts with a probe at that capacity.
Neither changes the front: what is skipped is proven dominated by rows the plan reports.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

FIRST_BUDGET = (
    512  # the paper's default Sarathi budget: near the best for most deployments at P99 TBT ≥ 0.1 s
)


def budget_order(budgets: Sequence[int], first: int = FIRST_BUDGET) -> list[int]:
    """The budget closest to `first`, then the larger ones upwards, then the smaller ones downwards: each
    search starts from its neighbour's answer, which is usually close."""
    b = sorted(set(budgets))
    start = min(b, key=lambda x: (abs(x - first), x))
    return [x for x in b if x >= start] + [x for x in reversed(b) if x < start]


def front_threshold(rows: Sequence[tuple[float, float]], replica_costs: Sequence[float]) -> float:
    """The capacity per replica a deployment must exceed for any of its rows to escape domination by `rows`
    ((capacity qps, $ per hour) of deployments already searched); `replica_costs[r - 1]` is what r replicas of
    it cost per hour (whole rental units: catalog/prices.py). 0 when nothing found is as cheap."""
    best = float("inf")
    for r, cost in enumerate(replica_costs, start=1):
        offered = max((cap for cap, usd in rows if usd <= cost), default=0.0)
        best = min(best, offered / r)
    return 0.0 if best == float("inf") else best


def halvings_to_floor(start_qps: float, min_qps: float) -> int:
    """Halvings from `start_qps` whose last probe is at or below `min_qps`, so a search from any start sees
    every rate down to the floor (a search started above --start-qps needs more of them)."""
    return max(0, math.ceil(math.log2(start_qps / min_qps) - 1e-9))
