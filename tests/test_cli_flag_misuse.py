"""Flags used where they mean nothing or where the engine would refuse them: `simserve run` refuses each in
one line naming the flag and the fix (exit 2, nothing written) instead of running without it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_runner import cli

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(
    not (REPO / "profiles" / "a100-80gb" / "mistral-7b").is_dir(), reason="shipped Mistral-7B profile absent"
)


DISAGG = ["--model", "llama-2-70b", "--gpu", "h200"]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        # an engine runs its own scheduler: another --policy beside it was silently replaced by sglang's
        (["--engine", "sglang", "--policy", "sarathi"], "--engine sglang runs the sglang policy"),
        (["--engine", "vllm", "--policy", "sarathi"], "drop --policy sarathi"),
        # vLLM's flags under SGLang or another policy ran without them
        (["--engine", "sglang", "--enforce-eager"], "--enforce-eager is a vLLM worker flag"),
        (["--long-prefill-token-threshold", "100"], "--long-prefill-token-threshold is a vLLM flag"),
        (["--engine", "sglang", "--long-prefill-token-threshold", "100"], "use it with --policy vllm-v1"),
        (
            ["--long-prefill-token-threshold-adaptive"],
            "--long-prefill-token-threshold-adaptive is a vLLM flag",
        ),
        # what `vllm serve` refuses to start with, in its words, then the fix in run's flags
        (
            ["--engine", "vllm", "--budget", "100", "--max-batch", "256"],
            "max_num_batched_tokens (100) must be greater than or equal to max_num_seqs (256). (vLLM 0.33.0 "
            "refuses this combination: raise --budget or lower --max-batch)",
        ),
        (
            ["--engine", "vllm", "--long-prefill-token-threshold", "9000"],
            "long_prefill_token_threshold (9000) cannot be greater than the max_model_len (8192)",
        ),
        # a budget on a policy without one ran without it (and named the output folder -b512)
        (["--policy", "orca", "--budget", "512"], "--policy orca has no token budget"),
        (["--policy", "hybrid", "--budget", "512"], "drop --budget, or use --policy sarathi"),
        # knobs of other policies, of disaggregated runs and of MoE routers changed nothing
        (["--tbt-target", "0.05"], "--tbt-target is a knob of --policy slo-aware or pressure"),
        (["--policy", "slo-aware", "--min-budget", "64"], "--min-budget is a knob of --policy pressure"),
        (["--kv-link", "nvlink"], "--kv-link belongs to a disaggregated run: add --prefill and --decode"),
        (["--decode-router", "rr"], "--decode-router belongs to a disaggregated run"),
        (["--model", "llama-3-8b", "--moe-skew", "1"], "--moe-skew 1 needs a mixture-of-experts model"),
        # the flag at fault is named, not another one (--dp-attention 0 named --replicas)
        (
            ["--model", "mixtral-8x7b", "--gpu", "h100", "--tp", "2", "--dp-attention", "0"],
            "--dp-attention must be at least 1",
        ),
        # attention DP with PP: the fix is PP 1 (it said 'lower --dp-attention or --tp', which PP 2 still
        # fails)
        (
            [
                "--model",
                "mixtral-8x7b",
                "--gpu",
                "h200",
                "--tp",
                "2",
                "--dp-attention",
                "2",
                "--ep",
                "4",
                "--pp",
                "2",
            ],
            "with PP 1, where the experts' all-to-all stays on the node's links; use --pp 1",
        ),
        (["--policy", "sglang", "--page-size", "0"], "--page-size must be at least 1 token, got 0"),
        (
            ["--policy", "sglang", "--schedule-conservativeness", "0"],
            "--schedule-conservativeness must be positive, got 0",
        ),
        # an arrival process's own knob under another process was ignored without a word
        (["--time-scale", "0.5"], "--time-scale scales recorded arrival times"),
        (
            ["--cv", "2"],
            "--cv shapes the gaps of --arrival gamma or vllm-bench; --arrival poisson has no such knob",
        ),
        (
            ["--time-scale", "-1", "--arrival", "replay", "--trace", "sharegpt-multiturn"],
            "--time-scale must be positive",
        ),
        # the recorded times set the rate: --qps inf was ignored
        (["--trace", "sharegpt-multiturn", "--arrival", "replay", "--qps", "inf"], "--arrival replay keeps"),
        # a pool with no GPUs: the pool spec is named, not --tp
        ([*DISAGG, "--prefill", "2xTP0", "--decode", "1xTP4"], "--prefill '2xTP0': TP must be at least 1"),
        (
            [*DISAGG, "--prefill", "2xTP2", "--decode", "1xTP4PP0"],
            "--decode '1xTP4PP0': PP must be at least 1",
        ),
        ([*DISAGG, "--tp", "4", "--prefill", "2xTP2", "--decode", "1xTP4"], "--tp 4 describes an aggregated"),
        # run's help offers --qps inf; a disaggregated run said 'must be a positive request rate, got inf'
        ([*DISAGG, "--prefill", "2xTP2", "--decode", "1xTP4", "--qps", "inf"], "takes a finite --qps"),
        # a box of another GPU ran with its links and the asked GPU's specs, silently
        (
            ["--model", "llama-3-8b", "--gpu", "h200", "--node", "dgx-a100"],
            "--node dgx-a100 holds A100-80GB GPUs, not H200; pick a node that holds H200 (hgx-h200)",
        ),
        (
            [*DISAGG, "--prefill", "4xTP2", "--decode", "2xTP4", "--kv-link", "nvlink"],
            "--kv-link nvlink joins GPUs inside one node, but the disaggregated layout",
        ),
        # TP past the default box: the catalog's bigger box of the same GPU is named (A100's default holds 4)
        (["--model", "llama-2-70b", "--tp", "8"], "pick a node that holds 8 (--node dgx-a100)"),
        # vLLM 0.33.0's measured CPU costs: a host speed that is no speed, or one with nothing to scale
        (["--engine", "vllm", "--host-speed", "0"], "--host-speed"),
        (["--engine", "vllm", "--host-speed", "-1"], "--host-speed"),
        (["--policy", "sarathi", "--frontend", "off", "--host-speed", "2"], "drop --host-speed"),
        (["--api-endpoint", "grpc"], "unknown --api-endpoint 'grpc'; choose completions or chat"),
        (["--frontend", "constant", "--api-endpoint", "chat"], "this run has no API server"),
    ],
)
def test_a_flag_that_would_be_ignored_or_refused_is_named(capsys, tmp_path, args, words):
    code, _, err = cli(capsys, "run", "--requests", "8", "--out", str(tmp_path / "o"), *args)
    assert code == 2 and err.count("\n") == 1 and words in err and "Traceback" not in err, err
    assert not (tmp_path / "o").exists()


def test_an_fp8_deployment_that_does_not_fit_is_not_told_to_use_fp8_weights(capsys, tmp_path):
    args = [
        "--model",
        "qwen3-235b-a22b",
        "--gpu",
        "h100",
        "--tp",
        "2",
        "--requests",
        "8",
        "--out",
        str(tmp_path),
    ]
    code, _, err = cli(capsys, "run", *args, "--dtype", "fp8")
    assert (
        code == 2 and "does not fit" in err and "fp8 KV (--kv-dtype fp8)" in err and "--dtype" not in err
    ), err
    code, _, err = cli(capsys, "run", *args, "--dtype", "fp8", "--kv-dtype", "fp8")
    assert code == 2 and "a bigger GPU or a shorter max length" in err and "fp8 (" not in err, err


@pytest.mark.parametrize(("engine", "policy"), [("vllm", "vllm-v1"), ("sglang", "sglang")])
def test_an_engine_alone_runs_its_own_scheduler(capsys, tmp_path, engine, policy):
    code, _, err = cli(
        capsys, "run", "--engine", engine, "--requests", "8", "--qps", "4", "--out", str(tmp_path)
    )
    assert code == 0, err
    assert json.loads((tmp_path / "summary.json").read_text())["scenario"]["policy"] == policy


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--engine", "sglang", "--policies", "sarathi"], "--policies sets simserve's policy grid"),
        (["--engine", "vllm", "--budgets", "512"], "--budgets sets simserve's policy grid"),
        (["--engine-grid", "max-num-seqs=128", "--max-batch", "64"], "give the values with --engine-grid"),
        (["--engine", "sglang", "--no-prefix-caching"], "radix cache off already"),
    ],
)
def test_an_engine_sweep_refuses_the_policy_grid_it_would_ignore(capsys, tmp_path, args, words):
    code, _, err = cli(
        capsys, "sweep", "--slo", "0.1", "--requests", "16", "--out", str(tmp_path / "o"), *args
    )
    assert code == 2 and err.count("\n") == 1 and words in err and "Traceback" not in err, err
    assert not (tmp_path / "o").exists()


def test_plan_names_a_missing_trace_before_its_searches_start(capsys, tmp_path):
    args = [
        "--model",
        "llama-3-8b",
        "--gpus",
        "h100",
        "--max-gpus",
        "1",
        "--slo",
        "0.1",
        "--out",
        str(tmp_path / "o"),
    ]
    code, _, err = cli(capsys, "plan", *args, "--trace", str(tmp_path / "missing.csv"))
    # one line: the search's progress bar never started (it was printed above the error)
    assert code == 2 and err.count("\n") == 1 and "no such file" in err and "plan searches" not in err, err
    assert "()" not in err  # shipped traces without aliases are listed bare, not as 'sharegpt-multiturn ()'
    assert not (tmp_path / "o").exists()


def test_plan_takes_a_bench_dataset_as_its_searches_do(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("SIMSERVE_CACHE", str(tmp_path / "cache"))
    args = [
        "--model",
        "llama-3-8b",
        "--gpus",
        "h100",
        "--max-gpus",
        "1",
        "--slo",
        "0.1",
        "--budgets",
        "512",
        "--requests",
        "40",
        "--no-plots",
        "--out",
        str(tmp_path / "o"),
    ]
    # range ratio 0: every output 16 tokens
    code, _, err = cli(capsys, "plan", *args, "--trace", "random:64:16:0")
    assert code == 0, err  # it failed after every search ran: the output-token mean read the spec as a file
    assert json.loads((tmp_path / "o" / "plan.json").read_text())["mean_output_tokens"] == 16.0


def test_an_slo_no_load_meets_is_one_line_after_the_searches(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("SIMSERVE_CACHE", str(tmp_path / "cache"))
    args = ["--slo", "0.0001", "--policies", "sarathi", "--budgets", "512", "--requests", "50", "--no-plots"]
    code, _, err = cli(capsys, "sweep", *args, "--out", str(tmp_path / "o"))
    # the progress bar's last frame was left above the error on a pipe: two lines
    assert code == 2 and err.count("\n") == 1 and "no load meets P99 TBT" in err, err
    assert not (tmp_path / "o").exists()


def test_plan_counts_the_output_tokens_of_the_rounds_it_simulates():
    from simserve.plan.search import mean_output_tokens
    from simserve.workload import load_trace

    # a multi-turn trace is simulated as its first rounds in file order; goodput and $ per million tokens used
    # a shuffled sample's mean instead (304.0 against 296.9 tokens here)
    t = load_trace("sharegpt-multiturn", max_total_tokens=4096)
    assert t.in_order
    assert mean_output_tokens("sharegpt-multiturn", 4096, 512, 0) == float(t.head(512).output_tokens.mean())
    shuffled = load_trace("sharegpt", max_total_tokens=4096)  # any other trace: the seeded sample, as before
    assert mean_output_tokens("sharegpt", 4096, 512, 0) == float(shuffled.sample(512, 0).output_tokens.mean())
