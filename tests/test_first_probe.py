"""The search's first rate: the grid rate just below the deployment's throughput bound (first_probe.py)."""

from __future__ import annotations

import math

from simserve.sim.scenario import Scenario
from simserve.tune.first_probe import first_qps, throughput_bound
from simserve.tune.toy import ToyScenario


def test_first_rate_is_the_grid_rate_just_below_the_bound() -> None:
    s = Scenario(policy="sarathi", budget=512, num_requests=256)
    bound = throughput_bound(s)
    assert bound is not None and bound > 0
    q = first_qps(s, 1.0)
    k = math.log2(q)
    assert k == round(k)  # on the search's grid 1 · 2^k
    assert q <= bound < 2 * q


def test_bound_scales_with_replicas_and_falls_with_a_slower_schedule() -> None:
    one = throughput_bound(Scenario(num_requests=256))
    two = throughput_bound(Scenario(num_requests=256, num_replicas=2))
    assert two == 2 * one
    # Request-level batching of 16 decodes shares each iteration among fewer requests than 128 do.
    assert throughput_bound(Scenario(policy="orca", max_batch=16, num_requests=256)) < one


def test_scenarios_without_a_bound_start_at_start_qps() -> None:
    assert throughput_bound(ToyScenario()) is None
    assert first_qps(ToyScenario(), 0.5) == 0.5
    # An unknown model is not this module's error to report: the first probe reports it.
    assert first_qps(Scenario(model="no-such-model"), 1.0) == 1.0
