"""A reference single-thread benchmark, to carry the engine-CPU figures from the host they were measured on to
a serving host.

    python3 tools/engine_cpu_refbench.py [--json]

Run it on both hosts with the same Python minor version (the figures in profiles/engine/vllm-0.33.0/ were
measured under CPython 3.11); the ratio of the two `python_us` medians is the host-speed factor simserve's
engine-CPU model takes (simserve/predictor/engine_cpu.py: `host_speed` = this host's time / that host's time).
Two parts, CPU time of this thread (`time.thread_time`), median of 15 rounds:

- `python_us`: a fixed pure-Python workload shaped like the engine's own per-step code (objects with
  attributes, dict lookups by request id, list appends, small sorts, string formatting), 20,000 "requests" per
  round.
- `clock_ghz`: the core's effective clock, from a chain of dependent integer adds (one cycle each on every x86
  core since the P6) in a small C program built with the system's cc; absent where no C compiler is installed.
  On a VM /proc/cpuinfo shows the TSC rate, not the clock the core runs at: this is the clock as the workload
  sees it.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

ROUNDS = 15
C_SOURCE = r"""
#include <stdio.h>
#include <stdint.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(void) {
    const uint64_t n = 100000000ULL;  /* 100 M iterations x 20 dependent adds */
    uint64_t x = 1, y = 3;
    double t0 = now();
    for (uint64_t i = 0; i < n; i++) {
        __asm__ volatile(
            "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t"
            "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t"
            "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t"
            "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t"
            : "+r"(x) : "r"(y));
    }
    double t = now() - t0;
    printf("%.4f %llu\n", 20.0 * n / t / 1e9, (unsigned long long)x);
    return 0;
}
"""  # noqa: E501


class Req:
    __slots__ = ("rid", "prompt", "computed", "out", "blocks", "status")

    def __init__(self, rid: str, prompt: int):
        self.rid, self.prompt, self.computed, self.out, self.blocks, self.status = rid, prompt, 0, [], [], 0


def python_round(n: int = 4000) -> float:
    t0 = time.thread_time()
    reqs = {f"req-{i}": Req(f"req-{i}", 64 + i % 200) for i in range(n)}
    budget, scheduled = 8192, {}
    for rid, r in reqs.items():  # a scheduler-like pass: tokens under a budget, blocks per 16 tokens
        take = min(r.prompt - r.computed, budget) if r.computed < r.prompt else 1
        if take <= 0:
            continue
        budget -= take
        scheduled[rid] = take
        r.computed += take
        r.blocks.extend(range(len(r.blocks), (r.computed + 15) // 16))
        if budget <= 0:
            budget = 8192
    outs = []
    for k, (rid, _take) in enumerate(sorted(scheduled.items(), key=lambda kv: kv[1])):  # an output pass
        r = reqs[rid]
        r.out.append(k % 32000)
        outs.append({"id": rid, "tokens": r.out[-1:], "text": f"tok{k % 977}", "done": len(r.out) > 4})
    " ".join(o["text"] for o in outs)
    return (time.thread_time() - t0) * 1e6


def clock_ghz() -> float | None:
    with tempfile.TemporaryDirectory() as d:
        src, exe = os.path.join(d, "clk.c"), os.path.join(d, "clk")
        with open(src, "w") as f:
            f.write(C_SOURCE)
        try:
            subprocess.run(["cc", "-O1", "-o", exe, src], check=True, capture_output=True)
        except (OSError, subprocess.CalledProcessError):
            return None
        runs = [
            float(subprocess.run([exe], capture_output=True, text=True).stdout.split()[0]) for _ in range(5)
        ]
    return statistics.median(runs)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def run() -> dict:
    python_round(400)  # warm
    times = sorted(python_round() for _ in range(ROUNDS))
    return {
        "python_us": round(statistics.median(times), 1),
        "python_us_min": round(times[0], 1),
        "python_us_max": round(times[-1], 1),
        "rounds": ROUNDS,
        "clock_ghz": clock_ghz(),
        "python": platform.python_version(),
        "cpu": cpu_model(),
        "load_average": os.getloadavg(),
    }


if __name__ == "__main__":
    r = run()
    print(
        json.dumps(r, indent=1)
        if "--json" in sys.argv
        else f"python_us {r['python_us']} ({r['python_us_min']}-{r['python_us_max']}), clock "
        f"{r['clock_ghz']} GHz, {r['cpu']}, Python {r['python']}"
    )
