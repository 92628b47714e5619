"""A plan's outputs: the printed table and recommendation, plan.csv, searches.csv, plan.json and pareto.png.

The plot is drawn from plan.csv's columns alone, so the notebook redraws it from a saved plan.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from simserve.io import MARKER, output_dir
from simserve.plan import speculation
from simserve.plan.rows import LAYOUT_AGG, deployment_label, layout_of
from simserve.plan.search import PlanResult

if TYPE_CHECKING:  # imported where a plot is drawn: ~0.7 CPU-s that a plan with --no-plots does not spend
    from matplotlib.figure import Figure

GPU_COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:gray")
APPROXIMATION = (
    "capacity of R replicas = R × one replica's simulated capacity; against a simulated round-robin cluster "
    "it UNDERESTIMATES or matches (by 0-3% on the mean of 4 seeds at 2 and 4 replicas: "
    "benchmarks/plan_replicas.py, docs/planner.md), so multi-replica rows are conservative"
)


def pareto_plot(rows: pd.DataFrame, title: str = "") -> Figure:
    """Dollars per hour against capacity, one colour per GPU; the Pareto frontier joined and labelled."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.5, 4.8))
    ax = fig.add_subplot()
    for i, (gpu, df) in enumerate(rows.groupby("gpu", sort=True)):
        ax.scatter(
            df["capacity_qps"],
            df["usd_per_hour"],
            s=18,
            alpha=0.45,
            color=GPU_COLORS[i % len(GPU_COLORS)],
            label=gpu,
        )
    front = rows[rows["pareto"]].sort_values("capacity_qps")
    if len(front):
        ax.plot(front["capacity_qps"], front["usd_per_hour"], "k-", lw=1, label="Pareto frontier")
        ax.scatter(front["capacity_qps"], front["usd_per_hour"], s=36, facecolors="none", edgecolors="k")
        for _, r in front.iterrows():
            ax.annotate(
                deployment_label(r),
                (r["capacity_qps"], r["usd_per_hour"]),
                fontsize=7,
                xytext=(4, -9),
                textcoords="offset points",
            )
    ax.set_xlabel("capacity (requests/s within the SLO)")
    ax.set_ylabel("cost ($ per hour)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig


def recommendation(result: PlanResult) -> pd.Series | None:
    """The row to buy: cheapest per hour that carries --qps, else cheapest per million output tokens
    (ties go to fewer GPUs)."""
    rows = result.rows
    if rows.empty:
        return None
    keys = ["usd_per_hour"] if result.spec.target_qps else ["usd_per_million_output_tokens"]
    return rows.sort_values([*keys, "gpus"], kind="stable").iloc[0]


def spread(result: PlanResult) -> dict[tuple, float]:
    from simserve.plan.ties import seed_spread

    return seed_spread(result.searches, result.spec.seed)


def ties(result: PlanResult) -> list:
    """The rows the plan cannot rank below the recommendation (plan/ties.py)."""
    from simserve.plan.ties import find_ties

    best = recommendation(result)
    if best is None:
        return []
    s = result.spec
    return find_ties(
        result.rows,
        best,
        result.objective,
        result.prices,
        s.tolerance,
        spread(result),
        s.num_requests,
        capacity_based=s.target_qps is None,
    )


def noise_lines(result: PlanResult) -> list[str]:
    """One line for the top of the table when the seed spread the plan measured is wider than the gap between
    its first two deployments: their order is within noise, and roughly how many requests per simulation would
    separate them (plan/ties.requests_to_resolve)."""
    from simserve.plan.ties import contenders, requests_to_resolve

    measured = spread(result)
    best = recommendation(result)
    if not measured or best is None or result.spec.target_qps is not None:
        return []
    obj = result.objective
    rows = contenders(result.rows, obj)
    if len(rows) < 2:
        return []
    first, second = float(rows.iloc[0][obj]), float(rows.iloc[1][obj])
    gap, worst = (second - first) / first, max(measured.values())
    if worst <= gap:
        return []
    n = result.spec.num_requests
    return [
        f"noise: one seed's capacity differs from another's by up to {worst:.1%} at {n} requests per "
        f"simulation (the {len(measured)} cheapest deployments at {result.spec.tie_seeds + 1} seeds), more "
        f"than the {gap:.1%} between the first two deployments below: their order is within noise; about "
        f"--requests {requests_to_resolve(n, worst, gap):,} would separate them (ties below)"
    ]


def commands(result: PlanResult, row: pd.Series) -> list[str]:
    """The `vllm serve` line of each replica of `row` (plan/command.py)."""
    from simserve.catalog.hardware import NODES
    from simserve.plan.command import replica_commands

    s = result.spec
    if layout_of(row) != LAYOUT_AGG:
        from simserve.plan.command import disagg_commands

        return disagg_commands(s, row)
    node = row.get("node")
    per_node = NODES.get(node).gpus_per_node if isinstance(node, str) and node else None
    return replica_commands(
        s.model,
        int(row["tp"]),
        int(row["pp"]),
        int(row["replicas"]),
        int(row["budget"]),
        s.max_batch,
        s.max_len,
        s.memory_utilization,
        per_node,
        s.dtype,
        s.kv_dtype,
        int(row.get("ep", 1)),
        tuple(speculation.serve_flags(s, int(row.get(speculation.COLUMN, 0)))),
    )


def title(result: PlanResult) -> str:
    s = result.spec
    return f"{s.model}, {s.trace}, {s.slo.describe()}, ≤ {s.max_gpus} GPUs"


def summarize(result: PlanResult) -> dict:
    from simserve.plan.ties import key_label

    best = recommendation(result)
    return {
        "model": result.spec.model,
        "trace": result.spec.trace,
        "slo": result.spec.slo.describe(),
        "max_gpus": result.spec.max_gpus,
        "requests_per_search": result.spec.num_requests,
        "target_qps": result.spec.target_qps,
        "mean_output_tokens": result.mean_output_tokens,
        "prices": {
            g: {
                "usd_per_gpu_hour": p.usd_per_gpu_hour,
                "low": p.low,
                "high": p.high,
                "gpus_per_rental": p.gpus_per_rental,
                "source": p.source,
                "date": p.date,
            }
            for g, p in result.prices.items()
        },
        "profiles": sorted(set(result.searches["profile"])),
        "recommendation": None if best is None else {k: _plain(v) for k, v in best.items()},
        "ties": [t.as_dict() for t in ties(result)],
        "seed_spread": [{"deployment": key_label(k), "spread": v} for k, v in spread(result).items()],
        "commands": [] if best is None else commands(result, best),
        "approximation": APPROXIMATION,
        "rejected": result.rejected,
        "stats": {k: _plain(v) for k, v in result.stats.items()},
        **({"speculation": speculation.summary(result)} if result.spec.speculative else {}),
    }


def _plain(v):
    return v.item() if hasattr(v, "item") else v


def write_outputs(
    result: PlanResult, out: str | Path, plots: bool = True, force: bool = False, day=None
) -> list[Path]:
    """plan.csv, searches.csv, plan.json and pareto.png into `out`, with a day plan (plan/day.py) day.csv and
    plan.json's `day` section; each file lands whole (io.output_dir)."""
    out = Path(out)
    doc = summarize(result)
    if day is not None:
        from simserve.plan.day import summarize as day_summary

        doc["day"] = day_summary(day)
    with output_dir(out, force) as tmp:
        result.rows.to_csv(tmp / "plan.csv", index=False, float_format="%.6g")
        result.searches.to_csv(tmp / "searches.csv", index=False, float_format="%.6g")
        if day is not None:
            day.rows.to_csv(tmp / "day.csv", index=False, float_format="%.6g")
        (tmp / "plan.json").write_text(json.dumps(doc, indent=2) + "\n")
        if plots:
            pareto_plot(result.rows, title(result)).savefig(tmp / "pareto.png", dpi=110)
    return sorted(out / rel for rel in (out / MARKER).read_text().split())


def table_rows(result: PlanResult, all_rows: bool = False) -> pd.DataFrame:
    """What the CLI prints: the Pareto rows (or all), cheapest first; with disaggregated layouts searched,
    also the best disaggregated row when it is off the front (the plan's answer to "and disaggregated?")."""
    df = result.rows if all_rows else result.rows[result.rows["pareto"]]
    extra = best_disagg(result)
    if extra is not None and not (df.index == extra.name).any():
        df = pd.concat([df, extra.to_frame().T])
    return df.sort_values(["usd_per_hour", "capacity_qps"], ascending=[True, False], kind="stable")


def best_disagg(result: PlanResult) -> pd.Series | None:
    """The disaggregated row cheapest by the plan's objective (ties: fewer GPUs), or None."""

    rows = result.rows
    if "layout" not in rows or rows.empty:
        return None
    d = rows[rows["layout"].fillna(LAYOUT_AGG) != LAYOUT_AGG]
    if d.empty:
        return None
    return d.sort_values([result.objective, "gpus"], kind="stable").iloc[0]


def disagg_story(result: PlanResult) -> list[str]:
    """With disaggregated layouts asked for, what became of them: the best row against the first one, or why
    none has a row (each searched layout's outcome; the screen's notes are printed apart)."""

    if "disagg" not in result.spec.layouts:
        return []
    best, first = best_disagg(result), recommendation(result)
    obj = result.objective
    if best is not None and first is not None:
        if deployment_label(best) == deployment_label(first):
            return [f"disaggregated: {deployment_label(best)} is the first row"]
        gap = (float(best[obj]) - float(first[obj])) / float(first[obj])
        where = (
            "on the Pareto front" if bool(best["pareto"]) else "off the Pareto front (shown for comparison)"
        )
        unit = "per hour" if obj == "usd_per_hour" else "per million output tokens"
        return [
            f"disaggregated: best {deployment_label(best)}, {float(best['capacity_qps']):.3g} qps, "
            f"${float(best[obj]):.3f} {unit}, {gap:+.1%} against the first row; {where}"
        ]
    s = result.searches
    d = s[s["layout"].fillna(LAYOUT_AGG) != LAYOUT_AGG] if "layout" in s else s.iloc[0:0]
    d = d[~d["status"].astype(str).str.startswith("seed spread")]
    if d.empty:
        return ["disaggregated: no layout was searched (see the notes below: the screen found none to try)"]
    parts = []
    for status, group in d.groupby("status", sort=False):
        names = ", ".join(sorted(group["layout"]))
        if status == "pruned":
            rate = float(group["start_qps"].min())
            parts.append(
                f"{names} failed their one probe at {rate:.3g} qps, the rate the Pareto front demands "
                f"(dominated: status 'pruned')"
            )
        elif status == "below floor":
            parts.append(f"{names} stayed below --min-qps {result.spec.min_qps:g}")
        else:
            parts.append(f"{names}: {status}")
    return [f"disaggregated: no layout has a row: {'; '.join(parts)} (searches.csv)"]
