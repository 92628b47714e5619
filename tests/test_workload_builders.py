"""Trace builders on tiny fixtures: ShareGPT (truncated JSON, split pieces), arXiv (JSONL, parquet),
synthetic."""

from __future__ import annotations

import io
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simserve.cli import main
from simserve.errors import SimserveError
from simserve.workload import load_trace
from simserve.workload.sharegpt import build_sharegpt, merge_pieces, read_json_array_prefix
from simserve.workload.synthetic import PUBLISHED
from simserve.workload.trace import TRACES_DIR

FIXTURES = Path(__file__).parent / "fixtures"


def run_cli(argv: list[str]) -> None:
    """simserve.cli.main, which may end a successful command with SystemExit(0)."""
    try:
        main(argv)
    except SystemExit as exc:
        assert exc.code in (None, 0), f"exit code {exc.code}"


@pytest.fixture(scope="module")
def tokenizer():
    pytest.importorskip("sentencepiece")
    pytest.importorskip("mistral_common")
    from simserve.workload.provenance import mistral_tokenizer

    return mistral_tokenizer()


@pytest.mark.parametrize("chunk", [1, 7, 64, 1 << 20])
def test_json_prefix_keeps_complete_elements_whatever_the_chunk_size(chunk):
    with open(FIXTURES / "sharegpt_tiny.json", encoding="utf-8") as f:
        parsed = read_json_array_prefix(f, chunk_chars=chunk)
    assert [p["id"] for p in parsed.items] == [
        "convA_0",
        "convB_0",
        "convA_3",
        "convC_0",
        "convA_6",
        "convC_4",
    ]
    assert not parsed.complete and parsed.dropped_chars > 50
    assert "[brackets]" in parsed.items[1]["conversations"][3]["value"]


def test_json_prefix_of_a_complete_array_and_of_scalars():
    parsed = read_json_array_prefix(io.StringIO(' [ {"a": 1} , 12345, "x,]" ]  '), chunk_chars=2)
    assert parsed.items == [{"a": 1}, 12345, "x,]"] and parsed.complete and parsed.dropped_chars == 0
    cut = read_json_array_prefix(io.StringIO("[1, 2, 12"), chunk_chars=3)
    assert cut.items == [1, 2] and cut.dropped_chars == 2  # a number cut at the end is not a number
    with pytest.raises(SimserveError, match="not a JSON array"):
        read_json_array_prefix(io.StringIO('{"id": 1}'))


def test_split_pieces_are_merged_without_repeated_turns():
    pieces = json.loads((FIXTURES / "sharegpt_tiny.json").read_text().rsplit(",\n", 1)[0] + "]")
    counts: Counter = Counter()
    conversations = merge_pieces(pieces, counts)
    assert [c.id for c in conversations] == ["convA", "convB", "convC"]
    a = conversations[0]
    assert [role for role, _ in a.turns] == ["human", "gpt"] * 4  # 4 + (3 - 1 repeated) + 2 turns
    assert a.turns[4][1] == "And with a 4096-token sliding window?"
    assert len(conversations[2].turns) == 2  # convC_4 follows a missing piece and is dropped
    assert counts["repeated_turns_removed"] == 1 and counts["pieces_after_a_gap"] == 1


def test_build_sharegpt_from_fixture(tmp_path, tokenizer):
    out = tmp_path / "chat.csv.gz"
    result = build_sharegpt(out, FIXTURES / "sharegpt_tiny.json", command="test")
    table = pd.read_csv(out)
    assert list(table.columns) == ["num_prefill_tokens", "num_decode_tokens", "conversation_id", "round"]
    assert list(zip(table.conversation_id, table["round"], strict=True)) == [
        ("convA", 0),
        ("convA", 1),
        ("convA", 2),
        ("convA", 3),
        ("convB", 1),
        ("convC", 0),
    ]
    with open(FIXTURES / "sharegpt_tiny.json", encoding="utf-8") as f:
        pieces = read_json_array_prefix(f).items
    a = [t["value"] for t in pieces[0]["conversations"] + pieces[2]["conversations"][1:]]
    a += [t["value"] for t in pieces[4]["conversations"]]
    counts = tokenizer.count(a)
    # round k of A: the prompt is every earlier turn plus the human turn 2k; the output is turn 2k + 1
    assert table.num_prefill_tokens[:4].tolist() == [sum(counts[: 2 * k + 1]) for k in range(4)]
    assert table.num_decode_tokens[:4].tolist() == [counts[2 * k + 1] for k in range(4)]
    b = [t["value"] for t in pieces[1]["conversations"]]
    assert table.num_prefill_tokens[4] == sum(
        tokenizer.count(b[:4])
    )  # system and the empty round stay history
    provenance = json.loads(result.provenance.read_text())
    assert provenance["source"]["dropped_tail_chars"] > 0 and provenance["source"]["complete_json"] is False
    assert provenance["tokenizer"]["file"] == "mistral_common/data/tokenizer.model.v1"
    assert len(provenance["tokenizer"]["sha256"]) == 64
    assert provenance["counts"]["rounds_with_empty_turn"] == 1
    assert provenance["statistics"]["count"] == 6 and provenance["command"] == "test"
    assert result.provenance.name == "chat.provenance.json"
    assert len(load_trace(str(out))) == 6


def test_build_sharegpt_filter_and_determinism(tmp_path, tokenizer):
    first = build_sharegpt(tmp_path / "a.csv.gz", FIXTURES / "sharegpt_tiny.json")
    again = build_sharegpt(tmp_path / "b.csv.gz", FIXTURES / "sharegpt_tiny.json")
    assert (tmp_path / "a.csv.gz").read_bytes() == (tmp_path / "b.csv.gz").read_bytes()
    limit = int(np.median(first.trace.prompt_tokens + first.trace.output_tokens))
    small = build_sharegpt(tmp_path / "c.csv.gz", FIXTURES / "sharegpt_tiny.json", max_total_tokens=limit)
    assert (small.trace.prompt_tokens + small.trace.output_tokens <= limit).all()
    assert small.counts["rounds_over_max_total"] == len(again.trace) - len(small.trace) > 0


def test_build_arxiv_from_jsonl_and_parquet(tmp_path, tokenizer, capsys):
    out = tmp_path / "arxiv.csv.gz"
    run_cli(["trace", "build", "arxiv", "--from", str(FIXTURES / "arxiv_tiny.jsonl"), "--out", str(out)])
    assert "wrote" in capsys.readouterr().out
    trace = load_trace(str(out))
    rows = [json.loads(line) for line in (FIXTURES / "arxiv_tiny.jsonl").read_text().splitlines()]
    assert trace.prompt_tokens.tolist() == tokenizer.count(
        [
            rows[0]["article"],
            "Raw release rows carry sentence lists .\nThey are joined with newlines .",
            rows[3]["article"],
        ]
    )
    assert trace.output_tokens[1] == tokenizer.count(["raw abstracts are tagged ."])[0]
    provenance = json.loads((tmp_path / "arxiv.provenance.json").read_text())
    assert provenance["synthetic"] is False and provenance["counts"]["rows_with_empty_text"] == 1
    folder = tmp_path / "dataset"
    folder.mkdir()
    pd.DataFrame([rows[0], rows[3]]).to_parquet(folder / "test-00000-of-00001.parquet")
    from simserve.workload.arxiv import build_arxiv

    result = build_arxiv(folder, tmp_path / "pq.csv.gz")
    assert result.trace.prompt_tokens.tolist() == [trace.prompt_tokens[0], trace.prompt_tokens[2]]


def test_build_arxiv_bad_sources(tmp_path, tokenizer):
    from simserve.workload.arxiv import build_arxiv

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"article": "a b c", "abstract": "d"}\n{"article": "no abstract here"}\n')
    with pytest.raises(SimserveError, match=r"bad.jsonl: row 2: missing the 'abstract' field"):
        build_arxiv(bad, tmp_path / "o.csv.gz")
    with pytest.raises(SimserveError, match="no such file or directory"):
        build_arxiv(tmp_path / "absent", tmp_path / "o.csv.gz")
    with pytest.raises(SimserveError, match="no row has article"):
        build_arxiv(FIXTURES / "arxiv_tiny.jsonl", tmp_path / "o.csv.gz", max_total_tokens=2)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["trace", "build", "arxiv"], "exactly one of --from PATH"),
        (["trace", "build", "arxiv", "--synthetic", "--from", "x"], "exactly one of --from PATH"),
        (["trace", "build", "sharegpt", "--synthetic"], "--synthetic applies to arxiv only"),
        (["trace", "build", "lmsys"], "unknown trace 'lmsys' to build; choose one of sharegpt, arxiv"),
        (["trace", "stats", "no-such-trace"], "no trace named 'no-such-trace'"),
    ],
)
def test_cli_usage_errors_exit_2(argv, message, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


def test_synthetic_arxiv_is_within_3_percent_of_the_published_statistics():
    trace = load_trace("arxiv")
    assert len(trace) >= 30_000
    for tokens, target in (
        (trace.prompt_tokens, PUBLISHED["prompt"]),
        (trace.output_tokens, PUBLISHED["output"]),
    ):
        assert np.median(tokens) == pytest.approx(target["median"], rel=0.03)
        assert np.percentile(tokens, 90) == pytest.approx(target["p90"], rel=0.03)
    assert (trace.prompt_tokens + trace.output_tokens <= 16384).all()
    assert np.std(trace.prompt_tokens) == pytest.approx(PUBLISHED["prompt"]["std"], rel=0.05)


def test_shipped_synthetic_arxiv_is_what_the_builder_makes(tmp_path):
    from simserve.workload.arxiv import build_arxiv_synthetic

    provenance = json.loads((TRACES_DIR / "arxiv_summarization.provenance.json").read_text())
    assert "SYNTHETIC" in provenance["warning"]
    sample = provenance["sample"]
    rebuilt = build_arxiv_synthetic(tmp_path / "a.csv.gz", sample["requests"], sample["seed"]).trace
    shipped = load_trace("arxiv")
    assert np.array_equal(rebuilt.prompt_tokens, shipped.prompt_tokens)
    assert np.array_equal(rebuilt.output_tokens, shipped.output_tokens)


def test_stats_command_prints_table_and_saves_histogram(tmp_path, capsys):
    path = tmp_path / "t.csv"
    path.write_text(
        "num_prefill_tokens,num_decode_tokens\n" + "".join(f"{p},{p % 3 + 1}\n" for p in range(1, 11))
    )
    png = tmp_path / "h.png"
    run_cli(["trace", "stats", str(path), "--hist", str(png)])
    out = capsys.readouterr().out
    # prompts 1..10: median 5.5, P90 9.1 (linear interpolation), population std sqrt(8.25) = 2.9
    assert "10 requests" in out and "5.5" in out and "9.1" in out and "2.9" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_build_sharegpt_bench_keeps_vllms_first_two_turns_per_piece(tmp_path, tokenizer):
    from simserve.workload.sharegpt_bench import build_sharegpt_bench

    out = tmp_path / "bench.csv.gz"
    result = build_sharegpt_bench(out, FIXTURES / "sharegpt_tiny.json", command="test")
    with open(FIXTURES / "sharegpt_tiny.json", encoding="utf-8") as f:
        pieces = [p for p in read_json_array_prefix(f).items if len(p["conversations"]) >= 2]
    # every piece in file order, split pieces not merged: a continuation starts with whatever turn it has
    first = [
        tokenizer.count([p["conversations"][0]["value"], p["conversations"][1]["value"]]) for p in pieces
    ]
    table = pd.read_csv(out)
    # BOS counted, as vLLM's tokenizer()
    assert table.num_prefill_tokens.tolist() == [a + 1 for a, _ in first]
    assert table.num_decode_tokens.tolist() == [b + 1 for _, b in first]
    assert json.loads(result.provenance.read_text())["counts"]["rows"] == len(pieces)
