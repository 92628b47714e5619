"""SGLang 0.5.23's engine CPU model (predictor/sglang_cpu.py) against the measured data it was fitted on, and
what `--engine sglang` steps charge with it."""

from __future__ import annotations

import json
import statistics
from collections import defaultdict

import pytest

from simserve.errors import SimserveError
from simserve.predictor import sglang_cpu as S
from simserve.predictor import sglang_cpu_fit as F
from simserve.shipped import shipped_dir

DATA = shipped_dir("profiles") / S.DATA


def test_the_data_says_what_it_is():
    prov = json.loads((DATA / "steps.provenance.json").read_text())
    assert prov["sglang"] == "0.5.23" and prov["repeats"] >= 5
    assert prov["command"] and prov["date"] and prov["load_average"]
    # the host the vLLM figures (engine_cpu.MEASURING_HOST) were measured on
    assert prov["host"]["model"] == "207"


def test_the_constants_are_the_fit_of_the_committed_data():
    rows = F.read_rows(DATA / "steps.csv")
    for name, fitted in F.fit_steps(rows).items():
        c = S.STEP[name]
        got = (c.a_us, c.per_req_us, c.per_token_us, c.per_chunk_us, *c.error_pct)
        assert got == pytest.approx(fitted, rel=1e-3, abs=2e-2), name
    for name, fitted in F.fit_frontend(rows).items():
        c = S.FRONTEND[{"detokenize": "detokenizer"}.get(name, name)]
        assert (c.a_us, c.per_req_us, *c.error_pct) == pytest.approx(fitted, rel=1e-3, abs=2e-2), name


def test_each_component_predicts_its_measured_medians_within_its_stated_error():
    meds = F._with_chunks(F.block_medians(F.read_rows(DATA / "steps.csv")))
    by = defaultdict(list)
    for m in meds:
        by[(m["config"], m["mode"])].append(m)
    for name, cost in S.STEP.items():
        errs = []
        for ms in by.values():
            y = statistics.median(m[name] for m in ms)
            p = statistics.median(cost.us(m["num_reqs"], m["num_tokens"], m["chunks"]) for m in ms)
            errs.append(abs(p / y - 1) * 100)
        assert statistics.median(errs) == pytest.approx(cost.error_pct[0], abs=0.1), name
        assert max(errs) == pytest.approx(cost.error_pct[1], abs=0.1), name


def test_the_other_processes_never_bind_before_the_scheduler():
    """Why `components` leaves the detokenizer and the tokenizer manager out of the step: each runs in its own
    process, and its CPU for a step's output is below the scheduler's for that step, so under the overlap
    model the scheduler's is the one that can exceed the GPU's step. Measured: in the decode-only
    configurations (the output streamed in an iteration is the previous decode step's, of the same batch) the
    detokenizer's and the tokenizer manager's CPU (medians over the blocks) is below the scheduler's timed
    calls. Fitted: for every measured step shape, streaming one chunk per request of the step."""
    by = defaultdict(list)
    for m in F.block_medians(F.read_rows(DATA / "steps.csv")):
        if m["config"].startswith("decode-"):
            by[m["config"]].append(m)
    for config, ms in by.items():
        spent = statistics.median(sum(m[c] for c in S.SCHEDULER) for m in ms)
        assert statistics.median(m["detokenize"] for m in ms) < spent, config
        assert statistics.median(m["tm_output"] + m["tm_stream"] for m in ms) < spent, config
    for m in F._with_chunks(F.block_medians(F.read_rows(DATA / "steps.csv"))):
        own = S.scheduler_step_us(m["num_reqs"], m["num_tokens"], m["chunks"])
        for process in S.FRONTEND:
            assert S.frontend_step_us(process, m["num_reqs"]) < own, (process, m["config"], m["mode"])


def test_the_components_have_sglangs_roles_and_the_measured_costs():
    from simserve.predictor.overhead import PREPARE_INPUTS, SAMPLER, CpuOverhead

    one, two = dict(S.components(1.0)), dict(S.components(2.0))
    assert one["schedule"].b_ms == pytest.approx(S.STEP["schedule"].per_req_us * 1e-3)
    assert one["recv"].d_ms == pytest.approx(S.STEP["recv"].per_chunk_us * 1e-3)
    assert two["result"].c_ms == pytest.approx(one["result"].c_ms / 2)
    assert (two["prepare_inputs"].a_ms, two["sampler"].a_ms) == (PREPARE_INPUTS[0], SAMPLER[0])
    assert {n: c.stage for n, c in one.items()} == {
        "recv": "first",
        "schedule": "first",
        "launch": "first",
        "result": "last",
        "prepare_inputs": "first",
        "sampler": "last",
    }
    overlap = CpuOverhead(components=S.components(), async_scheduling=True)  # event_loop_overlap
    normal = CpuOverhead(components=S.components())  # --disable-overlap-schedule: event_loop_normal
    assert set(overlap.components_of("overlap")) == {"recv", "schedule", "launch", "result", "prepare_inputs"}
    assert overlap.components_of("gpu") == ("sampler",) and overlap.components_of("serial") == ()
    assert set(normal.components_of("serial")) == set(one) and normal.components_of("overlap") == ()
    with pytest.raises(SimserveError, match="--host-speed"):
        S.components(0.0)


def test_a_scenario_with_sglangs_scheduler_charges_its_measured_cpu():
    from simserve.predictor.overhead import VIDUR
    from simserve.sim.scenario import Scenario

    sgl = Scenario(policy="sglang", overlap_schedule=True)
    assert sgl.cpu_components() == S.components(2.0) != VIDUR
    assert dict(Scenario(policy="sglang", host_speed=4.0).cpu_components())["result"].b_ms == pytest.approx(
        S.STEP["result"].per_req_us * 1e-3 / 4
    )
    assert Scenario(policy="sarathi").cpu_components() == VIDUR


def test_engine_sglang_steps_charge_the_measured_costs(capsys, tmp_path):
    """`simserve run --engine sglang`: summary.json's step breakdown carries the scheduler's measured CPU (at
    the default host speed the decode steps' CPU is SGLang's a + b·reqs, not Vidur's), and a bad --host-speed
    is one line, exit 2, nothing written."""
    from tests.test_step_parts import cli

    def run(out, *extra):
        return cli(
            capsys,
            "run",
            "--model",
            "llama-3-8b",
            "--gpu",
            "h100",
            "--engine",
            "sglang",
            "--requests",
            "40",
            "--qps",
            "4",
            "--seed",
            "1",
            "--out",
            str(out),
            *extra,
        )

    code, _, _ = run(tmp_path / "a")
    assert code == 0
    parts = json.loads((tmp_path / "a" / "summary.json").read_text())["step_parts"]
    code, _, _ = run(tmp_path / "b", "--host-speed", "1")
    assert code == 0
    slow = json.loads((tmp_path / "b" / "summary.json").read_text())["step_parts"]
    assert parts["switches"]["async_scheduling"] is True
    # the overlapped CPU per step: SGLang's measured scheduler (~1.1 ms at host speed 1 on these small
    # batches, halved at 2) plus Vidur's unscaled prepare_inputs (0.15 ms); Vidur's own set was under 0.3 ms
    hidden, hidden_slow = parts["all"]["cpu_hidden_s"], slow["all"]["cpu_hidden_s"]
    assert hidden > 0.5e-3 and hidden_slow > 1.5 * hidden
    code, out, err = run(tmp_path / "c", "--host-speed", "-1")
    assert code == 2 and "--host-speed must be a positive number" in out + err
    assert not (tmp_path / "c").exists()


def test_an_sglang_sweep_preloads_its_own_timer(monkeypatch):
    """`simserve sweep --engine sglang` preloaded the timer of a stand-in `vllm` scenario before forking its
    workers; with the overlap scheduler on (SGLang's only) that scenario was refused and the sweep exited 2,
    and with the timer now depending on the policy's CPU costs it would have preloaded the wrong one."""
    from simserve.sim.scenario import Scenario
    from simserve.tune import simadapter
    from simserve.tune.sweep import SweepSpec, run_sweep

    seen = []

    class Stop(Exception):
        pass

    def preload(scenarios):
        seen.extend(scenarios)
        raise Stop

    monkeypatch.setattr(simadapter, "preload", preload)
    base = Scenario(model="llama-3-8b", gpu="h100", policy="sglang", overlap_schedule=True)
    spec = SweepSpec(base, policies=("sglang",), budgets=(8192,), seeds=(0, 1))
    with pytest.raises(Stop):
        run_sweep(spec)
    assert [(s.policy, s.budget, s.overlap_schedule, s.seed) for s in seen] == [
        ("sglang", 8192, True, 0),
        ("sglang", 8192, True, 1),
    ]
