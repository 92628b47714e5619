"""`simserve sweep --engine vllm` (simserve.tune.engine): the flag grid, the recommendation, the command line."""

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
from simserve.tune.engine import parse_grid, recommend, run_engine_sweep, vllm_command


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


def fake_run(capacity):
    """A stand-in for the sweep: capacity(budget, max_batch, threshold) per grid point."""

    def run(spec):
        rows = [
            {"budget": b, "max_batch": m, "slo_s": spec.slos[0].tbt_s, "capacity_qps": capacity(b, m, spec.base),
             "capacity_std": 0.0, "seeds": 1, "message": ""}
            for b in spec.budgets for m in spec.max_batches
        ]  # fmt: skip
        return SimpleNamespace(rows=pd.DataFrame(rows))

    return run


def make_spec(overrides, budgets, max_batches):
    base = Scenario(**overrides)
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


def test_command_names_parallelism_and_non_default_partial_prefills():
    flags = {"max-num-batched-tokens": 2048, "max-num-seqs": 256, "long-prefill-token-threshold": 0,
             "max-num-partial-prefills": 2, "max-long-partial-prefills": 1}  # fmt: skip
    cmd = vllm_command(Scenario(model="yi-34b", tp=2, pp=2, trace="arxiv"), flags)
    assert cmd == (  # Yi-34B accepts 4096 tokens: the arXiv trace's 16k default is capped at the model's limit
        "vllm serve 01-ai/Yi-34B --max-num-batched-tokens 2048 --max-num-seqs 256 --max-num-partial-prefills 2 "
        "--tensor-parallel-size 2 --pipeline-parallel-size 2 --max-model-len 4096"
    )


def _cli(args, capsys):
    with pytest.raises(SystemExit) as exc:
        main(args)
        raise SystemExit(0)
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


@pytest.mark.parametrize(
    ("args", "match"),
    [(["--engine", "trt"], "unknown --engine 'trt'"),
     (["--engine", "vllm", "--engine-grid", "max-batch=4"], "unknown vllm flag 'max-batch'")],
)  # fmt: skip
def test_cli_bad_engine_input_is_one_line_and_exit_2(args, match, capsys, tmp_path: Path):
    code, _, err = _cli(["sweep", "--out", str(tmp_path / "o"), "--no-cache", *args], capsys)
    assert code == 2 and err.startswith("error: ") and match in err and err.count("\n") == 1
    assert not (tmp_path / "o").exists()


def test_cli_engine_sweep_prints_the_command_and_writes_the_files(capsys, tmp_path: Path):
    out = tmp_path / "o"
    grid = "max-num-batched-tokens=512,2048;max-num-seqs=128"
    args = ["sweep", "--engine", "vllm", "--engine-grid", grid, "--requests", "64", "--executor", "serial",
            "--no-cache", "--no-plots", "--out", str(out)]  # fmt: skip
    code, stdout, _ = _cli(args, capsys)
    assert code == 0
    rec = json.loads((out / "recommendation.json").read_text())
    assert rec["command"] in stdout.replace("\n", " ") or rec["command"] in stdout
    assert rec["command"].startswith("vllm serve mistralai/Mistral-7B-v0.1 --max-num-batched-tokens ")
    table = pd.read_csv(out / "engine.csv")
    assert sorted(table["max-num-batched-tokens"]) == [512, 2048]
    assert rec["capacity_qps"] == table.capacity_qps.max() > 0
