"""The report of benchmarks/published_e2e.py: per-cell median |error| tables, the setups two sources
published, and the per-run rows as markdown (docs/published-e2e-runs.md). Plain functions over the script's
JSON results, so a saved run can be rendered again without simulating (`published_e2e.py --from-json`)."""

from __future__ import annotations

import numpy as np
import published_runs as pr


def cell_table(results: list[dict], split: str) -> dict[str, dict[str, dict]]:
    """'gpu / regime' -> family -> {median_abs_error_pct, runs} over the split's unflagged runs."""
    cells: dict[tuple[str, str, str], list[float]] = {}
    for res in results:
        if "rows" not in res or res["split"] != split or res["flagged"]:
            continue
        for row in res["rows"]:
            cells.setdefault((res["gpu"], res["regime"], row["family"]), []).append(abs(row["error_pct"]))
    table: dict[str, dict[str, dict]] = {}
    for (gpu, regime, fam), errs in sorted(cells.items()):
        cell = {"median_abs_error_pct": float(np.median(errs)), "runs": len(errs)}
        table.setdefault(f"{gpu} / {regime}", {})[fam] = cell
    return table


def format_cells(table: dict[str, dict[str, dict]]) -> str:
    head = "| GPU / regime | " + " | ".join(pr.FAMILIES) + " |"
    lines = [head, "|---" * (len(pr.FAMILIES) + 1) + "|"]
    for name, fams in table.items():
        cells = [
            f"{fams[f]['median_abs_error_pct']:.1f}% ({fams[f]['runs']})" if f in fams else ""
            for f in pr.FAMILIES
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def disagreement_rows(runs: tuple[pr.Run, ...], results: dict[str, dict]) -> list[dict]:
    """Setups published twice with different numbers: both values, simserve's, and which one it is closer
    to."""
    out = []
    for members in pr.disagreements(runs):
        done = [results[m.key] for m in members if m.key in results and "rows" in results[m.key]]
        if len(done) < 2:
            continue
        for i, row in enumerate(done[0]["rows"]):
            pubs = [(d["key"], d["rows"][i]["published"]) for d in done]
            closer = min(pubs, key=lambda kp: abs(row["simulated"] - kp[1]))[0]
            out.append(
                {
                    "setup": pr.setup_id(members[0]),
                    "metric": row["metric"],
                    "published": pubs,
                    "simulated": row["simulated"],
                    "closer_to": closer,
                }
            )
    return out


def _num(x: float) -> str:
    return f"{x:.4g}"


def runs_markdown(results: list[dict], runs: dict[str, pr.Run]) -> str:
    """One row per run: what it is, then each published metric as published → simulated (error)."""
    lines = [
        "| run | split | GPU | regime | engine | published → simserve (error) |",
        "|---|---|---|---|---|---|",
    ]
    for res in results:
        run = runs[res["key"]]
        what = f"{run.engine} {run.release}"
        if "rows" not in res:
            lines.append(
                f"| {run.key} | {run.split} | {run.gpu} | {run.regime} | {what} | skipped: {res['skipped']} |"
            )
            continue
        cells = "; ".join(
            f"{row['metric']} {_num(row['published'])} → {_num(row['simulated'])} ({row['error_pct']:+.1f}%)"
            for row in res["rows"]
        )
        flag = f" **flagged: {run.flagged}**" if run.flagged else ""
        lines.append(f"| {run.key} | {run.split} | {run.gpu} | {run.regime} | {what} | {cells}{flag} |")
    return "\n".join(lines)


def disagreements_markdown(rows: list[dict]) -> str:
    lines = ["| setup | metric | published (source: value) | simserve | closer to |", "|---|---|---|---|---|"]
    for row in rows:
        pubs = "; ".join(f"{key}: {_num(v)}" for key, v in row["published"])
        gpu, model, tp, _, _, _, client = row["setup"].split("|")[:7]
        setup = f"{model} TP{tp} on {gpu}, {client}"
        lines.append(
            f"| {setup} | {row['metric']} | {pubs} | {_num(row['simulated'])} | {row['closer_to']} |"
        )
    return "\n".join(lines)
