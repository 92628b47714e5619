"""vLLM 0.33.0's engine CPU model (predictor/engine_cpu.py) against the measured data it was fitted on."""

from __future__ import annotations

import json
import statistics
from collections import defaultdict

import pytest

from simserve.errors import SimserveError
from simserve.predictor import engine_cpu as E
from simserve.predictor import engine_cpu_fit as F
from simserve.shipped import shipped_dir

DATA = shipped_dir("profiles") / E.DATA


def test_the_data_says_what_it_is():
    for name in ("steps", "server"):
        prov = json.loads((DATA / f"{name}.provenance.json").read_text())
        assert prov["vllm"] == "0.33.0" and prov["repeats"] >= 5, name
        assert prov["command"] and prov["date"]
    host = json.loads((DATA / "steps.provenance.json").read_text())["host"]
    assert host["model"] == "207"  # Emerald Rapids, as MEASURING_HOST says
    # every constant is at the host's median speed over the steps' blocks, which MEASURING_HOST records
    rows = F.read_rows(DATA / "steps.csv")
    assert round(F.reference_us(rows), 1) == E.MEASURING_HOST["python_us"]
    assert json.loads((DATA / "refbench.json").read_text())["clock_ghz"] == E.MEASURING_HOST["clock_ghz"]


def test_the_constants_are_the_fit_of_the_committed_data():
    rows = F.read_rows(DATA / "steps.csv")
    for name, fitted in F.fit_steps(rows).items():
        c = E.STEP[name]
        got = (c.a_us, c.per_req_us, c.per_token_us, *c.error_pct)
        assert got == pytest.approx(fitted, rel=1e-3, abs=1e-3), name
    add = F.fit_add_request(rows)
    got = (E.ADD_REQUEST.per_request_us, E.ADD_REQUEST.per_prompt_token_us, *E.ADD_REQUEST.error_pct)
    assert got == pytest.approx(add, rel=1e-3, abs=1e-3)
    srows = F.read_rows(DATA / "server.csv")
    idle = json.loads((DATA / "server.provenance.json").read_text())["idle_cpu_per_s"]
    ref = F.reference_us(rows)
    for endpoint, fitted in F.fit_server(srows, idle, "1", ref).items():
        c = E.API_SERVER[endpoint]
        got = (c.per_request_us, c.per_prompt_token_us, c.per_output_token_us, *c.error_pct)
        assert got == pytest.approx(fitted, rel=1e-3, abs=1e-3), endpoint
    ratio = F.server_count_ratio(srows, ref, "2")
    assert ratio == pytest.approx(E.TWO_API_SERVERS_CPU_RATIO, rel=1e-3)
    rest = F.fit_engine_core_rest(srows, F.fit_steps(rows), add, ref)
    got = (E.ENGINE_CORE_REST_PER_STEP_US, E.ENGINE_CORE_REST.per_request_us, *E.ENGINE_CORE_REST.error_pct)
    assert got == pytest.approx(rest, rel=1e-3, abs=1e-3)


def test_each_component_predicts_its_measured_medians_within_its_stated_error():
    meds = F.step_medians(F.read_rows(DATA / "steps.csv"))
    by = defaultdict(list)
    for m in meds:
        by[m["config"]].append(m)
    for name, cost in E.STEP.items():
        col = f"{name}_us"
        errs = []
        for config, ms in by.items():
            measured = statistics.median(m[col] for m in ms)
            if measured <= 0:
                continue
            errs.append(abs(cost.us(ms[0]["num_reqs"], ms[0]["num_tokens"]) / measured - 1) * 100)
            assert errs[-1] <= cost.error_pct[1] + 1.0, (name, config, errs[-1])
        assert statistics.median(errs) == pytest.approx(cost.error_pct[0], abs=0.5), name
    # and the errors stated are not hiding a bad fit: the median configuration within 25 %
    assert all(c.error_pct[0] <= 25 for c in E.STEP.values())


def test_costs_grow_with_the_batch_and_the_tokens():
    for name in E.STEP:
        small, big = E.step_us(name, 8, 8), E.step_us(name, 512, 512)
        assert 0 < small <= big, name
        assert E.step_us(name, 64, 4096) >= E.step_us(name, 64, 64), name
    assert E.engine_core_step_us(256, 256) > E.engine_core_step_us(16, 16) > E.ENGINE_CORE_REST_PER_STEP_US
    # a step that takes in a 4k-token prompt costs more than the same step without it
    assert E.engine_core_step_us(65, 4160, new_reqs=1, new_prompt_tokens=4096) > E.engine_core_step_us(
        65, 4160
    )
    assert E.engine_core_step_us(32, 32, model_runner=E.MODEL_RUNNER_UNMEASURED) > E.engine_core_step_us(
        32, 32
    )
    for ep in E.API_SERVER:
        assert E.api_server_request_us(ep, 1024, 2) > E.api_server_request_us(ep, 128, 2) > 0
        assert E.api_server_request_us(ep, 128, 64) > E.api_server_request_us(ep, 128, 2)


def test_host_speed_divides_every_cost():
    assert E.step_us("schedule", 100, 100, host_speed=2.0) == pytest.approx(
        E.step_us("schedule", 100, 100) / 2
    )
    assert E.engine_core_step_us(10, 500, 1, 400, host_speed=0.5) == pytest.approx(
        2 * E.engine_core_step_us(10, 500, 1, 400)
    )
    assert E.api_server_request_us("chat", 100, 10, 4.0) == pytest.approx(
        E.api_server_request_us("chat", 100, 10) / 4
    )
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(SimserveError, match="--host-speed must be a positive number"):
            E.step_us("schedule", 1, 1, host_speed=bad)


def test_async_scheduling_hides_the_cpu_behind_the_gpu_and_sync_adds_it():
    assert E.step_period_us(10_000, 3_000, async_scheduling=True) == 10_000
    assert E.step_period_us(2_000, 3_000, async_scheduling=True) == 3_000
    assert E.step_period_us(10_000, 3_000, async_scheduling=False) == 13_000


def test_api_server_count_follows_vllm_serve():
    assert E.api_server_count() == 1
    assert E.api_server_count(data_parallel_size=4) == 4
    assert E.api_server_count(2, data_parallel_size=4) == 2
    with pytest.raises(SimserveError, match="api-server-count"):
        E.api_server_count(0)
    with pytest.raises(SimserveError, match="unknown API endpoint"):
        E.api_server_request_us("responses", 1, 1)


def test_where_each_part_runs():
    assert {c.process for n, c in E.STEP.items() if n in E.ENGINE_CORE_STEP} == {"engine_core"}
    assert E.STEP["frontend_output"].process == "api_server"
    assert all(c.process == "api_server" for c in E.API_SERVER.values())
    assert E.ENGINE_CORE_STEP == F.ENGINE_STEP


def test_the_step_components_are_the_measured_costs_at_the_host_speed():
    """`--engine vllm`'s per-step CPU (engine_cpu.components): the measured constants divided by the host
    speed, with vLLM V1's roles (busy-loop work serial without async scheduling, the EngineCore's input and
    output threads overlapping the GPU either way); Vidur's prepare_inputs/sampler stand in for the model
    runner, unscaled."""
    from simserve.predictor.overhead import PREPARE_INPUTS, SAMPLER, CpuOverhead

    one, two = dict(E.components(1.0)), dict(E.components(2.0))
    assert one["schedule"].b_ms == pytest.approx(E.STEP["schedule"].per_req_us * 1e-3)
    assert two["schedule"].b_ms == pytest.approx(one["schedule"].b_ms / 2)
    assert two["admit"].d_ms == pytest.approx(
        (E.ADD_REQUEST.per_request_us + E.ENGINE_CORE_REST.per_request_us) * 1e-3 / 2
    )
    assert (two["prepare_inputs"].a_ms, two["sampler"].a_ms) == (PREPARE_INPUTS[0], SAMPLER[0])
    sync, asyn = (
        CpuOverhead(components=E.components()),
        CpuOverhead(components=E.components(), async_scheduling=True),
    )
    assert set(sync.components_of("overlap")) == {"encode", "admit"}
    assert set(asyn.components_of("serial")) == set()
    # each prefill chunk pays its request's admission on the EngineCore's input thread, beside the GPU
    assert sync.stage_coefficients(0, 1).prefill == pytest.approx((0.0, two["admit"].d_ms * 1e-3, 0.0))
    assert sync.ms("admit", 8, 100, num_prefills=2) == pytest.approx(
        two["admit"].c_ms * 100 + 2 * two["admit"].d_ms
    )


def test_a_scenario_charges_vllms_measured_cpu_only_to_its_worker(tmp_path):
    from simserve.predictor.overhead import VIDUR
    from simserve.sim.frontend import api_server_cpu
    from simserve.sim.scenario import Scenario

    vllm = Scenario(policy="vllm-v1", vllm_worker=True, host_speed=4.0)
    assert dict(vllm.cpu_components())["schedule"].b_ms == pytest.approx(
        E.STEP["schedule"].per_req_us * 1e-3 / 4
    )
    assert Scenario(policy="sarathi").cpu_components() == VIDUR
    with pytest.raises(SimserveError, match="drop --host-speed"):
        Scenario(policy="sarathi", host_speed=2.0).serving_host_speed()
    chat, comp = api_server_cpu("chat", 2.0), api_server_cpu("completions", 2.0)
    assert chat.request_s > comp.request_s and chat.token_s > comp.token_s
    assert api_server_cpu("completions", 1.0).request_s == pytest.approx(2 * comp.request_s)
