"""The planner's disaggregated layouts (plan/disagg.py): the screen by hand, a small plan end to end,
commands."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from simserve.cli import main
from simserve.plan.command import KV_TRANSFER_CONFIG, disagg_commands
from simserve.plan.disagg import pool_rates
from simserve.plan.report import commands, deployment_label, recommendation
from simserve.plan.search import PlanSpec, run_plan
from simserve.sim.testing import ConstantTimer, LinearTimer
from simserve.tune.capacity import SLO


def test_pool_rates_by_hand():
    """600-token prompts under a 256 budget take 3 iterations of 10 ms: 33.3 prefills/s. 1000 blocks of 16
    hold 16000 / (600 + 200) = 20 requests decoding at 10 ms a step, 200 steps each: 10 requests/s."""
    mu_p, mu_d = pool_rates(ConstantTimer(0.01), 1000, 16, 600.0, 200.0, 256, 128, None)
    assert mu_p == pytest.approx(1 / 0.03) and mu_d == pytest.approx(20 / (200 * 0.01))
    # a TBT SLO below one step at that batch lowers the batch until a step meets it
    slow = LinearTimer(0.001, 0.0, 1e-6)  # 1 ms + 1 µs per KV token read: 20 decodes of 700 tokens take 15 ms
    _, free = pool_rates(slow, 1000, 16, 600.0, 200.0, 256, 128, None)
    _, capped = pool_rates(slow, 1000, 16, 600.0, 200.0, 256, 128, tbt_s=0.005)
    assert free == pytest.approx(20 / (200 * 0.015))
    assert capped == pytest.approx(4 / (200 * (0.001 + 4 * 700e-6)))  # 20 → 15 → 11 → 8 → 6 → 4 (3.8 ms)


SPEC = PlanSpec(
    "mistral-7b",
    ("h100",),
    max_gpus=2,
    slo=SLO(0.1),
    budgets=(512,),
    num_requests=32,
    layouts=("agg", "disagg"),
    tie_seeds=0,
)


def test_a_small_plan_searches_agg_and_disagg_side_by_side(tmp_path, monkeypatch):
    from dataclasses import replace

    monkeypatch.setenv("SIMSERVE_CACHE", str(tmp_path / "cache"))
    first = run_plan(SPEC, executor="serial")
    rows = first.rows
    assert set(rows["layout"]) == {"agg", "1xTP1P+1xTP1D"}  # 2 GPUs: one prefill and one decode replica
    d = rows[rows["layout"] != "agg"].iloc[0]
    assert d["gpus"] == 2 and d["capacity_qps"] > 0 and d["usd_per_million_output_tokens"] > 0
    assert deployment_label(d) == "1×(H100-SXM 1xTP1P+1xTP1D)"
    lines = commands(first, d)
    assert sum(KV_TRANSFER_CONFIG in line for line in lines) == 2 and "toy_proxy_server.py" in lines[-1]
    assert recommendation(first) is not None
    # the same layout alone, its seed spread measured too: the same row (determinism), one more seed searched
    second = run_plan(replace(SPEC, layouts=("disagg",), tie_seeds=1), executor="serial")
    cols = [c for c in second.rows.columns if c != "pareto"]
    pd.testing.assert_frame_equal(
        rows[rows["layout"] != "agg"][cols].reset_index(drop=True), second.rows[cols]
    )
    assert sorted(second.searches["seed"]) == [0, 1]


def test_disagg_commands_give_each_instance_its_own_gpus_and_ports():
    row = pd.Series({"layout": "2xTP2P+1xTP4D", "gpu": "H200", "node": "hgx-h200", "budget": 2048})
    spec = PlanSpec("llama-2-70b", ("h200",))
    lines = disagg_commands(spec, row)
    assert len(lines) == 4  # 2 prefill, 1 decode, the proxy
    devices = [re.search(r"CUDA_VISIBLE_DEVICES=([\d,]+)", line).group(1) for line in lines[:3]]
    assert devices == ["0,1", "2,3", "4,5,6,7"]
    nixl = [int(re.search(r"VLLM_NIXL_SIDE_CHANNEL_PORT=(\d+)", line).group(1)) for line in lines[:3]]
    # base + the first GPU: each TP rank adds its rank, so ranges are disjoint
    assert nixl == [5600, 5602, 5604]
    assert "--tensor-parallel-size 4" in lines[2] and "--port 8200" in lines[2]
    assert "--prefiller-ports 8100 8101 --decoder-hosts localhost --decoder-ports 8200" in lines[3]


def test_disaggregated_probes_key_by_both_pools():
    from dataclasses import replace

    from simserve.sim.disagg_scenario import DisaggScenario, PoolSpec
    from simserve.sim.scenario import Scenario
    from simserve.tune.probe import probe_key

    base = Scenario(model="llama-2-70b", gpu="h200")
    a = DisaggScenario.create(base, PoolSpec(2, 2), PoolSpec(1, 4))
    b = DisaggScenario.create(base, PoolSpec(2, 2), PoolSpec(2, 2))
    assert probe_key(a, 1.0, (0.99,)) == probe_key(a, 1.0, (0.99,)) != probe_key(b, 1.0, (0.99,))
    assert probe_key(a, 1.0, (0.99,)) != probe_key(replace(a, decode_router="rr"), 1.0, (0.99,))


def test_unknown_layout_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["plan", "--layouts", "agg,pd", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and "\n" not in err and "--layouts takes agg and/or disagg" in err


def test_disagg_layouts_off_the_front_are_pruned_as_aggregated_ones_are(tmp_path, monkeypatch):
    """The screen's first layout is searched whole; every other one starts with one probe at the rate the
    front demands of it (plan/prune.py) and stops there when that fails. Each pruned layout really is slower
    than that rate (its unpruned search says so), and the disaggregated rows on the front are the unpruned
    plan's."""
    from dataclasses import replace

    monkeypatch.setenv("SIMSERVE_CACHE", str(tmp_path / "cache"))
    spec = replace(SPEC, max_gpus=4, disagg_layouts=4, num_requests=256)  # 32 requests pass at any rate
    pruned = run_plan(spec, executor="serial")
    full = run_plan(spec, executor="serial", prune=False)

    def disagg(searches):
        s = searches[(searches["layout"] != "agg") & (searches["seed"] == 0)]
        return {r["layout"]: r for _, r in s.iterrows()}

    p, f = disagg(pruned.searches), disagg(full.searches)
    assert list(p) == list(f) and len(p) == 4
    first = next(iter(p))
    assert p[first]["status"] == "searched" and p[first]["capacity_qps"] == f[first]["capacity_qps"]
    cut = [lay for lay, r in p.items() if r["status"] == "pruned"]
    assert cut, "no layout was pruned: the case does not test pruning"
    for lay in cut:
        assert p[lay]["probes"] == 1 and f[lay]["capacity_qps"] < p[lay]["start_qps"]
    for lay, r in p.items():
        if r["status"] == "searched":
            assert r["capacity_qps"] == pytest.approx(f[lay]["capacity_qps"], rel=spec.tolerance)

    def front(plan):
        rows = plan.rows
        return sorted(rows[(rows["layout"] != "agg") & rows["pareto"]]["layout"])

    assert front(pruned) == front(full)


def test_pools_take_pp_only_where_the_model_needs_it_and_moe_pools_take_ep():
    """PP > 1 in a pool only below the fewest GPUs a PP-1 pool fits in (Llama-3.1-405B on B200 fits TP8 alone,
    so 6- and 7-GPU pools need PP; LLaMA2-70B on H200 fits TP2, so none of its pools has PP); an MoE model's
    pools come with experts TP-sharded and whole over the TP group (EP = TP)."""
    from simserve.catalog import GPU
    from simserve.catalog.models import resolve_model
    from simserve.plan.candidates import best_box
    from simserve.plan.disagg import pool_deployments, pool_label

    def pools(model, gpu):
        g = GPU.get(gpu)
        node = best_box(g, 8, 1)
        return pool_deployments(resolve_model(model), g, node, 8, PlanSpec(model, (gpu,)))

    assert sorted(pools("llama-3.1-405b", "b200")) == [(1, 6, 1), (1, 7, 1), (2, 3, 1)]
    dense = pools("llama-2-70b", "h200")
    assert dense and all(pp == 1 for _, pp, _ in dense)
    moe = pools("mixtral-8x7b", "h200")
    assert {(2, 1, 1), (2, 1, 2), (4, 1, 4)} <= set(moe)
    assert (
        pool_label(moe[(2, 1, 2)][0]) == "TP2EP2"
        and pool_label(pools("llama-3.1-405b", "b200")[(2, 3, 1)][0]) == "TP2PP3"
    )


def test_disagg_commands_for_pp_and_ep_pools():
    row = pd.Series({"layout": "1xTP1PP3P+2xTP2EP2D", "gpu": "H200", "node": "hgx-h200", "budget": 2048})
    lines = disagg_commands(PlanSpec("mixtral-8x7b", ("h200",)), row)
    assert len(lines) == 4
    assert "CUDA_VISIBLE_DEVICES=0,1,2 " in lines[0] and "--pipeline-parallel-size 3" in lines[0]
    assert "CUDA_VISIBLE_DEVICES=3,4 " in lines[1] and "--enable-expert-parallel" in lines[1]
    assert "CUDA_VISIBLE_DEVICES=5,6 " in lines[2] and "VLLM_NIXL_SIDE_CHANNEL_PORT=5605" in lines[2]
