"""Fit and print the engine-CPU constants from the measured files (simserve/predictor/engine_cpu_fit.py).

    python tools/engine_cpu_fit.py profiles/engine/vllm-0.33.0

Prints the per-configuration medians and spreads (docs/step-anatomy.md's tables), the fitted constants with
their errors, and the EngineCore's measured CPU in the server runs against what the fitted components predict.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from simserve.predictor import engine_cpu_fit as F


def spread_table(meds: list[dict]) -> None:
    by = defaultdict(list)
    for m in meds:
        by[m["config"]].append(m)
    cols = ["schedule_us", "update_us", "encode_us", "frontend_output_us"]
    print("| configuration | reqs | tokens | " + " | ".join(c[:-3] + " µs" for c in cols) + " |")
    print("|---|---|---|" + "---|" * len(cols))
    for config, ms in by.items():
        cells = []
        for c in cols:
            v = sorted(m[c] for m in ms)
            cells.append(f"{statistics.median(v):.0f} ({v[0]:.0f}–{v[-1]:.0f})")
        print(
            f"| {config} | {ms[0]['num_reqs']:.0f} | {ms[0]['num_tokens']:.0f} | " + " | ".join(cells) + " |"
        )


def main(root: Path) -> None:
    rows = F.read_rows(root / "steps.csv")
    ref = F.reference_us(rows)
    print(f"reference speed (median ref_us over the steps' blocks): {ref:.1f} us")
    spread_table(F.step_medians(rows))
    steps = F.fit_steps(rows)
    add = F.fit_add_request(rows)
    print()
    for name, (a, b, c, med, worst) in steps.items():
        print(f"{name}: {a:.2f} + {b:.4f}/req + {c:.5f}/token us; error median {med:.1f}% max {worst:.1f}%")
    print(
        f"add_request: {add[0]:.2f}/req + {add[1]:.5f}/prompt token us; error median {add[2]:.1f}% "
        f"max {add[3]:.1f}%"
    )
    server = root / "server.csv"
    if server.is_file():
        srows = F.read_rows(server)
        prov = json.loads((root / "server.provenance.json").read_text())
        idle = prov.get("idle_cpu_per_s")
        print(f"server runs' median ref_us: {F.reference_us(srows):.1f} us")
        for ep, (a, b, c, med, worst) in F.fit_server(srows, idle, "1", ref).items():
            print(
                f"api {ep}: {a:.1f}/req + {b:.3f}/prompt token + {c:.2f}/output token us; "
                f"error median {med:.1f}% max {worst:.1f}%"
            )
        for count in sorted({r["api_server_count"] for r in srows} - {"1"}):
            for w, ratio in F.server_count_ratio(srows, ref, count).items():
                print(f"{count} API servers, {w}: {ratio:.3f}x the CPU per request of one")
        rest = F.fit_engine_core_rest(srows, steps, add, ref)
        print(
            f"engine_core_rest: {rest[0]:.1f}/step + {rest[1]:.1f}/request us; error median {rest[2]:.1f}% "
            f"max {rest[3]:.1f}%"
        )
        per_server_table(srows, ref)
        print(
            "\nEngineCore CPU in the server runs against the fitted components (same steps, same requests):"
        )
        for r in srows:
            if r["role"] != "engine_core":
                continue
            steps_n, reqs, toks = (
                int(r["engine_steps"]),
                int(r["engine_step_reqs"]),
                int(r["engine_step_tokens"]),
            )
            n, n_in = int(r["completed"]), int(r["input_tokens"])
            pred = sum(steps[c][0] * steps_n + steps[c][1] * reqs + steps[c][2] * toks for c in F.ENGINE_STEP)
            pred += add[0] * n + add[1] * n_in
            meas = float(r["cpu_s"]) * 1e6 * F.speed_factor(r, ref)
            print(
                f"  x{r['api_server_count']} rep {r['rep']} {r['endpoint']} "
                f"{r['input_len']}/{r['output_len']}: {steps_n} steps, measured {meas / steps_n:.0f} "
                f"us/step, predicted {pred / steps_n:.0f} ({meas / pred:.2f}x)"
            )


def per_server_table(srows: list[dict], ref: float) -> None:
    """Each API-server process's CPU per request in every run, by count: how the kernel spread the
    requests."""
    runs = F.server_runs(srows, None, ref)
    by = defaultdict(list)
    for r in runs:
        by[(r["api_server_count"], r["rep"], r["endpoint"], r["input_len"], r["output_len"])].append(r)
    print("\n| API servers | workload | CPU µs per request, each process | sum |")
    print("|---|---|---|---|")
    for (count, rep, ep, i, o), rs in sorted(by.items()):
        each = [r["cpu_per_req_us"] for r in rs]
        print(
            f"| {count} | {ep} {i}/{o} rep {rep} | {', '.join(f'{v:.0f}' for v in each)} | {sum(each):.0f} |"
        )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
