"""A model's context limit: requests past it are dropped from the trace (and counted); going past it is asked
for."""

from __future__ import annotations

import json

import pytest

from simserve.cli import main
from simserve.errors import SimserveError
from simserve.sim.scenario import Scenario, paper_setup, workload_drops, workload_notes

LLAMA2 = dict(model="llama2-70b", gpu="a40", tp=4, pp=2)


def test_default_max_length_is_capped_at_the_model_limit():
    assert Scenario(**LLAMA2).max_len == 4096  # Llama-2-70B: max_position_embeddings 4096
    assert Scenario(model="mistral-7b").max_len == 8192  # 32k model: the trace's default stays
    assert Scenario(model="llama-3.1-8b", trace="arxiv").max_len == 16384


def test_going_past_the_limit_is_an_error_unless_asked_for():
    with pytest.raises(
        SimserveError, match="--max-model-len 8192 exceeds llama2-70b's context limit of 4096"
    ):
        _ = Scenario(**LLAMA2, max_model_len=8192).max_len
    assert Scenario(**LLAMA2, max_model_len=8192, allow_long_context=True).max_len == 8192
    assert Scenario(**LLAMA2, allow_long_context=True).max_len == 8192


def test_paper_setup_keeps_the_papers_8k_trace_and_says_so():
    s = paper_setup(Scenario(**LLAMA2))
    assert s.max_len == 8192
    assert any("exceeds llama2-70b's context limit of 4096" in n for n in workload_notes(s))


def test_rows_past_the_limit_are_dropped_and_counted():
    capped = workload_drops(Scenario(**LLAMA2))
    full = workload_drops(Scenario(**LLAMA2, allow_long_context=True))
    assert capped["max_model_len"] == 4096 and capped["model_context_limit"] == 4096
    assert capped["trace_rows"] == full["trace_rows"]
    # the issue: 19% of ShareGPT's requests exceed 4096 tokens in total
    assert 0.15 < (capped["too_long"] - full["too_long"]) / capped["trace_rows"] < 0.25
    assert any("context limit of 4096" in n for n in workload_notes(Scenario(**LLAMA2)))


def _run(capsys, *args: str) -> tuple[int, str]:
    try:
        main(["run", "--model", "llama2-70b", "--gpu", "a40", "--tp", "4", "--pp", "2", *args])
        code = 0
    except SystemExit as exc:
        code = exc.code
    return code, capsys.readouterr().err


def test_cli_refuses_past_the_limit_in_one_line(capsys, tmp_path):
    code, err = _run(capsys, "--max-model-len", "8192", "--requests", "5", "--out", str(tmp_path / "o"))
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "--allow-long-context" in lines[0]
    assert not (tmp_path / "o").exists()


def test_run_summary_counts_the_dropped_rows(capsys, tmp_path):
    out = tmp_path / "o"
    code, err = _run(capsys, "--requests", "20", "--qps", "0.5", "--iterations", "none", "--out", str(out))
    assert code in (0, None), err
    doc = json.loads((out / "summary.json").read_text())
    assert doc["trace_dropped"]["max_model_len"] == 4096 and doc["trace_dropped"]["too_long"] > 0
