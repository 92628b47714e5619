"""Adaptive budgets and vLLM v1's scheduler, on timers simple enough to check by hand
(simserve.sim.adaptive_budgets, simserve.sim.vllm_v1)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from simserve.errors import SimserveError
from simserve.sim import SimConfig, build_result, simulate
from simserve.sim.adaptive_budgets import largest_fitting
from simserve.sim.testing import ConstantTimer, LinearTimer

NEW_POLICIES = ("slo-aware", "pressure", "equal-cost", "vllm-v1")


def run(prompt, output, arrived, policy, timer=None, blocks=10_000, **cfg):
    raw = simulate(
        np.array(prompt),
        np.array(output),
        np.array(arrived, dtype=float),
        timer or ConstantTimer(0.01),
        blocks,
        SimConfig(policy=policy, **cfg),
    )
    return build_result(raw)


def prefill_chunks(res) -> list[int]:
    it = res.iterations
    return it.num_prefill_tokens[it.num_prefill_tokens > 0].tolist()


def test_largest_fitting_is_a_bisection_on_a_monotone_predicate():
    assert largest_fitting(lambda n: n <= 37, 100) == 37
    assert largest_fitting(lambda n: n <= 500, 100) == 100
    assert largest_fitting(lambda n: False, 100) == 0
    assert largest_fitting(lambda n: True, 0) == 0


def test_slo_aware_takes_the_largest_chunk_under_the_tbt_target():
    # 0.01 s + 0.1 ms per token ≤ 0.05005 s  ⇔  tokens ≤ 400: a 1000-token prompt runs as 400, 400, 200.
    res = run(
        [1000], [2], [0.0], "slo-aware", LinearTimer(0.01, 1e-4, 0.0), tbt_target_s=0.05005, stretch=False
    )
    assert prefill_chunks(res) == [400, 400, 200]


def test_slo_aware_counts_the_decodes_in_the_batch():
    # Request 0 (1 token prompt) decodes while request 1's prompt is chunked: 1 decode + 399 prefill tokens.
    res = run(
        [1, 1000],
        [50, 2],
        [0.0, 0.001],
        "slo-aware",
        LinearTimer(0.01, 1e-4, 0.0),
        tbt_target_s=0.05005,
        stretch=False,
    )
    it = res.iterations
    mixed = it[(it.num_prefill_tokens > 0) & (it.num_decode_tokens > 0)]
    assert mixed.num_prefill_tokens.tolist()[:2] == [399, 399]
    assert ((it.end_s - it.start_s) <= 0.05005 + 1e-12).all()


def test_slo_aware_is_capped_by_the_budget_and_always_progresses():
    res = run([1000], [2], [0.0], "slo-aware", ConstantTimer(0.01), budget=300, stretch=False)
    assert prefill_chunks(res) == [300, 300, 300, 100]
    # A target no batch can meet (below the fixed 0.01 s): 16-token chunks instead of a stalled replica.
    res = run([40], [2], [0.0], "slo-aware", LinearTimer(0.01, 1e-4, 0.0), tbt_target_s=0.001, stretch=False)
    assert prefill_chunks(res) == [16, 16, 8]


def test_pressure_budget_grows_with_the_queue_and_shrinks_without_tbt_slack():
    # Cap 1024, floor 256. One waiting request: 256·2 = 512; then nothing waits: the floor, 256.
    res = run([1000], [2], [0.0], "pressure", ConstantTimer(0.01), budget=1024, min_budget=256, stretch=False)
    assert prefill_chunks(res) == [512, 256, 232]
    # Four waiting: 256·5 = 1280, capped at 1024 (filled across requests).
    res = run(
        [1000] * 4,
        [2] * 4,
        [0.0] * 4,
        "pressure",
        ConstantTimer(0.01),
        budget=1024,
        min_budget=256,
        stretch=False,
    )
    assert prefill_chunks(res)[0] == 1024
    # 512 tokens would take 0.0612 s > 0.05 s: halved to 256 (the floor; it never goes below).
    res = run(
        [1000],
        [2],
        [0.0],
        "pressure",
        LinearTimer(0.01, 1e-4, 0.0),
        budget=1024,
        min_budget=256,
        tbt_target_s=0.05,
        stretch=False,
    )
    assert prefill_chunks(res) == [256, 256, 256, 232]


def test_equal_cost_chunks_shrink_as_the_prefix_grows():
    # Chunk cost = 1e-4·c + 1e-6·(p + c); the limit is a 1000-token chunk at p = 0 (0.101 s), so at p = 1000
    # c ≤ 0.1/1.01e-4 = 990.1 and at p = 1990 c ≤ 0.09901/1.01e-4 = 980.3.
    res = run([3000], [2], [0.0], "equal-cost", LinearTimer(0.0, 1e-4, 1e-6), budget=1000, stretch=False)
    assert prefill_chunks(res) == [1000, 990, 980, 30]


def test_equal_cost_with_a_tiny_budget_still_progresses():
    # Budget 1: one token over any prefix costs more than the 1-token limit at prefix 0, so no chunk fits;
    # the cheapest chunk (one token) is taken rather than waiting forever (found by the property test).
    res = run([3, 5], [2, 2], [0.0, 0.0], "equal-cost", LinearTimer(0.0, 1e-4, 1e-6), budget=1, stretch=False)
    assert res.summary.completed == 2
    assert prefill_chunks(res) == [1] * 8


def test_vllm_v1_shares_one_budget_between_decodes_and_chunks():
    # Budget 100: request 0 decodes, request 1's 300-token prompt gets the other 99 tokens.
    res = run([1, 300], [20, 2], [0.0, 0.001], "vllm-v1", budget=100, stretch=False)
    it = res.iterations
    assert ((it.num_prefill_tokens + it.num_decode_tokens) <= 100).all()
    assert it[it.num_prefill_tokens > 0].num_prefill_tokens.tolist() == [1, 99, 99, 99, 3]
    # Budget 2 and three decoding requests: at most two decode per iteration (the third stalls).
    res = run([1, 1, 1], [6, 6, 6], [0.0] * 3, "vllm-v1", budget=2, stretch=False)
    assert res.iterations.num_decode_tokens.max() == 2 and res.summary.completed == 3


def test_vllm_v1_long_prefill_threshold_and_several_prefills_per_step():
    # Alone, a request is never capped (vLLM: "nobody to starve"): one 350-token chunk.
    res = run([350], [2], [0.0], "vllm-v1", budget=1000, long_prefill_token_threshold=100, stretch=False)
    assert prefill_chunks(res) == [350]
    two = ([300, 300], [2, 2], [0.0, 0.0])
    # V1 has no partial-prefill limit: both prompts share the first step's budget.
    assert prefill_chunks(run(*two, "vllm-v1", budget=1000, stretch=False))[0] == 600
    # With two requests the threshold caps each chunk at 100, both in the same step.
    res = run(*two, "vllm-v1", budget=1000, long_prefill_token_threshold=100, stretch=False)
    assert prefill_chunks(res)[:3] == [200, 200, 200]
    # Adaptive: the threshold is floored at the budget's fair share, 1000 // 2 = 500 per request.
    res = run(
        *two,
        "vllm-v1",
        budget=1000,
        long_prefill_token_threshold=100,
        long_prefill_token_threshold_adaptive=True,
        stretch=False,
    )
    assert prefill_chunks(res)[0] == 600
    res = run(
        [900, 900],
        [2, 2],
        [0.0, 0.0],
        "vllm-v1",
        budget=1000,
        long_prefill_token_threshold=100,
        long_prefill_token_threshold_adaptive=True,
        stretch=False,
    )
    assert prefill_chunks(res)[0] == 1000  # 500 + 500
    with pytest.raises(SimserveError, match="unrecognized arguments: --max-num-partial-prefills"):
        run(*two, "vllm-v1", budget=1000, max_num_partial_prefills=2, stretch=False)


def test_vllm_v1_max_num_seqs_and_preemption_under_kv_pressure():
    res = run([10] * 4, [5] * 4, [0.0] * 4, "vllm-v1", max_batch=1, stretch=False)
    assert res.iterations.num_requests.max() == 1 and res.summary.completed == 4
    rng = np.random.default_rng(3)
    p, o = rng.integers(50, 400, 60), rng.integers(20, 200, 60)
    res = run(
        p,
        o,
        np.sort(rng.uniform(0, 1, 60)),
        "vllm-v1",
        blocks=120,
        budget=512,
        stretch=False,
        sched_delay_slo_s=1e3,
        overload_wait_s=1e4,
    )
    assert res.summary.completed == 60 and res.summary.preemptions > 0


@pytest.mark.parametrize("policy", NEW_POLICIES)
def test_new_policies_finish_everything_deterministically_and_the_fast_path_agrees(policy):
    rng = np.random.default_rng(7)
    n = 150
    p, o, a = rng.integers(1, 1500, n), rng.integers(1, 80, n), np.cumsum(rng.exponential(1 / 15, n))
    timer = LinearTimer(0.005, 2e-5, 1e-7)
    cfg = dict(tbt_target_s=0.03, budget=1024, max_model_len=2048)
    fast = run(p, o, a, policy, timer, blocks=2000, **cfg)
    again = run(p, o, a, policy, timer, blocks=2000, **cfg)
    exact = run(p, o, a, policy, timer, blocks=2000, stretch=False, **cfg)
    assert fast.summary.completed == n
    pd.testing.assert_frame_equal(fast.requests, again.requests)
    cols = ["first_token_at_s", "completed_at_s", "tbt_max_s"]
    np.testing.assert_allclose(fast.requests[cols], exact.requests[cols], rtol=1e-9)


def test_equal_cost_runs_under_pipeline_parallelism():
    rng = np.random.default_rng(1)
    p, o, a = rng.integers(100, 3000, 80), rng.integers(1, 40, 80), np.cumsum(rng.exponential(0.1, 80))
    res = run(
        p, o, a, "equal-cost", LinearTimer(0.002, 2e-5, 2e-8, num_stages=2), budget=1024, max_model_len=4096
    )
    assert res.summary.completed == 80


@pytest.mark.parametrize(
    ("field", "value", "flag"),
    [
        ("long_prefill_token_threshold", -1, "--long-prefill-token-threshold"),
        ("max_num_partial_prefills", 0, "--max-num-partial-prefills"),
        ("tbt_target_s", 0.0, "--tbt-target"),
    ],
)
def test_bad_knobs_name_the_flag(field, value, flag):
    with pytest.raises(SimserveError, match=flag):
        SimConfig(policy="vllm-v1", **{field: value}).validate()


def test_vllm_v1_admission_before_full_isl_preempts_a_long_prompt_it_cannot_finish():
    """A holds 10 of 16 blocks while it decodes; B's 200-token prompt needs 13. vLLM 0.33.0
    (scheduler_reserve_full_isl) keeps B waiting until A is done; vLLM 0.8.2 admits B on its first 64-token
    chunk (4 blocks), runs out two chunks later and preempts B, the last admitted (recompute), again and
    again."""
    args = ([160, 200], [40, 2], [0.0, 0.001], "vllm-v1")
    kw = dict(blocks=16, budget=64, stretch=False, sched_delay_slo_s=1e3, overload_wait_s=1e4)
    now = run(*args, **kw)
    before = run(*args, **kw, reserve_full_isl=False)
    r0, r1 = now.requests.set_index("request_id"), before.requests.set_index("request_id")
    assert now.summary.preemptions == 0 and r0.loc[1, "scheduled_at_s"] >= r0.loc[0, "completed_at_s"]
    assert before.summary.preemptions > 0 and r1.loc[1, "scheduled_at_s"] < r1.loc[0, "completed_at_s"]
    assert before.summary.completed == now.summary.completed == 2
    # the waste: B's chunks computed, then recomputed
    assert before.iterations.num_prefill_tokens.sum() > now.iterations.num_prefill_tokens.sum()
