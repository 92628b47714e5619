"""Trace loading: accepted formats, shipped names, Trace operations, and one clear error per kind of bad
input."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from simserve.cli import main
from simserve.errors import SimserveError
from simserve.workload import Trace, load_trace
from simserve.workload.trace import TRACES_DIR


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_vidur_columns_with_arrivals_and_extra_columns(tmp_path):
    path = write(
        tmp_path / "t.csv",
        "arrived_at,num_prefill_tokens,num_decode_tokens,pd_ratio\n0.0,10,2,5.0\n0.5,20,4,5.0\n0.5,7,1,7.0\n",
    )
    trace = load_trace(str(path))
    assert trace.name == "t"
    assert trace.prompt_tokens.tolist() == [10, 20, 7]
    assert trace.output_tokens.tolist() == [2, 4, 1]
    assert trace.prompt_tokens.dtype == np.int64
    assert trace.arrived_at.tolist() == [0.0, 0.5, 0.5]


@pytest.mark.parametrize("prompt", ["prompt_len", "input_len", "prompt_tokens"])
@pytest.mark.parametrize("output", ["output_len", "expected_output_len", "output_tokens"])
def test_vllm_column_names(tmp_path, prompt, output):
    trace = load_trace(str(write(tmp_path / "v.csv", f"{prompt},{output}\n100,30\n5,1\n")))
    assert trace.prompt_tokens.tolist() == [100, 5]
    assert trace.output_tokens.tolist() == [30, 1]
    assert trace.arrived_at is None


def test_mooncake_jsonl_timestamp_in_ms(tmp_path):
    rows = [
        {"timestamp": 0, "input_length": 6955, "output_length": 52, "hash_ids": [1, 2]},
        {"timestamp": 1500, "input_length": 100, "output_length": 8, "hash_ids": [3]},
    ]
    path = write(tmp_path / "m.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n")
    trace = load_trace(str(path))
    assert trace.prompt_tokens.tolist() == [6955, 100]
    assert trace.arrived_at.tolist() == [0.0, 1.5]


def test_gzip_is_detected_by_content_and_json_arrays_load(tmp_path):
    gz = tmp_path / "g.csv.gz"
    gz.write_bytes(gzip.compress(b"num_prefill_tokens,num_decode_tokens\n3,4\n"))
    assert load_trace(str(gz)).name == "g"
    disguised = tmp_path / "plain_name.csv"
    disguised.write_bytes(gzip.compress(b"input_len,output_len\n8,9\n"))
    assert load_trace(str(disguised)).output_tokens.tolist() == [9]
    array = write(tmp_path / "a.json", json.dumps([{"input_length": 5, "output_length": 6}]))
    assert load_trace(str(array)).prompt_tokens.tolist() == [5]


def test_shipped_names_and_aliases():
    for name, alias in (("sharegpt", "chat"), ("arxiv", "arxiv_summarization")):
        trace = load_trace(name)
        assert trace.name == name
        assert len(trace) > 30_000
        assert np.array_equal(trace.prompt_tokens, load_trace(alias).prompt_tokens)
        assert (trace.prompt_tokens > 0).all() and (trace.output_tokens > 0).all()
    assert (TRACES_DIR / "sharegpt.provenance.json").is_file()
    assert json.loads((TRACES_DIR / "arxiv_summarization.provenance.json").read_text())["synthetic"] is True


def test_max_total_tokens_filters_rows(tmp_path):
    path = write(tmp_path / "t.csv", "num_prefill_tokens,num_decode_tokens\n10,2\n100,1\n5,5\n")
    assert load_trace(str(path), max_total_tokens=12).prompt_tokens.tolist() == [10, 5]
    with pytest.raises(SimserveError, match="no request has prompt"):
        load_trace(str(path), max_total_tokens=3)
    assert load_trace("sharegpt", max_total_tokens=2048).prompt_tokens.max() < 2048


def test_unknown_name_lists_shipped_traces():
    with pytest.raises(
        SimserveError, match=r"shipped traces: sharegpt \(chat\), arxiv \(arxiv_summarization\)"
    ):
        load_trace("no-such-trace")


def test_head_keeps_arrivals_and_sample_is_seeded():
    trace = Trace("t", np.arange(1, 11), np.arange(1, 11) * 2, np.linspace(0, 9, 10))
    head = trace.head(3)
    assert head.prompt_tokens.tolist() == [1, 2, 3] and head.arrived_at.tolist() == [0, 1, 2]
    a, b = trace.sample(7, seed=3), trace.sample(7, seed=3)
    assert np.array_equal(a.prompt_tokens, b.prompt_tokens)
    assert not np.array_equal(a.prompt_tokens, trace.sample(7, seed=4).prompt_tokens)
    assert a.arrived_at is None  # shuffled rows no longer own their arrival times
    assert np.array_equal(a.output_tokens, a.prompt_tokens * 2)  # rows stay paired
    assert len(trace.sample(0, seed=1)) == 0


def test_sample_larger_than_trace_cycles_whole_shuffles():
    trace = Trace("t", np.arange(1, 6), np.ones(5, dtype=np.int64))
    picked = trace.sample(12, seed=0).prompt_tokens
    assert sorted(picked[:5]) == sorted(picked[5:10]) == [1, 2, 3, 4, 5]
    assert set(picked[10:]) <= {1, 2, 3, 4, 5} and len(set(picked[10:])) == 2
    expected_first = np.random.default_rng(0).permutation(5) + 1
    assert picked[:5].tolist() == expected_first.tolist()


BAD_CSV = [
    (
        "num_prefill_tokens,num_decode_tokens\n10,2\nabc,3\n",
        r"data row 2: num_prefill_tokens is 'abc', not a",
    ),
    (
        "num_prefill_tokens,num_decode_tokens\n10,2\n4,0\n",
        r"data row 2: num_decode_tokens is 0; token counts",
    ),
    ("num_prefill_tokens,num_decode_tokens\n-5,2\n", r"data row 1: num_prefill_tokens is -5; token counts"),
    (
        "num_prefill_tokens,num_decode_tokens\n10,2\n1.5,2\n",
        r"data row 2: num_prefill_tokens is 1.5, not a whole",
    ),
    ("num_prefill_tokens,num_decode_tokens\n10,2\n,2\n", r"data row 2: num_prefill_tokens is missing"),
    ("num_prefill_tokens,num_decode_tokens\n10,2\n\n3,3\n", r"data row 2: num_prefill_tokens is missing"),
    (
        "num_prefill_tokens,tokens_out\n10,2\n",
        r"missing the output tokens column: expected one of num_decode",
    ),
    (
        "arrived_at,num_prefill_tokens,num_decode_tokens\n-1,10,2\n",
        r"data row 1: arrived_at is -1; arrival times",
    ),
    (
        "arrived_at,num_prefill_tokens,num_decode_tokens\n0,1,1\n2.5,1,1\n1.0,1,1\n3,1,1\n",
        r"data row 3: arrived_at 1 is earlier than the previous row's 2.5; .*non-decreasing",
    ),
    (
        "num_prefill_tokens,num_decode_tokens\n0,x\n-1,2\n",
        r"data row 1: num_prefill_tokens is 0; .* \(1 more bad rows\)",
    ),
    (
        "num_prefill_tokens,num_decode_tokens\n1,1e30\n",
        r"data row 1: num_decode_tokens is 1e\+30; token counts must be <=",
    ),
    ("num_prefill_tokens,num_decode_tokens\n", r"the trace is empty \(a header but no data rows\)"),
    ("", r"the trace is empty"),
    # surplus cells: the data row, as every other error names it (pandas named the file's line)
    ("num_prefill_tokens,num_decode_tokens\n1,2,3\n", r"data row 1: 3 cells where the header has 2"),
    ("num_prefill_tokens,num_decode_tokens\n1,2\n3,4,5\n", r"data row 2: 3 cells where the header has 2"),
]


@pytest.mark.parametrize(("text", "message"), BAD_CSV)
def test_bad_rows_name_file_row_and_problem(tmp_path, text, message):
    path = write(tmp_path / "bad.csv", text)
    with pytest.raises(SimserveError, match=message) as info:
        load_trace(str(path))
    assert str(info.value).startswith(f"{path}: ") and "\n" not in str(info.value)


def test_binary_and_bad_jsonl_files(tmp_path):
    png = tmp_path / "plot.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe")
    with pytest.raises(SimserveError, match=r"plot.png: not a CSV file \(binary content\)"):
        load_trace(str(png))
    jsonl = write(tmp_path / "m.jsonl", '{"input_length": 5, "output_length": 1}\n{"input_length": 5,\n')
    with pytest.raises(SimserveError, match=r"m.jsonl: row 2: not valid JSON"):
        load_trace(str(jsonl))
    mooncake = write(tmp_path / "n.jsonl", '{"timestamp": 5, "input_length": 5, "output_length": 1}\n' * 2)
    mooncake.write_text(mooncake.read_text() + '{"timestamp": 4, "input_length": 5, "output_length": 1}\n')
    with pytest.raises(SimserveError, match=r"data row 3: timestamp 4 is earlier than the previous row's 5"):
        load_trace(str(mooncake))


def test_cli_reports_bad_input_in_one_line_with_exit_code_2(tmp_path, capsys):
    path = write(tmp_path / "bad.csv", "num_prefill_tokens,num_decode_tokens\n10,2\n7,-3\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["trace", "stats", str(path)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err == f"error: {path}: data row 2: num_decode_tokens is -3; token counts must be positive\n"
    assert "Traceback" not in err


def test_trace_constructor_guards_invariants():
    with pytest.raises(SimserveError, match="positive"):
        Trace("t", np.array([1, 0]), np.array([1, 1]))
    with pytest.raises(SimserveError, match="equally long"):
        Trace("t", np.array([1, 2]), np.array([1]))
    with pytest.raises(SimserveError, match="non-decreasing"):
        Trace("t", np.array([1, 2]), np.array([1, 1]), np.array([1.0, 0.5]))
