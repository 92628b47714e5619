"""Simulator speed: simulated requests and iterations per CPU-second, near capacity.

    python benchmarks/bench_sim.py [--repeats 3] [--update-docs]

Cases: Mistral-7B on one A100 (chat trace, Sarathi B=512) and LLaMA2-70B on 8×A40 (TP4-PP2, Sarathi B=512),
2048 requests at a rate just below each one's capacity (the printed scheduling delay and P99 TBT show where
each run sits against the paper's SLOs), and the LLaMA2-70B case again at half that rate. Each case runs once
to warm the per-process caches (trace, predictor, memory plan), then `--repeats` times; the fastest CPU time
(time.process_time) is reported, for the compiled core (the default) and for the SimPy reference model
($SIMSERVE_CORE=reference). When a profile is missing the case falls back to a LinearTimer and says so.

Then, when `.venv-vidur/` exists (created once by `python benchmarks/vs_vidur.py --quick`), the same run also
times Vidur beside simserve on identical inputs (benchmarks/vs_vidur.py's setup: Llama-2-7B on one A100, 2,000
arXiv requests replayed with the same arrivals, Sarathi 512, KV blocks from simserve's plan) and records the
wall-time ratios, whole run and simulation only. Without the venv it prints one line saying why it skipped.
`--no-vidur` skips it.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path

from common import write_block

from simserve.errors import SimserveError
from simserve.sim.scenario import Scenario, run_scenario
from simserve.sim.testing import LinearTimer

DOC = Path(__file__).resolve().parents[1] / "docs" / "simulator.md"
CASES = [
    ("Mistral-7B / A100, TP1", Scenario(model="mistral-7b", gpu="a100", budget=512, num_requests=2048), 3.5),
    (
        "LLaMA2-70B / A40, TP4-PP2",
        Scenario(model="llama2-70b", gpu="a40", tp=4, pp=2, budget=512, num_requests=2048),
        1.0,
    ),
    (  # half the load: longer decode-only stretches, twice the simulated time
        "LLaMA2-70B / A40, TP4-PP2",
        Scenario(model="llama2-70b", gpu="a40", tp=4, pp=2, budget=512, num_requests=2048),
        0.5,
    ),
]


def measure(s: Scenario, qps: float, repeats: int) -> tuple[float, object, str]:
    timer, note = None, ""
    try:
        result = run_scenario(s, qps)  # warm-up: loads trace, predictor and memory plan once
    except SimserveError as exc:
        timer, note = LinearTimer(0.01, 5e-5, 5e-8, num_stages=s.pp), f"LinearTimer fallback ({exc})"
        result = run_scenario(s, qps, timer)
    best = float("inf")
    for _ in range(repeats):
        t = time.process_time()
        result = run_scenario(s, qps, timer)
        best = min(best, time.process_time() - t)
    return best, result, note


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--update-docs", action="store_true", help=f"write the table into {DOC.name}")
    ap.add_argument("--no-vidur", action="store_true", help="skip the side-by-side run with Vidur")
    ap.add_argument("--vidur-requests", type=int, default=2000)
    ap.add_argument("--vidur-qps", type=float, default=1.0)
    args = ap.parse_args()
    lines = [
        "| case | QPS | path | CPU s | requests / CPU s | iterations / CPU s | table rows for iterations | "
        "sched. delay P50 | TBT P99 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    notes = []
    chosen = os.environ.get("SIMSERVE_CORE")
    for name, s, qps in CASES:
        for path in ("core", "reference"):
            os.environ["SIMSERVE_CORE"] = "" if path == "core" else "reference"
            cpu, res, note = measure(s, qps, args.repeats)
            m = res.summary
            lines.append(
                f"| {name} | {qps:g} | {path} | {cpu:.2f} | {m.completed / cpu:,.0f} | "
                f"{m.num_iterations / cpu:,.0f} | {len(res.iterations):,} for {m.num_iterations:,} | "
                f"{m.scheduling_delay_p50_s:.2f} s | {m.tbt_p99_s * 1e3:.0f} ms |"
            )
            print(lines[-1], flush=True)
            if note:
                notes.append(f"{name}: {note}")
    # NOTE: the side-by-side below runs whichever model the caller chose (the core by default); it ran the
    # reference, the last case's setting, until this was restored
    if chosen is None:
        os.environ.pop("SIMSERVE_CORE", None)
    else:
        os.environ["SIMSERVE_CORE"] = chosen
    block = "\n".join(
        [
            f"Measured with `python benchmarks/bench_sim.py --repeats {args.repeats} --update-docs` "
            f"(Python {platform.python_version()}, {platform.machine()}, best of {args.repeats}, "
            "CPU time of `run_scenario` after a warm-up run):",
            "",
            *lines,
            *([""] + [f"Note: {n}" for n in notes] if notes else []),
        ]
    )
    vidur_lines = [] if args.no_vidur else vs_vidur_lines(args.vidur_requests, args.vidur_qps)
    print("\n".join(vidur_lines))
    if vidur_lines:
        block += "\n\n" + "\n".join(vidur_lines)
    if args.update_docs:
        write_block(DOC, "<!-- bench_sim:begin -->", "<!-- bench_sim:end -->", block)
        print(f"updated {DOC}")


def vs_vidur_lines(num_requests: int, qps: float) -> list[str]:
    """Markdown lines: simserve and Vidur on identical inputs, one after the other, or one line saying why
    not."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import tempfile

    import side_by_side as vv
    import vidur_runner as vr

    python = vr.VENV / "bin" / "python"
    if not (vr.VENV / ".simserve-vidur").exists() or not python.exists():
        return [
            f"Vidur side by side: skipped ({vr.VENV.name}/ absent; create it once with "
            "`python benchmarks/vs_vidur.py --quick`, which installs Vidur from the package index)"
        ]
    b = replace(vv.Bench(), num_requests=num_requests, policies=("sarathi",), qps=(qps,))
    work = vv.workload(b, qps)
    dep, cfg = vv.dep_for(b), vv.sim_config(b, "sarathi")
    vv.run_simserve(dep, cfg, work)  # warm-up: fits or loads the predictor, like Vidur's cached predictor
    ours = min((vv.run_simserve(dep, cfg, work) for _ in range(3)), key=lambda side: side.cpu_s)  # best of 3
    with tempfile.TemporaryDirectory() as tmp:
        export = vv.export_profile(b, Path(tmp) / "profile")
        out = Path(tmp) / "run"
        out.mkdir()
        theirs, _ = vv.run_vidur(python, export, vv.vidur_setup(b, "sarathi", ours.num_blocks), work, out)
    return [
        f"Vidur side by side ({num_requests} arXiv requests, Llama-2-7B/A100, Sarathi 512, QPS {qps:g}, "
        "reduced RF grid, warm caches on both sides; simserve best of 3 by CPU, Vidur one run):",
        "",
        "| simulator | wall s | of which simulation s | CPU s | of which simulation CPU s |",
        "|---|---|---|---|---|",
        f"| simserve | {ours.wall_s:.3f} | {ours.sim_s:.3f} | {ours.cpu_s:.3f} | {ours.sim_cpu_s:.3f} |",
        f"| Vidur | {theirs.wall_s:.2f} | {theirs.sim_s:.2f} | {theirs.cpu_s:.2f} | {theirs.sim_cpu_s:.2f} |",
        f"| ratio Vidur / simserve | {theirs.wall_s / ours.wall_s:.0f}x | {theirs.sim_s / ours.sim_s:.0f}x | "
        f"{theirs.cpu_s / ours.cpu_s:.0f}x | {theirs.sim_cpu_s / ours.sim_cpu_s:.0f}x |",
        "",
        "(simserve in this process, warm: timer from the cache, simulation, tables; Vidur a subprocess: "
        "interpreter start, cached predictors, simulation, outputs. CPU = user + system.)",
    ]


if __name__ == "__main__":
    main()
