"""The core's decode stretches (core.Core._decode_stretch) at their edges, against the SimPy reference.

A stretch runs a replica's decode-only iterations in one loop while each is surely the next event. Random
workloads (tests/test_sim_core.py) rarely put an iteration's end exactly on an arrival or a watchdog check,
or make the next batch's KV growth take exactly the last free blocks; these cases do, by construction.
"""

from __future__ import annotations

import numpy as np
import pytest

from simserve.sim import SimConfig, simulate
from simserve.sim.testing import ConstantTimer, LinearTimer
from tests.test_sim_core import CORES, _run, assert_same

# the policies whose decode-only batches the core may run as a stretch
STRETCH_POLICIES = ("fcfs", "orca", "vllm", "sarathi", "chunked", "slo-aware", "pressure", "equal-cost")


@pytest.mark.parametrize("mode", CORES)
@pytest.mark.parametrize("policy", STRETCH_POLICIES)
def test_iterations_ending_exactly_at_an_arrival_or_a_check(monkeypatch, mode, policy):
    """Iterations of 0.25 s (exact in binary) end on the arrivals' and the 1 s checks' times: the other
    event was scheduled first, so it goes first, and the arrival joins the next batch."""
    arrived = np.array([0.0, 0.5, 1.0, 1.0, 2.25, 3.0, 4.75, 6.0])
    prompt = np.array([40, 30, 20, 50, 10, 60, 25, 35])
    output = np.array([30, 12, 25, 9, 18, 14, 22, 7])
    cfg = SimConfig(policy=policy, max_model_len=256, check_period_s=1.0, tbt_target_s=1.0)

    def sim():
        return simulate(prompt, output, arrived, ConstantTimer(0.25), 200, cfg)

    assert_same(_run(monkeypatch, "reference", sim), _run(monkeypatch, mode, sim))


@pytest.mark.parametrize("mode", CORES)
@pytest.mark.parametrize("num_blocks", range(8, 23))
def test_kv_growth_that_takes_the_last_free_blocks(monkeypatch, mode, num_blocks):
    """Four decodes cross block boundaries at different iterations on pools of 8 to 22 blocks: on some the
    growth of one iteration takes exactly the free blocks, and the scheduler (not the stretch) must form
    that batch, preempting as the reference does."""
    prompt = np.array([31, 25, 18, 9])
    output = np.array([90, 90, 90, 90])
    arrived = np.zeros(4)
    cfg = SimConfig(policy="sarathi", budget=512, max_model_len=160, watermark=0.0)

    def sim():
        return simulate(prompt, output, arrived, LinearTimer(0.003, 2e-5, 3e-8), num_blocks, cfg)

    ref = _run(monkeypatch, "reference", sim)
    assert_same(ref, _run(monkeypatch, mode, sim))


@pytest.mark.parametrize("mode", CORES)
def test_replicas_whose_iterations_interleave(monkeypatch, mode):
    """Two replicas decoding at once: each stretch stops before the other replica's next event."""
    rng = np.random.default_rng(3)
    n = 24
    prompt, output = rng.integers(1, 300, n), rng.integers(20, 200, n)
    arrived = np.cumsum(rng.exponential(0.3, n))
    cfg = SimConfig(policy="sarathi", budget=256, max_model_len=512, num_replicas=2, router="lor")

    def sim():
        return simulate(prompt, output, arrived, LinearTimer(0.003, 2e-5, 3e-8), 400, cfg)

    assert_same(_run(monkeypatch, "reference", sim), _run(monkeypatch, mode, sim))
