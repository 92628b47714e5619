"""Peak memory of one big `simserve run` (issue 11, item 3: 1M requests below 1 GB), per --iterations mode.

    python benchmarks/bench_memory.py
        # 1,000,000 requests at 3 QPS, all three modes
    python benchmarks/bench_memory.py --requests 200000 --modes all               # a smaller check
    python benchmarks/bench_memory.py --tree /path/to/other/checkout --modes all  # the same, older code

Each run is a fresh child interpreter (`python -c "from simserve.cli import main; main([...])"`) with a cache
warmed first by a 10-request run, so the figure is the big run's own. Reported per run: the child's peak
resident set (ru_maxrss from os.wait4, that child alone), its CPU seconds (user + system) and wall seconds
(inflated on a loaded machine: compare CPU seconds), and the size of each file it wrote.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHILD = "import sys; from simserve.cli import main; main(sys.argv[1:])"


def run_child(tree: Path, args: list[str], cache: Path) -> dict:
    env = {**os.environ, "SIMSERVE_CACHE": str(cache), "PYTHONPATH": str(tree)}
    t = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, *args],
        env=env,
        cwd=tree,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        sys.exit(f"error: simserve {' '.join(args)} failed: {err.strip().splitlines()[-1:]}")
    return {
        "peak_rss_mb": usage.ru_maxrss / 1024,  # Linux: KiB
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "wall_s": wall,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--qps", type=float, default=3.0)
    ap.add_argument("--modes", default="all,sampled,none", help="--iterations modes to run, comma-separated")
    ap.add_argument(
        "--tree", type=Path, default=REPO, help="the simserve checkout to run (default: this one)"
    )
    ap.add_argument("extra", nargs="*", help="more `simserve run` options, after --")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "cache"
        run_child(a.tree, ["run", "--requests", "10", "--out", str(Path(tmp) / "warm"), *a.extra], cache)
        for mode in a.modes.split(","):
            out = Path(tmp) / f"out-{mode}"
            args = [
                "run",
                "--requests",
                str(a.requests),
                "--qps",
                f"{a.qps:g}",
                "--iterations",
                mode,
                "--out",
                str(out),
                *a.extra,
            ]
            r = run_child(a.tree, args, cache)
            files = ", ".join(
                f"{p.name} {p.stat().st_size / 1e6:.0f} MB"
                for p in sorted(out.iterdir())
                if not p.name.startswith(".")
            )
            print(
                f"simserve {' '.join(args[: -2 - len(a.extra)] + list(a.extra))} ({a.tree}): peak RSS "
                f"{r['peak_rss_mb']:.0f} MB, CPU {r['cpu_s']:.0f} s, wall {r['wall_s']:.0f} s "
                f"(load {os.getloadavg()[0]:.1f}); {files}",
                flush=True,
            )


if __name__ == "__main__":
    main()
