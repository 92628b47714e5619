"""Fit and print the SGLang CPU constants from the measured files (simserve/predictor/sglang_cpu_fit.py).

    python tools/sglang_cpu_fit.py profiles/engine/sglang-0.5.23

Prints the per-configuration medians and spreads (docs/step-anatomy.md's tables), the fitted constants with
their errors, and the scheduler's measured CPU in the server runs against what the per-step fits predict.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from simserve.predictor import sglang_cpu_fit as F

SHOWN = ("recv", "schedule", "launch", "result", "detokenize", "tm_output", "tm_stream")


def spread_table(meds: list[dict]) -> None:
    by = defaultdict(list)
    for m in meds:
        by[(m["config"], m["mode"])].append(m)
    print("| configuration | step | reqs | tokens | held | " + " | ".join(SHOWN) + " |")
    print("|---|---|---|---|---|" + "---|" * len(SHOWN))
    for (config, mode), ms in by.items():
        cells = []
        for c in SHOWN:
            v = sorted(m[c] for m in ms)
            cells.append(f"{statistics.median(v):.0f} ({v[0]:.0f}–{v[-1]:.0f})")
        shape = f"{ms[0]['num_reqs']:.0f} | {ms[0]['num_tokens']:.0f} | {ms[0]['held']:.0f}"
        print(f"| {config} | {mode} | {shape} | " + " | ".join(cells) + " |")


def main(root: Path) -> None:
    rows = F.read_rows(root / "steps.csv")
    refs = sorted(float(r["ref_us"]) for r in rows)
    print(
        f"reference speed {F.REFERENCE_US} us (engine_cpu.MEASURING_HOST); this run's ref_us "
        f"{refs[0]:.0f}-{refs[-1]:.0f}, median {statistics.median(refs):.0f}"
    )
    spread_table(F.block_medians(rows))
    print()
    steps = F.fit_steps(rows)
    for name, (a, b, c, d, med, worst) in steps.items():
        print(
            f"{name}: {a:.6g} + {b:.6g}/req + {c:.6g}/token + {d:.6g}/prefill chunk us; "
            f"error median {med:.6g}% max {worst:.6g}%"
        )
    for name, (a, b, med, worst) in F.fit_frontend(rows).items():
        print(f"{name}: {a:.6g} + {b:.6g}/streamed request us; error median {med:.6g}% max {worst:.6g}%")
    add = F.fit_tm_add(rows)
    print(
        f"tm_add: {add[0]:.2f}/request + {add[1]:.5f}/prompt token us; error median {add[2]:.1f}% max "
        f"{add[3]:.1f}%"
    )
    server = root / "server.csv"
    if not server.is_file():
        return
    srows = F.read_rows(server)
    idle = json.loads((root / "server.provenance.json").read_text()).get("idle_cpu_per_s")
    for role in F.SERVER_ROLES:
        for ep, (a, b, c, med, worst) in F.fit_server(srows, idle, role).items():
            print(
                f"{role} {ep}: {a:.1f}/req + {b:.3f}/prompt token + {c:.2f}/output token us; "
                f"error median {med:.1f}% max {worst:.1f}%"
            )
    rest = F.fit_scheduler_rest(srows, steps)
    print(
        f"scheduler rest: {rest[0]:.1f}/step + {rest[1]:.1f}/request us; error median {rest[2]:.1f}% "
        f"max {rest[3]:.1f}%"
    )
    print("\nper server process and run, CPU us per request at the reference speed:")
    by = defaultdict(list)
    for r in F.server_runs(srows, idle):
        by[(r["backend"], r["input_len"], r["output_len"], r["role"])].append(r["cpu_per_req_us"])
    for k, v in sorted(by.items()):
        v = sorted(v)
        print(f"  {k[0]} {k[1]}/{k[2]} {k[3]}: {statistics.median(v):.0f} ({v[0]:.0f}-{v[-1]:.0f})")
    print("\nscheduler CPU in the server runs against the per-step fits (same steps, same requests):")
    for r in srows:
        if r["role"] != "scheduler":
            continue
        n = int(r["decode_steps"]) + int(r["extend_steps"])
        meas = float(r["cpu_s"]) * 1e6 * F.speed_factor(r)
        pred = F.predicted_scheduler_us(r, steps)
        print(
            f"  rep {r['rep']} {r['backend']} {r['input_len']}/{r['output_len']}: {n} steps, measured "
            f"{meas / n:.0f} us/step, predicted {pred / n:.0f} ({meas / pred:.2f}x)"
        )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
