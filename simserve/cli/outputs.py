"""What `simserve run` writes and checks alike for an aggregated and a disaggregated run (cli/run.py,
cli/disagg.py): summary.json's values (a non-finite number is null), and the refusal of a run that served
nothing.
"""

from __future__ import annotations

import math


def jsonable(x):
    """`x` with every non-finite float as None (null in summary.json), through dicts, lists and tuples."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [jsonable(v) for v in x]
    return x


def check_served(s: dict, scenario) -> None:
    """A run whose every request was dropped has no latencies to report: its table was all nan, exit 0."""
    n = s["num_requests"]
    if s["completed"] or s["ignored"] < n:
        return
    from simserve.errors import SimserveError

    limit = scenario.sim_config().prompt_limit()
    what = "--budget (vllm's largest prefill)" if scenario.policy == "vllm" else "the max model length"
    raise SimserveError(
        f"no request was served: all {n} were dropped as longer than {what}, {limit} tokens (or than the KV "
        f"cache); use shorter requests (random:IN:OUT with IN + OUT <= {limit}), or raise --max-model-len "
        f"(--allow-long-context past the model's own limit)"
    )
