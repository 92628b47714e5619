"""What an autoscaled run reports: replicas over time (replicas.csv), GPU-hours against static provisioning at
the peak, and SLO attainment and request rate per window of arrival time (summary.json), and the plot.

SLO attainment follows DistServe's per-request definition: the share of requests (served or not) whose TTFT
and TPOT both met their bound. TTFT and TPOT are the client's, as the run's summary reports them: with the
API-server model from the client's send to its first and last token, else from arrival plus the front end's
latency; TPOT = (last token − first token) / (output − 1), `vllm bench serve`'s. A request dropped as too
long, or unfinished when the run ended, misses. Defaults: Dynamo's SLA planner's (ai-dynamo/dynamo
components/src/dynamo/planner/config/defaults.py, SLAPlannerDefaults: ttft 500 ms, itl 50 ms).
"""

from __future__ import annotations

import math

import numpy as np

from simserve.sim.request import DONE

COLUMNS = ("time_s", "event", "active", "starting", "draining", "desired", "metric")
TTFT_SLO_S = 0.5
TPOT_SLO_S = 0.05
WINDOW_S = 60.0
# what each policy's `metric` column holds
METRIC = {
    "utilization": "mean KV-cache usage of the serving replicas",
    "queue": "largest queued prompt tokens / context length",
    "slo": "predicted request rate (requests/s)",
}


def client_latencies(run) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(arrival or send time, TTFT, TPOT) per request, NaN where it did not finish (metrics.py's client
    view)."""
    r = run.reqs
    front = run.cfg.frontend_s
    if run.api is not None:
        start, first, last = run.api.sent, run.api.first + front, run.api.done + front
    else:
        start, first, last = r.arrived, r.first_token + front, r.completed + front
    done = r.status == DONE
    ttft = np.where(done, first - start, np.nan)
    many = r.output > 1
    tpot = np.where(done & many, (last - first) / np.maximum(r.output - 1, 1), 0.0)
    tpot = np.where(done, tpot, np.nan)
    return start, ttft, tpot


def scaling_summary(
    run,
    gpus_per_replica: int,
    ttft_slo_s: float = TTFT_SLO_S,
    tpot_slo_s: float = TPOT_SLO_S,
    window_s: float = WINDOW_S,
) -> dict:
    """summary.json's `autoscale` section of a finished autoscaled RawRun."""
    scaler, end = run.scaler, float(run.end_time)
    held = scaler.held(end)
    gpu_s = math.fsum(b - a for _, a, b in held) * gpus_per_replica
    static_s = scaler.config.max_replicas * gpus_per_replica * end
    start, ttft, tpot = client_latencies(run)
    met = (ttft <= ttft_slo_s) & (tpot <= tpot_slo_s)  # NaN (not finished) compares False: a miss
    # each request's window k (edges[k] <= start < edges[k + 1], the edges k * window_s), counted in one pass
    # rather than a mask over every request per window (a day is 1,440 windows of a million requests)
    num = max(1, math.ceil(end / window_s))
    edges = np.arange(num + 1) * window_s
    win = np.searchsorted(edges, start, side="right") - 1
    inside = (win >= 0) & (win < num)  # NaN sorts last: outside, as its comparisons are False
    counts = np.bincount(win[inside], minlength=num).tolist()
    hits = np.bincount(win[inside & met], minlength=num).tolist()
    windows = []
    for k, (n, hit) in enumerate(zip(counts, hits, strict=True)):
        lo, hi = k * window_s, (k + 1) * window_s
        busy = math.fsum(max(0.0, min(b, hi, end) - max(a, lo)) for _, a, b in held)
        windows.append(
            {
                "start_s": lo,
                "requests": n,
                "rate_qps": n / window_s,
                "slo_attainment": hit / n if n else None,
                "mean_replicas_held": busy / max(min(hi, end) - lo, 1e-12),
            }
        )
    c = scaler.config
    return {
        "policy": c.policy,
        "min_replicas": c.min_replicas,
        "max_replicas": c.max_replicas,
        "initial_replicas": c.initial,
        "interval_s": c.interval,
        "cold_start_s": c.cold_start_s,
        "target": c.target,
        "replica_capacity_qps": c.capacity_qps,
        "metric": METRIC[c.policy],
        "gpus_per_replica": gpus_per_replica,
        "gpu_hours": gpu_s / 3600.0,
        "static_peak_gpu_hours": static_s / 3600.0,
        "gpu_hours_saved": 1.0 - gpu_s / static_s if static_s else 0.0,
        "decisions": sum(1 for row in scaler.rows if row[1] == "decision"),
        "scale_events": _changes(scaler.rows),
        "slo": {"ttft_s": ttft_slo_s, "tpot_s": tpot_slo_s},
        "slo_attainment": float(met.mean()),
        "window_s": window_s,
        "windows": windows,
    }


def _changes(rows) -> int:
    """Decisions that changed the replica count."""
    out, last = 0, None
    for row in rows:
        count = row[2] + row[3]
        if last is not None and count != last:
            out += 1
        last = count
    return out


def write_replicas_csv(path, run) -> None:
    """replicas.csv: one row per wake of the autoscaler (a decision, or a cold start ending)."""
    lines = [",".join(COLUMNS)]
    for t, event, active, starting, draining, desired, metric in run.scaler.rows:
        m = "" if isinstance(metric, float) and math.isnan(metric) else repr(float(metric))
        lines.append(f"{t!r},{event},{active},{starting},{draining},{'' if desired < 0 else desired},{m}")
    path.write_text("\n".join(lines) + "\n")


def plot_replicas(path, run, section: dict) -> None:
    """replicas.png: replicas held and serving over time, and the request rate per window."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = run.scaler.rows
    t = [r[0] for r in rows] + [float(run.end_time)]
    active = [r[2] for r in rows] + [rows[-1][2] if rows else 0]
    held = [r[2] + r[3] + r[4] for r in rows] + [rows[-1][2] + rows[-1][3] + rows[-1][4] if rows else 0]
    fig, ax = plt.subplots(figsize=(9, 4))
    ax.step(t, held, where="post", label="replicas held (GPUs billed)", color="tab:gray")
    ax.step(t, active, where="post", label="replicas serving", color="tab:blue")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("replicas")
    ax.set_ylim(0, section["max_replicas"] + 0.5)
    rate = ax.twinx()
    w = section["windows"]
    rate.step(
        [x["start_s"] for x in w],
        [x["rate_qps"] for x in w],
        where="post",
        color="tab:orange",
        label="request rate",
    )
    rate.set_ylabel("requests/s")
    lines = ax.get_legend_handles_labels()[0] + rate.get_legend_handles_labels()[0]
    ax.legend(lines, [h.get_label() for h in lines], loc="upper right", fontsize=8)
    ax.set_title(
        f"--scale-policy {section['policy']}: {section['gpu_hours']:.2f} GPU-h vs "
        f"{section['static_peak_gpu_hours']:.2f} static at peak; SLO met by "
        f"{section['slo_attainment']:.1%}",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
