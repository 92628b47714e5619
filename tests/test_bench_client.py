"""`vllm bench serve`'s datasets and clients: random/fixed/ShareGPT lengths, its send times, --qps inf, the
closed-loop client (--max-concurrency), and its printed metrics."""

from __future__ import annotations

import math

import numpy as np
import pytest
from cli_runner import cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simserve.errors import SimserveError
from simserve.sim import core_run, simulate
from simserve.sim.bench_report import bench_metrics, format_bench
from simserve.sim.config import SimConfig
from simserve.sim.request import DONE, IGNORED
from simserve.sim.testing import ConstantTimer, LinearTimer
from simserve.workload import arrival_times
from simserve.workload import bench_datasets as bd


# -- datasets ---------------------------------------------------------------------------------------------
def test_random_lengths_are_the_ones_vllm_draws():
    # vLLM 0.33.0's get_sampling_params(np.random.default_rng(3), 5, 0.25, 1024, 128, tokenizer with one
    # special token), run in its own environment: inputs [1183, 810, 859, 888, 860], outputs [148, 152, 133,
    # 98, 102]. The engine sees the sampled prompt plus the special token the server adds back.
    prompt, output = bd.random_lengths(5, 3, 1024, 128, 0.25)
    assert prompt.tolist() == [1184, 811, 860, 889, 861]
    assert output.tolist() == [148, 152, 133, 98, 102]


@pytest.mark.parametrize("ratio", [0.0, 0.1, 0.5, 0.9])
def test_random_lengths_stay_in_vllms_closed_ranges(ratio):
    prompt, output = bd.lengths(bd.parse(f"random:500:40:{ratio}"), 4000, 1)
    real = 500 - 1
    assert (
        prompt.min() >= math.floor(real * (1 - ratio)) + 1
        and prompt.max() <= math.ceil(real * (1 + ratio)) + 1
    )
    assert output.min() >= max(math.floor(40 * (1 - ratio)), 1) and output.max() <= math.ceil(
        40 * (1 + ratio)
    )
    if ratio:  # uniform: both ends are reached and the mean sits in the middle
        assert prompt.min() == math.floor(real * (1 - ratio)) + 1 and output.max() == math.ceil(
            40 * (1 + ratio)
        )
        assert abs(prompt.mean() - (real + 1)) < 0.05 * real


def test_fixed_and_defaults():
    p, o = bd.lengths(bd.parse("fixed:300:20"), 7, 0)
    assert p.tolist() == [300] * 7 and o.tolist() == [20] * 7
    assert bd.parse("random") == bd.BenchDataset("random", 1024, 128, 0.0)  # vLLM's defaults
    assert bd.parse("random:2048") == bd.BenchDataset("random", 2048, 128, 0.0)
    p, o = bd.lengths(bd.parse("random:1024:128"), 50, 9)  # ratio 0: exactly IN and OUT
    assert set(p.tolist()) == {1024} and set(o.tolist()) == {128}


@pytest.mark.parametrize(
    "spec",
    [
        "random:abc",
        "random:100:10:1.0",
        "random:100:10:-0.1",
        "fixed:100",
        "random:0:10",
        "fixed:1:2:3",
        "sharegpt-bench:0",
        "random:1:10:0.5",
    ],
)
def test_bad_dataset_specs_are_refused(spec):
    with pytest.raises(SimserveError, match="spec|too small"):
        bd.lengths(bd.parse(spec), 10, 0)


def test_sharegpt_bench_applies_vllms_filter_and_is_seeded():
    p, o = bd.lengths(bd.parse("sharegpt-bench"), 3000, 0)
    assert (
        len(p) == 3000 and (p >= 4).all() and (o >= 4).all() and (p <= 1024).all() and (p + o <= 2048).all()
    )
    again = bd.lengths(bd.parse("sharegpt-bench"), 3000, 0)
    assert np.array_equal(p, again[0]) and np.array_equal(o, again[1])
    assert not np.array_equal(p, bd.lengths(bd.parse("sharegpt-bench"), 3000, 1)[0])
    p, o = bd.lengths(bd.parse("sharegpt-bench:300"), 100, 0)
    assert set(o.tolist()) == {300} and (p + 300 <= 2048).all()


def test_sharegpt_sampling_takes_valid_pairs_in_shuffled_order_then_oversamples():
    pairs = [(10, 10), (2, 50), (2000, 5), (30, 40), (50, 3)]  # only (10, 10) and (30, 40) are valid
    p, o = bd.sample_like_vllm(pairs, 6, seed=0, output_len=None)
    assert sorted(set(zip(p.tolist(), o.tolist(), strict=True))) == [(10, 10), (30, 40)] and len(p) == 6
    # with --sharegpt-output-len the output check is skipped: (50, 3) becomes (50, 8)
    p, o = bd.sample_like_vllm(pairs, 3, seed=0, output_len=8)
    assert sorted(zip(p.tolist(), o.tolist(), strict=True)) == [(10, 8), (30, 8), (50, 8)]


# -- arrivals -----------------------------------------------------------------------------------------------
def test_vllm_bench_send_times_are_vllms():
    # vLLM 0.33.0's get_request(6 requests, rate 2, burstiness 1) after np.random.seed(3), its clock stubbed
    assert arrival_times(6, 2.0, "vllm-bench", seed=3).tolist() == [
        0.3162665931418066,
        0.8029507904952168,
        0.9388047268243997,
        1.2213841828433623,
        2.1044172629326217,
        3.0,
    ]


def test_vllm_bench_ends_at_n_over_rate_and_burstiness_sets_the_spread():
    for cv in (0.5, 1.0, 2.0):
        t = arrival_times(20_000, 8.0, "vllm-bench", seed=1, cv=cv)
        assert t[-1] == pytest.approx(20_000 / 8.0, rel=1e-12) and (np.diff(t) >= 0).all()
        gaps = np.diff(t, prepend=0.0)
        assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.05)


@pytest.mark.parametrize("process", ["poisson", "gamma", "vllm-bench", "poisson-clipped"])
def test_infinite_rate_sends_everything_at_zero(process):
    assert arrival_times(5, math.inf, process).tolist() == [0.0] * 5


# -- the closed-loop client ---------------------------------------------------------------------------
def _run(n, arrivals, cfg):
    rng = np.random.default_rng(4)
    p, o = rng.integers(20, 200, n), rng.integers(2, 20, n)
    return simulate(p, o, arrivals, LinearTimer(0.004, 2e-5, 1e-7), 4000, cfg)


@pytest.mark.parametrize("limit", [1, 3, 16])
def test_closed_loop_sends_each_request_when_a_slot_frees(limit):
    n = 60
    gen = arrival_times(n, 1000.0, seed=2)  # far faster than service: the limit binds
    raw = _run(n, gen, SimConfig(policy="vllm-v1", max_concurrency=limit))
    r = raw.reqs
    assert (r.status == DONE).all()
    done_times = np.sort(r.completed)
    for i in range(n):  # vLLM's FIFO semaphore: max(its own send time, the (i − N + 1)-th completion)
        freed = done_times[i - limit] if i >= limit else 0.0
        assert r.arrived[i] == max(gen[i], freed)
    # never more than N in flight at the engine
    events = sorted([(t, 1) for t in r.arrived] + [(t, -1) for t in r.completed], key=lambda e: (e[0], e[1]))
    assert max(np.cumsum([e[1] for e in events])) == limit


def test_a_limit_that_never_binds_changes_nothing():
    n = 40
    gen = arrival_times(n, 2.0, seed=5)
    cfg = SimConfig(policy="sarathi")
    open_loop = _run(n, gen, cfg)
    closed = _run(n, gen, SimConfig(policy="sarathi", max_concurrency=n))
    for name in ("arrived", "first_token", "completed", "preemptions"):
        assert np.array_equal(getattr(open_loop.reqs, name), getattr(closed.reqs, name))


def test_one_at_a_time_by_hand():
    # concurrency 1, each request prefills in one 0.1 s step and decodes 3 more: 0.4 s a request
    cfg = SimConfig(policy="vllm-v1", max_concurrency=1)
    raw = simulate(np.full(5, 100), np.full(5, 4), np.zeros(5), ConstantTimer(0.1), 4000, cfg)
    assert raw.reqs.arrived.tolist() == pytest.approx([0.0, 0.4, 0.8, 1.2, 1.6])
    m = bench_metrics(raw, math.inf)
    assert m["mean_ttft_ms"] == pytest.approx(100.0) and m["p99_tpot_ms"] == pytest.approx(100.0)
    assert m["median_e2el_ms"] == pytest.approx(400.0) and m["duration"] == pytest.approx(2.0)
    assert m["request_throughput"] == pytest.approx(2.5) and m["output_throughput"] == pytest.approx(10.0)
    assert m["total_input_tokens"] == 500 and m["completed"] == 5 and m["max_concurrency"] == 1
    assert m["mean_itl_ms"] == pytest.approx(100.0) and m["median_itl_ms"] == pytest.approx(100.0, rel=2e-3)
    text = format_bench(m)
    assert "Maximum request concurrency:             1" in text and "Mean TPOT (ms):" in text
    assert "Request rate configured" not in text  # vLLM leaves it out at rate inf


def test_closed_loop_runs_on_the_compiled_core(capsys, monkeypatch):
    monkeypatch.delenv(core_run.ENV, raising=False)
    if not core_run.compiled_available():
        pytest.skip("no compiled core in this install")
    cfg = SimConfig(policy="vllm-v1", max_concurrency=2)
    assert core_run.choose(cfg, ConstantTimer(0.1)) is not None
    assert "closed-loop" not in capsys.readouterr().err


# -- the command line -----------------------------------------------------------------------------------
def test_run_prints_vllms_metrics_for_a_bench_workload(capsys, tmp_path):
    code, out, _ = cli(
        capsys,
        "run",
        "--policy",
        "vllm-v1",
        "--trace",
        "random:512:32:0.5",
        "--requests",
        "40",
        "--qps",
        "inf",
        "--max-concurrency",
        "8",
        "--out",
        str(tmp_path / "o"),
    )
    assert code == 0, out
    assert "Serving Benchmark Result" in out and "Maximum request concurrency:             8" in out
    import json

    doc = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert doc["vllm_bench_serve"]["completed"] == 40 and doc["scenario"]["max_concurrency"] == 8


@pytest.mark.parametrize(
    ("args", "word"),
    [
        (["--max-concurrency", "0"], "--max-concurrency"),
        (["--trace", "random:10:10:1.5"], "range ratio"),
        (["--qps", "nan"], "--qps"),
        (["--trace", "sharegpt-bench", "--arrival", "replay"], "replay"),
    ],
)
def test_bad_client_input_is_one_line(capsys, tmp_path, args, word):
    code, _, err = cli(capsys, "run", "--requests", "4", "--out", str(tmp_path / "o"), *args)
    assert code == 2 and err.count("\n") == 1 and word in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    policy=st.sampled_from(["vllm-v1", "sarathi", "vllm", "orca"]),
    limit=st.integers(1, 12),
    pp=st.integers(1, 2),
    replicas=st.integers(1, 2),
    rate=st.sampled_from([5.0, 100.0, math.inf]),
    blocks=st.integers(60, 400),
    seed=st.integers(0, 10_000),
)
def test_closed_loop_invariants_on_random_workloads(policy, limit, pp, replicas, rate, blocks, seed):
    rng = np.random.default_rng(seed)
    n = 40
    gen = arrival_times(n, rate, seed=seed)
    cfg = SimConfig(
        policy=policy, max_concurrency=limit, num_replicas=replicas, max_model_len=512, budget=128
    )
    timer = LinearTimer(0.003, 2e-5, 1e-7, num_stages=pp)
    raw = simulate(rng.integers(1, 400, n), rng.integers(1, 60, n), gen, timer, blocks, cfg)
    r = raw.reqs
    done = r.status == DONE
    assert (done | (r.status == IGNORED)).all()
    # a request ignored as too long finishes when it arrives (vLLM's server refuses it at once)
    finished = np.sort(np.where(done, r.completed, r.arrived))
    for i in range(n):  # the FIFO semaphore: its own send time, or the (i − N + 1)-th finish if later
        assert r.arrived[i] == max(gen[i], finished[i - limit] if i >= limit else 0.0)
    events = sorted(
        [(t, 1) for t in r.arrived[done]] + [(t, -1) for t in r.completed[done]], key=lambda e: (e[0], e[1])
    )
    assert max(np.cumsum([e[1] for e in events])) <= limit
