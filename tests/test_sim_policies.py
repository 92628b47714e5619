"""Policy behaviour a person can check by hand (simserve.sim.policies)."""

from __future__ import annotations

import numpy as np
import pytest

from simserve.sim import SimConfig, build_result, simulate
from simserve.sim.testing import ConstantTimer, LinearTimer


def run(prompt, output, arrived, policy="sarathi", timer=None, blocks=10_000, **cfg):
    raw = simulate(
        np.array(prompt),
        np.array(output),
        np.array(arrived, dtype=float),
        timer or ConstantTimer(0.01),
        blocks,
        SimConfig(policy=policy, **cfg),
    )
    return raw, build_result(raw)


def random_workload(n=200, seed=0, qps=20.0, max_prompt=1500, max_output=60):
    rng = np.random.default_rng(seed)
    return (
        rng.integers(1, max_prompt, n),
        rng.integers(1, max_output, n),
        np.cumsum(rng.exponential(1 / qps, n)),
    )


def test_600_token_prompt_under_256_budget_runs_as_256_256_88():
    _, res = run([600], [4], [0.0], "sarathi", budget=256, stretch=False)
    it = res.iterations
    assert it.num_prefill_tokens.tolist() == [256, 256, 88, 0, 0, 0]
    assert it.num_decode_tokens.tolist() == [0, 0, 0, 1, 1, 1]  # 4 outputs: the last chunk samples the first
    req = res.requests.iloc[0]
    assert req.first_token_at_s == pytest.approx(0.03) and req.completed_at_s == pytest.approx(0.06)
    assert req.tbt_mean_s == pytest.approx(0.01) and req.tbt_max_s == pytest.approx(0.01)


def test_sarathi_puts_decodes_first_and_fills_the_budget_with_several_prefills():
    # Request 0 decodes while 1 and 2 arrive; budget 100 = 1 decode + 60 of request 1 + 39 of request 2.
    _, res = run([10, 60, 80], [5, 2, 2], [0.0, 0.015, 0.015], "sarathi", budget=100, stretch=False)
    row = res.iterations[res.iterations.start_s >= 0.02].iloc[0]
    assert (row.num_decode_tokens, row.num_prefill_tokens, row.num_requests) == (1, 99, 3)


def test_vllm_never_mixes_prefills_and_decodes():
    p, o, a = random_workload()
    _, res = run(p, o, a, "vllm", timer=LinearTimer(0.005, 1e-5, 1e-7), max_model_len=2048)
    it = res.iterations
    assert ((it.num_prefill_tokens == 0) | (it.num_decode_tokens == 0)).all()
    assert (it.num_prefill_tokens > 0).any() and (it.num_decode_tokens > 0).any()
    assert res.summary.completed == len(p)


def test_chunked_alternates_prefill_and_decode_batches():
    p, o, a = random_workload(seed=1)
    _, res = run(p, o, a, "chunked", budget=256, stretch=False, max_model_len=2048)
    it = res.iterations
    assert ((it.num_prefill_tokens == 0) | (it.num_decode_tokens == 0)).all()
    assert it.num_prefill_tokens.max() <= 256


def test_hybrid_takes_whole_prompts_next_to_decodes():
    _, res = run([10, 1500], [6, 2], [0.0, 0.025], "hybrid", stretch=False, max_model_len=2048)
    assert 1500 in res.iterations.num_prefill_tokens.tolist()  # budget = max_model_len: no chunking
    mixed = res.iterations[(res.iterations.num_prefill_tokens > 0) & (res.iterations.num_decode_tokens > 0)]
    assert len(mixed) == 1


def test_request_level_fcfs_admits_nothing_while_a_request_is_resident():
    p, o, a = random_workload(seed=2)
    _, res = run(p, o, a, "fcfs", max_batch=8, max_model_len=2048)
    r = res.requests
    s, c = r.scheduled_at_s.to_numpy(), r.completed_at_s.to_numpy()
    resident_at_admission = (s[None, :] > s[:, None]) & (s[None, :] < c[:, None])  # j admitted while i runs
    assert not resident_at_admission.any()
    assert r.groupby("scheduled_at_s").size().max() > 1  # but whole batches are admitted together


def test_orca_never_exceeds_its_batch_size():
    p, o, a = random_workload(seed=3, qps=100.0)
    _, res = run(p, o, a, "orca", timer=LinearTimer(0.005, 1e-5, 1e-7), max_model_len=2048)
    r = res.requests
    s, c = r.scheduled_at_s.to_numpy(), r.completed_at_s.to_numpy()
    resident = ((s[None, :] <= s[:, None]) & (c[None, :] > s[:, None])).sum(axis=1)
    assert resident.max() == 16  # the default: it fills up, and never beyond
    assert res.iterations.num_requests.max() <= 16


def test_orca_reserves_max_length_and_vllm_only_the_prompt():
    # 4 resident max-length reservations of 128 blocks need 512 blocks: a 300-block pool holds two.
    raw, res = run([100] * 4, [50] * 4, [0.0] * 4, "orca", blocks=300, max_model_len=2048)
    assert res.requests.scheduled_at_s.nunique() == 2
    raw, res = run([100] * 4, [50] * 4, [0.0] * 4, "vllm", blocks=300, max_model_len=2048)
    assert res.requests.scheduled_at_s.nunique() == 1


def test_preemption_recomputes_the_youngest_and_keeps_the_output_length():
    # 8 blocks of 16 tokens, two requests that each grow to 80 tokens (5 blocks): they cannot both stay.
    raw, res = run([40, 40], [40, 40], [0.0, 0.0], "sarathi", blocks=8, budget=512, max_model_len=128)
    r = res.requests
    assert r.preemptions[0] == 0 and r.preemptions[1] >= 1  # always the youngest
    assert (raw.reqs.generated == [40, 40]).all() and (r.status == "completed").all()
    assert raw.replicas[0].state.kv.free == 8


def test_too_long_prompts_are_ignored_and_reported():
    _, res = run([100, 5000, 50], [3, 3, 3], [0.0, 0.1, 0.2], "sarathi", max_model_len=4096)
    assert res.summary.ignored == 1 and res.summary.completed == 2
    assert res.requests.status.tolist() == ["completed", "ignored", "completed"]


def test_strict_fifo_head_of_line_blocking():
    # The head (600 tokens = 38 blocks) does not fit beside the resident one (25+); the small one behind it
    # would, but it must wait for the head.
    _, res = run([400, 600, 10], [30, 2, 2], [0.0, 0.01, 0.02], "vllm", blocks=60, max_model_len=1024)
    s = res.requests.scheduled_at_s.to_numpy()
    assert s[2] >= s[1] > 0.3


def test_least_outstanding_router_balances_and_round_robin_alternates():
    p, o, a = random_workload(n=60, seed=4)
    _, rr = run(p, o, a, num_replicas=2, router="rr", max_model_len=2048)
    assert rr.requests.sort_values("arrived_at_s").replica.tolist()[:6] == [0, 1, 0, 1, 0, 1]
    _, lor = run(p, o, a, num_replicas=3, router="lor", max_model_len=2048)
    assert set(lor.requests.replica) == {0, 1, 2}
    assert lor.summary.completed == 60 and len(lor.summary.stage_busy) == 3
