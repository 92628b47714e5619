"""Autoscaling under a rate step: 2 qps, then 8 qps, then 2 qps (10 minutes each, Poisson, ShareGPT lengths),
on Llama-3-8B / H100 with vLLM 0.33.0 (`simserve run --engine vllm`), autoscaled 1:8 under each --scale-policy
against static provisioning for the peak; GPU-hours, SLO attainment, and the CPU cost of each run.

Each row is one `simserve run` process on a trace this script writes (a CSV of ShareGPT lengths with the
step's arrival times, replayed with --arrival replay). A static deployment runs as `--replicas K --autoscale
K:K` (an autoscaler that cannot move: the same run as a fixed K, which `test_cli_autoscale` checks, and it
reports the same GPU-hours and attainment); the CPU columns also time the plain fixed run without --autoscale.

    python benchmarks/autoscale_step.py             # prints the table
    python benchmarks/autoscale_step.py --write     # and writes it into docs/traffic.md's Autoscaling section
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from common import REPO, write_block

# (qps, seconds) phases: the 2 -> 8 -> 2 qps, and the same shape at four times the rate (one replica
# of Llama-3-8B/H100 meets the SLO at about 9 qps: the first step needs no second replica, the second needs
# four)
STEPS = {
    "2-8-2": ((2.0, 600.0), (8.0, 600.0), (2.0, 600.0)),
    "8-32-8": ((8.0, 600.0), (32.0, 600.0), (8.0, 600.0)),
}
RUN = [
    "--model",
    "llama-3-8b",
    "--gpu",
    "h100",
    "--engine",
    "vllm",
    "--arrival",
    "replay",
    "--qps",
    "1",
    "--iterations",
    "none",
    "--seed",
    "0",
]
BEGIN, END = "<!-- autoscale_step:begin -->", "<!-- autoscale_step:end -->"


def write_trace(path: Path, step, seed: int = 0) -> int:
    """ShareGPT lengths (simserve's shipped sample) with the step's Poisson arrivals; returns the request
    count."""
    from simserve.sim.scenario import _workload

    rng, times, t0 = np.random.default_rng(seed), [], 0.0
    for qps, seconds in step:
        gaps = rng.exponential(1.0 / qps, int(qps * seconds * 2) + 50)
        at = t0 + np.cumsum(gaps)
        times.append(at[at < t0 + seconds])
        t0 += seconds
    arrived = np.concatenate(times)
    prompt, output, _, _ = _workload("sharegpt", 8192, len(arrived), seed, False)
    rows = [
        f"{p},{o},{a!r}" for p, o, a in zip(prompt.tolist(), output.tolist(), arrived.tolist(), strict=True)
    ]
    path.write_text("num_prefill_tokens,num_decode_tokens,arrived_at\n" + "\n".join(rows) + "\n")
    return len(arrived)


def run(trace: Path, n: int, out: Path, *args: str) -> tuple[dict, float]:
    """One `simserve run`; (its summary.json, the CPU seconds of its whole process)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    cmd = [
        sys.executable,
        "-m",
        "simserve",
        "run",
        *RUN,
        "--trace",
        str(trace),
        "--requests",
        str(n),
        "--out",
        str(out),
        *args,
    ]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return json.loads((out / "summary.json").read_text()), cpu


def measure(tmp: Path, name: str, step) -> str:
    """The markdown block of one step shape: every deployment's row."""
    trace = tmp / f"{name}.csv"
    n = write_trace(trace, step)
    # the slo policy's first run measures one replica's capacity (cached probes); the table's run is given it
    first, search_cpu = run(trace, n, tmp / f"{name}-search", "--autoscale", "1:8", "--scale-policy", "slo")
    capacity = first["autoscale"]["replica_capacity_qps"]
    peak = math.ceil(max(q for q, _ in step) / capacity)  # Dynamo's own sizing, applied to the peak rate
    rows = []
    for label, extra in (
        (f"static {peak} (the peak's need)", ["--replicas", str(peak), "--autoscale", f"{peak}:{peak}"]),
        ("static 8 (the maximum)", ["--replicas", "8", "--autoscale", "8:8"]),
        (
            "utilization (HPA on KV usage, target 0.5)",
            ["--autoscale", "1:8", "--scale-policy", "utilization"],
        ),
        ("queue (Dynamo load planner)", ["--autoscale", "1:8", "--scale-policy", "queue"]),
        (
            "slo (Dynamo SLA planner)",
            ["--autoscale", "1:8", "--scale-policy", "slo", "--replica-capacity", repr(capacity)],
        ),
    ):
        summary, cpu = run(trace, n, tmp / f"{name}-{len(rows)}", *extra)
        rows.append((label, summary, cpu))
    _, plain_cpu = run(trace, n, tmp / f"{name}-plain", "--replicas", str(peak))
    _, plain8_cpu = run(trace, n, tmp / f"{name}-plain8", "--replicas", "8")
    cold = rows[0][1]["autoscale"]["cold_start"]
    qps = " -> ".join(f"{q:g}" for q, _ in step)
    lines = [
        f"**{qps} qps** ({step[0][1]:g} s each, {n} requests). One replica's capacity at P99 TTFT <= 0.5 s "
        f"and P99 TPOT <= 0.05 s: {capacity:.3g} qps (simserve's capacity search, {search_cpu:.0f} CPU-s "
        f"with the run that made it); cold start {cold['total_s']:.1f} s (weights {cold['weights_s']:.1f} s "
        f"from {cold['storage']}, torch.compile {cold['compile_s']:.1f}, CUDA graphs "
        f"{cold['capture_s']:.1f}, engine {cold['engine_s']:.1f}).",
        "",
        "| deployment | GPU-hours | vs static peak | SLO attainment | worst 60 s window | replica changes | "
        "run CPU-s |",
        "|---|---|---|---|---|---|---|",
    ]
    base = rows[0][1]["autoscale"]["gpu_hours"]
    for label, s, cpu in rows:
        a = s["autoscale"]
        worst = min(w["slo_attainment"] for w in a["windows"] if w["requests"])
        lines.append(
            f"| {label} | {a['gpu_hours']:.3f} | {a['gpu_hours'] / base - 1:+.0%} | "
            f"{a['slo_attainment']:.1%} | {worst:.1%} | {a['scale_events']} | {cpu:.1f} |"
        )
    lines += [
        "",
        f"The same fixed deployments without --autoscale: static {peak}, {plain_cpu:.1f} CPU-s; static 8, "
        f"{plain8_cpu:.1f} CPU-s (whole process, one `simserve run` each).",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="write the tables into docs/traffic.md")
    ap.add_argument("--only", choices=list(STEPS), help="one step shape")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        blocks = [measure(Path(tmp), name, step) for name, step in STEPS.items() if args.only in (None, name)]
    body = "\n\n".join(blocks)
    print(body)
    if args.write:
        write_block(REPO / "docs" / "traffic.md", BEGIN, END, body)


if __name__ == "__main__":
    main()
