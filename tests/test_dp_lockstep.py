"""Attention-DP ranks step together (sim/lockstep.py): every rank waits for the slowest, idle ranks run dummy
steps, requests go to ranks by vLLM's DP load balancing, and equal loads give the per-rank approximation."""

from __future__ import annotations

import numpy as np
import pytest

from simserve.sim.cluster import run_cluster
from simserve.sim.config import SimConfig

DP2 = SimConfig(policy="vllm-v1", budget=4096, max_model_len=4096, num_replicas=2, dp_attention=2)


def test_a_short_request_waits_for_the_long_prefill_on_the_other_rank(moe_dp_timer):
    # rank 0 gets a 4000-token prompt, rank 1 a 10-token one, both at t = 0: one step holds both prefills
    cluster, reqs = run_cluster(moe_dp_timer, [4000, 10], [1, 1], [0.0, 0.0], DP2)
    assert reqs.replica.tolist() == [0, 1]  # least loaded, ties to the lowest rank
    assert reqs.first_token[1] == reqs.first_token[0]  # the short one finished when the long one did
    alone, _ = moe_dp_timer.own_time([(10, 0)], np.zeros(0, dtype=np.int64))
    long_own, _ = moe_dp_timer.own_time([(4000, 0)], np.zeros(0, dtype=np.int64))
    assert reqs.first_token[1] == pytest.approx(long_own + moe_dp_timer.experts_time(4010), rel=1e-12)
    assert long_own > 5 * alone  # the 10-token prefill alone would have been done far sooner
    (group,) = cluster.groups
    assert (
        group.lockstep_wait[1] == pytest.approx(long_own - alone, rel=1e-12) and group.lockstep_wait[0] == 0.0
    )


def test_an_idle_rank_runs_dummy_steps_while_another_has_work(moe_dp_timer):
    # one request of 20 output tokens on rank 0: rank 1 has nothing, yet steps with it (one dummy token each)
    cluster, reqs = run_cluster(moe_dp_timer, [100], [20], [0.0], DP2)
    (group,) = cluster.groups
    assert group.steps == 20 and group.dummy_steps == [0, 20]
    # a decode step costs rank 0's own time plus the experts of its token and rank 1's dummy token
    own, t = moe_dp_timer.own_time([], np.array([101]))
    assert t == 1 and moe_dp_timer.experts_time(2) > moe_dp_timer.experts_time(1)
    gaps = np.diff([reqs.first_token[0], reqs.completed[0]])[0] / 19
    assert gaps == pytest.approx(own + moe_dp_timer.experts_time(2), rel=0.05)  # KV grows by one token a step


def test_equal_loads_match_the_independent_rank_approximation(moe_dp_timer):
    # pairs of identical requests arriving together: each rank carries exactly the other's load, so the
    # lockstep step is the per-rank timer's (experts at 2 × a rank's tokens) up to float rounding
    rng = np.random.default_rng(3)
    k = 30
    prompt = np.repeat(rng.integers(50, 2000, k), 2)
    output = np.repeat(rng.integers(5, 60, k), 2)
    arrived = np.repeat(np.cumsum(rng.exponential(0.4, k)), 2)
    _, lock = run_cluster(moe_dp_timer, prompt, output, arrived, DP2)
    indep = SimConfig(policy="vllm-v1", budget=4096, max_model_len=4096, num_replicas=2, router="rr")
    _, old = run_cluster(moe_dp_timer, prompt, output, arrived, indep)
    assert lock.replica.tolist() == old.replica.tolist() == [0, 1] * k
    np.testing.assert_allclose(lock.completed, old.completed, rtol=1e-9)
    np.testing.assert_allclose(lock.first_token, old.first_token, rtol=1e-9)


def _random_load(seed: int, n: int = 120):
    rng = np.random.default_rng(seed)
    return rng.integers(20, 3000, n), rng.integers(1, 80, n), np.cumsum(rng.exponential(0.05, n))


def test_every_request_is_served_once_with_all_its_tokens(moe_dp_timer):
    prompt, output, arrived = _random_load(7)
    cluster, reqs = run_cluster(
        moe_dp_timer,
        prompt,
        output,
        arrived,
        SimConfig(policy="vllm-v1", budget=2048, max_model_len=4096, num_replicas=4, dp_attention=2),
    )
    assert (reqs.status == 2).all() and (reqs.generated == output).all()
    assert set(reqs.replica.tolist()) == {0, 1, 2, 3}  # two deployments of two ranks, every rank used
    assert all(rank.state.kv.used == 0 and rank.state.outstanding == 0 for rank in cluster.replicas)
    assert (reqs.completed >= reqs.first_token).all() and (reqs.first_token > reqs.arrived).all()
    assert reqs.preemptions.sum() == 0  # so every prompt token is computed once and every later output once
    assert sum(rank.work.tokens for rank in cluster.replicas) == int((reqs.prompt + reqs.output - 1).sum())


def test_lockstep_runs_are_deterministic_and_run_on_the_core_silently(moe_dp_timer, capsys, monkeypatch):
    from simserve.sim import core_run
    from simserve.sim.cluster import simulate

    prompt, output, arrived = _random_load(11)
    cfg = SimConfig(policy="vllm-v1", budget=2048, max_model_len=4096, num_replicas=2, dp_attention=2)
    a = simulate(prompt, output, arrived, moe_dp_timer, 4000, cfg)
    b = simulate(prompt, output, arrived, moe_dp_timer, 4000, cfg)
    assert np.array_equal(a.reqs.completed, b.reqs.completed)
    assert np.array_equal(a.reqs.replica, b.reqs.replica)
    monkeypatch.setenv(core_run.ENV, "python")  # sim/core/'s source: chosen whether or not it is built
    assert core_run.choose(cfg, moe_dp_timer) is not None  # the ranks' lockstep is in the core
    assert capsys.readouterr().err == ""


def test_under_cuda_graphs_every_rank_runs_padded_to_the_largest(moe_dp_timer):
    from simserve.sim.lockstep import padded_tokens
    from simserve.vllm_worker import padded_timer

    sizes = (1, 2, 4, 8, 16)
    # the largest rank's 3 tokens run as the captured 4, on both ranks
    assert padded_tokens([3, 1], sizes) == 4
    assert padded_tokens([3, 17], sizes) == 0  # one rank past the largest graph runs eagerly: nobody pads
    assert padded_tokens([3, 1], ()) == 0  # no CUDA graphs
    # three 10-token prompts at once: two on rank 0, one on rank 1; then decode steps of 2 and 1 tokens
    args = ([10, 10, 10], [6, 6, 6], [0.0, 0.0, 0.0], DP2)
    plain, a = run_cluster(moe_dp_timer, *args)
    graphs, b = run_cluster(padded_timer(moe_dp_timer, sizes), *args)
    assert a.replica.tolist() == b.replica.tolist() == [0, 1, 0]
    # the 20-token prefill: eager
    assert plain.groups[0].padded_steps == 0 and graphs.groups[0].padded_steps == 5
    assert moe_dp_timer.experts_time(4) > moe_dp_timer.experts_time(3)
    assert (b.completed > a.completed).all()  # every decode step paid the experts of 2 × 2 tokens, not 2 + 1
