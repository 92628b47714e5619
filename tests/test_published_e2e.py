"""benchmarks/published_e2e.py: how it simulates the published runs, at which engine defaults, and its
tables."""

import math
import sys
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import published_e2e as pe  # noqa: E402
import published_report as report  # noqa: E402
import published_runs as pr  # noqa: E402

from simserve.errors import SimserveError  # noqa: E402

RUNS = {r.key: r for r in pr.load()}


def test_latency_run_is_one_batch_of_eight_fixed_requests():
    """vllm bench latency: 8 prompts of 32 tokens, 128 outputs each, all at t = 0 — one prefill step of the
    eight prompts, then 127 decode steps of all eight (no request finishes earlier: ignore_eos)."""
    run = RUNS["latency-llama3-8b-h200"]
    values, _, detail = pe.simulate_once(run, 0)
    assert (detail["requests"], detail["prompt_tokens"], detail["output_tokens"]) == (8, 8 * 32, 8 * 128)
    assert detail["iterations"] == 128 and detail["preemptions"] == 0 and detail["frontend_ms"] == 0
    assert values["throughput_rps"] == pytest.approx(8 / (values["batch_latency_ms"] / 1e3))
    out = pe.simulate(run)
    assert out["draws"] == 1  # a fixed-length burst has nothing random to draw
    (row,) = out["rows"]
    assert (row["metric"], row["published"], row["family"]) == ("batch_latency_ms", 833.421, "E2E")
    assert row["simulated"] == row["min"] == row["max"] == pytest.approx(values["batch_latency_ms"])


def test_release_defaults_by_hand():
    h200 = RUNS["vb-vllm-082-l31-8b-fp8-h200-10000-500"]
    assert pe.engine_setup(h200) == pe.EngineSetup(
        "vllm-v1",
        8192,
        1024,
        0.90,
        None,
        True,
        False,
        reserve_full_isl=False,  # 0.8.2: no full-ISL admission
    )
    on_a100 = pe.engine_setup(replace(h200, gpu="a100"))  # vLLM 0.8.2's small tier: 2048 tokens
    assert (on_a100.budget, on_a100.max_batch) == (2048, 1024)
    ci = RUNS["throughput-llama3-8b-a100"]  # the CI's LLM class on an A100: vLLM 0.33.0's 8192 / 256
    assert (pe.engine_setup(ci).budget, pe.engine_setup(ci).max_batch) == (8192, 256)
    assert pe.engine_setup(RUNS["throughput-llama3-8b-h200"]).budget == 16384
    assert pe.engine_setup(ci, async_scheduling=False).async_scheduling is False
    v060 = pe.engine_setup(RUNS["v060-llama31-8b-a100-rps4"])  # V0, --max_model_len 4096: whole prompts
    assert (v060.policy, v060.budget, v060.max_batch, v060.max_model_len) == ("vllm", 4096, 256, 4096)
    sg044 = pe.engine_setup(RUNS["vb-sglang-044post3-qwq-32b-tp2-h200-1000-2000"])
    assert (sg044.policy, sg044.memory_utilization, sg044.overlap_schedule) == ("sglang", 0.87, True)
    sg030 = pe.engine_setup(RUNS["sglang030-llama31-70b-tp4-h100-rps4"])  # the page's --mem-frac, no overlap
    assert (sg030.memory_utilization, sg030.overlap_schedule) == (0.85, False)


def test_unknown_release_or_override_is_refused():
    run = RUNS["vb-vllm-082-l31-8b-fp8-h200-10000-500"]
    with pytest.raises(SimserveError, match="no engine setup for vllm 0.7.3"):
        pe.engine_setup(replace(run, release="0.7.3"))
    with pytest.raises(SimserveError, match=r"overrides \['enforce_eager'\] are not engine settings"):
        pe.engine_setup(replace(run, overrides={"enforce_eager": True}))


def test_sglang_run_uses_its_scheduler_and_the_pages_memory_fraction():
    """SGLang 0.3.0 runs simulate the `sglang` policy, its KV pool sized by the --mem-fraction-static the page
    states (0.88 gives more KV than 0.85 on the same GPUs), with the front end on TTFT and E2E."""
    base = RUNS["sglang030-llama31-70b-tp4-h100-rps4"]
    small = replace(base, num_prompts=40)
    values, _, detail = pe.simulate_once(small, 1)
    assert detail["policy"] == "sglang" and detail["requests"] == 40 and detail["frontend_ms"] > 0
    assert values["median_ttft_ms"] > detail["frontend_ms"]
    more = pe.simulate_once(replace(small, overrides={"memory_utilization": 0.88}), 1)[2]
    assert more["kv_blocks"] > detail["kv_blocks"]


def test_each_engine_has_at_least_three_published_results():
    assert sum(r.engine == "sglang" for r in RUNS.values()) >= 3
    assert sum(r.engine == "vllm" for r in RUNS.values()) >= 3


def _result(key, split, gpu, regime, errors, flagged=""):
    rows = [
        {"metric": m, "family": pr.METRICS[m][1], "error_pct": e, "published": 1.0, "simulated": 1 + e / 100}
        for m, e in errors.items()
    ]
    return {"key": key, "split": split, "gpu": gpu, "regime": regime, "flagged": flagged, "rows": rows}


def test_cell_table_medians_per_half_without_flagged_runs():
    results = [
        _result("a", "fit", "h100", "loaded decode", {"median_tpot_ms": -10.0, "throughput_rps": 30.0}),
        _result("b", "fit", "h100", "loaded decode", {"median_tpot_ms": 20.0, "median_itl_ms": -5.0}),
        _result("c", "fit", "h100", "loaded decode", {"median_tpot_ms": -40.0}),
        _result("d", "report", "h100", "loaded decode", {"median_tpot_ms": 1.0}),
        _result("e", "fit", "h100", "loaded decode", {"median_tpot_ms": 99.0}, flagged="multi-step"),
        {"key": "f", "skipped": "why"},
    ]
    fit = report.cell_table(results, "fit")
    assert fit["h100 / loaded decode"]["TPOT"] == {"median_abs_error_pct": 20.0, "runs": 3}
    assert fit["h100 / loaded decode"]["throughput"]["runs"] == 1
    assert report.cell_table(results, "report")["h100 / loaded decode"] == {
        "TPOT": {"median_abs_error_pct": 1.0, "runs": 1}
    }
    table = report.format_cells(fit)
    assert "| h100 / loaded decode | 30.0% (1) |  | 20.0% (3) | 5.0% (1) |  |" in table


def test_disagreements_show_both_published_values():
    runs = (RUNS["latency-llama3-8b-h200"], RUNS["latency-llama3-8b-h200-b4338"])
    res = {r.key: _result(r.key, r.split, r.gpu, r.regime, {"batch_latency_ms": -18.0}) for r in runs}
    for r in runs:
        res[r.key]["rows"][0].update(published=r.measured["batch_latency_ms"], simulated=680.0)
    (row,) = report.disagreement_rows(runs, res)
    assert row["published"] == [
        ("latency-llama3-8b-h200", 833.421),
        ("latency-llama3-8b-h200-b4338", 834.059),
    ]
    assert row["closer_to"] == "latency-llama3-8b-h200"


def test_bad_arguments_are_one_line_exit_2(capsys):
    assert pe.main(["--only", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown run ['nope']" in err[0]
    assert pe.main(["--samples", "0"]) == 2
    assert capsys.readouterr().err.strip() == "error: --samples must be at least 1, got 0"


def test_draws_per_kind_of_run():
    assert pe.draws(RUNS["throughput-llama3-8b-h200"], 20) == 20  # ShareGPT: the pairs differ per seed
    assert pe.draws(RUNS["vb-vllm-082-l31-8b-fp8-h200-10000-500"], 20, 7) == 7  # Poisson arrivals
    assert pe.draws(RUNS["latency-llama3-8b-h200"], 20) == 1
    assert math.isinf(RUNS["latency-llama3-8b-h200"].qps)


def test_a_run_past_its_time_limit_is_skipped_and_its_deployment_not_retried(monkeypatch):
    """A simulation that does not return (simserve's predictor fit can spin: docs/engines.md) is reported as
    skipped; later runs of the same deployment are skipped without waiting again."""
    import time

    calls = []

    def never_returns(run, seed, async_scheduling=True, host_speed=None):
        calls.append(run.key)
        time.sleep(5)

    monkeypatch.setattr(pe, "simulate_once", never_returns)
    a = RUNS["vb-vllm-082-l31-8b-fp8-h200-10000-500"]
    b = RUNS["vb-sglang-044post3-l31-8b-fp8-h200-10000-500"]  # the same model, GPU, TP and dtype
    first, second = pe.compare((a, b), pe.Options(samples=1, arrival_draws=1, timeout_s=1))
    assert first["skipped"] == "did not finish in 1 s (0 of 1 draws)"
    assert second["skipped"] == f"same deployment as {a.key}, which did not finish"
    assert calls == [a.key]


def test_json_has_runs_cells_and_both_values_of_a_disagreement(tmp_path, capsys):
    out = tmp_path / "e2e.json"
    keys = "latency-llama3-8b-h200,latency-llama3-8b-h200-b4338"
    assert pe.main(["--only", keys, "--split", "report", "--json", str(out)]) == 0
    doc = __import__("json").loads(out.read_text())
    assert [r["key"] for r in doc["runs"]] == keys.split(",")
    assert set(doc["cells"]) == {"report"}  # --split report: that half's table only
    assert doc["cells"]["report"]["h200 / small-batch decode"]["E2E"]["runs"] == 2
    (row,) = doc["disagreements"]
    assert [v for _, v in row["published"]] == [833.421, 834.059]
    assert "report half" in capsys.readouterr().out
    assert (
        pe.main(["--only", keys, "--split", "fit"]) == 0
    )  # both runs are in the report half: nothing to run
    assert "latency-llama3-8b-h200 " not in capsys.readouterr().out


def test_a_saved_run_renders_again_without_simulating(tmp_path, monkeypatch):
    saved, md = tmp_path / "e2e.json", tmp_path / "runs.md"
    keys = "latency-llama3-8b-h200,latency-llama3-8b-h200-b4338"
    assert pe.main(["--only", keys, "--json", str(saved)]) == 0
    monkeypatch.setattr(pe, "simulate_once", lambda *a, **k: pytest.fail("--from-json must not simulate"))
    assert pe.main(["--from-json", str(saved), "--markdown", str(md)]) == 0
    text = md.read_text()
    assert (
        "| latency-llama3-8b-h200 | report | h200 | small-batch decode | vllm not stated | batch_latency_ms "
        "833.4 → " in text
    )
    assert "latency-llama3-8b-h200: 833.4; latency-llama3-8b-h200-b4338: 834.1" in text
    assert pe.main(["--from-json", str(tmp_path / "missing.json")]) == 2


def test_each_run_gets_the_front_end_its_client_saw():
    """vLLM served online: its API server as a server (vLLM 0.33.0's measured costs for the endpoint the
    client called, one process as `vllm serve` defaults to) beside the network constant; SGLang: the constant
    alone (its tokenizer manager is not measured); the offline LLM class: none."""
    vllm = RUNS["vb-vllm-082-l31-8b-fp8-h200-10000-500"]
    got = pe.frontend_of(vllm, "vllm-v1")
    assert got["api_server_count"] == 1 and got["api_endpoint"] == "completions" and got["frontend_ms"] > 0
    chat = replace(vllm, client_flags=vllm.client_flags + " --backend openai-chat")
    assert pe.frontend_of(chat, "vllm-v1")["api_endpoint"] == "chat"
    sg = RUNS["vb-sglang-044post3-l31-8b-fp8-h200-10000-500"]
    assert set(pe.frontend_of(sg, "sglang")) == {"frontend_ms"}
    assert pe.frontend_of(RUNS["throughput-llama3-8b-h200"], "vllm-v1") == dict(frontend_ms=0.0)
