"""benchmarks/published_e2e.py: the published vLLM results it compares with, and how it simulates them."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import published_e2e as pe  # noqa: E402


def test_entries_cite_a_source_and_a_real_number():
    keys = [p.key for p in pe.PUBLISHED]
    assert len(keys) == len(set(keys))
    for p in pe.PUBLISHED:
        assert p.source.startswith("https://") and p.value > 0
        assert (
            p.kind in ("latency", "throughput") and p.unit == {"latency": "ms", "throughput": "req/s"}[p.kind]
        )


def test_latency_entry_is_one_batch_of_eight_fixed_requests():
    """vllm bench latency: 8 prompts of 32 tokens, 128 outputs each, all at t = 0 — one prefill step of the
    eight prompts, then 127 decode steps of all eight (no request finishes earlier: ignore_eos)."""
    out = pe.simulate(next(p for p in pe.PUBLISHED if p.key == "latency-llama3-8b-h200"))
    assert out.skipped is None
    d = out.detail
    assert (d["requests"], d["prompt_tokens"], d["output_tokens"]) == (8, 8 * 32, 8 * 128)
    assert d["iterations"] == 128
    assert out.simulated == pytest.approx(d["span_s"] * 1e3)
    assert out.error_pct == pytest.approx(100 * (out.simulated - out.entry.value) / out.entry.value)


def test_unknown_entry_is_one_line_exit_2(capsys):
    assert pe.main(["--only", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown entry ['nope']" in err[0] and "latency-llama3-8b-h200" in err[0]
