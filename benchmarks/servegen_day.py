"""A day of ServeGen traffic, autoscaled: the CPU a whole `simserve run` process takes for 24 hours of over a
million requests (issue 31 item 7: at most 60 CPU-s).

The day is ServeGen's language pool (alibaba/ServeGen, its m-large clients at a tenth of their recorded rates:
`simserve trace build servegen --category language --hours 24 --rate-scale 0.1`), built from a clone into a
temporary directory, then replayed on Llama-3-8B / H100 autoscaled 1:16 under each --scale-policy that needs
no capacity search first (utilization, queue). Each row is one process; its CPU is the child's user + system
time (resource.getrusage), the build's too. Needs a ServeGen clone: `git clone
https://github.com/alibaba/ServeGen`.

    python benchmarks/servegen_day.py --servegen ServeGen [--policies utilization,queue]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

RUN = ["--model", "llama-3-8b", "--gpu", "h100", "--arrival", "replay", "--autoscale", "1:16"]


def timed(args: list[str]) -> float:
    """CPU seconds (user + system) of one `simserve` process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-m", "simserve", *args], check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--servegen", type=Path, required=True, help="a clone of alibaba/ServeGen")
    ap.add_argument("--policies", default="utilization,queue")
    args = ap.parse_args()
    if not (args.servegen / "data").is_dir():
        sys.exit(
            f"error: {args.servegen} is not a ServeGen clone (no data/): git clone "
            "https://github.com/alibaba/ServeGen"
        )
    with tempfile.TemporaryDirectory() as tmp:
        day = Path(tmp) / "day.csv.gz"
        build = timed(
            [
                "trace",
                "build",
                "servegen",
                "--from",
                str(args.servegen),
                "--category",
                "language",
                "--hours",
                "24",
                "--rate-scale",
                "0.1",
                "--out",
                str(day),
            ]
        )
        requests = json.loads(day.with_name("day.provenance.json").read_text())["counts"]["requests"]
        print(f"day: {requests:,} requests, built in {build:.1f} CPU-s")
        print(
            "| --scale-policy | CPU-s (whole process) | GPU-hours | vs static peak | SLO attainment | "
            "replica changes |"
        )
        print("|---|---|---|---|---|---|")
        for policy in args.policies.split(","):
            out = Path(tmp) / policy
            cpu = timed(["run", "--trace", str(day), *RUN, "--scale-policy", policy, "--out", str(out)])
            s = json.loads((out / "summary.json").read_text())["autoscale"]
            print(
                f"| {policy} | {cpu:.1f} | {s['gpu_hours']:.1f} | {s['static_peak_gpu_hours']:.0f} | "
                f"{s['slo_attainment']:.1%} | {s['scale_events']} |"
            )


if __name__ == "__main__":
    main()
