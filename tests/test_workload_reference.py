"""Our traces next to the reference traces in ../shared (skipped in a fresh clone without it)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simserve.workload import load_trace
from simserve.workload.stats import TokenStats, TraceStats

REPO = Path(__file__).parents[1]
SHARED = REPO.parent / "shared"
PAPER_CHAT = (
    SHARED / "reference" / "sarathi-serve" / "traces" / "sharegpt_8k_filtered_stats_llama2_tokenizer.csv"
)
VIDUR_ARXIV = (
    SHARED / "reference" / "vidur" / "traces" / "arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv"
)


def reference(path: Path) -> str:
    if not path.is_file():
        pytest.skip(f"reference trace {path} is absent (a fresh clone without ../shared)")
    return str(path)


def docs_row(stats: TraceStats) -> str:
    """The numbers of one row of the comparison table in docs/workloads.md, formatted as written there."""

    def cells(s: TokenStats) -> str:
        return f"{s.median:g} | {s.p90:g} | {s.std:.1f} | {s.mean:.1f}"

    return f"| {stats.count:,} | {cells(stats.prompt)} | {cells(stats.output)} |"


def test_paper_chat_trace_matches_table_2():
    stats = TraceStats.of(load_trace(reference(PAPER_CHAT)))
    assert stats.count == 30_731
    assert (stats.prompt.median, stats.prompt.p90, stats.output.median, stats.output.p90) == (
        1730,
        5696,
        415,
        834,
    )


def test_docs_comparison_table_holds_the_measured_numbers():
    docs = (REPO / "docs" / "workloads.md").read_text()
    paper = TraceStats.of(load_trace(reference(PAPER_CHAT)))
    ours = TraceStats.of(load_trace("sharegpt"))
    assert docs_row(paper) in docs
    assert docs_row(ours) in docs


def test_built_sharegpt_has_the_papers_prompt_shape_but_shorter_outputs():
    paper = TraceStats.of(load_trace(reference(PAPER_CHAT)))
    ours = TraceStats.of(load_trace("sharegpt"))
    # Same 8k filter and a similar long-history prompt tail; outputs shorter (ShareGPT V3 is mostly GPT-3.5).
    assert ours.prompt.p90 == pytest.approx(paper.prompt.p90, rel=0.10)
    assert ours.prompt.std == pytest.approx(paper.prompt.std, rel=0.05)
    assert ours.output.median < paper.output.median
    assert max(ours.prompt.max + 0, paper.prompt.max) <= 8192


def test_vidur_arxiv_trace_loads_and_is_the_4k_variant():
    trace = load_trace(reference(VIDUR_ARXIV))
    assert (trace.prompt_tokens + trace.output_tokens).max() == 4096
    assert np.median(trace.prompt_tokens) < 7059 / 2  # not the paper's 16k arXiv trace
