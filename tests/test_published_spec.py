"""benchmarks/published_spec.py: which published speculative-decoding results simserve can represent and why
not, the acceptance it takes from a source, and the shape of one reproduced entry (issue 32 item 4). The
numbers' agreement with the published ones is reported in docs/speculative.md, not asserted here."""

import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import published_spec as ps  # noqa: E402

ENTRIES = {e["id"]: e for e in ps.load()}


def test_every_entry_is_a_setup_or_one_line_saying_why_not():
    for entry in ENTRIES.values():
        got = ps.setup_of(entry)
        if isinstance(got, str):
            assert got and "\n" not in got
        else:
            assert len(got.acceptance) == got.k == entry["num_speculative_tokens"]
            assert all(a >= b for a, b in zip(got.acceptance, got.acceptance[1:], strict=False))
    assert "RTX 3090" in ps.setup_of(ENTRIES["eagle3-paper-vllm-eagle3-batch"])
    assert "not modelled" in ps.setup_of(ENTRIES["vllm-blog-2024-draft-sharegpt-qps"])
    assert "K" in ps.setup_of(ENTRIES["eagle3-paper-sglang-bs1"])


def test_a_reported_mean_accepted_length_is_the_sources_and_the_input():
    for key, tau in ps.REPORTED_TAU.items():
        entry = ENTRIES[key]
        assert f"mean accepted length {tau:g}" in entry["acceptance_reported"]
        setup = ps.setup_of(entry)
        assert 1 + sum(setup.acceptance) == pytest.approx(tau, abs=1e-5)
        assert "reported" in setup.acceptance_source


def test_a_result_from_a_note_is_in_that_note():
    for key, _, a, b, change in ps.NOTE_CHECKS:
        note = ENTRIES[key]["note"]
        assert f"{-100 * change:.1f}%" in note and f"batch {a} to {b}" in note


def test_crossing_names_the_batches_around_it():
    assert ps.crossing([(16, 1.02), (8, 1.2), (24, 0.93)]).startswith("16-24")
    assert ps.crossing([(2, 1.8), (64, 1.38)]) == "none up to 64"
    assert ps.crossing([(128, 0.9)]) == "below 1.0 at batch 128"
    assert ps.published_crossing(ENTRIES["eagle3-paper-sglang-eagle-batch"]).startswith("16-24")


def test_one_entry_reproduced_chain_points_only_with_its_sweep():
    entry = ENTRIES["specdecode-bench-sglang-chain-vs-tree-qwen3-8b-gsm8k"]
    got = ps.reproduce(entry, sweep=(1, 4))
    assert [r["batch_size"] for r in got["rows"]] == [1]  # the chain; the tree point is listed, not simulated
    assert len(got["skipped_points"]) == 1 and "tree" in got["skipped_points"][0]
    assert [r["batch_size"] for r in got["sweep"]] == [4]
    for r in got["rows"] + got["sweep"]:
        off, on = r["off"]["tokens_per_s"], r["on"]["tokens_per_s"]
        assert off > 0 and on > 0 and r["speedup"] == pytest.approx(on / off)
        assert r["on"]["steps"] < r["off"]["steps"]  # accepted drafts: fewer steps for the same tokens
    row = got["rows"][0]
    assert row["error_pct"] == pytest.approx(100 * (row["speedup"] - row["published"]) / row["published"])
    assert got["published_crossing"] == entry["crossing"]
    assert ps.markdown(ps.run_all([]) | {"results": [got]}).count(entry["id"]) >= 2


def test_speculation_that_accepts_nothing_only_costs_and_one_that_accepts_everything_gains():
    setup = ps.setup_of(ENTRIES["specdecode-bench-eagle-llama31-8b-gsm8k"])
    with tempfile.TemporaryDirectory() as tmp:
        for acc, better in (((0.0, 0.0, 0.0), False), ((1.0, 1.0, 1.0), True)):
            path = str(Path(tmp) / f"{acc[0]}.json")
            Path(path).write_text(json.dumps(list(acc)))
            got = ps.speedup_at(replace(setup, acceptance=acc), 2, "fixed:64:64", path)
            assert (got["speedup"] > 1.0) is better
