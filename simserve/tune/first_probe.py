"""Where a capacity search starts: at the top of what the deployment could possibly serve.

A probe above capacity is cheap: the run stops within seconds of simulated time, at the first sign of
overload or of a sure TBT miss (a few hundredths of a CPU-second for the default deployment at 2× its
capacity). A probe below capacity is the expensive kind: it must run the whole trace to pass. The search
(capacity.find_capacity) brackets capacity on the rates start_qps · 2^k and bisects the bracket; which
grid rate it probes first does not change the bracket it ends in while pass/fail is monotone in load, and
so not the capacity either. It only changes how many probes, and which kind, it takes to get there. So
the search starts at the grid rate just below a throughput bound and walks down through cheap failures,
instead of walking up from start_qps through passing runs of the whole trace. (Just below, not just above:
capacity sits below the bound, so that first probe usually fails, and the one above it would only have
failed too; when it passes, the search doubles to the rate above, as it would have started there.)

The bound: a replica that always ran full batches would spend, per request, its prompt's prefill tokens
at the marginal cost of a budget-sized chunk beside a full decode batch, and its output tokens at the
per-request share of a full decode iteration (the batch the KV cache and max batch allow, at the mean
context). Its inverse is a rate no schedule can beat by much. An estimate that is off only costs probes.
"""

from __future__ import annotations

import math
from typing import Any

from simserve.tune.capacity import _round_qps

MAX_STEPS = 12  # never start more than 2^12 × start_qps away (a bound that far off is a broken input)


def throughput_bound(scenario: Any) -> float | None:
    """Requests per second the scenario's deployment serves if every iteration is a full batch, or None
    for scenarios that are not a simulator Scenario (test models) or whose inputs fail to load."""
    from simserve.errors import SimserveError
    from simserve.sim.scenario import Scenario, _num_blocks, _workload, scenario_timer

    if not isinstance(scenario, Scenario):
        return None
    s = scenario
    try:
        cfg, dep = s.sim_config(), s.deployment()
        prompt, output, _, _ = _workload(s.trace, s.max_len, s.num_requests, s.seed, s.arrival == "replay")
        timer = scenario_timer(s)
        blocks = _num_blocks(dep, cfg.policy, cfg.memory_budget, cfg.batch_limit(dep.pp))
    except SimserveError:
        return None  # the search's own first probe reports the problem, in the usual words
    p, o = float(prompt.mean()), float(output.mean())
    kv_tokens = blocks * cfg.block_size
    batch = max(1, min(cfg.batch_limit(dep.pp), int(kv_tokens // (p + o))))
    context = int(p + o / 2)
    chunk = int(min(cfg.token_budget(), p)) if math.isfinite(cfg.token_budget()) else int(p)
    chunk = max(chunk, 1)
    seconds = 0.0
    for stage in range(timer.num_stages):  # a pipeline runs at its slowest stage's pace
        decode = timer([], [context] * batch, stage)
        prefill = timer([(chunk, 0)], [context] * batch, stage) - decode
        per_request = p * prefill / chunk + o * decode / batch
        seconds = max(seconds, per_request)
    if not seconds > 0:
        return None
    return s.num_replicas / seconds


def first_qps(scenario: Any, start_qps: float) -> float:
    """The grid rate start_qps · 2^k at or just below the scenario's throughput bound (start_qps if none,
    and never below start_qps / 2^MAX_STEPS), reached with the search's own rounded doublings/halvings so it
    is a rate the search would probe."""
    bound = throughput_bound(scenario)
    qps = _round_qps(start_qps)
    if bound is None:
        return qps
    for _ in range(MAX_STEPS):
        higher = _round_qps(qps * 2)
        if higher > bound:
            break
        qps = higher
    for _ in range(MAX_STEPS):
        if qps <= bound:
            break
        qps = _round_qps(qps / 2)
    return qps
