"""Disaggregated serving (simserve/sim/disagg.py): conservation, timing by hand, the link, routing, bad
input."""

from __future__ import annotations

import numpy as np
import pytest

from simserve.cli import main
from simserve.deployment import Deployment
from simserve.errors import SimserveError
from simserve.sim.config import SimConfig
from simserve.sim.disagg import Pool, simulate_disagg, transfer_summary
from simserve.sim.kvlink import KVLink, kv_bytes_per_prompt_token, resolve_link
from simserve.sim.metrics import summarize
from simserve.sim.request import DONE
from simserve.sim.testing import ConstantTimer, LinearTimer

KV = 1000.0  # bytes of KV per prompt token in the hand-made runs


def _workload(n=200, seed=0, rate=5.0):
    rng = np.random.default_rng(seed)
    prompt = rng.integers(20, 1500, n)
    output = rng.integers(1, 200, n)
    return prompt, output, np.cumsum(rng.exponential(1 / rate, n))


def _run(
    link_gbps=10.0,
    n=200,
    pp=1,
    prefill_replicas=2,
    decode_replicas=2,
    router="kv",
    blocks=(600, 900),
    policy="sarathi",
    seed=0,
    rate=5.0,
    stop=False,
):
    prompt, output, arrived = _workload(n, seed, rate)
    timer = LinearTimer(0.004, 1e-5, 1e-8, num_stages=pp)
    link = KVLink("test", link_gbps, 20e-6, 1, "test")
    cfg = SimConfig(policy=policy, stop_when_overloaded=stop)
    return (
        simulate_disagg(
            prompt,
            output,
            arrived,
            cfg,
            Pool(prefill_replicas, timer, blocks[0]),
            Pool(decode_replicas, timer, blocks[1], router),
            link,
            KV,
        ),
        prompt,
        output,
    )


@pytest.mark.parametrize("pp", [1, 2])
@pytest.mark.parametrize("router", ["rr", "lor", "kv"])
def test_every_request_is_prefilled_once_moved_once_and_decoded_to_the_end(pp, router):
    run, prompt, output = _run(pp=pp, router=router)
    r, t = run.raw.reqs, run.transfers
    assert (r.status == DONE).all()
    order = run.raw.request_ids
    # every output token, the first one included, from the decode side
    assert (r.generated == output[order]).all()
    assert np.isfinite(t.end).all() and (t.nbytes == prompt[order] * KV).all()  # each prompt's KV moved once
    ints, _ = next(run.raw.log.chunks(len(run.raw.log)))
    stage0 = ints[:, 1] == 0
    pre, dec = ints[:, 0] < run.num_prefill, ints[:, 0] >= run.num_prefill
    # prefill tokens computed once, all on the prefill side
    assert ints[stage0 & pre, 2].sum() == prompt.sum()
    assert ints[stage0 & pre, 3].sum() == 0  # prefill-only iterations
    # the decode side recomputes each prompt's last token, then decodes output - 1 tokens
    assert ints[stage0 & dec, 2].sum() == len(prompt) and ints[stage0 & dec, 3].sum() == (output - 1).sum()


@pytest.mark.parametrize("policy", ["chunked", "hybrid", "slo-aware", "pressure", "equal-cost", "vllm-v1"])
def test_every_chunking_policy_serves_both_pools(policy):
    run, _, output = _run(policy=policy, n=80)
    assert (run.raw.reqs.status == DONE).all() and run.raw.reqs.generated.sum() == output.sum()


@pytest.mark.parametrize("policy", ["vllm", "orca", "fcfs"])
def test_policies_without_chunks_are_refused(policy):
    with pytest.raises(SimserveError, match="chunked-prefill policy"):
        _run(policy=policy, n=5)


def test_each_step_of_a_request_follows_the_last():
    run, _, _ = _run(link_gbps=0.5)
    r, t = run.raw.reqs, run.transfers
    steps = [r.arrived, r.scheduled, t.prefilled, t.queued, t.start, t.end, r.first_token, r.completed]
    for earlier, later in zip(steps, steps[1:], strict=False):
        assert (later >= earlier).all()
    assert (r.first_token - r.arrived >= t.prefilled - r.scheduled).all()  # TTFT ≥ the prefill itself
    assert (np.diff(t.start[np.argsort(t.queued, kind="stable")]) >= 0).all()  # FIFO on the link


def test_one_request_by_hand():
    """A 600-token prompt under a 256 budget: prefill 256/256/88 at 10 ms each; its 600 kB cross a 1 GB/s link
    in 0.6 ms + 50 µs; the decode side's first step (the last prompt token) samples token 1; 3 decodes
    follow."""
    link = KVLink("test", 1.0, 50e-6, 1, "test")
    timer = ConstantTimer(0.01)
    cfg = SimConfig(policy="sarathi", budget=256)
    run = simulate_disagg([600], [4], [0.0], cfg, Pool(1, timer, 100), Pool(1, timer, 100), link, KV)
    r, t = run.raw.reqs, run.transfers
    assert t.prefilled[0] == pytest.approx(0.03)
    # idle link: latency + bytes / bandwidth
    assert t.end[0] - t.start[0] == pytest.approx(600 * KV / 1e9 + 50e-6)
    assert t.queued[0] == t.start[0] == t.prefilled[0]
    assert r.first_token[0] == pytest.approx(t.end[0] + 0.01)
    assert r.completed[0] == pytest.approx(r.first_token[0] + 0.03)
    assert summarize(run.raw).tbt_p99_s == pytest.approx(0.01, rel=1e-3)


def test_a_slower_link_never_lowers_ttft():
    ttft = []
    for gbps in (100.0, 10.0, 1.0, 0.1):
        run, _, _ = _run(link_gbps=gbps)
        r = run.raw.reqs
        ttft.append(float(np.mean(r.first_token - r.arrived)))
    assert ttft == sorted(ttft) and ttft[-1] > ttft[0]


def test_the_prefill_side_holds_its_kv_until_the_transfer_is_done():
    """A prefill pool of 2 max-length requests' blocks behind a crawling link: prefills wait for transfers."""
    slow, _, _ = _run(link_gbps=0.002, blocks=(200, 5000), prefill_replicas=1, decode_replicas=1, n=60)
    fast, _, _ = _run(link_gbps=50.0, blocks=(200, 5000), prefill_replicas=1, decode_replicas=1, n=60)
    assert np.nanmedian(slow.raw.reqs.scheduled - slow.raw.reqs.arrived) > np.nanmedian(
        fast.raw.reqs.scheduled - fast.raw.reqs.arrived
    )


def test_a_backlog_in_front_of_the_decode_pool_is_an_overload():
    """A decode pool of 150 blocks (2400 tokens: one or two requests at a time) behind a roomy prefill pool:
    prefills keep up, so only the decode admission queue grows, and the watchdog must see it."""
    run, _, _ = _run(n=400, rate=20.0, blocks=(20000, 150), prefill_replicas=2, decode_replicas=1, stop=True)
    r = run.raw.reqs
    assert run.raw.overloaded
    assert np.nanmedian(r.scheduled - r.arrived) < 2.0  # the prefill side never queued that long


def test_kv_router_sends_to_the_decode_replica_with_the_most_free_blocks():
    run, _, _ = _run(router="kv", decode_replicas=2, blocks=(600, 400))
    counts = np.bincount(run.raw.reqs.replica - run.num_prefill)
    assert len(counts) == 2 and counts.min() > 0


def test_summary_has_pools_and_transfers():
    run, _, _ = _run()
    d = transfer_summary(run)
    assert 0 < d["prefill_utilization"] <= 1 and 0 < d["decode_utilization"] <= 1
    assert d["transfers"] == 200 and d["transfer_s"]["p50"] > 0
    assert set(d["link_queue_s"]) == {"p50", "p90", "p99"}


def test_resolve_link_inside_a_node_and_across():
    p = Deployment.create("llama-2-70b", "h200", tp=2)
    d = Deployment.create("llama-2-70b", "h200", tp=4)
    link = resolve_link(p, 2, d, 1, None)
    assert link.name == "nvlink" and link.lanes == 2 and link.gbps == 2 * p.node.nvlink_bus_gbps
    kv = kv_bytes_per_prompt_token(p)
    assert kv == 2 * 2 * 8 * 128 * 80  # K and V, bf16, 8 KV heads of 128, 80 layers
    assert link.seconds(1700 * kv) == pytest.approx(link.latency_s + 1700 * kv / (link.gbps * 1e9))
    with pytest.raises(SimserveError, match="needs 12 GPUs.*--kv-link"):
        resolve_link(p, 4, d, 1, None)
    ib = resolve_link(p, 4, d, 1, "infiniband-400g")
    assert ib.gbps == 46.0 and ib.lanes == 1
    h100 = Deployment.create("llama-2-70b", "h100", tp=4)
    with pytest.raises(SimserveError, match="different nodes"):
        resolve_link(p, 1, h100, 1, None)


def test_same_seed_same_run():
    from dataclasses import replace

    from simserve.sim.disagg_scenario import DisaggScenario, PoolSpec, run_disagg
    from simserve.sim.scenario import Scenario

    base = Scenario(model="llama-2-70b", gpu="h200", num_requests=60, seed=3, stop_when_overloaded=False)
    ds = DisaggScenario.create(
        base, PoolSpec.parse("2xTP2", "--prefill"), PoolSpec.parse("1xTP4", "--decode")
    )
    timers = (LinearTimer(0.003, 2e-5, 1e-8), LinearTimer(0.004, 2e-5, 2e-8))
    a, b = (run_disagg(ds, 2.0, timers) for _ in range(2))
    for name in ("first_token", "completed", "scheduled"):
        assert np.array_equal(getattr(a.raw.reqs, name), getattr(b.raw.reqs, name), equal_nan=True)
    c = run_disagg(DisaggScenario.create(replace(base, seed=4), PoolSpec(2, 2), PoolSpec(1, 4)), 2.0, timers)
    assert not np.array_equal(a.raw.reqs.first_token, c.raw.reqs.first_token, equal_nan=True)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--prefill", "2xTP1", "--decode", "1xTP4"], "prefill pool: .* does not fit"),
        (["--prefill", "4xTP2", "--decode", "1xTP4"], "needs 12 GPUs"),
        (["--prefill", "1xTP2@h100", "--decode", "1xTP4"], "different nodes"),
        (["--prefill", "2xTP2"], "needs both pools"),
        (["--prefill", "two", "--decode", "1xTP4"], "is not a pool"),
        (["--prefill", "2xTP2", "--decode", "1xTP4", "--policy", "vllm"], "chunked-prefill policy"),
        (
            ["--prefill", "2xTP2", "--decode", "1xTP4", "--tp", "2"],
            "--tp 2 describes an aggregated deployment",
        ),
    ],
)
def test_bad_layouts_are_one_line_and_exit_2(capsys, tmp_path, args, message):
    import re

    out = tmp_path / "run"
    with pytest.raises(SystemExit) as exc:
        main(["run", "--model", "llama-2-70b", "--gpu", "h200", *args, "--out", str(out)])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert exc.value.code == 2 and len(lines) == 1 and re.search(message, lines[0]), lines
    assert not out.exists()


def test_the_compiled_core_runs_it_and_says_nothing(capsys, monkeypatch):
    """Disaggregation is in the compiled core (core.DisaggCore): no line about the reference, and the run
    does not create a SimPy environment."""
    from simserve.sim import core_run

    if not core_run.compiled_available():
        pytest.skip("no compiled core in this install")
    monkeypatch.delenv(core_run.ENV, raising=False)
    import simpy

    def no_simpy(*args, **kwargs):
        raise AssertionError("the SimPy reference ran")

    monkeypatch.setattr(simpy, "Environment", no_simpy)
    run, _, output = _run(n=20)
    assert run.raw.reqs.generated.sum() == output.sum()
    assert capsys.readouterr().err == ""


def test_moe_pools_run_with_ep_and_attention_dp_is_refused_in_one_line():
    """An MoE model's pools take --ep (experts sharded inside each pool's TP group); attention-DP ranks, which
    step in lockstep in the aggregated model, have no disaggregated model yet: refused before any profile is
    built."""
    from simserve.sim.disagg_scenario import DisaggScenario, PoolSpec
    from simserve.sim.scenario import Scenario

    base = Scenario(model="mixtral-8x7b", gpu="h200", ep=2)
    ds = DisaggScenario.create(base, PoolSpec(2, 2), PoolSpec(1, 4))
    assert ds.check()[2].name == "nvlink"
    dp = DisaggScenario.create(
        Scenario(model="mixtral-8x7b", gpu="h200", ep=4, dp_attention=2), PoolSpec(1, 2), PoolSpec(1, 2)
    )
    with pytest.raises(SimserveError, match="does not model attention data parallelism") as exc:
        dp.check()
    assert "\n" not in str(exc.value)


def test_a_pool_may_name_its_own_expert_parallelism():
    """`2xTP2EP2` as a plan labels it: a pool's EP overrides the run's --ep (here the TP1 decode pool keeps EP
    1)."""
    from simserve.sim.disagg_scenario import DisaggScenario, PoolSpec
    from simserve.sim.scenario import Scenario

    pre, dec = PoolSpec.parse("2xTP2EP2", "--prefill"), PoolSpec.parse("4xTP1", "--decode")
    assert (pre.tp, pre.ep, dec.ep) == (2, 2, None) and pre.label() == "2xTP2EP2"
    ds = DisaggScenario.create(Scenario(model="mixtral-8x7b", gpu="h200"), pre, dec)
    assert (ds.prefill.ep, ds.decode.ep) == (2, 1) and ds.label() == "2xTP2EP2P+4xTP1D"
    assert ds.check()[2].name == "nvlink"
