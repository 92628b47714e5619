"""SimConfig.stop_tbt: a capacity probe stops once its TBT quantile surely misses the limit.

The rule must never stop a run whose full-length quantile would meet the limit (a pass stays a pass), and a
stopped run's own partial quantile already exceeds the limit (so the SLO check fails it for the same reason).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
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
