"""`simserve sweep --engine vllm` (simserve.tune.engine): the flag grid, the recommendation, the command
line."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from simserve.cli import main
from simserve.errors import SimserveError
from simserve.sim.scenario import Scenario
from simserve.tune.capacity import SLO
from simserve.tune.engine import (
    VLLM_FLAGS,
    check_grid,
    check_vllm_flags,
    default_grid,
    parse_grid,
    recommend,
    run_engine_sweep,
    vllm_command,
    vllm_defaults,
)


def test_grid_overrides_the_defaults_and_rejects_unknown_flags():
    grid = parse_grid("vllm", "max-num-batched-tokens=1024,2048; --max-num-seqs=64")
    assert grid["max-num-batched-tokens"] == (1024, 2048) and grid["max-num-seqs"] == (64,)
    assert grid["long-prefill-token-threshold"] == (0,)  # untouched: vLLM's default
    with pytest.raises(SimserveError, match="unknown vllm flag 'max-tokens'.*known flags: max-num-batched"):
        parse_grid("vllm", "max-tokens=5")
    with pytest.raises(SimserveError, match="non-negative integers"):
        parse_grid("vllm", "max-num-seqs=lots")
    with pytest.raises(SimserveError, match="unknown --engine 'trt'"):
        parse_grid("trt", None)


@pytest.mark.parametrize("flag", ["max-num-partial-prefills", "--max-long-partial-prefills"])
def test_flags_the_pinned_release_removed_are_refused_as_its_parser_does(flag):
    assert flag.removeprefix("--") not in VLLM_FLAGS
    with pytest.raises(SimserveError, match=r"^vllm serve: error: unrecognized arguments: --max-.*PR #49244"):
        parse_grid("vllm", f"{flag}=2")


def test_per_gpu_defaults_are_vllm_0_33s_server_defaults():
    # EngineArgs.get_batch_defaults, UsageContext.OPENAI_API_SERVER (vllm/engine/arg_utils.py)
    assert vllm_defaults(79.15, "A100-80GB") == (2048, 256)
    assert vllm_defaults(79.11, "H100-SXM") == (8192, 1024)
    assert vllm_defaults(139.8, "H200") == (8192, 1024)
    assert vllm_defaults(178.4, "B200") == (16384, 1024)
    assert vllm_defaults(44.35, "A40-48GB") == (2048, 256)
    for mem, name in ((79.15, "A100-80GB"), (79.11, "H100-SXM"), (178.4, "B200")):
        grid = default_grid(mem, name)
        tokens, seqs = vllm_defaults(mem, name)
        assert tokens in grid["max-num-batched-tokens"] and seqs in grid["max-num-seqs"]
        check_grid(grid, 8192)  # every default point is one vLLM starts with
    assert default_grid(79.11, "H100-SXM")["max-num-batched-tokens"] == (2048, 4096, 8192, 16384, 32768)
    assert parse_grid("vllm", None, 79.11, "H100-SXM")["max-num-seqs"] == (256, 1024)


def test_combinations_vllm_refuses_fail_with_its_own_message():
    with pytest.raises(
        SimserveError,
        match=r"^max_num_batched_tokens \(128\) must be greater than or equal to "
        r"max_num_seqs \(256\)",
    ):
        check_vllm_flags(128, 256, 0, 4096)
    with pytest.raises(
        SimserveError,
        match=r"^long_prefill_token_threshold \(5000\) cannot be greater than the "
        r"max_model_len \(4096\)",
    ):
        check_vllm_flags(2048, 256, 5000, 4096)
    with pytest.raises(
        SimserveError, match=r"^max_num_batched_tokens \(2048\) is smaller than max_model_len"
    ):
        check_vllm_flags(2048, 256, 0, 4096, chunked_prefill=False)
    check_vllm_flags(2048, 256, 0, 4096)  # V1 chunks prefills: a budget below max_model_len is fine
    check_vllm_flags(256, 256, 256, 4096)  # equality is allowed


def fake_run(capacity):
    """A stand-in for the sweep: capacity(budget, max_batch, threshold) per grid point."""

    def run(spec):
        rows = [
            {
                "budget": b,
                "max_batch": m,
                "slo_s": spec.slos[0].tbt_s,
                "capacity_qps": capacity(b, m, spec.base),
                "capacity_std": 0.0,
                "seeds": 1,
                "message": "",
            }
            for b in spec.budgets
            for m in spec.max_batches
        ]
        return SimpleNamespace(rows=pd.DataFrame(rows))

    return run


def make_spec(overrides, budgets, max_batches):
    base = Scenario(prefix_caching=True, **overrides)  # the engine sweep's default (vLLM V1: on)
    return SimpleNamespace(base=base, budgets=budgets, max_batches=max_batches, slos=(SLO(0.2),))


def test_the_recommendation_is_the_highest_capacity_over_every_flag():
    grid = parse_grid("vllm", "max-num-batched-tokens=512,1024,2048;long-prefill-token-threshold=0,256")

    def capacity(b, m, base):  # best: 1024 tokens, with the threshold on
        return 10 - abs(b - 1024) / 512 + (1 if base.long_prefill_token_threshold else 0)

    res = run_engine_sweep("vllm", grid, make_spec, fake_run(capacity))
    assert len(res.rows) == 3 * 2 * 2  # batched tokens × seqs × threshold
    assert res.best["max-num-batched-tokens"] == 1024 and res.best["long-prefill-token-threshold"] == 256
    assert res.best["max-num-seqs"] == 128  # a tie with 256: the smaller, earlier grid value
    assert res.capacity_qps == 11
    assert res.command == (
        "vllm serve mistralai/Mistral-7B-v0.1 --max-num-batched-tokens 1024 --max-num-seqs 128 "
        "--long-prefill-token-threshold 256 --max-model-len 8192"
    )


def test_no_capacity_anywhere_is_an_error_naming_the_fix():
    table = pd.DataFrame({"max-num-batched-tokens": [512], "slo_s": [0.1], "capacity_qps": [0.0]})
    with pytest.raises(SimserveError, match="relax --slo or widen --engine-grid"):
        recommend(table, 0.1, ["max-num-batched-tokens"])


def test_command_names_parallelism_and_never_a_removed_flag():
    flags = {
        "max-num-batched-tokens": 2048,
        "max-num-seqs": 256,
        "long-prefill-token-threshold": 0,
        "max-num-partial-prefills": 2,
        "max-long-partial-prefills": 1,
    }
    cmd = vllm_command(Scenario(model="yi-34b", tp=2, pp=2, trace="arxiv", prefix_caching=True), flags)
    # Yi-34B accepts 4096 tokens: the arXiv trace's 16k default is capped at the model's limit
    assert cmd == (
        "vllm serve 01-ai/Yi-34B --max-num-batched-tokens 2048 --max-num-seqs 256 "
        "--tensor-parallel-size 2 --pipeline-parallel-size 2 --max-model-len 4096"
    )
    flags.update({"long-prefill-token-threshold": 256, "long-prefill-token-threshold-adaptive": 1})
    assert vllm_command(Scenario(prefix_caching=True), flags) == (
        "vllm serve mistralai/Mistral-7B-v0.1 --max-num-batched-tokens 2048 --max-num-seqs 256 "
        "--long-prefill-token-threshold 256 --long-prefill-token-threshold-adaptive --max-model-len 8192"
    )
    # prefix caching is on in vLLM V1 unless switched off (`sweep --engine vllm --no-prefix-caching`)
    assert vllm_command(Scenario(), flags).endswith("--max-model-len 8192 --no-enable-prefix-caching")
    with pytest.raises(SimserveError, match="is a switch: 0 \\(off\\), 1 \\(on\\)"):
        parse_grid("vllm", "long-prefill-token-threshold-adaptive=2")


def _cli(args, capsys):
    with pytest.raises(SystemExit) as exc:
        main(args)
        raise SystemExit(0)
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--engine", "trt"], "unknown --engine 'trt'"),
        (["--engine", "vllm", "--engine-grid", "max-batch=4"], "unknown vllm flag 'max-batch'"),
        (
            ["--engine", "vllm", "--engine-grid", "max-num-partial-prefills=2"],
            "vllm serve: error: unrecognized arguments: --max-num-partial-prefills",
        ),
        (
            ["--engine", "vllm", "--engine-grid", "max-num-batched-tokens=128;max-num-seqs=256"],
            "max_num_batched_tokens (128) must be greater than or equal to max_num_seqs (256)",
        ),
        (
            ["--engine", "vllm", "--gpu", "h100", "--engine-grid", "max-num-batched-tokens=512"],
            "max_num_batched_tokens (512) must be greater than or equal to max_num_seqs (1024)",
        ),
    ],
)
def test_cli_bad_engine_input_is_one_line_and_exit_2(args, match, capsys, tmp_path: Path):
    code, _, err = _cli(["sweep", "--out", str(tmp_path / "o"), "--no-cache", *args], capsys)
    assert code == 2 and err.startswith("error: ") and match in err and err.count("\n") == 1
    assert not (tmp_path / "o").exists()


def test_cli_engine_sweep_prints_the_command_and_writes_the_files(capsys, tmp_path: Path):
    out = tmp_path / "o"
    grid = "max-num-batched-tokens=512,2048;max-num-seqs=128"
    args = [
        "sweep",
        "--engine",
        "vllm",
        "--engine-grid",
        grid,
        "--requests",
        "64",
        "--executor",
        "serial",
        "--no-cache",
        "--no-plots",
        "--out",
        str(out),
    ]
    code, stdout, _ = _cli(args, capsys)
    assert code == 0
    rec = json.loads((out / "recommendation.json").read_text())
    assert rec["command"] in stdout.replace("\n", " ") or rec["command"] in stdout
    assert rec["release"] == "vLLM 0.33.0 (V1 engine)" and "vLLM 0.33.0" in stdout  # table title, comment
    assert "# for vLLM 0.33.0" in stdout and "partial-prefills" not in stdout
    assert rec["scenario"]["memory_utilization"] == 0.92  # the release's default: the command omits the flag
    assert rec["command"].startswith("vllm serve mistralai/Mistral-7B-v0.1 --max-num-batched-tokens ")
    table = pd.read_csv(out / "engine.csv")
    assert sorted(table["max-num-batched-tokens"]) == [512, 2048]
    assert rec["capacity_qps"] == table.capacity_qps.max() > 0
