"""SGLang 0.5.23's DP attention under the `sglang` policy (`--dp-attention D`, SGLang's `--attn-dp-size D`):
requests go to ranks in turn (its DataParallelController's round robin, not vLLM's least-loaded rank), each
rank runs with --chunked-prefill-size // D, --max-running-requests // D and the conservativeness × 0.3, the
memory default sets aside SGLang's DP reserve, and the printed command carries SGLang's flags."""

from __future__ import annotations

from pathlib import Path

import pytest

from simserve.cli import main
from simserve.errors import SimserveError
from simserve.sim.cluster import run_cluster
from simserve.sim.config import SimConfig
from simserve.tune.sglang import check_sglang_scenario, sglang_command, sglang_defaults

MIXTRAL = "mixtral-8x7b"


def test_sglang_sends_requests_to_ranks_in_turn_where_vllm_picks_the_least_loaded(moe_dp_timer):
    # request 1 arrives long after request 0 finished: both ranks are empty then. vLLM's balancer picks the
    # lowest of equally loaded ranks (rank 0 again); SGLang's round robin moves on to rank 1.
    workload = ([100, 100, 100], [2, 2, 2], [0.0, 5.0, 10.0])
    _, sg = run_cluster(
        moe_dp_timer,
        *workload,
        SimConfig(policy="sglang", max_model_len=4096, num_replicas=2, dp_attention=2),
    )
    assert sg.replica.tolist() == [0, 1, 0]
    _, vl = run_cluster(
        moe_dp_timer,
        *workload,
        SimConfig(policy="vllm-v1", max_model_len=4096, num_replicas=2, dp_attention=2),
    )
    assert vl.replica.tolist() == [0, 0, 0]


def test_each_rank_gets_its_share_of_the_chunk_and_the_running_cap(moe_dp_timer):
    cfg = SimConfig(
        policy="sglang", budget=4096, max_batch=10, max_model_len=4096, num_replicas=2, dp_attention=2
    )
    # a 4000-token prompt on rank 0: chunks of 4096 // 2 = 2048, not one 4000-token step
    cluster, _ = run_cluster(moe_dp_timer, [4000], [1], [0.0], cfg)
    for rank in cluster.replicas:
        st = rank.state
        # parallel_hook: chunk // D; resolve_max_num_reqs: cap // D
        assert st.budget == 2048 and st.max_batch == 5
        # schedule_conservativeness × 0.3 under DP attention
        assert st.sglang.init == pytest.approx(0.7 * 0.3)
    assert [int(n) for n in cluster.log.column("num_prefill_tokens") if n] == [2048, 1952]
    with pytest.raises(SimserveError, match="leaves each rank less than a page"):
        SimConfig(policy="sglang", budget=1, num_replicas=2, dp_attention=2).validate()


def test_the_memory_default_and_the_command_follow_sglangs_dp_attention():
    # H100 (79.11 GiB = 81008.64 MiB), TP 1 per rank, 2 ranks: SGLang's --tp-size is 2, max_bs stays 256;
    # reserved = 512 + 1.5·8192 + 2/8·1024 + 2·256 + 8·58 + 256·2·3 = 15568 MiB → (81008.64 − 15568) /
    # 81008.64
    assert sglang_defaults(79.11, tp=1, dp=2).mem_fraction_static == 0.808
    assert sglang_defaults(79.11, tp=2).mem_fraction_static == 0.827  # the same GPUs without DP attention
    # TP 2 × 2 ranks: --tp-size 4 → max_bs 512, and its DP reserve grows by 1.5 MiB a batch (max_bs > 300)
    four = sglang_defaults(79.11, tp=2, dp=2)
    assert four.decode_graph_max_bs == 512 and four.mem_fraction_static == 0.76

    class Base:
        model, tp, pp, max_len, dtype, kv_dtype, ep, dp_attention = MIXTRAL, 2, 1, 4096, "fp8", "bf16", 4, 2
        all2all_backend = "allgather_reducescatter"

    check_sglang_scenario(Base)  # DP attention with the default exchange: modelled
    cmd = sglang_command(Base, {"chunked-prefill-size": 8192, "max-running-requests": 512})
    assert "--tp-size 4 --attn-dp-size 2" in cmd and "--ep-size 4" in cmd
    Base.all2all_backend = "deepep_low_latency"
    with pytest.raises(SimserveError, match="DeepEP"):
        check_sglang_scenario(Base)


def test_cli_refuses_deepep_with_sglang_in_one_line(capsys, tmp_path: Path):
    args = [
        "run",
        "--engine",
        "sglang",
        "--model",
        MIXTRAL,
        "--gpu",
        "h100",
        "--dtype",
        "fp8",
        "--dp-attention",
        "2",
        "--ep",
        "2",
        "--all2all-backend",
        "deepep_low_latency",
        "--requests",
        "8",
        "--out",
        str(tmp_path / "o"),
    ]
    with pytest.raises(SystemExit) as exc:
        main(args)
    err = capsys.readouterr().err
    assert (
        exc.value.code == 2
        and err.startswith("error: ")
        and "SGLang's DeepEP (--moe-a2a-backend deepep) is not modelled" in err
        and err.count("\n") == 1
    )
    assert not (tmp_path / "o").exists()
