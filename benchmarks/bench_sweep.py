"""Wall time of the default sweep and of one capacity search (docs/tuning.md records the output).

    python benchmarks/bench_sweep.py                 # default sweep (cold cache, then warm), one search
    python benchmarks/bench_sweep.py --requests 2048 # also the paper's 2048-request trials
    python benchmarks/bench_sweep.py --search bisect # the plain bisection, to compare with the guided search

Cold runs use a fresh probe cache directory, so every probe is simulated; "warm" reruns the same sweep on it.
(The predictor cache, $SIMSERVE_CACHE/predictor, is left as it is; point SIMSERVE_CACHE at an empty
directory to include fitting the predictor.) CPU time counts the driver and its worker processes. The work
itself, which does not depend on the host, is printed below the table: the simulations the searches used and
the decode and prefill iterations they simulated (from probes.csv).
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the command and every worker process it waited for)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def simulated_work(probes_csv: Path) -> tuple[int, int]:
    """(simulations the searches used, iterations they simulated): the work, whatever the host's speed."""
    import csv

    with probes_csv.open() as f:
        rows = list(csv.DictReader(f))
    return len(rows), sum(int(float(r["num_iterations"])) for r in rows)


def one_search(requests: int, search: str) -> tuple[float, int, float]:
    """(wall seconds, probes, capacity) of one Sarathi-512 search, in this process, no cache."""
    from simserve.sim.scenario import Scenario
    from simserve.tune.capacity import SLO
    from simserve.tune.jobs import CapacityTask, solve

    task = CapacityTask(
        Scenario(
            model="mistral-7b",
            gpu="a100",
            trace="sharegpt",
            num_requests=requests,
            policy="sarathi",
            budget=512,
            max_batch=128,
        ),
        SLO(0.1),
        search=search,
    )
    t0 = time.perf_counter()
    result = solve(task)
    return time.perf_counter() - t0, len(result.probes), result.capacity_qps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, nargs="*", default=[], help="extra request counts to time")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--search", default=None, help="simserve sweep --search (default: the sweep's own)")
    args = ap.parse_args()
    env = dict(os.environ)
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"python {platform.python_version()}; workers={args.workers}"
    )
    load = os.getloadavg()[0]
    print(
        f"load average before: {load:.1f} (above {os.cpu_count()}: other jobs ran, wall times are inflated)"
    )
    print("| what | command | wall time (s) | CPU time (s) |\n|---|---|---|---|")
    work: list[tuple[str, int, int]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for requests in [None, *args.requests]:
            cache, out = Path(tmp) / f"cache-{requests}", Path(tmp) / f"out-{requests}"
            cmd = [
                sys.executable,
                "-c",
                "from simserve.cli import main; main()",
                "sweep",
                "--slo",
                "0.1",
                "--workers",
                str(args.workers),
                "--cache",
                str(cache),
                "--out",
                str(out),
            ]
            if requests is not None:
                cmd += ["--requests", str(requests)]
            if args.search:
                cmd += ["--search", args.search]
            shown = (
                "simserve sweep --slo 0.1"
                + (f" --requests {requests}" if requests else "")
                + (f" --search {args.search}" if args.search else "")
            )
            cold = timed(cmd, env)
            warm = timed(cmd, env)
            print(
                f"| default sweep, cold cache | `{shown} --workers {args.workers}` | {cold[0]:.1f} | "
                f"{cold[1]:.1f} |"
            )
            print(f"| same sweep, warm cache | (rerun) | {warm[0]:.1f} | {warm[1]:.1f} |")
            work.append((shown, *simulated_work(out / "probes.csv")))
    for shown, probes, iterations in work:
        print(f"`{shown}`: {probes} simulations used by the searches, {iterations:,} iterations simulated")
    for requests in [1024, *args.requests]:
        wall, probes, cap = one_search(requests, args.search or "simserve")
        print(
            f"| one capacity search (sarathi-512, {requests} requests; {probes} probes, "
            f"capacity {cap:.3g} qps) | `solve(CapacityTask(...))` | {wall:.1f} | |"
        )


if __name__ == "__main__":
    main()
