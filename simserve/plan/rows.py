"""What a plan's tables hold: the columns of searches.csv and plan.csv, what a row keeps of the search at
capacity, and a row's layout and label (aggregated replicas, or a disaggregated xPyD from plan/disagg.py).
"""

from __future__ import annotations

import math

import pandas as pd

from simserve.tune.capacity import CapacityResult

LAYOUT_AGG = "agg"
LAYOUTS = ("agg", "disagg")

SEARCH_COLUMNS = [
    "gpu",
    "tp",
    "pp",
    "ep",
    "node",
    "gpus_per_replica",
    "nodes_per_replica",
    "seed",
    "budget",
    "capacity_qps",
    "status",
    "start_qps",
    "probes",
    "limited_by",
    "message",
    "kv_blocks",
    "profile",
    "tpot_mean_s",
    "requests_simulated",
]

PLAN_COLUMNS = [
    "gpu",
    "tp",
    "pp",
    "ep",
    "node",
    "replicas",
    "gpus",
    "gpus_rented",
    "budget",
    "capacity_qps",
    "capacity_per_gpu_qps",
    "output_tokens_per_s",
    "goodput_tokens_per_s_per_gpu",
    "usd_per_hour",
    "usd_per_million_output_tokens",
    "profile",
    "tpot_mean_s",
    "user_tokens_per_s",
]


def at_capacity(r: CapacityResult) -> dict:
    """What a search row keeps of the probe at capacity: the mean TPOT (a user's time per output token, as
    `vllm bench serve` reports it) and how many requests that probe simulated (tune/simadapter.steady_record
    lengthens a run until it is steady)."""
    m = r.metrics_at_capacity
    return {
        "tpot_mean_s": m.get("tpot_mean_s", math.nan),
        "requests_simulated": m.get("requests_simulated", math.nan),
    }


def user_speed(tpot_mean_s: float) -> dict:
    """Mean TPOT at capacity and the per-user speed it gives: output tokens per second one user sees while its
    answer streams (1 / mean TPOT)."""
    t = float(tpot_mean_s)
    return {"tpot_mean_s": t, "user_tokens_per_s": 1.0 / t if t > 0 else math.nan}


def layout_of(row) -> str:
    """A plan row's layout: 'agg', or the xPyD label of a disaggregated row."""
    v = row.get("layout", LAYOUT_AGG) if hasattr(row, "get") else LAYOUT_AGG
    return v if isinstance(v, str) and v else LAYOUT_AGG


def deployment_label(row: pd.Series) -> str:
    if layout_of(row) != LAYOUT_AGG:
        return f"{int(row['replicas'])}×({row['gpu']} {layout_of(row)})"
    ep = int(row.get("ep", 1))
    dp = f"DP{ep // int(row['tp'])}×" if ep > int(row["tp"]) else ""  # attention DP: EP = DP × TP
    ep_label = f" EP{ep}" if ep > 1 else ""
    return f"{int(row['replicas'])}×({row['gpu']} {dp}TP{int(row['tp'])}{ep_label} PP{int(row['pp'])})"
