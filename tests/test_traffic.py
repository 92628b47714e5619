"""Traces over time (issue 31): the shipped Mooncake and Azure traces, their builders, chained prefix-block
ids, load curves, `trace stats` rate over time and prefix reuse, and the bad input around them."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from cli_runner import cli

from simserve.errors import SimserveError
from simserve.workload import load_trace
from simserve.workload.load_curve import LoadCurve, load_curve


def one_line_refusal(code, err, *words):
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, (w, err)


@pytest.mark.parametrize(
    "name, rows, ids",
    [
        ("mooncake-conversation", 12031, True),
        ("mooncake-synthetic", 3993, True),
        ("azure-code-2023", 8819, False),
        ("azure-conv-2023", 19366, False),
    ],
)
def test_the_public_traces_ship_with_arrival_times_and_their_licence(name, rows, ids):
    from simserve.workload.provenance import provenance_path
    from simserve.workload.trace import resolve_trace

    t = load_trace(name)
    assert len(t) == rows and t.arrived_at is not None and t.arrived_at[0] == 0.0
    assert (t.hash_offsets is not None) == ids
    record = json.loads(provenance_path(resolve_trace(name)[0]).read_text())
    assert record["licence"].startswith("Apache-2.0" if ids else "CC-BY-4.0") and record["attribution"]
    assert record["statistics"]["count"] == rows


def test_the_azure_arrivals_are_the_timestamps_to_the_tick():
    """AzureLLMInferenceTrace_code.csv starts 18:17:03.9799600, 18:17:04.0319600 (the Splitwise trace's 0.052
    s)."""
    t = load_trace("azure-code-2023")
    assert t.arrived_at[1] == 0.052 and t.prompt_tokens[:2].tolist() == [4808, 3180]


def _mooncake_clone(tmp_path, rows):
    path = tmp_path / "Mooncake" / "FAST25-release" / "traces" / "conversation_trace.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path / "Mooncake"


TREE_ROWS = [
    {"timestamp": 0, "input_length": 1536, "output_length": 10, "hash_ids": [1, 2, 3]},
    {"timestamp": 500, "input_length": 1400, "output_length": 5, "hash_ids": [1, 2, 5]},
    {"timestamp": 1500, "input_length": 2048, "output_length": 7, "hash_ids": [1, 2, 5, 6]},
]


def test_a_mooncake_trace_is_built_from_a_clone_with_its_tree_of_prefixes(capsys, tmp_path):
    clone = _mooncake_clone(tmp_path, TREE_ROWS)
    out = tmp_path / "mc.csv.gz"
    code, stdout, err = cli(
        capsys, "trace", "build", "mooncake-conversation", "--from", str(clone), "--out", str(out)
    )
    assert code == 0, err
    text = gzip.decompress(out.read_bytes()).decode()
    assert text.splitlines()[:2] == [
        "arrived_at,num_prefill_tokens,num_decode_tokens,hash_ids",
        "0.0,1536,10,1 2 3",
    ]
    t = load_trace(str(out))
    assert t.arrived_at.tolist() == [0.0, 0.5, 1.5]
    assert t.hash_offsets.tolist() == [0, 3, 6, 10] and t.hash_ids.tolist() == [1, 2, 3, 1, 2, 5, 1, 2, 5, 6]
    record = json.loads((tmp_path / "mc.provenance.json").read_text())
    assert (
        record["licence"].startswith("Apache-2.0") and "kvcache-ai/Mooncake" in record["source"]["repository"]
    )
    # the same trace straight from Mooncake's JSONL loads the same
    direct = load_trace(str(clone / "FAST25-release" / "traces" / "conversation_trace.jsonl"))
    assert np.array_equal(direct.hash_ids, t.hash_ids) and np.array_equal(direct.arrived_at, t.arrived_at)


def test_an_azure_trace_is_built_from_a_clone(capsys, tmp_path):
    csv = tmp_path / "Azure" / "data" / "AzureLLMInferenceTrace_conv.csv"
    csv.parent.mkdir(parents=True)
    csv.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 23:59:59.9000000,100,5\n2023-11-17 00:00:00.2500000,200,6\n"
    )
    out = tmp_path / "az.csv"
    code, _, err = cli(
        capsys, "trace", "build", "azure-conv-2023", "--source", str(tmp_path / "Azure"), "--out", str(out)
    )
    assert code == 0, err
    assert load_trace(str(out)).arrived_at.tolist() == [0.0, 0.35]  # across midnight, to the 100-ns tick


@pytest.mark.parametrize(
    "name, repo",
    [("mooncake-synthetic", "kvcache-ai/Mooncake"), ("azure-code-2023", "Azure/AzurePublicDataset")],
)
def test_building_without_a_copy_names_where_to_get_it(capsys, tmp_path, name, repo):
    code, _, err = cli(capsys, "trace", "build", name, "--out", str(tmp_path / "t.csv"))
    one_line_refusal(code, err, "--from", repo)
    code, _, err = cli(
        capsys, "trace", "build", name, "--from", str(tmp_path), "--out", str(tmp_path / "t.csv")
    )
    one_line_refusal(code, err, "no such file", repo)
    assert not (tmp_path / "t.csv").exists()


@pytest.mark.parametrize(
    "cell, words",
    [
        ('"1 x 3"', "not a list of whole numbers"),
        ('"1 -2"', "not a list of whole numbers"),
        ('"1 2 3 4"', "4 hash_ids for a 1536-token prompt"),
    ],
)
def test_malformed_hash_ids_are_refused_by_row(capsys, tmp_path, cell, words):
    bad = tmp_path / "bad.csv"
    bad.write_text(f"num_prefill_tokens,num_decode_tokens,hash_ids\n1536,4,1 2\n1536,4,{cell}\n")
    code, _, err = cli(capsys, "trace", "stats", str(bad))
    one_line_refusal(code, err, "data row 2", words)


def test_a_trace_gives_one_prefix_identity_only(capsys, tmp_path):
    bad = tmp_path / "both.csv"
    bad.write_text(
        "num_prefill_tokens,num_decode_tokens,prefix_group,prefix_tokens,hash_ids\n600,4,0,600,1 2\n"
    )
    code, _, err = cli(capsys, "trace", "stats", str(bad))
    one_line_refusal(code, err, "keep one prefix identity")


def test_trace_stats_reports_the_rate_over_time_and_the_prefix_reuse(capsys, tmp_path):
    trace = _mooncake_clone(tmp_path, TREE_ROWS) / "FAST25-release" / "traces" / "conversation_trace.jsonl"
    png = tmp_path / "rate.png"
    code, out, err = cli(capsys, "trace", "stats", str(trace), "--window", "1", "--plot", str(png))
    assert code == 0, err
    out = " ".join(out.split())
    # windows [0, 1) and [1, 1.5]: 2 requests in 1 s, then 1 in the last half second
    assert "peak 2.00 req/s (window at 0 s), lowest 2.00 req/s" in out and "mean 1.33 req/s" in out
    # 96 + 87 + 128 whole 16-token blocks; B hits [1, 2] (64 blocks), C hits [1, 2] and B's [5] up to B's
    # 1400 + 5 - 1 computed tokens (87 blocks in all): 64 + 87 = 151 of 311
    assert "prefix reuse: 48.6% of 311 whole 16-token prompt blocks" in out
    assert png.stat().st_size > 0


def test_trace_stats_plot_needs_arrival_times(capsys, tmp_path):
    plain = tmp_path / "plain.csv"
    plain.write_text("num_prefill_tokens,num_decode_tokens\n10,2\n")
    code, _, err = cli(capsys, "trace", "stats", str(plain), "--plot", str(tmp_path / "r.png"))
    one_line_refusal(code, err, "no arrival times", "--plot")
    assert not (tmp_path / "r.png").exists()


# -- load curves -------------------------------------------------------------------------------------------


def test_a_load_curve_warps_poisson_arrivals_into_its_rate():
    """qps 10 for 100 s at x1, then 100 s at x3, then x0 for 100 s, then x1: counts follow the curve."""
    from simserve.workload import arrival_times

    curve = LoadCurve(np.array([0.0, 100.0, 200.0, 300.0]), np.array([1.0, 3.0, 0.0, 1.0]))
    t = curve.warp(arrival_times(20000, 10.0, "poisson", seed=4))
    counts, _ = np.histogram(t, bins=[0, 100, 200, 300, 400])
    assert abs(counts[0] - 1000) < 120 and abs(counts[1] - 3000) < 200 and counts[2] == 0
    assert abs(counts[3] - 1000) < 120
    assert np.all(np.diff(t) >= 0)


def test_a_load_curve_thins_and_duplicates_recorded_arrivals_with_the_seed():
    recorded = np.arange(4000) * 0.1  # 10 req/s for 400 s
    curve = LoadCurve(np.array([0.0, 200.0]), np.array([0.25, 2.0]))
    rows, times = curve.thin(recorded, seed=7)
    assert abs((times < 200).sum() - 500) < 80 and abs((times >= 200).sum() - 4000) < 100
    again = curve.thin(recorded, seed=7)
    assert np.array_equal(again[0], rows) and np.array_equal(again[1], times)
    assert not np.array_equal(curve.thin(recorded, seed=8)[1], times)
    assert np.all(np.diff(times) >= 0) and np.array_equal(np.unique(rows), np.unique(rows[times >= 0]))


@pytest.mark.parametrize(
    "text, words",
    [
        ("time_s,multiplier\n0,1\n60,-0.5\n", ["data row 2", "finite and >= 0"]),
        ("time_s,multiplier\n0,1\n60,nan\n", ["data row 2", "finite and >= 0"]),
        ("time_s,multiplier\n0,inf\n", ["data row 1", "finite and >= 0"]),
        ("time_s,multiplier\n0,1\n60,2\n30,1\n", ["data row 3", "sort the rows"]),
        ("time_s,multiplier\n10,1\n", ["data row 1", "starts at time_s 0"]),
        ("time_s,multiplier\n0,1\n60,0\n", ["data row 2", "end the curve with a positive multiplier"]),
        ("time,rate\n0,1\n", ["no time_s column"]),
        ("time_s,multiplier\n0,1\n60,abc\n", ["data row 2", "'abc'"]),
    ],
)
def test_a_bad_load_curve_is_refused_in_one_line_before_anything_is_written(capsys, tmp_path, text, words):
    curve = tmp_path / "curve.csv"
    curve.write_text(text)
    out = tmp_path / "out"
    code, _, err = cli(capsys, "run", "--requests", "8", "--load-curve", str(curve), "--out", str(out))
    one_line_refusal(code, err, *words)
    assert not out.exists()
    load_curve.cache_clear()
    with pytest.raises(SimserveError):
        load_curve(str(curve))


def test_replay_of_a_trace_without_arrival_times_is_refused_naming_the_trace(capsys, tmp_path):
    out = tmp_path / "out"
    code, _, err = cli(
        capsys, "run", "--requests", "8", "--trace", "sharegpt", "--arrival", "replay", "--out", str(out)
    )
    one_line_refusal(code, err, "--arrival replay", "'sharegpt' has none", "azure-conv-2023")
    assert not out.exists()


def test_answer_driven_conversations_need_conversations_not_block_ids(capsys, tmp_path):
    code, _, err = cli(
        capsys,
        "run",
        "--requests",
        "8",
        "--trace",
        "mooncake-conversation",
        "--arrival",
        "conversation",
        "--out",
        str(tmp_path / "o"),
    )
    one_line_refusal(code, err, "--arrival conversation needs a multi-turn trace")
    assert not (tmp_path / "o").exists()


def test_a_load_curve_cannot_reshape_answer_driven_conversations(capsys, tmp_path):
    curve = tmp_path / "c.csv"
    curve.write_text("time_s,multiplier\n0,1\n")
    code, _, err = cli(
        capsys,
        "run",
        "--requests",
        "8",
        "--trace",
        "sharegpt-multiturn",
        "--arrival",
        "conversation",
        "--load-curve",
        str(curve),
        "--out",
        str(tmp_path / "o"),
    )
    one_line_refusal(code, err, "--load-curve", "--arrival replay")


def test_a_mooncake_replay_under_a_load_curve_runs_with_prefix_hits(tmp_path):
    """The shipped conversation trace replayed at its recorded times for its first 300 requests, doubled after
    30 s (about 1.5x the requests), and vllm-v1's prefix cache hits the blocks they share."""
    from simserve.sim.scenario import Scenario, simulate_scenario

    curve = tmp_path / "c.csv"
    curve.write_text("time_s,multiplier\n0,1\n30,2\n")
    base = Scenario(
        model="llama-3-8b",
        gpu="h100",
        trace="mooncake-conversation",
        num_requests=300,
        arrival="replay",
        policy="vllm-v1",
        prefix_caching=True,
        max_model_len=131072,
        allow_long_context=True,
        stop_when_overloaded=False,
    )
    plain, _ = simulate_scenario(base, 1.0)
    shaped, _ = simulate_scenario(Scenario(**{**base.__dict__, "load_curve": str(curve)}), 1.0)
    late = plain.reqs.arrived >= 30
    assert plain.reqs.n == 300 and abs(shaped.reqs.n - (300 + late.sum())) < 4 * np.sqrt(late.sum()) + 5
    # nearly every request opens with hash id 0 (a shared 512-token system prompt): it hits once computed
    assert (plain.reqs.cached_tokens >= 512).sum() > 250


# -- ServeGen ----------------------------------------------------------------------------------------------


def _servegen_clone(tmp_path):
    pool = tmp_path / "ServeGen" / "data" / "language" / "m-large"
    pool.mkdir(parents=True)
    # client 3: 0.5 req/s Gamma in window 0, nothing in window 600, 0.2 req/s Weibull in window 1200
    (pool / "chunk-3-trace.csv").write_text(
        "0,0.5,1.2,Gamma,0.7,2.8\n600,0,0,,0,0\n1200,0.2,0.9,Weibull,1.1,5.0\n"
    )
    lengths = {"input_tokens": "{100: 0.25, 300: 0.75}", "output_tokens": "{0: 0.5, 7: 0.5}"}
    (pool / "chunk-3-dataset.json").write_text(json.dumps({"0": lengths}))
    # client 4: its dataset file is missing (skipped and counted)
    (pool / "chunk-4-trace.csv").write_text("0,1.0,1.0,Gamma,1.0,1.0\n")
    return tmp_path / "ServeGen"


def test_a_servegen_day_follows_each_clients_windows_and_lengths(capsys, tmp_path):
    out = tmp_path / "day.csv.gz"
    args = (
        "trace",
        "build",
        "servegen",
        "--from",
        str(_servegen_clone(tmp_path)),
        "--hours",
        "0.5",
        "--out",
        str(out),
    )
    code, _, err = cli(capsys, *args)
    assert code == 0, err
    t = load_trace(str(out))
    first, third = (t.arrived_at < 600).sum(), (t.arrived_at >= 1200).sum()
    # ceil(rate * 600) gaps rescaled to the window; the last lands on its end and is left out (or just inside)
    assert first in (299, 300) and third in (119, 120) and first + third == len(t)
    assert set(t.prompt_tokens.tolist()) <= {100, 300} and set(t.output_tokens.tolist()) <= {1, 7}  # 0 -> 1
    assert 0.6 < (t.prompt_tokens == 300).mean() < 0.9
    record = json.loads((tmp_path / "day.provenance.json").read_text())
    assert (
        record["source"]["licence"].startswith("Apache-2.0")
        and record["counts"]["clients_without_dataset_skipped"] == 1
    )
    again = tmp_path / "again.csv.gz"
    assert cli(capsys, *args[:-1], str(again))[0] == 0
    assert gzip.decompress(again.read_bytes()) == gzip.decompress(out.read_bytes())  # seeded: the same day


@pytest.mark.parametrize(
    "extra, words",
    [
        ([], ["--from", "alibaba/ServeGen"]),
        (["--from", "CLONE", "--category", "multimodal"], ["--category multimodal", "language or reason"]),
        (["--from", "CLONE", "--pool", "m-huge"], ["no such folder", "--pool"]),
        (["--from", "CLONE", "--rate-scale", "-1"], ["--rate-scale"]),
        (["--from", "CLONE", "--hours", "0"], ["--hours"]),
    ],
)
def test_bad_servegen_builds_are_refused_in_one_line(capsys, tmp_path, extra, words):
    clone = str(_servegen_clone(tmp_path))
    out = tmp_path / "day.csv"
    code, _, err = cli(
        capsys,
        "trace",
        "build",
        "servegen",
        *[clone if a == "CLONE" else a for a in extra],
        "--out",
        str(out),
    )
    one_line_refusal(code, err, *words)
    assert not out.exists()


def test_servegen_options_belong_to_servegen(capsys, tmp_path):
    code, _, err = cli(
        capsys, "trace", "build", "azure-code-2023", "--hours", "2", "--out", str(tmp_path / "t.csv")
    )
    one_line_refusal(code, err, "--hours is a servegen option")
