"""prefill_stretch.py runs a prompt's chunks without the scheduler loop: every table row, request time, histogram
count and summary field must be what the loop gives, bit for bit, including runs that an overload check or the
TBT stop rule ends while a prompt is being prefilled."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from simserve.sim import prefill_stretch
from simserve.sim.cluster import simulate
from simserve.sim.config import SimConfig
from simserve.sim.histogram import LogHistogram
from simserve.sim.metrics import build_result
from simserve.sim.scenario import Scenario, run_scenario
from simserve.sim.testing import LinearTimer

MISTRAL = dict(model="mistral-7b", gpu="a100", num_requests=300)


def _same(a, b) -> None:
    pd.testing.assert_frame_equal(a.requests, b.requests, check_exact=True)
    pd.testing.assert_frame_equal(a.iterations, b.iterations, check_exact=True)
    assert repr(sorted(a.summary.as_dict().items())) == repr(sorted(b.summary.as_dict().items()))
    assert a.tbt.counts.tobytes() == b.tbt.counts.tobytes() and a.tbt.zeros == b.tbt.zeros


def _both(monkeypatch, run):
    """(with chunk runs, without them): the same run twice, the second through the scheduler loop only."""
    fast = run()
    with monkeypatch.context() as m:
        m.setattr(prefill_stretch, "POLICIES", ())
        slow = run()
    return fast, slow


@pytest.mark.parametrize(
    ("budget", "qps", "stop_tbt"),
    [
        (512, 0.5, None),
        (512, 3.5, None),
        (256, 2.0, None),
        (1024, 1.0, None),
        (512, 12.0, None),  # overloaded: an overload check ends the run
        (512, 2.0, (0.03, 0.9)),  # the TBT stop rule ends the run at a check
        (256, 3.0, (0.05, 0.99)),
    ],
)
def test_chunk_runs_give_the_scheduler_loops_results(monkeypatch, budget, qps, stop_tbt) -> None:
    scenario = Scenario(**MISTRAL, budget=budget, stop_tbt=stop_tbt)
    calls = []
    real = prefill_stretch.chunk_run

    def counted(*args):
        ran = yield from real(*args)
        calls.append(ran)
        return ran

    monkeypatch.setattr(prefill_stretch, "chunk_run", counted)
    fast, slow = _both(monkeypatch, lambda: run_scenario(scenario, qps))
    assert any(calls), "no chunk run happened: the test would check nothing"
    if stop_tbt is not None and qps == 2.0:
        assert fast.summary.stopped_early
    _same(fast, slow)


def test_chunk_runs_with_preemption_and_a_tiny_pool(monkeypatch) -> None:
    rng = np.random.default_rng(3)
    n = 200
    prompt, output = rng.integers(20, 900, n), rng.integers(5, 200, n)
    arrived = np.cumsum(rng.exponential(0.2, n))
    cfg = SimConfig(policy="sarathi", budget=128, max_model_len=1024, overload_wait_s=1e9, sched_delay_slo_s=1e9)
    timer = LinearTimer(0.004, 2e-5, 3e-8)
    fast, slow = _both(monkeypatch, lambda: build_result(simulate(prompt, output, arrived, timer, 120, cfg)))
    assert fast.requests.preemptions.sum() > 0
    _same(fast, slow)


@pytest.mark.parametrize("value", [0.0, 1e-12, 1e-9, 0.0123, 0.1, 1.0, 7.5, 2e6])
def test_bucket_is_where_add_puts_a_value(value: float) -> None:
    h = LogHistogram()
    h.add(value)
    expect = -1 if value <= 0 else int(np.flatnonzero(h.counts)[0])
    assert LogHistogram.bucket(value) == expect
    assert math.isfinite(h.total)
