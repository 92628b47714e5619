"""Attention data parallelism for MoE models: DP ranks with their own batches, experts shared over DP x TP
GPUs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from simserve.cli import main
from simserve.deployment import Deployment
from simserve.errors import SimserveError
from simserve.memory import weights_bytes_per_gpu

MIXTRAL = "mixtral-8x7b"


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = exc.code or 0
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def profile_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("profiles")
    main(
        [
            "profile",
            "--gpu",
            "h100",
            "--model",
            MIXTRAL,
            "--tp",
            "1,2",
            "--dtype",
            "fp8",
            "--quick",
            "--max-model-len",
            "4096",
            "--max-tokens",
            "4096",
            "--out",
            str(root),
        ]
    )
    return root


def test_ranks_share_the_experts_and_keep_their_own_attention():
    tp2 = Deployment.create("deepseek-v3", "h200", 2, ep=2, dtype="fp8")
    dp4 = Deployment.create("deepseek-v3", "h200", 2, ep=8, dtype="fp8", dp=4)
    assert (dp4.local_experts, dp4.expert_tp) == (32, 1)  # 256 experts over 8 GPUs, whole
    m = dp4.model
    # the same attention and dense layers per GPU; the routed experts on 8 GPUs instead of 2
    saved = m.moe_layers * m.expert_params * (1 / 2 - 1 / 8)  # fp8: one byte per weight
    assert weights_bytes_per_gpu(tp2) - weights_bytes_per_gpu(dp4) == pytest.approx(saved, rel=1e-9)


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"model": "deepseek-v3", "tp": 2, "ep": 2, "dp": 4}, "use --ep 8"),
        ({"model": "llama-3.1-8b", "tp": 2, "ep": 1, "dp": 2}, "Llama-3.1-8B is dense: use --replicas 2"),
        (
            {"model": "deepseek-v3", "tp": 8, "ep": 16, "dp": 2},
            "more than the 8 GPUs of one node; use --tp 4 --ep 8",
        ),
    ],
)
def test_bad_layouts_say_what_to_use(kwargs, words):
    model = kwargs.pop("model")
    with pytest.raises(SimserveError, match=words):
        Deployment.create(model, "h200", dtype="fp8", **kwargs)


def test_a_rank_times_its_experts_on_every_ranks_tokens_and_pays_the_exchange(profile_root):
    from simserve.ops import exchange_bytes, timed_linear_ops
    from simserve.predictor.coverage import find_collective, node_link
    from simserve.predictor.fit import ModelKey, fit
    from simserve.predictor.tables import CollectiveCurve, token_tables

    dep = Deployment.create(MIXTRAL, "h100", 1, ep=2, dtype="fp8", dp=2, max_model_len=4096)
    pred = fit(profile_root / "h100-sxm" / "mixtral-8x7b-fp8", use_cache=False)
    tok = token_tables(pred, dep)
    t = 300
    # linear: every op at the rank's 300 tokens, the experts (moe@ep2 at TP 1) at both ranks' 600
    want = 0.0
    for op, share in timed_linear_ops(dep):
        x = 2 * t if op == "moe@ep2" else t
        want += share * max(
            float(pred.models[ModelKey("linear", op, 1)].model.predict(np.array([x]))[0]), 0.0
        )
    assert tok.linear[t] == pytest.approx(dep.layers_per_stage * 1e-3 * want, rel=1e-9)
    # TP 1 has no all-reduce of its own: the component is the dispatch and the combine of 2·300 tokens' hidden
    # states over the 2 ranks, each timed as an all-reduce of half the gathered bytes, on all 32 (MoE) layers
    curve = CollectiveCurve.build(pred.models[find_collective(pred.models, "all_reduce", node_link(dep), 2)])
    one = float(curve(np.array([2 * t * 4096 * 2 / 2]))[0])
    assert exchange_bytes(dep, t) == 2 * t * 4096 * 2 / 2
    assert tok.all_reduce[t] == pytest.approx(32 * 2 * one)
    assert tok.all_reduce[t] > 0


def test_dp_run_simulates_one_replica_per_rank(capsys, tmp_path, profile_root):
    code, out, err = _cli(
        capsys,
        "run",
        "--model",
        MIXTRAL,
        "--gpu",
        "h100",
        "--tp",
        "1",
        "--ep",
        "2",
        "--dp-attention",
        "2",
        "--dtype",
        "fp8",
        "--max-model-len",
        "4096",
        "--profiles",
        str(profile_root),
        "--requests",
        "40",
        "--qps",
        "4",
        "--iterations",
        "none",
        "--out",
        str(tmp_path / "dp"),
    )
    assert code == 0, err
    summary = json.loads((tmp_path / "dp" / "summary.json").read_text())
    assert summary["scenario"]["dp_attention"] == 2 and summary["summary"]["completed"] == 40
    import pandas as pd

    req = pd.read_csv(tmp_path / "dp" / "requests.csv")
    assert sorted(req["replica"].unique()) == [0, 1]  # both ranks served requests


def test_a_profile_without_the_ranks_all_reduce_names_the_command(capsys, tmp_path):
    root = tmp_path / "p"
    main(
        [
            "profile",
            "--gpu",
            "h100",
            "--model",
            MIXTRAL,
            "--tp",
            "2",
            "--dtype",
            "fp8",
            "--quick",
            "--max-model-len",
            "4096",
            "--max-tokens",
            "4096",
            "--out",
            str(root),
        ]
    )
    capsys.readouterr()
    code, _, err = _cli(
        capsys,
        "run",
        "--model",
        MIXTRAL,
        "--gpu",
        "h100",
        "--tp",
        "2",
        "--ep",
        "8",
        "--dp-attention",
        "4",
        "--dtype",
        "fp8",
        "--max-model-len",
        "4096",
        "--profiles",
        str(root),
        "--requests",
        "5",
        "--out",
        str(tmp_path / "o"),
    )
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "all_reduce rows for 4 workers" in err and "--tp 2,4" in err


def test_deepep_needs_attention_dp_and_a_known_backend():
    with pytest.raises(SimserveError, match="exchanges tokens between attention-DP ranks"):
        Deployment.create("deepseek-v3", "h200", 8, dtype="fp8", all2all="deepep_low_latency")
    with pytest.raises(SimserveError, match="use one of allgather_reducescatter, deepep_low_latency"):
        Deployment.create("deepseek-v3", "h200", 1, ep=8, dp=8, dtype="fp8", all2all="pplx")


def test_deepep_on_a_roofline_profile_says_it_is_measured_only(capsys, tmp_path, profile_root):
    code, _, err = _cli(
        capsys,
        "run",
        "--model",
        MIXTRAL,
        "--gpu",
        "h100",
        "--tp",
        "1",
        "--ep",
        "2",
        "--dp-attention",
        "2",
        "--all2all-backend",
        "deepep_low_latency",
        "--dtype",
        "fp8",
        "--max-model-len",
        "4096",
        "--profiles",
        str(profile_root),
        "--requests",
        "5",
        "--out",
        str(tmp_path / "o"),
    )
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "no a2a_deepep_low_latency rows for EP 2" in err and "--backend measured" in err


@pytest.mark.skipif(
    not __import__("simserve.profiling.measured", fromlist=["installed"]).installed(),
    reason="needs aiconfigurator-core (pip install -e '.[measured]')",
)
def test_deepep_rows_are_the_measured_dispatch_plus_combine_and_the_timer_charges_them_once(tmp_path):
    import pandas as pd

    from simserve.ops import a2a_bytes
    from simserve.predictor.coverage import find_collective, node_link
    from simserve.predictor.fit import fit
    from simserve.predictor.tables import CollectiveCurve, token_tables
    from simserve.profiling import measured

    main(
        [
            "profile",
            "--backend",
            "measured",
            "--gpu",
            "h200",
            "--model",
            "deepseek-v3",
            "--tp",
            "1",
            "--dtype",
            "fp8",
            "--quick",
            "--max-model-len",
            "2048",
            "--max-tokens",
            "2048",
            "--out",
            str(tmp_path),
        ]
    )
    prof = tmp_path / "h200" / "deepseek-v3-fp8"
    col = pd.read_csv(prof / "collectives.csv")
    ll = col[col["op"] == "a2a_deepep_low_latency"].sort_values("size_bytes")
    raw = pd.read_parquet(
        measured.open_database("H200").folder / "comm" / "vllm" / "0.24.0" / "moe_a2a_perf.parquet"
    )
    raw = raw[
        (raw["comm_backend"] == "deepep_ll")
        & (raw["hidden_size"] == 7168)
        & (raw["topk"] == 8)
        & (raw["num_experts"] == 256)
        & (raw["num_tokens"] == 64)
    ]
    row = ll[ll["size_bytes"] == 64 * 7168 * 2]
    assert (ll["num_workers"] == 8).all() and (ll["source"] == "measured").all()
    # dispatch + combine, µs → ms (6 digits in the CSV)
    assert row["time_ms"].iloc[0] == pytest.approx(raw["latency"].sum() / 1e3, rel=1e-5)
    dep = Deployment.create(
        "deepseek-v3", "h200", 1, ep=8, dp=8, dtype="fp8", all2all="deepep_low_latency", max_model_len=2048
    )
    pred = fit(prof, use_cache=False)
    tok = token_tables(pred, dep)
    curve = CollectiveCurve.build(
        pred.models[find_collective(pred.models, "a2a_deepep_low_latency", node_link(dep), 8)]
    )
    t = 64
    # 58 MoE layers
    assert tok.all_reduce[t] == pytest.approx(58 * float(curve(np.array([a2a_bytes(dep, t)]))[0]))


def test_the_vllm_command_of_a_dp_run_names_its_data_parallel_size():
    from simserve.sim.scenario import Scenario
    from simserve.tune.engine import check_engine_scenario, vllm_command

    base = Scenario(
        model="deepseek-v3",
        gpu="h200",
        tp=2,
        ep=8,
        dp_attention=4,
        dtype="fp8",
        all2all_backend="deepep_low_latency",
    )
    check_engine_scenario(base)  # EP = DP x TP is what vLLM's flags give: no error
    cmd = vllm_command(base, {"max-num-batched-tokens": 8192, "max-num-seqs": 1024})
    for flag in (
        "--tensor-parallel-size 2",
        "--data-parallel-size 4",
        "--enable-expert-parallel",
        "--all2all-backend deepep_low_latency",
        "--quantization fp8",
    ):
        assert flag in cmd
