"""Where a published run's simulated steps spend their time: one draw of each run (its first seed, the scenario
benchmarks/published_e2e.py builds) with summary.json's `step_parts` (sim/step_parts.breakdown) per step kind,
and the preemptions. For reading why a cell misses (docs/engines.md § After issue 30's step model).

    python benchmarks/published_parts.py KEY [KEY ...] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import published_e2e as pe  # noqa: E402
import published_runs as pr  # noqa: E402

KEEP = ("steps", "mean_step_s", "parts_s", "cpu_hidden_s", "cpu_bound_steps", "gemm_fraction_of_peak",
        "hbm_fraction", "limited_by")  # fmt: skip


def parts(run: pr.Run) -> dict:
    from simserve.profiling.generated import for_scenario
    from simserve.sim.scenario import scenario_timer, simulate_scenario
    from simserve.sim.step_parts import breakdown
    from simserve.workload import arrival_times

    prompt, output = pe._lengths(run, run.seed)
    n = len(prompt)
    arrived = np.zeros(n) if math.isinf(run.qps) else arrival_times(n, run.qps, "poisson", run.seed)
    with tempfile.TemporaryDirectory() as tmp:
        s, _ = for_scenario(pe.scenario_of(run, run.seed, pe._write_trace(prompt, output, arrived, Path(tmp))))
        raw, dep = simulate_scenario(s, 1.0)
    got = breakdown(raw.log, scenario_timer(s), dep, block_tokens=s.sim_config().kv_block_tokens())
    return {"preemptions": int(raw.reqs.preemptions.sum()),
            **{kind: {k: v[k] for k in KEEP} for kind, v in got.items()}}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("keys", nargs="+")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    runs = {r.key: r for r in pr.load()}
    unknown = [k for k in args.keys if k not in runs]
    if unknown:
        print(f"error: unknown run key(s) {', '.join(unknown)}; see benchmarks/data/published_runs.toml", file=sys.stderr)
        return 2
    out = {}
    for key in args.keys:
        out[key] = got = parts(runs[key])
        print(f"{key}: {got['preemptions']} preemptions")
        for kind, e in got.items():
            if kind in ("preemptions", "all"):
                continue
            p = " ".join(f"{n} {x * 1e3:.2f}" for n, x in e["parts_s"].items() if x)
            print(f"  {kind:12s} {e['steps']:6d} steps, mean {e['mean_step_s'] * 1e3:.2f} ms: {p}; "
                  f"GEMMs at {e['gemm_fraction_of_peak']:.0%} of dense peak, HBM {e['hbm_fraction']:.0%}; "
                  f"limited by {e['limited_by']}")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
