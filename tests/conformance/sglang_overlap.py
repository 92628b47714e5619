"""What simserve leaves out of SGLang's overlap scheduler, measured on SGLang itself.

`event_loop_overlap` (on by default in 0.5.23) schedules step k+1 before it has processed step k's results:
the requests that step k finishes still hold their KV and their slot while k+1 is formed (those finishing by
length sit out its decode: `_reqs_finishing_inflight`), new outputs are counted a step late, and a request
admitted at step k joins the running batch at k+2. simserve models the overlap scheduler's CPU time only (the
step's CPU work hidden behind the GPU's, `Scenario.scheduling_is_async`), not this one-step lag, and its
`sglang` policy agrees step for step with `event_loop_normal` (test_sglang_loop.py). Here SGLang's own
scheduler runs each workload both ways (sglang_loop_driver.py with `overlap`), and the table says how far the
overlapped schedule is from the one simserve reproduces: steps to drain, when each request is first prefilled
and when it finishes.

    python tests/conformance/sglang_overlap.py .venv-sglang/bin/python [names...]   # docs/engines.md
"""

from __future__ import annotations

import sys

import numpy as np
import sglang_loop as sl


def milestones(steps: list[dict], n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per request: the step of its first prefill and the last step it ran in (its finish)."""
    first, last = np.full(n, -1), np.full(n, -1)
    for k, step in enumerate(steps):
        for rid, _ in step.get("prefills", []):
            if first[rid] < 0:
                first[rid] = k
            last[rid] = k
        for rid in step.get("decodes", []):
            last[rid] = k
    return first, last


def compare_modes(normal: list[dict], overlap: list[dict], n: int) -> dict:
    f0, l0 = milestones(normal, n)
    f1, l1 = milestones(overlap, n)
    same = next((k for k, (a, b) in enumerate(zip(normal, overlap, strict=False)) if a != b), None)
    return {
        "steps": (len(normal), len(overlap)),
        "first different step": same,
        "admitted later": float(np.mean(f1 - f0)),
        "finished later": float(np.mean(l1 - l0)),
        "admission moved": int(np.count_nonzero(f1 != f0)),
        "retracted": (sum(len(s["retracted"]) for s in normal), sum(len(s["retracted"]) for s in overlap)),
    }


def table(python: str, names: list[str]) -> None:
    workloads = [sl.make(name) for name in names]
    runs = sl.sglang_steps(python, [*workloads, *({**w, "overlap": True} for w in workloads)])
    print(
        "| workload | requests | steps: normal / overlap | first step that differs | requests first "
        "prefilled at another step | mean shift of the first prefill (steps) | mean shift of the finish "
        "(steps) | retracted: normal / overlap |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for i, (name, w) in enumerate(zip(names, workloads, strict=True)):
        n = len(w["prompt"])
        c = compare_modes(runs[i], runs[len(names) + i], n)
        print(
            f"| {name} | {n} | {c['steps'][0]} / {c['steps'][1]} | {c['first different step']} | "
            f"{c['admission moved']} | {c['admitted later']:+.1f} | {c['finished later']:+.1f} | "
            f"{c['retracted'][0]} / {c['retracted'][1]} |"
        )


if __name__ == "__main__":
    table(sys.argv[1], sys.argv[2:] or list(sl.CI))
