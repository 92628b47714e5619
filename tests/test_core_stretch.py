"""The core's decode stretches (core.Core._decode_stretch) at their edges, against the SimPy reference.

A stretch runs a replica's decode-only iterations in one loop while each is surely the next event. Random
workloads (tests/test_sim_core.py) rarely put an iteration's end exactly on an arrival or a watchdog check,
or make the next batch's KV growth take exactly the last free blocks; these cases do, by construction.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simserve.sim import SimConfig, simulate
from simserve.sim.scenario import Scenario, simulate_scenario
from simserve.sim.testing import ConstantTimer, LinearTimer
from tests.test_sim_core import CORES, MISTRAL, _run, assert_same

# the policies whose decode-only batches the core may run as a stretch
STRETCH_POLICIES = (
    "fcfs",
    "orca",
    "vllm",
    "sarathi",
    "chunked",
    "slo-aware",
    "pressure",
    "equal-cost",
    "vllm-v1",
    "sglang",
)


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
@pytest.mark.parametrize("policy", ["sarathi", "vllm-v1", "vllm-v1-cached", "sglang"])
@pytest.mark.parametrize("num_blocks", range(8, 23))
def test_kv_growth_that_takes_the_last_free_blocks(monkeypatch, mode, policy, num_blocks):
    """Four decodes cross block boundaries at different iterations on pools of 8 to 22 blocks: on some the
    growth of one iteration takes exactly the free blocks, and the scheduler (not the stretch) must form
    that batch, preempting (vllm-v1: the last admitted; sglang: retracting) as the reference does. With
    vllm-v1's prefix caching a block becomes full (and cached) at a step inside a stretch, and the new
    blocks come from the front of the free queue, evicting cached ones."""
    prompt = np.array([31, 25, 18, 9])
    output = np.array([90, 90, 90, 90])
    arrived = np.zeros(4)
    cfg = SimConfig(
        policy=policy.removesuffix("-cached"),
        budget=512,
        max_model_len=160,
        watermark=0.0,
        prefix_caching=policy.endswith("-cached"),
    )
    # pages of a block; admission reserves a tenth of the outputs, so decodes outgrow it
    if policy == "sglang":
        cfg = replace(cfg, page_size=16, ignore_eos=False, schedule_conservativeness=0.1)

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


@pytest.mark.parametrize("mode", CORES)
@pytest.mark.parametrize("num_blocks", [12, 14, 16, 20, 40])
def test_vllm_v1_prefix_caching_with_blocks_filling_and_cached_inside_stretches(
    monkeypatch, mode, num_blocks
):
    """Requests sharing a prefix group arrive while others decode: each arrival's lookup must see the blocks
    that filled (and were cached) during the stretch before it, and the evictions of the blocks the stretch
    took from the free queue's front."""
    prompt = np.array([40, 40, 33, 40, 17, 40])
    output = np.array([60, 70, 45, 30, 50, 20])
    arrived = np.array([0.0, 0.0, 0.9, 1.6, 2.3, 3.1])
    prefix = (np.array([0, 0, 1, 0, -1, 0]), np.array([40, 40, 20, 60, 0, 80]))
    cfg = SimConfig(policy="vllm-v1", max_model_len=160, watermark=0.0, prefix_caching=True, block_size=8)

    def sim():
        return simulate(
            prompt, output, arrived, LinearTimer(0.02, 2e-5, 3e-8), num_blocks, cfg, prefix=prefix
        )

    assert_same(_run(monkeypatch, "reference", sim), _run(monkeypatch, mode, sim))


@pytest.mark.parametrize("mode", CORES)
@pytest.mark.parametrize("num_blocks", [44, 45, 47, 49, 50])
def test_sglang_new_token_ratio_decays_through_a_stretch(monkeypatch, mode, num_blocks):
    """One request decodes alone for 3 s (~300 steps, one stretch after another between the 1 s checks);
    the second one's admission holds back the first's remaining output times new_token_ratio, which fell
    by one decay per decode step. On pools of 45-49 blocks it fits only with the decayed ratio (a stretch
    that skipped the decay admits it at 7 s, after the first finished); 44 never admits the first, 50 fits
    either way."""
    prompt, output, arrived = np.array([10, 10]), np.array([700, 200]), np.array([0.0, 3.0])
    cfg = SimConfig(policy="sglang", max_model_len=1024, page_size=1, ignore_eos=False)

    def sim():
        return simulate(prompt, output, arrived, ConstantTimer(0.01), num_blocks, cfg)

    assert_same(_run(monkeypatch, "reference", sim), _run(monkeypatch, mode, sim))


@pytest.mark.parametrize("mode", CORES)
@pytest.mark.parametrize("num_blocks", [55, 60, 65, 70])
def test_sglang_retraction_stops_a_stretch(monkeypatch, mode, num_blocks):
    """A second request admitted on the first's decayed ratio (conservativeness 0.1): both grow a page per
    step until the pool runs out inside a stretch (60 and 65 blocks), where the policy's own step must
    retract; 55 does not admit it early, 70 never runs short."""
    prompt, output, arrived = np.array([10, 10]), np.array([700, 600]), np.array([0.0, 3.0])
    cfg = SimConfig(
        policy="sglang", max_model_len=1024, page_size=1, ignore_eos=False, schedule_conservativeness=0.1
    )

    def sim():
        return simulate(prompt, output, arrived, ConstantTimer(0.01), num_blocks, cfg)

    ref = _run(monkeypatch, "reference", sim)
    assert ref.reqs.preemptions.sum() == (1 if num_blocks in (60, 65) else 0)  # the case is what it says
    assert_same(ref, _run(monkeypatch, mode, sim))


@st.composite
def stretch_cases(draw):
    """Light load, where stretches are long: sparse arrivals, long outputs, pools from tight to ample, the
    policies whose stretches have their own steps (vllm-v1 with and without prefix caching, sglang)."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n = draw(st.integers(1, 24))
    policy = draw(st.sampled_from(["vllm-v1", "vllm-v1-cached", "sglang"]))
    max_len = 512
    cfg = SimConfig(
        policy=policy.removesuffix("-cached"),
        prefix_caching=policy.endswith("-cached"),
        max_model_len=max_len,
        budget=draw(st.one_of(st.none(), st.integers(1, 40).map(lambda k: k * 16))),
        max_batch=draw(st.one_of(st.none(), st.integers(1, 8))),
        num_replicas=draw(st.integers(1, 2)),
        check_period_s=draw(st.sampled_from([0.05, 1.0])),
        watermark=0.0,
        block_size=draw(st.sampled_from([16, 8, 10])),
        page_size=draw(st.sampled_from([1, 4, 16])) if policy == "sglang" else 1,
        schedule_conservativeness=draw(st.sampled_from([0.1, 0.3, 1.0])) if policy == "sglang" else 1.0,
        ignore_eos=draw(st.booleans()),  # False: sglang's admission reads new_token_ratio
        long_prefill_token_threshold=draw(st.sampled_from([0, 64])),
    )
    if cfg.policy == "sglang":
        cfg = replace(cfg, block_size=16)
    case = dict(
        prompt=rng.integers(1, 200, n),
        output=rng.integers(20, 300, n),
        arrived=np.cumsum(rng.exponential(draw(st.sampled_from([0.1, 0.5, 2.0])), n)),
        blocks=draw(st.integers(-(-max_len // 8), 200)),
        timer=ConstantTimer(0.01) if draw(st.booleans()) else LinearTimer(0.003, 2e-5, 3e-8),
        cfg=cfg,
        prefix=None,
    )
    if cfg.prefix_caching:
        case["prefix"] = (np.where(rng.random(n) < 0.7, rng.integers(0, 3, n), -1), rng.integers(0, 300, n))
    return case


@pytest.mark.parametrize("mode", CORES)
@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(case=stretch_cases())
def test_light_load_stretches_of_vllm_v1_and_sglang_match_the_reference(monkeypatch, mode, case):
    def sim():
        return simulate(
            case["prompt"],
            case["output"],
            case["arrived"],
            case["timer"],
            case["blocks"],
            case["cfg"],
            prefix=case["prefix"],
        )

    assert_same(_run(monkeypatch, "reference", sim), _run(monkeypatch, mode, sim))


LIGHT = {  # the profiled timer at light load, where most steps run in stretches
    # `--engine vllm`: CUDA-graph padding in the timer's tables, async scheduling's hidden CPU, prefix caching
    "vllm-engine": Scenario(
        **MISTRAL,
        policy="vllm-v1",
        vllm_worker=True,
        async_scheduling=True,
        prefix_caching=True,
        memory_utilization=0.92,
    ),
    "vllm-v1-eager": Scenario(**MISTRAL, policy="vllm-v1"),
    "sglang-overlap": Scenario(**MISTRAL, policy="sglang", overlap_schedule=True, ignore_eos=False),
}


@pytest.mark.parametrize("name", list(LIGHT))
def test_light_load_runs_with_the_profiled_timer_match_the_reference(monkeypatch, name):
    def sim():
        return simulate_scenario(LIGHT[name], 0.5)[0]

    assert_same(_run(monkeypatch, "reference", sim), _run(monkeypatch, CORES[-1], sim))


@pytest.mark.parametrize("worker", [False, True])
@pytest.mark.parametrize("qps", [0.5, 8.0])
def test_speculative_runs_with_the_profiled_timer_match_the_reference(monkeypatch, tmp_path, worker, qps):
    """EAGLE-3 with K = 3 on the profiled timer (its decode-attention table; with vLLM's worker also
    CUDA-graph padding and launch costs): verifications priced as one decode read beside their drafts, in the
    core's scheduler loop and its verification stretches as in the reference, at light load (mostly stretches)
    and heavier (batches that change every step)."""
    acceptance = tmp_path / "acceptance.json"
    acceptance.write_text("[0.8, 0.6, 0.4]")
    s = Scenario(
        **MISTRAL,
        policy="vllm-v1",
        vllm_worker=worker,
        speculative="eagle3",
        num_speculative_tokens=3,
        acceptance=str(acceptance),
    )

    def sim():
        return simulate_scenario(s, qps)[0]

    ref = _run(monkeypatch, "reference", sim)
    assert ref.reqs.spec_steps.sum() > 0  # verifications ran
    assert_same(ref, _run(monkeypatch, CORES[-1], sim))
