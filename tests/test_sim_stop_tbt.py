"""SimConfig.stop_tbt: a capacity probe stops once its TBT quantile surely misses the limit.

The rule must never stop a run whose full-length quantile would meet the limit (a pass stays a pass), and a
stopped run's own partial quantile already exceeds the limit (so the SLO check fails it for the same reason).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from simserve.sim.histogram import LogHistogram

scenario = pytest.importorskip("simserve.sim.scenario", reason="the simulator is not in this checkout")

BASE = scenario.Scenario(
    model="mistral-7b", gpu="a100", trace="sharegpt", num_requests=256, policy="sarathi", budget=2048
)


@pytest.mark.parametrize("limit", [0.01, 0.05, 0.1, 0.3])
def test_first_bucket_above_matches_quantile(limit: float) -> None:
    h = LogHistogram()
    edge = h.first_bucket_above(limit)
    for v in np.geomspace(limit * 0.98, limit * 1.02, 200):
        one = LogHistogram()
        one.add(float(v))
        above = one.count_from(edge) > 0
        assert above == (one.quantile(0.99) > limit), v


def test_stopped_run_surely_misses_and_passing_run_is_untouched() -> None:
    limit, q = 0.1, 0.99
    loud = 6.0  # far above sarathi-2048's capacity (~0.8 qps at 2048 requests): TBT misses
    full = scenario.run_scenario(BASE, loud)
    stopped = scenario.run_scenario(replace(BASE, stop_tbt=(limit, q)), loud)
    assert full.tbt.quantile(q) > limit and not full.summary.stopped_early
    assert stopped.summary.stopped_early
    assert stopped.summary.num_iterations < full.summary.num_iterations  # it did stop before the end
    assert stopped.tbt.quantile(q) > limit  # the partial run fails the SLO check too
    light = 0.2
    plain = scenario.run_scenario(BASE, light)
    watched = scenario.run_scenario(replace(BASE, stop_tbt=(limit, q)), light)
    assert plain.tbt.quantile(q) <= limit
    assert not watched.summary.stopped_early
    assert watched.summary == plain.summary  # the rule only watches: the run is the same


def test_stop_tbt_is_validated() -> None:
    from simserve.errors import SimserveError

    with pytest.raises(SimserveError, match="stop_tbt"):
        scenario.run_scenario(replace(BASE, stop_tbt=(0.1, 1.5)), 1.0)


MISTRAL = dict(model="mistral-7b", gpu="a100", num_requests=300)
LLAMA_PP2 = dict(model="llama2-70b", gpu="a40", tp=4, pp=2, num_requests=300)


@pytest.mark.parametrize(
    ("fields", "qps", "stop"),
    [
        # the TBT rule ends the run at a check
        (dict(MISTRAL, policy="orca"), 1.5, (0.1, 0.99)),
        (dict(MISTRAL, policy="sarathi", budget=512), 2.0, (0.03, 0.9)),
        # ... with PP = 2
        (dict(LLAMA_PP2, policy="vllm"), 0.5, (0.3, 0.99)),
        (dict(LLAMA_PP2, policy="sarathi", budget=2048), 0.5, (0.3, 0.99)),
        # the overload rule ends it there (no TBT rule)
        (dict(MISTRAL, policy="fcfs"), 0.5, None),
        (dict(MISTRAL, policy="fcfs"), 1.0, None),
        (dict(LLAMA_PP2, policy="orca"), 2.0, None),
    ],
)
def test_a_run_stopped_at_a_check_ends_as_the_reference_does(fields, qps, stop, monkeypatch) -> None:
    """The compiled core returns to Python at every check, where the stop rules run; a run they end must
    stop at the same check with the same histogram, summary and requests as the SimPy reference."""
    s = scenario.Scenario(**fields, stop_tbt=stop)
    fast = scenario.run_scenario(s, qps)
    monkeypatch.setenv("SIMSERVE_CORE", "reference")
    exact = scenario.run_scenario(s, qps)
    assert fast.summary.stopped_early or fast.summary.overloaded  # the case is only useful if it stops
    assert fast.tbt.counts.tobytes() == exact.tbt.counts.tobytes()
    assert repr(sorted(fast.summary.as_dict().items())) == repr(sorted(exact.summary.as_dict().items()))
    pd.testing.assert_frame_equal(fast.requests, exact.requests, check_exact=True)
    pd.testing.assert_frame_equal(fast.iterations, exact.iterations, check_exact=True)
