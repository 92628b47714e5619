"""What a sweep leaves behind: the summary (JSON and a printed table) and the output directory."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
from rich.table import Table

from simserve.io import MARKER, output_dir
from simserve.shipped import version
from simserve.tune.probe import CDF_GRID
from simserve.tune.sweep import SweepResult, best_per_policy, iter_probes, scenario_fields


def _num(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if hasattr(x, "item"):  # numpy / pandas scalars
        return _num(x.item())
    return None if x is pd.NA else x


def profile_of(scenario: Any) -> str:
    """The kind of profile (measured / roofline / torch) a sweep's scenarios rest on, for its summary and
    table."""
    from simserve.predictor.load import profile_label

    if not hasattr(scenario, "deployment"):  # the toy stand-in (tune/toy.py) has closed-form service times
        return "no (closed-form toy times)"
    return profile_label(scenario.deployment(), scenario.profiles_root)


def summarize(result: SweepResult) -> dict[str, Any]:
    """Per SLO: each policy's best configuration and capacity, Sarathi's best budget, its gain over vLLM."""
    per_slo = []
    for slo in result.spec.slos:
        best = best_per_policy(result.rows, slo.tbt_s)
        policies = {
            row["policy"]: {
                k: _num(row[k])
                for k in (
                    "label",
                    "budget",
                    "max_batch",
                    "capacity_qps",
                    "capacity_std",
                    "capacity_min",
                    "capacity_max",
                )
            }
            for _, row in best.iterrows()
        }
        entry: dict[str, Any] = {"slo": dataclasses.asdict(slo), "best": policies}
        if "sarathi" in policies:
            entry["sarathi_best_budget"] = policies["sarathi"]["budget"]
            vllm = policies.get("vllm", {}).get("capacity_qps")
            if vllm:
                entry["sarathi_gain_over_vllm"] = policies["sarathi"]["capacity_qps"] / vllm
        per_slo.append(entry)
    spec = result.spec
    return {
        "simserve": version(),
        "scenario": {
            k: (str(v) if isinstance(v, Path) else v)
            for k, v in scenario_fields(spec.base).items()
            if k not in ("policy", "budget", "max_batch", "seed")
        },
        "grid": {
            "policies": list(spec.policies),
            "budgets": list(spec.budgets),
            "max_batches": list(spec.max_batches),
            "reserving_max_batch": spec.reserving_max_batch,
            "vllm_max_batches": list(spec.vllm_max_batches or spec.max_batches),
            "seeds": list(spec.seeds),
            "tolerance": spec.tolerance,
            "start_qps": spec.start_qps,
        },
        "results": per_slo,
        "profile": profile_of(spec.base),
        "latency_cdfs": {"qps": result.cdf_qps, "reference": result.cdf_reference},
        # NOTE: no timings or cache-hit counts here: the file's bytes must not depend on the cache or the
        # clock.
        "searches": _num(result.stats.get("tasks")),
    }


def summary_table(result: SweepResult) -> Table:
    multi = len(result.spec.slos) > 1
    seeds = len(result.spec.seeds) > 1
    table = Table(title=f"Capacity (max QPS within the SLOs); {profile_of(result.spec.base)} profile")
    if multi:
        table.add_column("P99 TBT SLO")
    for col in (
        "policy",
        "best configuration",
        "capacity (qps)",
        "vs vLLM",
        "limited by",
    ):
        table.add_column(col, justify="right" if col != "policy" else "left")
    for slo in result.spec.slos:
        best = best_per_policy(result.rows, slo.tbt_s)
        best = best.sort_values("policy", key=lambda col: col.map(result.spec.policies.index))
        vllm = best.loc[best["policy"] == "vllm", "capacity_qps"]
        ref = float(vllm.iloc[0]) if len(vllm) else math.nan
        for _, row in best.iterrows():
            cap = f"{row['capacity_qps']:.3g}"
            if seeds:
                cap += f" ± {row['capacity_std']:.2g} [{row['capacity_min']:.3g}, {row['capacity_max']:.3g}]"
            gain = f"{row['capacity_qps'] / ref:.2f}×" if ref > 0 else "-"
            why = row.get("limited_by", "")
            why = "" if not isinstance(why, str) else why
            table.add_row(
                *([f"{slo.tbt_s:g} s"] if multi else []), row["policy"], row["label"], cap, gain, why
            )
    return table


def _limit_kind(reason: str) -> str:
    if "TBT" in reason:
        return "P99 TBT (longer hybrid iterations)"
    if "TTFT" in reason:
        return "TTFT"
    if reason:
        return "queueing (too little prefill per iteration)"
    return "nothing (search cap)"


def budget_story(result: SweepResult) -> list[str]:
    """Why Sarathi's best budget wins: which objective gives out first just above each budget's capacity.

    Budgets that are too large miss the TBT SLO (every hybrid iteration carries that many prefill tokens);
    budgets that are too small starve prefills, so requests queue and the scheduling delay gives out; one
    token past a GEMM tile boundary pays for a whole extra tile and loses capacity.
    """
    lines = []
    for slo in result.spec.slos:
        rows = result.rows[(result.rows["policy"] == "sarathi") & (result.rows["slo_s"] == slo.tbt_s)]
        if len(rows) < 2:
            continue
        rows = rows.sort_values("budget")
        best = rows.loc[rows["capacity_qps"].idxmax()]
        groups: dict[str, list[str]] = {}
        for _, r in rows.iterrows():
            groups.setdefault(_limit_kind(r["limited_by"] or ""), []).append(
                f"{int(r['budget'])} ({r['capacity_qps']:.3g})"
            )
        parts = [f"{', '.join(budgets)} stop at {kind}" for kind, budgets in groups.items()]
        lines.append(f"why sarathi-{int(best['budget'])} at P99 TBT ≤ {slo.tbt_s:g} s: " + "; ".join(parts))
    return lines


def write_outputs(
    result: SweepResult, out: str | Path, plots: bool = True, force: bool = False
) -> list[Path]:
    """sweep.csv, probes.csv, summary.json and the plots into `out`; each file lands whole (io.output_dir)."""
    out = Path(out)
    with output_dir(out, force) as tmp:
        result.rows.to_csv(tmp / "sweep.csv", index=False, float_format="%.6g")
        pd.DataFrame(list(iter_probes(result))).to_csv(tmp / "probes.csv", index=False, float_format="%.6g")
        (tmp / "summary.json").write_text(json.dumps(summarize(result), indent=2, allow_nan=False) + "\n")
        if result.cdfs:
            curves = {
                lab: {m: [_num(float(v)) for v in vs] for m, vs in c.items()}
                for lab, c in result.cdfs.items()
            }
            doc = {
                "qps": result.cdf_qps,
                "reference": result.cdf_reference,
                "quantiles": list(CDF_GRID),
                "curves": curves,
            }
            # sorted keys: a cached record comes back with sorted keys, and the bytes must not tell
            (tmp / "latency_cdfs.json").write_text(json.dumps(doc, allow_nan=False, sort_keys=True) + "\n")
        if plots:
            from simserve.tune.plots import save_all

            save_all(result, tmp)
    return sorted(out / rel for rel in (out / MARKER).read_text().split())


def read_outputs(out: str | Path) -> tuple[pd.DataFrame, dict[str, Any]]:
    """A sweep directory's table (sweep.csv) and latency curves (latency_cdfs.json; empty when absent)."""
    out = Path(out)
    if not (out / "sweep.csv").exists():
        from simserve.errors import SimserveError

        raise SimserveError(f"{out} holds no sweep.csv; run `simserve sweep --out {out}` first")
    rows = pd.read_csv(out / "sweep.csv")
    rows["budget"] = rows["budget"].astype("Int64")
    rows["message"] = rows["message"].fillna("")
    cdf_file = out / "latency_cdfs.json"
    cdfs = json.loads(cdf_file.read_text()) if cdf_file.exists() else {}
    for curves in cdfs.get("curves", {}).values():
        for metric, values in curves.items():
            curves[metric] = [math.nan if v is None else v for v in values]
    return rows, cdfs
