"""Plots of a sweep, drawn from its tables (sweep.csv rows, CDF curves), so the notebook can redraw them.

Every function returns a matplotlib `Figure` built without pyplot: it saves the same under any backend and
displays inline in a notebook.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from simserve.tune.probe import CDF_GRID
from simserve.tune.sweep import BUDGETED, best_per_policy

COLORS = {
    "fcfs": "tab:gray",
    "orca": "tab:purple",
    "vllm": "tab:red",
    "sarathi": "tab:blue",
    "chunked": "tab:orange",
    "hybrid": "tab:green",
}


def _slo(rows: pd.DataFrame, slo_s: float | None) -> tuple[pd.DataFrame, float | None]:
    if slo_s is None and rows["slo_s"].notna().any():
        slo_s = float(rows["slo_s"].dropna().iloc[0])
    return (rows if slo_s is None else rows[rows["slo_s"] == slo_s]), slo_s


def _yerr(df: pd.DataFrame) -> np.ndarray | None:
    if (df["seeds"] <= 1).all():
        return None
    return np.vstack([df["capacity_qps"] - df["capacity_min"], df["capacity_max"] - df["capacity_qps"]])


def capacity_vs_budget(rows: pd.DataFrame, slo_s: float | None = None) -> Figure:
    """Capacity of each budgeted policy against its token budget; other policies as horizontal lines.

    Filled markers are multiples of 128 tokens (tile-aligned), hollow ones are not: a dip at 257 or 513
    is the GEMM tile effect."""
    df, slo_s = _slo(rows, slo_s)
    fig = Figure(figsize=(7, 4.2), layout="constrained")
    ax = fig.add_subplot()
    for (policy, mb), g in df[df["policy"].isin(BUDGETED)].groupby(["policy", "max_batch"]):
        g = g.sort_values("budget")
        budgets = g["budget"].astype(float).to_numpy()
        name = policy if mb == 128 else f"{policy} bs{mb}"
        ax.errorbar(budgets, g["capacity_qps"], yerr=_yerr(g), color=COLORS.get(policy), label=name, lw=1.2)
        aligned = g["budget"].astype(int) % 128 == 0
        ax.plot(budgets[aligned], g["capacity_qps"][aligned], "o", color=COLORS.get(policy))
        ax.plot(budgets[~aligned], g["capacity_qps"][~aligned], "o", mfc="white", color=COLORS.get(policy))
    for _, row in best_per_policy(df[~df["policy"].isin(BUDGETED)]).iterrows():
        ax.axhline(row["capacity_qps"], ls="--", color=COLORS.get(row["policy"]), label=row["label"])
    budgeted = df[df["policy"].isin(BUDGETED)]
    if not budgeted.empty:
        ax.set_xscale("log", base=2)
        ticks = sorted({int(b) for b in budgeted["budget"] if int(b) % 128 == 0} or set(budgeted["budget"]))
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.minorticks_off()
    ax.set_xlabel("token budget (tokens per iteration)")
    ax.set_ylabel("capacity (queries/s)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"Capacity vs token budget (P99 TBT ≤ {slo_s:g} s)" if slo_s else "Capacity vs token budget")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return fig


def capacity_per_policy(rows: pd.DataFrame, slo_s: float | None = None) -> Figure:
    """Each policy's best configuration as a bar (with the min–max over seeds when there are several)."""
    df, slo_s = _slo(rows, slo_s)
    best = best_per_policy(df).sort_values("capacity_qps")
    fig = Figure(figsize=(6, 3.8), layout="constrained")
    ax = fig.add_subplot()
    x = np.arange(len(best))
    ax.bar(
        x,
        best["capacity_qps"],
        yerr=_yerr(best),
        capsize=4,
        color=[COLORS.get(p, "tab:gray") for p in best["policy"]],
    )
    for xi, (_, row) in zip(x, best.iterrows(), strict=True):
        ax.annotate(
            f"{row['capacity_qps']:.2f}", (xi, row["capacity_qps"]), ha="center", va="bottom", fontsize=8
        )
    ax.set_xticks(x, best["label"], rotation=20, fontsize=8)
    ax.set_ylabel("capacity (queries/s)")
    ax.set_title(f"Best capacity per policy (P99 TBT ≤ {slo_s:g} s)" if slo_s else "Best capacity per policy")
    ax.grid(axis="y", alpha=0.3)
    return fig


def latency_cdfs(
    cdfs: dict[str, dict[str, list[float]]], qps: float, reference: str = "", slo_s: float | None = None
) -> Figure:
    """CDFs of per-token TBT and per-request TTFT for each configuration, all at the same load."""
    fig = Figure(figsize=(10, 3.8), layout="constrained")
    axes = fig.subplots(1, 2)
    for ax, metric, title in zip(
        axes, ("tbt", "ttft"), ("time between tokens", "time to first token"), strict=True
    ):
        for lab, curves in cdfs.items():
            values = np.asarray(curves[metric], dtype=float)
            ok = np.isfinite(values) & (values > 0)
            policy = lab.replace(" ", "-").split("-")[0]
            style = ":" if "overloaded" in lab else "-"
            ax.plot(values[ok], np.asarray(CDF_GRID)[ok], style, label=lab, color=COLORS.get(policy))
        ax.set_xscale("log")
        ax.set_xlabel(f"{title} (s)")
        ax.set_ylabel("fraction")
        ax.grid(alpha=0.3)
        ax.set_title(title)
    if slo_s:
        axes[0].axvline(slo_s, color="black", ls=":", label=f"SLO {slo_s:g} s")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"Latency at {qps:.3g} qps" + (f" ({reference})" if reference else ""))
    return fig


def tradeoff(rows: pd.DataFrame) -> Figure:
    """Capacity against the P99 TBT SLO (the paper's Figure 12): vLLM per max batch, Sarathi at its best
    budget."""
    fig = Figure(figsize=(6.5, 4), layout="constrained")
    ax = fig.add_subplot()
    vllm = rows[rows["policy"] == "vllm"]
    styles = iter(["s:", "D-.", "^--", "v:", "o-."] * 4)
    for i, (mb, g) in enumerate(vllm.groupby("max_batch")):
        g = g.sort_values("slo_s")
        shade = 1.0 - 0.5 * i / max(vllm["max_batch"].nunique() - 1, 1)  # darker red = larger batch
        ax.plot(g["slo_s"], g["capacity_qps"], next(styles), color=(shade, 0.15, 0.15), label=f"vLLM bs{mb}")
    for policy in BUDGETED:
        best = best_per_policy(rows[rows["policy"] == policy]).sort_values("slo_s")
        if best.empty:
            continue
        ax.plot(
            best["slo_s"], best["capacity_qps"], "o-", color=COLORS[policy], label=f"{policy} (best budget)"
        )
        for _, row in best.iterrows():
            ax.annotate(
                str(row["budget"]),
                (row["slo_s"], row["capacity_qps"]),
                textcoords="offset points",
                xytext=(0, 6),
                ha="center",
                fontsize=7,
                color=COLORS[policy],
            )
    ax.set_xscale("log")
    slos = sorted(rows["slo_s"].dropna().unique())
    ax.set_xticks(slos, [f"{x:g}" for x in slos])
    ax.minorticks_off()
    ax.set_xlabel("P99 TBT SLO (s)")
    ax.set_ylabel("capacity (queries/s)")
    ax.set_ylim(0, ax.get_ylim()[1] * 1.05)
    ax.set_title("Latency–throughput tradeoff")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return fig


def save_all(result, out: Path) -> list[Path]:  # result: sweep.SweepResult
    """Write the sweep's plots as PNGs into `out`; returns the paths written."""
    rows, slos = result.rows, sorted(result.rows["slo_s"].dropna().unique())
    primary = result.spec.slos[0].tbt_s
    figures = {
        "capacity_vs_budget.png": capacity_vs_budget(rows, primary),
        "capacity_per_policy.png": capacity_per_policy(rows, primary),
    }
    if result.cdfs:
        figures["latency_cdfs.png"] = latency_cdfs(result.cdfs, result.cdf_qps, result.cdf_reference, primary)
    if len(slos) > 1:
        figures["tradeoff.png"] = tradeoff(rows)
    for name, fig in figures.items():
        fig.savefig(out / name, dpi=110)
    return [out / name for name in figures]
