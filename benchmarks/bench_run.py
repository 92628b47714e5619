"""Whole-command cost of `simserve run`: start-up, simulation and writing, as a user pays it.

    python benchmarks/bench_run.py
        # 2,000 chat requests, default deployment, cold + 5 warm
    python benchmarks/bench_run.py --tree /other/checkout    # the same for another checkout (before/after)
    python benchmarks/bench_run.py --phases                  # where a warm run's CPU goes, step by step
    python benchmarks/bench_run.py --memory 1000000 --qps 3  # peak RSS of one run of that many requests
                                                             # (benchmarks/bench_memory.py does this per mode)

Each run is a fresh child interpreter (`python -c "... main(['run', ...])"`), so imports are paid as a user
pays them. Reported per run: wall seconds from interpreter start to exit, wall and CPU seconds inside the
child after the interpreter has started (imports + run + writing; CPU = user + system of the child), and the
child's peak RSS (ru_maxrss from os.wait4, that child alone). "cold" uses an empty $SIMSERVE_CACHE (fits the
predictor, parses the trace) and empty bytecode caches; "warm" reuses both. Bytecode goes to a private
PYTHONPYCACHEPREFIX (PYTHONDONTWRITEBYTECODE is dropped for the children), as an installed package has its
.pyc files; without them every warm run would also compile simserve's sources (~0.05 s). Wall figures depend
on machine load: compare CPU seconds, and the best of the warm runs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = """
import json, sys, time
t0, c0 = time.perf_counter(), time.process_time()
from simserve.cli import main
main(sys.argv[1:])
print("BENCH=" + json.dumps({"wall_after_start_s": time.perf_counter() - t0,
                             "cpu_after_start_s": time.process_time() - c0}))
"""

# --phases: the steps of a warm `simserve run`, each timed (CPU) in one fresh interpreter, in the order the
# command takes them (each import also pays for whatever it imports first).
PHASES = """
import sys, time
T = time.process_time
marks = [("start", T())]
def mark(name):
    marks.append((name, T()))
import numpy; mark("import numpy")
import typer; mark("import typer (+ its click)")
import simserve.cli; mark("import simserve.cli (plain option values without pydantic: cli/coercion.py)")
import rich.console, rich.table; mark("import rich")
import simserve.cli.run, simserve.sim.scenario, simserve.sim.writers, simserve.sim.perfetto, simserve.io
mark("import simserve's run path")
from pathlib import Path
from simserve.sim.scenario import Scenario, simulate_scenario, _timer, _workload
from simserve.sim.metrics import summarize
from simserve.sim.writers import write_tables
from simserve.sim.perfetto import write_chrome_trace
n, qps, out = int(sys.argv[1]), float(sys.argv[2]), Path(sys.argv[3])
s = Scenario(num_requests=n, stop_when_overloaded=False)
dep = s.deployment()
_timer(dep, None, True, False); mark("load the compiled timer (cache)")
_workload(s.trace, s.max_len, n, s.seed, False); mark("load the parsed trace (cache), sample it")
raw, dep = simulate_scenario(s, qps); mark("simulate")
summarize(raw, dep); mark("summary")
out.mkdir(parents=True, exist_ok=True)
write_tables(raw, out); mark("write requests.csv, iterations.csv")
write_chrome_trace(out / "trace.json", raw.log); mark("write trace.json")
heavy = sorted({m.split(".")[0] for m in sys.modules} & {"pandas", "pydantic", "sklearn", "scipy"})
print(f"  imported of pandas, pydantic, scikit-learn, scipy: {heavy or 'none'}")
for (_, a), (name, b) in zip(marks, marks[1:]):
    print(f"  {name:60s} {b - a:6.3f} s")
print(f"  {'total':60s} {marks[-1][1] - marks[0][1]:6.3f} s")
"""


def run_child(args: list[str], cache: Path, tree: Path, pyc: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(SIMSERVE_CACHE=str(cache), PYTHONPATH=str(tree), PYTHONPYCACHEPREFIX=str(pyc))
    with tempfile.TemporaryFile("w+") as out_f, tempfile.TemporaryFile("w+") as err_f:
        t = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, *args], env=env, cwd=tree, stdout=out_f, stderr=err_f, text=True
        )
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage (CPU, peak RSS)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t
        out_f.seek(0)
        err_f.seek(0)
        stdout, stderr = out_f.read(), err_f.read()
    if proc.returncode != 0:
        sys.exit(f"error: simserve run failed: {stderr.strip().splitlines()[-1:]}")
    line = [x for x in stdout.splitlines() if x.startswith("BENCH=")][-1]
    out = json.loads(line[len("BENCH=") :])
    out["wall_total_s"] = wall
    out["cpu_total_s"] = usage.ru_utime + usage.ru_stime
    out["peak_rss_mb"] = usage.ru_maxrss / 1024  # Linux: KiB
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--qps", type=float, default=1.0)
    ap.add_argument("--memory", type=int, metavar="N", help="one warm run of N requests; report its peak RSS")
    ap.add_argument("--cache", type=Path, help="reuse this $SIMSERVE_CACHE (default: a fresh temporary one)")
    ap.add_argument("--warm", type=int, default=5, help="warm runs after the cold one")
    ap.add_argument(
        "--tree", type=Path, default=REPO, help="the simserve checkout to run (default: this one)"
    )
    ap.add_argument(
        "--phases", action="store_true", help="after the warm runs, time each step of one in-process"
    )
    ap.add_argument("extra", nargs="*", help="more `simserve run` options, after --")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cache = a.cache or Path(tmp) / "cache"
        n = a.memory or a.requests
        args = ["run", "--requests", str(n), "--qps", f"{a.qps:g}", *a.extra]
        print(
            f"simserve {' '.join(args)}  ({a.tree}, python {sys.version.split()[0]}, "
            f"load {os.getloadavg()[0]:.1f})"
        )
        phases = ["warm"] if a.memory else ["cold"] + ["warm"] * a.warm
        if a.memory:  # warm the timer cache with a tiny run, so the figure is the big run's own
            run_child(
                ["run", "--requests", "10", "--out", str(Path(tmp) / "w")], cache, a.tree, Path(tmp) / "pyc"
            )
        warm = []
        for i, phase in enumerate(phases):
            r = run_child([*args, "--out", str(Path(tmp) / f"out{i}")], cache, a.tree, Path(tmp) / "pyc")
            if phase == "warm":
                warm.append(r)
            print(
                f"{phase:5s} wall {r['wall_total_s']:6.2f} s total, {r['wall_after_start_s']:6.2f} s after "
                f"interpreter start; CPU {r['cpu_total_s']:6.2f} s total, {r['cpu_after_start_s']:6.2f} s "
                f"after start; peak RSS {r['peak_rss_mb']:.0f} MB"
            )
        if a.phases:
            env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
            env.update(
                SIMSERVE_CACHE=str(cache), PYTHONPATH=str(a.tree), PYTHONPYCACHEPREFIX=str(Path(tmp) / "pyc")
            )
            print("steps of one warm run, CPU seconds:")
            subprocess.run(
                [sys.executable, "-c", PHASES, str(n), f"{a.qps:g}", str(Path(tmp) / "phases")],
                env=env,
                cwd=a.tree,
                check=True,
            )
        if len(warm) > 1:
            best = min(warm, key=lambda r: r["cpu_after_start_s"])
            print(
                f"best warm: CPU {best['cpu_after_start_s']:.2f} s after interpreter start "
                f"({best['cpu_total_s']:.2f} s total), wall {min(r['wall_after_start_s'] for r in warm):.2f} "
                f"s after start (load {os.getloadavg()[0]:.1f})"
            )


if __name__ == "__main__":
    main()
