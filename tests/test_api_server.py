"""The API server as a server (sim/api_server.py): FIFO queues of CPU work in front of the engine, by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from simserve.sim import simulate
from simserve.sim.bench_report import bench_metrics
from simserve.sim.config import SimConfig
from simserve.sim.metrics import request_columns, summarize
from simserve.sim.testing import ConstantTimer

V1 = dict(policy="vllm-v1", max_model_len=4096)


def _run(n, prompt, output, cfg, step=0.01, arrived=None, blocks=4000):
    arrived = np.zeros(n) if arrived is None else np.asarray(arrived, dtype=float)
    return simulate(np.full(n, prompt), np.full(n, output), arrived, ConstantTimer(step), blocks, cfg)


def test_requests_reach_the_engine_when_their_input_work_is_done():
    # three sent at t = 0 to one process, 10 ms each: the engine sees them at 10, 20 and 30 ms, in order
    cfg = SimConfig(**V1, api_servers=1, api_request_s=0.01)
    raw = _run(3, 100, 1, cfg)
    assert raw.reqs.arrived.tolist() == pytest.approx([0.01, 0.02, 0.03])
    assert raw.api.sent.tolist() == [0.0, 0.0, 0.0]
    assert raw.api.input_wait.tolist() == pytest.approx([0.0, 0.01, 0.02])
    # with two processes, two at a time (requests go to them in turn)
    raw = _run(3, 100, 1, SimConfig(**V1, api_servers=2, api_request_s=0.01))
    assert raw.reqs.arrived.tolist() == pytest.approx([0.01, 0.01, 0.02])


def test_a_prompt_token_cost_adds_to_the_input_work():
    raw = _run(1, 100, 1, SimConfig(**V1, api_servers=1, api_request_s=0.002, api_prompt_token_s=1e-5))
    assert raw.reqs.arrived[0] == pytest.approx(0.002 + 100 * 1e-5)


def test_the_client_sees_each_step_after_its_output_work():
    # one request, 3 tokens, 10 ms steps, 1 ms per token: client times are the engine's + 1 ms, gaps 10 ms
    cfg = SimConfig(**V1, api_servers=1, api_request_s=0.005, api_token_s=0.001)
    raw = _run(1, 100, 3, cfg)
    r, api = raw.reqs, raw.api
    assert r.arrived[0] == pytest.approx(0.005) and r.first_token[0] == pytest.approx(0.015)
    assert api.first[0] == pytest.approx(r.first_token[0] + 0.001)
    assert api.done[0] == pytest.approx(r.completed[0] + 0.001)
    assert api.itl.total == 2 and api.itl_max[0] == pytest.approx(0.01)
    s = summarize(raw)
    assert s.ttft_p50_s == pytest.approx(0.016) and s.e2e_p50_s == pytest.approx(0.036)
    assert s.api_server["engine_ttft_p50_s"] == pytest.approx(0.01)
    cols = request_columns(raw)
    assert cols["client_first_token_at_s"][0] == api.first[0] and cols["sent_at_s"][0] == 0.0


def test_output_work_queues_behind_a_busy_process_and_the_engine_does_not_wait():
    # 20 decodes per step at 1 ms each: 20 ms of output work per 10 ms step; the process falls behind, the
    # engine's own times do not move (it never waits for the API server)
    base = SimConfig(**V1, api_servers=1, api_request_s=0.0)
    fast, slow = (_run(20, 50, 10, SimConfig(**{**base.__dict__, "api_token_s": c})) for c in (0.0, 0.001))
    for name in ("arrived", "first_token", "completed", "last_token"):
        assert np.array_equal(getattr(fast.reqs, name), getattr(slow.reqs, name)), name
    assert np.array_equal(
        fast.api.done, fast.reqs.completed
    )  # no output work: the client sees the engine's times
    lag = slow.api.done - slow.reqs.completed
    assert lag.min() > 0.09  # ten steps of 20 ms of work behind 10 ms steps: ~0.1 s behind at the end
    assert slow.api.busy[0] == pytest.approx(20 * 10 * 0.001)
    m = bench_metrics(slow, math.inf)
    assert m["duration"] == pytest.approx(float(slow.api.done.max()))
    assert m["mean_itl_ms"] == pytest.approx(20.0, rel=0.05)  # the client's gaps: the process's pace


def test_the_processes_cap_throughput_when_requests_are_short():
    # 200 requests at once, 4 tokens each: each costs 4 ms + 4 x 0.1 ms of one process's CPU, so one process
    # completes at most ~227 req/s, two ~455, however fast the engine
    out = {}
    for count in (1, 2):
        cfg = SimConfig(**V1, api_servers=count, api_request_s=0.004, api_token_s=1e-4)
        raw = _run(200, 128, 4, cfg, step=0.001)
        out[count] = bench_metrics(raw, math.inf)["request_throughput"]
        assert out[count] <= count / 0.0044 * 1.001
        assert summarize(raw).api_server["utilization"] == pytest.approx([1.0] * count, abs=0.05)
    assert out[1] > 200 and out[2] > 1.8 * out[1]


def test_a_closed_loop_client_sends_when_it_sees_the_answer():
    cfg = SimConfig(
        **V1, max_concurrency=1, api_servers=1, api_request_s=0.003, api_token_s=0.001, frontend_s=0.05
    )
    raw = _run(3, 100, 2, cfg)
    api = raw.api
    for i in range(2):  # the next one leaves the client when it has the answer, network included
        assert api.sent[i + 1] == api.done[i] + 0.05
        assert raw.reqs.arrived[i + 1] == pytest.approx(api.sent[i + 1] + 0.003)
    m = bench_metrics(raw, math.inf)
    assert m["mean_e2el_ms"] == pytest.approx(1000 * float(np.mean(api.done - api.sent + 0.05)))


def test_a_refused_request_frees_its_slot_at_once():
    # the first prompt is longer than the engine takes: the client gets its error when it reaches the engine
    cfg = SimConfig(**V1, max_concurrency=1, api_servers=1, api_request_s=0.002)
    prompt = np.array([5000, 100])
    raw = simulate(prompt, np.array([2, 2]), np.zeros(2), ConstantTimer(0.01), 4000, cfg)
    assert raw.api.sent[1] == pytest.approx(0.002) and raw.reqs.arrived[1] == pytest.approx(0.004)
    assert summarize(raw).ignored == 1


def test_an_open_loop_run_queues_behind_the_api_server_and_says_so():
    cfg = SimConfig(**V1, api_servers=1, api_request_s=0.004, api_token_s=1e-4)
    raw = _run(500, 128, 4, cfg, step=0.002, arrived=np.arange(500) / 400.0)  # 400 req/s offered, ~227 served
    s = summarize(raw).as_dict()["api_server"]
    assert s["input_wait_p99_s"] > 0.5 and s["utilization"][0] > 0.95
    assert s["processes"] == 1 and s["request_cpu_ms"] == pytest.approx(4.0)


def test_runs_without_the_model_keep_their_summary_keys():
    raw = _run(4, 100, 3, SimConfig(**V1))
    assert raw.api is None and "api_server" not in summarize(raw).as_dict()
    assert "sent_at_s" not in request_columns(raw)


@pytest.mark.parametrize("closed", [None, 3])
@pytest.mark.parametrize("count", [1, 2])
def test_a_free_api_server_changes_nothing_the_engine_does(count, closed):
    """Zero costs: requests enter the engine when sent and clients see tokens when the engine makes them, so
    the engine-side results are those of a run without the model, and the client's times are the engine's."""
    rng = np.random.default_rng(7)
    n = 40
    prompt, output = rng.integers(1, 600, n), rng.integers(1, 50, n)
    arrived = np.cumsum(rng.exponential(0.02, n))
    base = SimConfig(policy="sarathi", max_model_len=1024, max_concurrency=closed, frontend_s=0.004)
    free = SimConfig(**{**base.__dict__, "api_servers": count})
    a, b = (simulate(prompt, output, arrived, ConstantTimer(0.01), 300, cfg) for cfg in (base, free))
    for name in ("arrived", "scheduled", "first_token", "completed", "preemptions"):
        assert np.array_equal(getattr(a.reqs, name), getattr(b.reqs, name), equal_nan=True), name
    assert np.array_equal(b.api.first, b.reqs.first_token) and np.array_equal(b.api.done, b.reqs.completed)


def test_attention_dp_ranks_stream_through_the_api_servers(moe_dp_timer):
    """The DP lockstep (reference only): every rank's tokens go through the API servers, none is lost."""
    cfg = SimConfig(
        policy="vllm-v1",
        max_model_len=4096,
        num_replicas=2,
        dp_attention=2,
        api_servers=2,
        api_request_s=0.002,
        api_token_s=1e-4,
    )
    raw = simulate(np.full(30, 200), np.full(30, 8), np.zeros(30), moe_dp_timer, 2000, cfg)
    assert (raw.api.done >= raw.reqs.completed).all() and (raw.api.first > raw.reqs.first_token).all()
    assert int(raw.api.tokens.sum()) == 30 * 8 and raw.api.itl.total == 30 * 7
