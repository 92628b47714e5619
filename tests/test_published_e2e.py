"""benchmarks/published_e2e.py: the published vLLM results it compares with, and how it simulates them."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import published_e2e as pe  # noqa: E402


def test_entries_cite_a_source_and_published_numbers():
    keys = [p.key for p in pe.PUBLISHED]
    assert len(keys) == len(set(keys))
    for p in pe.PUBLISHED:
        assert p.source.startswith("https://")
        assert p.measured and set(p.measured) <= set(pe.METRICS)
        assert all(v > 0 for v in p.measured.values())


def test_latency_entry_is_one_batch_of_eight_fixed_requests():
    """vllm bench latency: 8 prompts of 32 tokens, 128 outputs each, all at t = 0 — one prefill step of the
    eight prompts, then 127 decode steps of all eight (no request finishes earlier: ignore_eos)."""
    p = next(p for p in pe.PUBLISHED if p.key == "latency-llama3-8b-h200")
    values, _, detail = pe.simulate_once(p, 0)
    assert (detail["requests"], detail["prompt_tokens"], detail["output_tokens"]) == (8, 8 * 32, 8 * 128)
    assert detail["iterations"] == 128 and detail["preemptions"] == 0
    # the batch's span is its latency; the median request finishes with it (all eight end in the same step)
    assert values["batch_latency_ms"] == pytest.approx(values["median_e2e_ms"] - detail["frontend_ms"])
    out = pe.simulate(p)
    ((metric, published, simulated, lo, hi),) = out.rows
    assert (metric, published) == ("batch_latency_ms", 833.421)
    assert simulated == lo == hi == pytest.approx(values["batch_latency_ms"])


def test_bad_arguments_are_one_line_exit_2(capsys):
    assert pe.main(["--only", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown entry ['nope']" in err[0] and "latency-llama3-8b-h200" in err[0]
    assert pe.main(["--samples", "0"]) == 2
    assert capsys.readouterr().err.strip() == "error: --samples must be at least 1, got 0"


def test_each_engine_has_at_least_three_published_results():
    """Issue 23 item 6: three published end-to-end results per engine (SGLang's entries name its release)."""
    sglang = [p for p in pe.PUBLISHED if p.release.startswith("sglang")]
    vllm = [p for p in pe.PUBLISHED if not p.release.startswith("sglang")]
    assert len(sglang) >= 3 and len(vllm) >= 3
    assert all(p.engine.policy == "sglang" for p in sglang)
    assert all(p.engine.policy != "sglang" for p in vllm)


def test_sglang_entry_runs_sglangs_scheduler_with_the_pages_memory_fraction():
    """The SGLang 0.3.0 entries simulate the `sglang` policy, its KV pool sized by the --mem-fraction-static the
    page states (0.88 gives more KV than 0.85 on the same GPUs), with the front end on TTFT and E2E."""
    from dataclasses import replace

    base = next(p for p in pe.PUBLISHED if p.key == "sglang030-llama31-70b-tp4-h100-rps4")
    small = replace(base, workload=replace(base.workload, num_prompts=40))
    values, _, detail = pe.simulate_once(small, 1)
    assert detail["policy"] == "sglang" and detail["requests"] == 40 and detail["frontend_ms"] > 0
    assert values["median_ttft_ms"] > detail["frontend_ms"]
    more = pe.simulate_once(replace(small, engine=pe.SGLANG_030_TP4_088), 1)[2]
    assert more["kv_blocks"] > detail["kv_blocks"]
