"""`simserve plan` searches attention-DP layouts of MoE models (DP × TP = EP in one box) beside TP/EP ones."""

from __future__ import annotations

import pandas as pd

from simserve.catalog import GPUSpec
from simserve.catalog.models import resolve_model
from simserve.plan.candidates import data_parallelisms, enumerate_candidates
from simserve.plan.command import replica_commands
from simserve.plan.report import deployment_label
from simserve.plan.search import PlanSpec
from simserve.resolve import ProfileChoice


def _layouts(model: str, gpu: str):
    cands, rejected = enumerate_candidates(
        resolve_model(model), [GPUSpec.from_name(gpu)], 8, (512, 2048), 128, 8192, 0.85, "fp8", "fp8"
    )
    return cands, rejected


def test_latent_attention_gets_dp_layouts_over_the_whole_box():
    cands, _ = _layouts("deepseek-v3", "h200")
    dp = {(c.deployment.dp, c.deployment.tp): c for c in cands if c.deployment.dp > 1}
    # DP 8 × TP 1, DP 4 × TP 2, DP 2 × TP 4: the experts whole over all 8 GPUs (EP 8) each time
    assert sorted(dp) == [(2, 4), (4, 2), (8, 1)]
    assert all(c.deployment.ep == 8 and c.num_gpus == 8 and c.deployment.pp == 1 for c in dp.values())
    # the TP/EP layouts are still there
    assert {(c.deployment.tp, c.deployment.ep) for c in cands if c.deployment.dp == 1} == {(8, 1), (8, 8)}


def test_dp_is_not_searched_where_tp_already_shards_the_kv_heads():
    # Mixtral has 8 KV heads: TP up to 8 shards its KV cache without copies, so DP only copies attention
    # weights
    assert data_parallelisms(resolve_model("mixtral-8x7b"), GPUSpec.from_name("h100"), 1, 1, 8)[0] == []
    cands, rejected = _layouts("mixtral-8x7b", "h100")
    assert all(c.deployment.dp == 1 for c in cands)
    assert any("DP 2/4/8 x TP1 not searched" in r and "8 KV heads" in r for r in rejected)
    # Qwen3-235B-A22B has 4: TP 8 copies each KV head twice, so DP × TP over 8 GPUs is tried, DP over 2-4 not
    kept, why = data_parallelisms(resolve_model("qwen3-235b-a22b"), GPUSpec.from_name("h200"), 1, 1, 8)
    assert kept == [8] and "DP 2/4 x TP1 not searched" in why
    # dense models and pipelines have none
    assert data_parallelisms(resolve_model("llama-3.1-8b"), GPUSpec.from_name("h100"), 1, 1, 8) == ([], "")
    assert data_parallelisms(resolve_model("deepseek-v3"), GPUSpec.from_name("h200"), 4, 2, 8) == ([], "")


def test_a_dp_row_simulates_its_ranks_and_prints_vllms_dp_command():
    cands, _ = _layouts("deepseek-v3", "h200")
    cand = next(c for c in cands if c.deployment.dp == 4)
    spec = PlanSpec("deepseek-v3", ("h200",), dtype="fp8", kv_dtype="fp8")
    s = spec.scenario(cand, 2048, ProfileChoice(None, "test"))
    assert (s.tp, s.ep, s.dp_attention) == (2, 8, 4)
    row = pd.Series({"replicas": 1, "gpu": "H200", "tp": 2, "pp": 1, "ep": 8})
    assert deployment_label(row) == "1×(H200 DP4×TP2 EP8 PP1)"
    (line,) = replica_commands("deepseek-v3", 2, 1, 1, 2048, 128, 8192, 0.85, 8, "fp8", "fp8", 8)
    assert line.startswith("# replica 1 of 1, node 1\nCUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 vllm serve")
    assert "--tensor-parallel-size 2 " in line and "--data-parallel-size 4 --enable-expert-parallel" in line
    # a TP-only EP layout keeps its command: no DP flag
    (tp8,) = replica_commands("deepseek-v3", 8, 1, 1, 2048, 128, 8192, 0.85, 8, "fp8", "fp8", 8)
    assert "--data-parallel-size" not in tp8 and "--enable-expert-parallel" in tp8
