"""The PP = 2 fast path (simserve/sim/pipeline_stretch.py) gives the step-by-step results, bit for bit."""

from __future__ import annotations

import contextlib

import numpy as np
import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simserve.sim import SimConfig, build_result, pipeline_stretch, simulate
from simserve.sim.config import POLICY_NAMES
from simserve.sim.testing import LinearTimer


class StagedTimer(LinearTimer):
    """LinearTimer with a different cost per stage, so either stage can be the one that ends a tick last."""

    def __init__(self, a: float, b: float, c: float, stage_factors: tuple[float, float]):
        super().__init__(a, b, c, num_stages=2)
        self.factors = stage_factors

    def __call__(self, prefills, decode_kv, stage=0):
        return super().__call__(prefills, decode_kv, stage) * self.factors[stage]

    def decode_stretch(self, num_decodes, kv_sums, stage=0):
        return super().decode_stretch(num_decodes, kv_sums, stage) * self.factors[stage]


@contextlib.contextmanager
def counting_plans(seen: list[tuple[bool, bool]]):
    """Record (queued, stage0_last) of every stretch the simulator plans."""
    plan = pipeline_stretch.plan_pipeline

    def counted(*args):
        p = plan(*args)
        if p is not None:
            seen.append((p.queued, p.stage0_last))
        return p

    pipeline_stretch.plan_pipeline = counted
    try:
        yield
    finally:
        pipeline_stretch.plan_pipeline = plan


def run_both(prompt, output, arrived, timer, blocks, cfg):
    fast = simulate(prompt, output, arrived, timer, blocks, cfg)
    slow = simulate(prompt, output, arrived, timer, blocks, SimConfig(**{**cfg.__dict__, "stretch": False}))
    return fast, slow


def assert_identical(fast_raw, slow_raw):
    fast, slow = build_result(fast_raw), build_result(slow_raw)
    pd.testing.assert_frame_equal(fast.requests, slow.requests, check_exact=True)
    # Rows of one replica keep their order; rows of different replicas may interleave differently.
    by_replica = [
        res.iterations.sort_values("replica", kind="stable").reset_index(drop=True) for res in (fast, slow)
    ]
    pd.testing.assert_frame_equal(*by_replica, check_exact=True)
    assert fast.summary == slow.summary or all(
        a == b or (a != a and b != b)
        for a, b in zip(fast.summary.as_dict().values(), slow.summary.as_dict().values(), strict=True)
    )
    assert np.array_equal(fast.tbt.counts, slow.tbt.counts) and fast.tbt.zeros == slow.tbt.zeros


def test_a_steady_pipeline_is_stretched_and_changes_nothing():
    rng = np.random.default_rng(3)
    n = 120
    prompt, output = rng.integers(20, 300, n), rng.integers(20, 400, n)
    arrived = np.cumsum(rng.exponential(0.25, n))
    seen: list[tuple[bool, bool]] = []
    for factors in ((1.0, 1.3), (1.3, 1.0), (1.0, 1.0)):
        timer = StagedTimer(0.004, 2e-5, 1e-8, factors)
        with counting_plans(seen):
            fast, slow = run_both(
                prompt, output, arrived, timer, 900, SimConfig(policy="sarathi", budget=128)
            )
        assert_identical(fast, slow)
        assert (build_result(slow).iterations.num_iterations == 1).all()
    # every way a stretch can start (stage 1 already timing B, or B just handed over) and end was taken
    assert set(seen) == {(False, False), (False, True), (True, False), (True, True)}


def test_a_stretch_stops_where_an_overload_check_stops_the_run():
    # All arrive at once, at most 6 resident: the rest wait, so the first check past the SLO stops the run
    # in the middle of steady decoding; checks before it do not (the fast path looks past those).
    n = 40
    prompt, output, arrived = np.full(n, 50), np.full(n, 3000), np.linspace(0.0, 0.01, n)
    for slo, factors in ((1.5, (1.0, 1.3)), (2.5, (1.3, 1.0))):
        cfg = SimConfig(max_batch=6, max_model_len=4096, sched_delay_slo_s=slo, check_period_s=0.5)
        seen: list[tuple[bool, bool]] = []
        with counting_plans(seen):
            fast, slow = run_both(prompt, output, arrived, StagedTimer(0.01, 1e-4, 1e-8, factors), 5000, cfg)
        assert fast.overloaded and slow.overloaded and seen
        assert_identical(fast, slow)


@st.composite
def cases(draw):
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    n = draw(st.integers(1, 40))
    max_len = draw(st.sampled_from([64, 200, 1024]))
    min_blocks = -(-max_len // 16)
    return dict(
        prompt=rng.integers(1, max_len + 40, n),
        output=rng.integers(1, draw(st.sampled_from([4, 40, 120])), n),
        arrived=np.cumsum(rng.exponential(draw(st.sampled_from([0.001, 0.02, 0.2])), n)),
        blocks=draw(st.integers(min_blocks, 4 * min_blocks)),  # small pools: preemption happens
        timer=StagedTimer(0.003, 2e-5, 3e-8, draw(st.sampled_from([(1.0, 1.0), (1.0, 1.25), (1.25, 1.0)]))),
        cfg=SimConfig(
            policy=draw(st.sampled_from(POLICY_NAMES)),
            budget=draw(st.one_of(st.none(), st.integers(1, 600))),
            max_batch=draw(st.one_of(st.none(), st.integers(1, 20))),
            max_model_len=max_len,
            num_replicas=draw(st.integers(1, 2)),
            router=draw(st.sampled_from(["rr", "lor"])),
            sched_delay_slo_s=draw(st.sampled_from([1e9, 0.05])),  # sometimes stop early: overloaded
            check_period_s=draw(st.sampled_from([1.0, 0.05])),
        ),
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_the_pipeline_fast_path_gives_the_step_by_step_results(case):
    fast, slow = run_both(
        case["prompt"], case["output"], case["arrived"], case["timer"], case["blocks"], case["cfg"]
    )
    assert_identical(fast, slow)
