"""simserve's ServeGen day against ServeGen's own generator, run beside it from a clone of alibaba/ServeGen.

    simserve trace build servegen --from ServeGen --category reason --hours 24 --out r1.csv.gz
    python tools/servegen_check.py --servegen ServeGen --trace r1.csv.gz --category reason --pool deepseek-r1

Runs `servegen.construct.generate_workload` (it needs numpy and scipy) with every client at its recorded rate
(the aggregate rate function is each window's sum of client rates, so each client gets its own), over the same
hours, and prints the requests per 600-s window and the length quantiles of both. The two draw differently
(ServeGen: scipy on a RandomState; simserve: numpy's Generator), so they agree in distribution, not sample by
sample.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

from simserve.workload import load_trace


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--servegen", type=Path, required=True, help="a clone of alibaba/ServeGen")
    ap.add_argument("--trace", required=True, help="the day simserve built (simserve trace build servegen)")
    ap.add_argument("--category", default="language")
    ap.add_argument("--pool", default="m-large")
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    sys.path.insert(0, str(args.servegen))
    from servegen import Category, ClientPool  # ServeGen's own code, from the clone
    from servegen.construct import generate_workload

    duration = int(args.hours * 3600)
    os.chdir(args.servegen)  # NOTE: ClientPool reads data/<category>/<pool> relative to the working directory
    start = time.process_time()
    pool = ClientPool(Category(args.category), args.pool)
    rate: dict[int, float] = {}
    for w in pool.span(0, duration).get():
        rate[w.timestamp] = rate.get(w.timestamp, 0.0) + (w.rate or 0.0)
    reqs = generate_workload(pool, rate, duration=duration, seed=args.seed)
    print(f"ServeGen: {len(reqs):,} requests in {time.process_time() - start:.1f} CPU-s")
    theirs = {
        "t": np.array([r.timestamp for r in reqs]),
        "input": np.array([r.data["input_tokens"] for r in reqs]),
        "output": np.array([r.data["output_tokens"] for r in reqs]),
    }
    trace = load_trace(args.trace)
    ours = {"t": trace.arrived_at, "input": trace.prompt_tokens, "output": trace.output_tokens}
    edges = np.arange(0, duration + 1, 600)
    a, b = np.histogram(theirs["t"], edges)[0], np.histogram(ours["t"], edges)[0]
    print(
        f"simserve: {len(trace):,} requests; per 600-s window: max |difference| {np.abs(a - b).max()} "
        f"(of at most {max(a.max(), b.max())} per window)"
    )
    for side in ("input", "output"):
        x, y = theirs[side], ours[side]
        q = np.percentile(x, [50, 90, 99]), np.percentile(y, [50, 90, 99])
        print(
            f"{side} tokens P50/P90/P99, mean: ServeGen {q[0].round(1).tolist()}, {x.mean():.1f}; "
            f"simserve {q[1].round(1).tolist()}, {y.mean():.1f}"
        )


if __name__ == "__main__":
    main()
