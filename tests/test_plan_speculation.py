"""`simserve plan --speculative`: each deployment searched off and at each K on one scheduler model, whether
speculation pays and at which K, the command line that starts it, and the refusals `run` gives
(plan/speculation.py)."""

from __future__ import annotations

import json
import shlex

import numpy as np
import pandas as pd
import pytest

from simserve.cli import main
from simserve.errors import SimserveError
from simserve.plan.command import replica_commands
from simserve.plan.search import PlanSpec, run_plan
from simserve.plan.speculation import COLUMN, GAIN, serve_flags, tokens
from simserve.tune.capacity import SLO

MODEL = "llama-3.1-8b"  # the catalog's acceptance table has EAGLE-3 and n-gram rates for it on sharegpt


def _plan(tmp_path, monkeypatch, acceptance: list[float], slo: SLO, ks=(1, 3)) -> object:
    monkeypatch.setenv("SIMSERVE_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "acc.json"
    path.write_text(json.dumps(acceptance))
    spec = PlanSpec(
        MODEL,
        ("a100",),
        max_gpus=1,
        slo=slo,
        budgets=(512,),
        num_requests=64,
        tie_seeds=0,
        speculative="eagle3",
        speculative_tokens=ks,
        acceptance=str(path),
    )
    return run_plan(spec, executor="serial")


def _light_tpot(tmp_path, monkeypatch) -> float:
    """The mean TPOT of the plan's off setting (vllm-v1, no speculation) at a light load."""
    from simserve.plan.search import prepare
    from simserve.resolve import resolve_profiles
    from simserve.sim.scenario import run_scenario

    monkeypatch.setenv("SIMSERVE_CACHE", str(tmp_path / "cache"))
    spec = PlanSpec(MODEL, ("a100",), max_gpus=1, budgets=(512,), num_requests=64, speculative="eagle3")
    cand = prepare(spec)[0][0]
    scenario = spec.scenario(cand, 512, resolve_profiles([cand.deployment])[cand.deployment])
    r = run_scenario(scenario, 0.25).requests
    r = r[r["output_tokens"] > 1]  # TPOT as vLLM's benchmark has it: (end − first token) / (outputs − 1)
    return float(((r["completed_at_s"] - r["first_token_at_s"]) / (r["output_tokens"] - 1)).mean())


def test_speculation_pays_when_every_draft_is_accepted_under_a_tight_tpot_slo(tmp_path, monkeypatch) -> None:
    """Acceptance 1: each verification gives K + 1 tokens, so the mean TPOT falls; with the SLO on TPOT at
    1.5x the off setting's light-load TPOT, speculation carries more load and the row picks a K > 0 with its
    gain."""
    bound = 1.5 * _light_tpot(tmp_path, monkeypatch)
    result = _plan(tmp_path, monkeypatch, [1.0, 1.0, 1.0], SLO(None, tpot_s=bound))
    s = result.searches
    assert set(s[COLUMN]) == {0, 1, 3} and (s["budget"] == 512).all()
    row = result.rows.iloc[0]
    assert int(row[COLUMN]) > 0
    off = s[s[COLUMN] == 0]["capacity_qps"].max()
    chosen = s[s[COLUMN] == int(row[COLUMN])]["capacity_qps"].max()
    assert chosen > off and float(row["capacity_qps"]) == chosen
    if off > 0:
        assert float(row[GAIN]) == pytest.approx(chosen / off - 1)
    else:
        assert np.isnan(float(row[GAIN]))


def test_speculation_does_not_pay_when_drafts_are_rejected(tmp_path, monkeypatch) -> None:
    """Acceptance near 0: the drafts cost budget, draft passes and KV but give almost no tokens, so under a
    TBT SLO every K carries less than off, and the row is speculation off (gain 0)."""
    result = _plan(tmp_path, monkeypatch, [0.02, 0.01, 0.0], SLO(0.2))
    row = result.rows.iloc[0]
    assert int(row[COLUMN]) == 0 and float(row[GAIN]) == 0.0
    s = result.searches
    assert (s[s[COLUMN] > 0]["capacity_qps"] < float(row["capacity_qps"])).all()


def test_a_speculative_plan_is_deterministic(tmp_path, monkeypatch) -> None:
    first = _plan(tmp_path, monkeypatch, [0.8, 0.6, 0.4], SLO(0.2), ks=(2,))
    second = _plan(tmp_path, monkeypatch, [0.8, 0.6, 0.4], SLO(0.2), ks=(2,))
    pd.testing.assert_frame_equal(first.rows, second.rows)
    cols = [c for c in first.searches.columns if c != "start_qps"]
    pd.testing.assert_frame_equal(first.searches[cols], second.searches[cols])


def test_the_command_line_carries_the_speculative_config() -> None:
    spec = PlanSpec(MODEL, ("a100",), speculative="eagle3", draft_model="org/head")
    on = serve_flags(spec, 2)
    assert on[0] == "--no-enable-prefix-caching" and on[1] == "--speculative-config"
    assert json.loads(on[2]) == {"method": "eagle3", "num_speculative_tokens": 2, "model": "org/head"}
    assert serve_flags(spec, 0) == ["--no-enable-prefix-caching"]  # off, as simulated: no prefix caching
    assert serve_flags(PlanSpec(MODEL, ("a100",)), 0) == []  # a plan without --speculative: unchanged
    ngram = json.loads(serve_flags(PlanSpec(MODEL, ("a100",), speculative="ngram"), 3)[2])
    assert ngram == {"method": "ngram", "num_speculative_tokens": 3}  # vLLM finds its own proposer
    line = replica_commands(MODEL, 1, 1, 1, 512, 128, 8192, 0.85, 8, extra=tuple(on))[0].splitlines()[-1]
    args = shlex.split(line)
    i = args.index("--speculative-config")
    assert json.loads(args[i + 1])["num_speculative_tokens"] == 2 and "--max-num-batched-tokens" in args


def test_default_k_runs_to_the_positions_the_acceptance_gives(tmp_path) -> None:
    # the catalog's sharegpt rates for Llama-3.1-8B EAGLE-3 have 3 positions
    assert [s.k for s in tokens(PlanSpec(MODEL, ("a100",), speculative="eagle3"))] == [1, 2, 3]
    path = tmp_path / "acc.json"
    path.write_text(json.dumps([0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3]))
    seven = PlanSpec(MODEL, ("a100",), speculative="eagle3", acceptance=str(path))
    assert [s.k for s in tokens(seven)] == [1, 2, 3, 4, 5]  # at most DEFAULT_MAX_TOKENS


def test_a_cli_plan_prints_the_speculation_column_and_command(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("SIMSERVE_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "acc.json"
    path.write_text(json.dumps([1.0, 1.0]))
    out = tmp_path / "o"
    args = [
        "plan",
        "--model",
        MODEL,
        "--gpus",
        "a100",
        "--max-gpus",
        "1",
        "--budgets",
        "512",
        "--requests",
        "64",
        "--tie-seeds",
        "0",
        "--executor",
        "serial",
        "--no-plots",
        "--out",
        str(out),
        "--speculative",
        "eagle3",
        "--num-speculative-tokens",
        "2",
        "--acceptance",
        str(path),
        "--draft-model",
        "org/head",
    ]
    try:
        main(args)
    except SystemExit as exc:
        assert exc.code in (0, None)
    text = capsys.readouterr().out
    assert "speculation" in text and "speculation (eagle3, K 2;" in text
    doc = json.loads((out / "plan.json").read_text())
    k = doc["recommendation"][COLUMN]
    assert doc["speculation"]["tokens_searched"] == [2] and doc["speculation"]["method"] == "eagle3"
    assert all("--no-enable-prefix-caching" in c for c in doc["commands"])
    assert all(("--speculative-config" in c) == (k > 0) for c in doc["commands"])
    assert (
        COLUMN in pd.read_csv(out / "searches.csv").columns and GAIN in pd.read_csv(out / "plan.csv").columns
    )


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--model", "mistral-7b", "--speculative", "mtp"], "num_nextn_predict_layers"),  # no MTP layers
        (["--model", "mistral-7b", "--speculative", "eagle3"], "--acceptance FILE"),  # no published rates
        (["--model", MODEL, "--speculative", "eagle3", "--num-speculative-tokens", "4"], "needs 4"),
        (["--model", MODEL, "--num-speculative-tokens", "2"], "add --speculative"),
        (["--model", MODEL, "--speculative", "eagle3", "--disagg"], "disaggregated"),
        (["--model", MODEL, "--speculative", "medusa"], "not modelled"),
    ],
)
def test_refusals_are_run_s_one_line_exit_2_and_write_nothing(tmp_path, capsys, extra, words) -> None:
    out = tmp_path / "o"
    with pytest.raises(SystemExit) as exc:
        main(["plan", "--gpus", "a100", "--max-gpus", "1", "--no-cache", "--out", str(out), *extra])
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and err.startswith("error: ") and "\n" not in err and words in err
    assert not out.exists()


def test_a_deployment_speculation_is_not_modelled_for_is_searched_off_only(tmp_path, monkeypatch) -> None:
    """PP 2 (simserve's refusal: vLLM's drafter after the last stage is not modelled): the deployment is
    searched with speculation off, and the plan says why it has no K."""
    monkeypatch.setenv("SIMSERVE_CACHE", str(tmp_path / "cache"))
    spec = PlanSpec(
        MODEL,
        ("a100",),
        max_gpus=2,
        slo=SLO(0.2),
        budgets=(512,),
        num_requests=32,
        tie_seeds=0,
        speculative="eagle3",
        speculative_tokens=(1,),
    )
    result = run_plan(spec, executor="serial")
    s = result.searches
    assert set(s[s["pp"] == 2][COLUMN]) == {0} and set(s[s["pp"] == 1][COLUMN]) == {0, 1}
    notes = result.stats["speculation"]["not_searched"]
    assert [n["deployment"] for n in notes] == ["A100-80GB TP1 PP2"] and "--pp 1" in notes[0]["why"]


def test_speculation_options_without_speculative_are_refused() -> None:
    with pytest.raises(SimserveError, match="add --speculative"):
        PlanSpec(MODEL, ("a100",), acceptance="x.csv")
