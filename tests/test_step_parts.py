"""The step's parts (predictor/step.py, predictor/overhead.py roles) and their report (sim/step_parts.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from cli_runner import cli

from simserve.catalog import GPUSpec
from simserve.errors import SimserveError
from simserve.predictor import load_timer
from simserve.predictor.overhead import Component, CpuOverhead
from simserve.predictor.step import (
    GRAPH_GAP_S,
    LAUNCH_CPU_S,
    LaunchCosts,
    gemm_flops_per_token,
    kernels_per_layer,
    launch_costs,
    with_launch_costs,
    with_sustained_clock,
)
from simserve.sim import SimConfig, core_run, simulate
from simserve.sim.scenario import Scenario, scenario_timer
from simserve.sim.step_parts import KINDS, PARTS, breakdown, guard
from simserve.vllm_worker import capture_sizes, padded_timer

KV = np.full(32, 900)


@pytest.fixture(scope="module")
def dep():
    return Scenario(model="mistral-7b", gpu="a100").deployment()


@pytest.fixture(scope="module")
def plain(dep):
    return load_timer(dep, overhead=CpuOverhead())


def test_without_overlap_or_launches_a_step_is_the_plain_sum(plain):
    """Sync scheduling, no launch costs: kernels + a + b·n, the float operations of the model before roles."""
    ov = CpuOverhead()
    a = sum(ov.ms(c, 0) for c in ov.components_of("serial")) * 1e-3
    for prefills, kv in (([(512, 0)], KV), ([], KV), ([(100, 300), (7, 0)], KV[:5])):
        parts = plain.breakdown(prefills, kv)
        kernels = sum(v for k, v in parts.items() if k != "cpu_overhead")
        assert plain(prefills, kv) == pytest.approx(kernels + parts["cpu_overhead"], rel=1e-12)
        assert parts["cpu_overhead"] == pytest.approx(
            a + (ov.total_ms(len(prefills) + len(kv)) * 1e-3 - a), rel=1e-9
        )


def test_async_step_is_the_longer_of_gpu_and_cpu_sides(dep):
    """Overlapping CPU work is free while the GPU is longer, and sets the step when it is longer itself."""
    heavy = (
        ("process_outputs", Component(0.0, 1.0, stage="last", role_async="overlap")),
    )  # 1 ms per request
    t = load_timer(dep, overhead=CpuOverhead(async_scheduling=True, components=heavy))
    gpu_only = load_timer(dep, overhead=CpuOverhead(scale=0.0))
    small, large = [(512, 0)], np.full(200, 900)
    assert t(small, KV[:1]) == pytest.approx(
        max(gpu_only(small, KV[:1]), 2e-3), rel=1e-12
    )  # 2 requests: 2 ms
    assert t([], large) == pytest.approx(200e-3, rel=1e-12)  # 200 ms of CPU against a ~20 ms decode step
    assert gpu_only([], large) < 0.05


def test_launch_costs_follow_vllms_dispatch(plain, dep):
    sizes = capture_sizes(256, 2048, 80)
    graphs = padded_timer(plain, sizes)
    t = with_launch_costs(graphs, launch_costs(dep, sizes))
    layers = dep.layers_per_stage
    assert t([], KV) - graphs([], KV) == pytest.approx(GRAPH_GAP_S, rel=1e-6)  # decode-only: one FULL graph
    mixed = [(100, 0)]
    assert t(mixed, KV) - graphs(mixed, KV) == pytest.approx(
        (layers + 1) * GRAPH_GAP_S, rel=1e-6
    )  # PIECEWISE
    big = [(sizes[-1] + 1, 0)]  # above the largest captured size: eager, its launches hidden behind the GPU
    eager_cpu = layers * kernels_per_layer(dep) * LAUNCH_CPU_S
    assert eager_cpu < graphs(big, []) and t(big, []) == graphs(big, [])
    eager = with_launch_costs(plain, launch_costs(dep, ()))  # --enforce-eager: every step eager
    assert eager([], KV[:1]) == plain([], KV[:1])  # a 7B decode on an A100 (~10 ms) hides 2.3 ms of launches
    slow = with_launch_costs(plain, LaunchCosts(((0.0, 0.0, 0.0),), ((0.0, 0.0, 1.0),), 0))  # a 1 s launch
    serial = plain([], KV[:1]) - load_timer(dep, overhead=CpuOverhead(scale=0.0))([], KV[:1])
    assert slow([], KV[:1]) == pytest.approx(1.0 + serial, rel=1e-12)  # launch-bound: CPU side + serial CPU


def test_sustained_clock_caps_the_steps_gemm_rate():
    s = Scenario(
        model="yi-34b", gpu="h200", tp=2
    )  # the shipped profile's GEMMs beat the H200's sustained rate
    dep = s.deployment()
    t = load_timer(dep, overhead=CpuOverhead())
    c = with_sustained_clock(t, dep)
    tokens = np.arange(1, len(t._tokens.linear))
    rate = gemm_flops_per_token(dep) * tokens / c._tokens.linear[1:]
    assert rate.max() <= dep.gpu.sustained_tflops * 1e12 * (1 + 1e-9)
    slowed = c._tokens.linear[1:] > t._tokens.linear[1:]
    assert slowed.any() and (c._tokens.linear[1:] >= t._tokens.linear[1:]).all()
    assert (
        with_sustained_clock(t, Scenario(model="yi-34b", gpu="a40", tp=2).deployment()) is t
    )  # no rate: as is


def test_catalog_sustained_rates_are_the_packages():
    pytest.importorskip("aiconfigurator_core")
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parent.parent / "benchmarks" / "sustained_gemm.py"
    spec = importlib.util.spec_from_file_location("sustained_gemm", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for name in ("A100-80GB", "H100-SXM", "H200", "B200"):
        assert GPUSpec.from_name(name).sustained_tflops == mod.rates(name)["sustained_tflops"]


@pytest.mark.skipif(not core_run.compiled_available(), reason="the compiled core is not built")
def test_the_core_composes_steps_as_the_reference_does(plain, dep, monkeypatch):
    sizes = capture_sizes(64, 512, 80)
    # each role with a per-prefill-chunk term too (vLLM's request admission: engine_cpu.components)
    heavy = (
        ("schedule", Component(0.5, 0.05, 0.001, stage="first", role_async="overlap", d_ms=0.7)),
        ("sampler", Component(0.3, 0.002, stage="last", role_async="gpu", d_ms=0.05)),
        ("process_outputs", Component(0.1, 0.03, stage="last", role_async="serial", d_ms=0.2)),
    )
    timer = load_timer(dep, overhead=CpuOverhead(async_scheduling=True, components=heavy))
    timer = with_launch_costs(padded_timer(timer, sizes), launch_costs(dep, sizes))

    def run(mode):
        monkeypatch.setenv(core_run.ENV, mode)
        rng = np.random.default_rng(1)
        n = 60
        raw = simulate(
            rng.integers(20, 900, n),
            rng.integers(2, 80, n),
            np.cumsum(rng.exponential(0.02, n)),
            timer,
            4000,
            SimConfig(policy="vllm-v1", budget=512, max_batch=64),
        )
        return raw.log.to_frame()

    ref, core = run("reference"), run("")
    assert len(ref) > 50 and ref.equals(core)


@pytest.mark.skipif(not core_run.compiled_available(), reason="the compiled core is not built")
def test_async_scheduling_with_pipeline_parallelism_runs_on_the_core_as_on_the_reference(
    capsys, tmp_path, monkeypatch
):
    # vLLM 0.33.0's Model Runner V2 keeps async scheduling on with PP: each stage composes its own CPU roles
    outs = {}
    for mode in ("reference", ""):
        monkeypatch.setenv(core_run.ENV, mode)
        out = tmp_path / (mode or "core")
        code, _, _ = cli(
            capsys,
            "run",
            "--engine",
            "vllm",
            "--model",
            "llama-2-70b",
            "--gpu",
            "a40",
            "--tp",
            "4",
            "--pp",
            "2",
            "--requests",
            "80",
            "--qps",
            "2",
            "--out",
            str(out),
        )
        assert code == 0
        outs[mode] = json.loads((out / "summary.json").read_text())
    assert outs["reference"]["step_parts"]["switches"]["async_scheduling"] is True
    assert outs["reference"]["step_parts"] == outs[""]["step_parts"]
    assert (out.parent / "reference" / "requests.csv").read_bytes() == (out / "requests.csv").read_bytes()


@pytest.mark.parametrize(
    ("args", "word"),
    [
        (["--launch-gaps"], "--engine vllm"),
        (["--gpu", "a40", "--sustained-clock"], "sustained_tflops"),
        (["--engine", "vllm", "--ray-comm", "--async-scheduling"], "`ray` does not support async scheduling"),
    ],
)
def test_a_part_the_engine_cannot_have_is_one_line(capsys, tmp_path, args, word):
    code, _, err = cli(capsys, "run", "--requests", "4", "--out", str(tmp_path / "o"), *args)
    assert code == 2 and err.count("\n") == 1 and word in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_summary_breaks_the_mean_step_into_parts(capsys, tmp_path):
    out = tmp_path / "o"
    code, _, _ = cli(
        capsys,
        "run",
        "--model",
        "llama-3-8b",
        "--gpu",
        "h200",
        "--engine",
        "vllm",
        "--requests",
        "60",
        "--trace",
        "random:700:60",
        "--qps",
        "inf",
        "--out",
        str(out),
    )
    assert code == 0
    doc = json.loads((out / "summary.json").read_text())["step_parts"]
    assert doc["switches"] == {
        "cpu_overhead": True,
        "async_scheduling": True,
        "launch_gaps": True,
        "sustained_clock": True,
    }
    assert set(doc) - {"switches"} <= {"all", *KINDS} and "all" in doc
    for kind in set(doc) - {"switches"}:
        entry = doc[kind]
        assert sum(entry["parts_s"][p] for p in PARTS) == pytest.approx(entry["mean_step_s"], rel=1e-9)
        assert 0 < entry["gemm_fraction_of_peak"] <= entry["gemm_fraction_of_sustained"] <= 1.0
        assert entry["limited_by"]
    off = tmp_path / "off"
    cli(
        capsys,
        "run",
        "--model",
        "llama-3-8b",
        "--gpu",
        "h200",
        "--engine",
        "vllm",
        "--requests",
        "60",
        "--trace",
        "random:700:60",
        "--qps",
        "inf",
        "--out",
        str(off),
        "--no-launch-gaps",
        "--no-sustained-clock",
        "--no-async-scheduling",
    )
    doc = json.loads((off / "summary.json").read_text())
    assert not any(
        doc["step_parts"]["switches"][k] for k in ("async_scheduling", "launch_gaps", "sustained_clock")
    )
    assert doc["scenario"]["launch_gaps"] is False and doc["scenario"]["sustained_clock"] is False


def _guarded(s, qps):
    from simserve.sim.scenario import simulate_scenario

    raw, dep = simulate_scenario(s, qps)
    return guard(raw.log, scenario_timer(s), dep), breakdown(raw.log, scenario_timer(s), dep)


@pytest.mark.parametrize(
    ("gpu", "model", "tp"),
    [("a100", "mistral-7b", 1), ("h100", "llama-3-8b", 1), ("h200", "yi-34b", 2), ("h200", "llama2-70b", 8)],
)
def test_no_step_beats_the_gpus_measured_gemm_rate(gpu, model, tp):
    """The physics guard on the shipped profiles: every step's GEMM FLOP/s within the GPU's ceiling."""
    s = Scenario(
        model=model,
        gpu=gpu,
        tp=tp,
        trace="random:3000:50",
        num_requests=80,
        budget=4096,
        stop_when_overloaded=False,
    )
    bad, parts = _guarded(s, 50.0)
    assert not bad, bad
    assert parts["all"]["gemm_fraction_of_peak"] < 0.9


def test_a_disaggregated_prefill_pool_stays_within_the_ceiling():
    from simserve.sim.disagg_scenario import DisaggScenario, PoolSpec, run_disagg

    base = Scenario(
        model="llama-3-8b",
        gpu="h200",
        trace="random:2000:200",
        num_requests=200,
        budget=2048,
        max_batch=128,
        stop_when_overloaded=False,
    )
    ds = DisaggScenario.create(
        base, PoolSpec.parse("2xTP1", "--prefill"), PoolSpec.parse("1xTP1", "--decode"), None, "kv"
    )
    run = run_disagg(ds, 40.0)
    timer, dep = scenario_timer(ds.prefill), ds.prefill.deployment()
    assert not guard(run.raw.log, timer, dep, (0, run.num_prefill))
    pool = breakdown(run.raw.log, timer, dep, (0, run.num_prefill))
    assert set(pool) == {"all", "prefill_only"}
    assert (
        0.4 < pool["prefill_only"]["gemm_fraction_of_peak"] < 0.85
    )  # the measured GEMMs, not the datasheet peak
    assert "GEMMs" in pool["prefill_only"]["limited_by"]
    with pytest.raises(SimserveError):
        Scenario(gpu="a40", sustained_clock=True).sustained_clock_on()


def test_sglangs_kv_pages_are_counted_as_pages_in_the_hbm_fraction(capsys, tmp_path):
    """SGLang's pool counts pages of --page-size tokens (1): read as vLLM's 16-token blocks, a decode step's
    KV bytes were 16x too many and its HBM fraction far above 1 (11.6 on a published SGLang 0.4.4 run)."""
    out = tmp_path / "o"
    code, _, _ = cli(
        capsys,
        "run",
        "--model",
        "llama-3-8b",
        "--gpu",
        "h200",
        "--engine",
        "sglang",
        "--requests",
        "40",
        "--trace",
        "random:4000:60",
        "--qps",
        "inf",
        "--out",
        str(out),
    )
    assert code == 0
    doc = json.loads((out / "summary.json").read_text())["step_parts"]
    assert 0.05 < doc["decode_only"]["hbm_fraction"] <= 1.0, doc["decode_only"]
