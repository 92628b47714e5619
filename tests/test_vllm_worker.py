"""vLLM 0.33.0's worker: CUDA-graph capture sizes and padding, and its memory profile
(simserve/vllm_worker.py). tests/conformance/test_bench_client_vllm.py checks the capture sizes against vLLM's
own method."""

from __future__ import annotations

import json

import numpy as np
import pytest
from cli_runner import cli

from simserve.errors import SimserveError
from simserve.memory import GIB, activation_bytes_per_token, kv_bytes_per_block, weights_bytes_per_gpu
from simserve.sim import SimConfig, core_run, simulate
from simserve.sim.scenario import Scenario, _timer, check_scenario, simulate_scenario
from simserve.vllm_worker import MIB, NON_TORCH_BYTES, capture_sizes, padded, padded_timer, worker_memory

A100 = 80


def test_the_default_capture_sizes_by_hand():
    # A100 defaults (256 sequences, 2048 tokens): 1, 2, 4, every 8 to 248, every 16 from 256 to 512
    sizes = capture_sizes(256, 2048, A100)
    assert sizes == (1, 2, 4, *range(8, 256, 8), *range(256, 513, 16)) and len(sizes) == 51
    assert capture_sizes(8, 2048, A100) == (1, 2, 4, 8, 16)  # max = 2 × max_num_seqs
    assert capture_sizes(256, 100, A100)[-1] == 100  # the token budget is captured when it is below the max
    assert capture_sizes(1024, 16384, 100)[-1] == 1024  # data-centre Blackwell: up to 1024


def test_padding_goes_to_the_next_captured_size_and_stops_past_the_largest():
    sizes = capture_sizes(256, 2048, A100)
    assert [padded(t, sizes) for t in (0, 1, 3, 5, 9, 249, 257, 512, 513, 2000)] == [
        0,
        1,
        4,
        8,
        16,
        256,
        272,
        512,
        513,
        2000,
    ]


@pytest.fixture(scope="module")
def timer():
    s = Scenario(model="mistral-7b", gpu="a100", policy="vllm-v1")
    return _timer(s.deployment(), None, True, False)


def test_a_padded_batch_costs_what_its_captured_size_costs(timer):
    sizes = capture_sizes(256, 2048, A100)
    graphs = padded_timer(timer, sizes)
    kv = np.full(9, 700)
    # 9 decodes run as a 16-token graph: the token-dependent work of 16, the attention of the 9 real ones
    tok9, tok16 = timer.breakdown([], kv), timer.breakdown([], np.full(16, 700))
    got = graphs.breakdown([], kv)
    assert got["linear"] == tok16["linear"] and got["all_reduce"] == tok16["all_reduce"]
    assert got["attention_decode"] == tok9["attention_decode"] and got["cpu_overhead"] == tok9["cpu_overhead"]
    assert graphs([], kv) == pytest.approx(sum(got.values()), rel=1e-12) and graphs([], kv) > timer([], kv)
    # a mixed batch of 300 tokens runs piecewise at 304; past 512 tokens it runs eagerly at its own size
    assert graphs([(291, 0)], kv) == pytest.approx(
        timer([(291, 0)], kv)
        + timer.breakdown([(295, 0)], kv)["linear"]
        - timer.breakdown([(291, 0)], kv)["linear"]
        + sum(
            timer.breakdown([(295, 0)], kv)[k] - timer.breakdown([(291, 0)], kv)[k]
            for k in ("elementwise", "all_reduce")
        ),
        rel=1e-9,
    )
    assert graphs([(1000, 0)], kv) == timer([(1000, 0)], kv)
    assert graphs([(16, 0)], []) == timer([(16, 0)], [])  # a captured size needs no padding


def test_worker_memory_term_by_term():
    s = Scenario(model="mistral-7b", gpu="a100", policy="vllm-v1", vllm_worker=True, memory_utilization=0.92)
    dep = s.deployment()
    sizes = s.cudagraph_sizes()
    mem = worker_memory(dep, 2048, 256, sizes)
    act = activation_bytes_per_token(dep)
    assert mem.capacity == 0.92 * dep.gpu.memory_bytes and mem.weights == weights_bytes_per_gpu(dep)
    assert mem.activation_peak == max(act * 2048, 256 * 32000 * 10)
    # FULL graphs for decode batches of up to 256 requests (35 sizes), PIECEWISE for all 51
    assert mem.num_graphs == 35 + 51
    assert mem.cudagraphs == act * 256 + 34 * MIB + act * 512 + 50 * MIB
    assert mem.non_torch == NON_TORCH_BYTES[1]
    block = kv_bytes_per_block(dep)
    assert mem.vllm_blocks == int(
        (mem.capacity - mem.weights - mem.activation_peak - mem.cudagraphs - mem.non_torch) // block
    )
    assert check_scenario(s) == mem.num_blocks == mem.vllm_blocks - 1  # the null block
    eager = worker_memory(dep, 2048, 256, ())
    assert eager.cudagraphs == 0 and eager.num_graphs == 0 and eager.vllm_blocks > mem.vllm_blocks
    assert 0.1 * GIB < mem.cudagraphs < 0.5 * GIB  # a 7B model's graphs: a few hundred MiB, not GiBs
    # the H100 defaults of a 128k-vocabulary model: the sampler over 1024 dummy requests is the peak
    big = worker_memory(
        Scenario(model="llama3-8b", gpu="h100", policy="vllm-v1").deployment(), 8192, 1024, ()
    )
    assert big.activation_peak == big.sampler_peak > act * 8192


def test_the_worker_needs_vllm_v1_and_room_for_one_request():
    with pytest.raises(SimserveError, match="--policy vllm-v1"):
        check_scenario(Scenario(policy="sarathi", vllm_worker=True))
    with pytest.raises(SimserveError, match="cannot hold one"):
        # 18% of 79 GiB leaves about 0.4 GiB for KV beside Mistral-7B: not the 1 GiB an 8192-token request
        # needs
        check_scenario(Scenario(policy="vllm-v1", vllm_worker=True, memory_utilization=0.18))


def test_graphs_change_the_run_and_eager_mode_runs_unpadded():
    base = dict(model="mistral-7b", gpu="a100", policy="vllm-v1", num_requests=150, vllm_worker=True)
    assert Scenario(**base, enforce_eager=True).cudagraph_sizes() == ()
    graphs, _ = simulate_scenario(Scenario(**base), 3.0)
    eager, _ = simulate_scenario(Scenario(**base, enforce_eager=True), 3.0)
    assert graphs.num_blocks < eager.num_blocks  # the graphs' memory comes out of the KV pool
    busy = [float((r.log.to_frame().end_s - r.log.to_frame().start_s).sum()) for r in (graphs, eager)]
    assert busy[0] > busy[1]  # padded batches take longer on the GPU
    assert not np.array_equal(graphs.reqs.completed, eager.reqs.completed)


def test_run_says_how_many_blocks_and_why(capsys, tmp_path):
    code, out, _ = cli(
        capsys,
        "run",
        "--policy",
        "vllm-v1",
        "--engine",
        "vllm",
        "--requests",
        "30",
        "--out",
        str(tmp_path / "o"),
    )
    assert code == 0
    flat = " ".join(out.split())
    assert "KV blocks (vLLM 0.33.0's worker" in flat and "CUDA graphs" in flat and "non-torch" in flat
    doc = json.loads((tmp_path / "o" / "summary.json").read_text())
    w = doc["vllm_worker"]
    assert w["usable_blocks"] == doc["summary"]["kv_blocks_per_replica"] == w["vllm_num_gpu_blocks"] - 1
    assert w["capacity_gib"] == pytest.approx(0.92 * 79.1, rel=0.01)  # vLLM's default utilization
    assert w["cudagraph_capture_sizes"][-1] == 512


@pytest.mark.parametrize(
    ("args", "word"),
    [
        (["--engine", "vllm", "--policy", "sarathi"], "--policy sarathi"),
        (["--engine", "sglang", "--policy", "vllm-v1"], "--engine"),
        (["--enforce-eager", "--policy", "vllm-v1"], "--engine vllm"),
    ],
)
def test_bad_engine_input_is_one_line(capsys, tmp_path, args, word):
    code, _, err = cli(capsys, "run", "--requests", "4", "--out", str(tmp_path / "o"), *args)
    assert code == 2 and err.count("\n") == 1 and word in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


# -- async scheduling ----------------------------------------------------------------------------------------
def test_async_scheduling_moves_all_but_the_sampler_beside_the_gpu():
    from simserve.predictor.overhead import SAMPLER, CpuOverhead

    sync, both = CpuOverhead(), CpuOverhead(async_scheduling=True)
    assert both.components_of("gpu") == ("sampler",) and both.components_of("serial") == ()
    assert both.components_of("overlap") == ("schedule", "prepare_inputs", "process_outputs")
    c = both.stage_coefficients(0, 1)
    assert c.gpu == pytest.approx((SAMPLER[0] * 1e-3, SAMPLER[1] * 1e-3, 0.0)) and c.serial == (0.0, 0.0, 0.0)
    assert sync.components_of("serial") == ("schedule", "prepare_inputs", "sampler", "process_outputs")
    assert sync.total_ms(64) == both.total_ms(64)  # the same work, only its place differs
    assert repr(sync) == "CpuOverhead(include_ray_comm=False, scale=1.0)"  # timer cache keys as before


def test_async_scheduling_follows_vllms_defaults_and_refusals():
    base = dict(policy="vllm-v1", vllm_worker=True)
    assert Scenario(**base).scheduling_is_async()
    assert not Scenario(**base, async_scheduling=False).scheduling_is_async()
    # on with PP too: Model Runner V2, vLLM 0.33.0's default runner, keeps it (only the V1 runner turned it
    # off)
    pp2 = dict(base, model="llama2-70b", gpu="a40", tp=4, pp=2)
    assert (
        Scenario(**pp2).scheduling_is_async() and Scenario(**pp2, async_scheduling=True).scheduling_is_async()
    )
    assert not Scenario(**base, ray_comm=True).scheduling_is_async()  # the Ray executor does not support it
    with pytest.raises(SimserveError, match="`ray` does not support async scheduling"):
        Scenario(**base, ray_comm=True, async_scheduling=True).scheduling_is_async()
    with pytest.raises(SimserveError, match="--engine vllm"):
        check_scenario(Scenario(policy="vllm-v1", async_scheduling=True))


def test_async_scheduling_shortens_every_step_by_the_hidden_cpu_work():
    s = Scenario(model="mistral-7b", gpu="a100", policy="vllm-v1", vllm_worker=True)
    dep = s.deployment()
    sync = _timer(dep, None, True, False, s.cudagraph_sizes(), False)
    asyn = _timer(dep, None, True, False, s.cudagraph_sizes(), True)
    from simserve.predictor.overhead import CpuOverhead

    ov = CpuOverhead(async_scheduling=True)
    for batch in ([(512, 0)], [], [(100, 300)]):
        kv = np.full(32, 900)
        n = len(batch) + 32
        hidden = sum(ov.ms(c, n) for c in ov.components_of("overlap"))
        # GPU-bound: all hidden
        assert sync(batch, kv) - asyn(batch, kv) == pytest.approx(hidden * 1e-3, rel=1e-9)


@pytest.mark.skipif(not core_run.compiled_available(), reason="the compiled core is not built")
def test_the_core_runs_a_padded_timer_as_the_reference_does(timer, monkeypatch):
    """The core reads the timer's arrays, the reference its lists: padding must reach both."""
    graphs = padded_timer(timer, capture_sizes(256, 2048, A100))

    def run(t, mode):
        monkeypatch.setenv(core_run.ENV, mode)
        rng = np.random.default_rng(0)
        n = 40
        return simulate(
            rng.integers(20, 600, n),
            rng.integers(2, 60, n),
            np.cumsum(rng.exponential(0.05, n)),
            t,
            4000,
            SimConfig(policy="vllm-v1", budget=512),
        )

    ref, got, plain = run(graphs, "reference"), run(graphs, ""), run(timer, "")
    assert core_run.choose(SimConfig(policy="vllm-v1", budget=512), graphs) is not None  # the core ran it
    assert not np.array_equal(plain.reqs.completed, ref.reqs.completed)  # padding matters in this workload
    assert np.array_equal(ref.reqs.completed, got.reqs.completed)
    assert np.array_equal(ref.log.column("end_s"), got.log.column("end_s"))
