"""The capacity regression check: its comparison logic on the toy model, and the committed baseline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simserve.errors import SimserveError
from simserve.tune import regress
from simserve.tune.regress import Case, check, write_baseline
from simserve.tune.toy import ToyScenario

CASES = (
    Case("toy/sarathi-512", {"policy": "sarathi", "budget": 512, "num_requests": 64}, slo_s=0.1),
    Case("toy/vllm", {"policy": "vllm", "budget": None, "num_requests": 64}, slo_s=0.1),
)
BASELINE = Path(__file__).resolve().parents[1] / "regress" / "baseline.json"


def _check(path: Path, cases=CASES):
    return check(path, executor="serial", cases=cases, make_scenario=ToyScenario)


def test_unchanged_model_passes(tmp_path: Path) -> None:
    path = tmp_path / "baseline.json"
    doc = write_baseline(path, executor="serial", cases=CASES, make_scenario=ToyScenario)
    assert set(doc["cases"]) == {c.name for c in CASES}
    assert all(c["capacity_qps"] > 0 for c in doc["cases"].values())
    report = _check(path)
    assert report.failed == []
    assert all(line.startswith("ok") for line in report.lines)


def test_a_moved_capacity_fails_naming_the_case_and_the_change(tmp_path: Path) -> None:
    path = tmp_path / "baseline.json"
    doc = write_baseline(path, executor="serial", cases=CASES, make_scenario=ToyScenario)
    doc["cases"]["toy/vllm"]["capacity_qps"] *= 1.25  # as if the model now predicted 20% less
    path.write_text(json.dumps(doc))
    report = _check(path)
    assert report.failed == ["toy/vllm"]
    moved = next(line for line in report.lines if "toy/vllm" in line)
    assert moved.startswith("MOVED") and "-20.0%" in moved
    # A move within the tolerance passes.
    doc["cases"]["toy/vllm"]["capacity_qps"] /= 1.25 * 1.03
    path.write_text(json.dumps(doc))
    assert _check(path).failed == []


def test_changed_configuration_and_case_set_fail(tmp_path: Path) -> None:
    path = tmp_path / "baseline.json"
    write_baseline(path, executor="serial", cases=CASES, make_scenario=ToyScenario)
    changed = (Case("toy/sarathi-512", {"policy": "sarathi", "budget": 256, "num_requests": 64}), CASES[1])
    report = _check(path, changed)
    assert report.failed == ["toy/sarathi-512"] and report.lines[0].startswith("CONFIG")
    report = _check(path, CASES[:1])
    assert report.failed == ["toy/vllm"] and "GONE" in report.lines[-1]


def test_missing_baseline_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SimserveError, match="simserve regress --update"):
        _check(tmp_path / "nope.json")


def test_committed_baseline_holds(tmp_path: Path) -> None:
    """The real check CI runs: recompute the fixed configurations with the simulator."""
    pytest.importorskip("simserve.sim.scenario", reason="the simulator is not in this checkout")
    if not BASELINE.exists():
        pytest.skip("no committed baseline yet: run `simserve regress --update`")
    doc = json.loads(BASELINE.read_text())
    assert set(doc["cases"]) == {c.name for c in regress.CASES}, "run `simserve regress --update`"
    report = check(BASELINE, executor="local", workers=2)
    assert report.failed == [], "\n".join(report.lines)
