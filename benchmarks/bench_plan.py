"""CPU time and wall time of one `simserve plan`, from a cold cache (docs/planner.md records the output).

    python benchmarks/bench_plan.py                            # the issue's command
    python benchmarks/bench_plan.py --no-prune                 # every deployment and budget searched whole
    python benchmarks/bench_plan.py --case disagg              # issue 33's agg + disagg plan, fixed 1700/400
    python benchmarks/bench_plan.py --stages                   # cold, then profiles only kept, then warm
    python benchmarks/bench_plan.py -- --gpus a100 --max-gpus 4   # other plan options after --
    python benchmarks/bench_plan.py --case qwen3-dp              # an MoE question with attention-DP layouts

The MoE cases (issue 33 item 19's question: 8×H200, every request 4000 prompt and 1000 output tokens, P50 TBT
≤ 50 ms and P50 TTFT ≤ 3 s; the plan searches DP × TP layouts beside TP and EP ones) run on a trace file of
1024 such requests, written into the run's temporary directory, as benchmarks/vs_aiconfigurator.py writes its
own.

Every run gets a fresh $SIMSERVE_CACHE, so it pays for everything a first plan pays for: writing the plan's
profiles, fitting predictors, and every probe. With --stages the same command runs three times in that cache:
cold (nothing cached), profiles (everything but the generated profiles removed again: the predictors are
fitted and every probe simulated, as on a machine that has planned this model and GPU before but nothing
else), and warm (everything cached). CPU seconds (user + sys of the plan and all its worker processes) are the
figure to compare on a shared machine: wall time there depends on the other load.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ISSUE = [
    "--model",
    "llama-2-70b",
    "--trace",
    "sharegpt",
    "--slo",
    "0.2",
    "--gpus",
    "a100,h100,h200",
    "--max-gpus",
    "8",
]
# Issue 33's plan: LLaMA2-70B on up to 8 H200s, every prompt 1,700 tokens and every answer 400, both layouts.
DISAGG = [
    "--model",
    "llama-2-70b",
    "--trace",
    "fixed:1700:400",
    "--slo",
    "0.2",
    "--gpus",
    "h200",
    "--max-gpus",
    "8",
    "--layouts",
    "agg,disagg",
]
FIXED = "{fixed}"  # replaced by the path of the fixed-length trace file
MOE = [
    "--dtype",
    "fp8",
    "--gpus",
    "h200",
    "--max-gpus",
    "8",
    "--trace",
    FIXED,
    "--slo",
    "0.05",
    "--tbt-quantile",
    "0.5",
    "--ttft-slo",
    "3",
    "--ttft-quantile",
    "0.5",
]
CASES = {
    "issue": ISSUE,
    "disagg": DISAGG,
    "qwen3-dp": ["--model", "qwen3-235b-a22b", *MOE],
    "deepseek-dp": ["--model", "deepseek-v3", *MOE],
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-prune", action="store_true", help="pass --no-prune to the plan")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument(
        "--case", choices=sorted(CASES), default="issue", help="a preset command (default: issue)"
    )
    ap.add_argument("--stages", action="store_true", help="cold, then with only the profiles kept, then warm")
    ap.add_argument("--keep", type=Path, default=None, help="copy the plan's output directory here")
    ap.add_argument("plan_args", nargs="*", help="plan options replacing the preset's (after --)")
    args = ap.parse_args()
    plan_args = args.plan_args or CASES[args.case]
    shown = shlex.join(["simserve", "plan", *plan_args, *(["--no-prune"] if args.no_prune else [])])
    print(f"command: {shown.replace(FIXED, '<4000/1000 trace>')} --workers {args.workers}")
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores (shared), load "
        f"{', '.join(f'{x:.1f}' for x in os.getloadavg())} (1, 5, 15 min) before the runs"
    )
    with tempfile.TemporaryDirectory(prefix="bench-plan-") as tmp:
        cache = Path(tmp) / "cache"
        if FIXED in plan_args:  # every request 4000 prompt and 1000 output tokens, 1024 of them
            trace = Path(tmp) / "fixed-4000-1000.csv"
            trace.write_text("prompt_tokens,output_tokens\n" + "4000,1000\n" * 1024)
            plan_args = [str(trace) if a == FIXED else a for a in plan_args]
        stages = ("cold", "profiles", "warm") if args.stages else ("cold",)
        for stage in stages:
            if stage == "profiles":  # keep the generated profiles, drop predictors, timers, probes and traces
                for entry in cache.iterdir():
                    if entry.name != "plan-profiles":
                        shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
            out = args.keep or Path(tmp) / "out"
            cpu, wall, stats, stdout = _run(plan_args, args, cache, out)
            if stage == stages[-1]:
                print(stdout)
            print(
                f"{stage}: CPU (user+sys, plan and workers) {cpu:.1f} s; wall {wall:.1f} s; searches "
                f"{stats['tasks']}, pruned after one probe {stats.get('searches_pruned', 0)}, probes "
                f"simulated {stats['probes_simulated']} ({stats['probes_speculative']} speculative)"
            )


def _run(plan_args: list[str], args, cache: Path, out: Path) -> tuple[float, float, dict, str]:
    cmd = [
        sys.executable,
        "-c",
        "from simserve.cli import main; main()",
        "plan",
        *plan_args,
        "--workers",
        str(args.workers),
        "--out",
        str(out),
        "--cache",
        str(cache / "probes"),
        "--force",
    ]
    cmd += ["--no-prune"] if args.no_prune else []
    env = {**os.environ, "SIMSERVE_CACHE": str(cache)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode:
        print(proc.stdout)
        sys.exit(f"the plan failed (exit {proc.returncode})")
    stats = json.loads((out / "plan.json").read_text())["stats"]
    return cpu, wall, stats, proc.stdout


if __name__ == "__main__":
    main()
