"""benchmarks/data/published_runs.toml and benchmarks/published_runs.py: the records are well formed, and the
stored regimes and fit/report split are what the written-down rules give (issue 30, item 4)."""

import math
import sys
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import published_runs as pr  # noqa: E402

RUNS = pr.load()


def test_every_record_names_its_source_release_gpu_regime_and_split():
    assert len(RUNS) >= 64  # the 24 published_e2e.py had before issue 30 and at least 40 found for it
    for run in RUNS:
        assert run.source.startswith("https://") and run.where
        assert run.release and run.gpu_published and run.model_published and run.flags
        assert run.regime in pr.REGIMES and run.split in pr.SPLITS
        assert run.measured and all(v > 0 for v in run.measured.values())
        if run.model.endswith(".json"):  # a config written for a model outside the catalog names its source
            assert '"_source": "https://' in Path(run.model_path).read_text()


def test_stored_regime_and_split_are_the_rules():
    split = pr.assign_splits(RUNS)
    for run in RUNS:
        assert run.regime == pr.classify(run), run.key
        assert run.split == split[run.key], run.key


def test_each_cell_with_two_setups_has_runs_in_both_halves():
    cells: dict[tuple, dict] = {}
    for run in RUNS:
        for family in run.families:
            cell = cells.setdefault((run.gpu, run.regime, family), {"units": set(), "fit": 0, "report": 0})
            cell["units"].add(pr.setup_id(run))
            cell[run.split] += 1
    assert cells
    for key, cell in cells.items():
        if len(cell["units"]) >= 2:
            assert cell["fit"] and cell["report"], key


def test_duplicates_of_one_setup_share_a_half():
    pairs = pr.disagreements(RUNS)
    assert pairs  # the CI report's builds: the same setup, other numbers (docs show both)
    for members in pairs:
        assert len({m.split for m in members}) == 1


def test_regime_rule_by_hand():
    base = next(
        r for r in RUNS if r.key == "latency-llama3-8b-h200"
    )  # 8 requests of 32 in / 128 out, at once
    assert pr.classify(base) == "small-batch decode"
    assert pr.classify(replace(base, num_prompts=200)) == "loaded decode"
    assert pr.classify(replace(base, dataset="fixed:128:4")) == "short-request"
    assert pr.classify(replace(base, dataset="fixed:10000:500")) == "prefill-heavy"
    assert pr.classify(replace(base, dataset="fixed:5000:1000", num_prompts=50)) == "loaded decode"  # O > P/8
    # Poisson clients: Little's law on the published medians (4 req/s x 1.69 s = 6.8 in flight)
    rps4 = next(r for r in RUNS if r.key == "v060-llama31-8b-a100-rps4")
    assert pr.in_flight(rps4) == pytest.approx(4.0 * 1.69197)
    assert pr.classify(rps4) == "small-batch decode"
    assert pr.in_flight(replace(rps4, max_concurrency=64)) == 64
    assert pr.in_flight(replace(rps4, qps=math.inf)) == 1200


def test_split_depends_on_the_data_not_on_the_order():
    assert pr.assign_splits(tuple(reversed(RUNS))) == pr.assign_splits(RUNS)


def test_bad_records_are_refused_with_the_record_named(tmp_path):
    good = pr.RUNS_FILE.read_text()
    bad = tmp_path / "runs.toml"
    bad.write_text(good.replace('engine = "vllm"', 'engine = "tgi"', 1))
    with pytest.raises(pr.RunDataError, match=r"run 1 \(latency-llama3-8b-h200\): engine 'tgi'"):
        pr.load(bad)
    bad.write_text(good.replace('key = "latency-llama3-8b-h200-b4338"', 'key = "latency-llama3-8b-h200"'))
    with pytest.raises(pr.RunDataError, match="duplicate keys"):
        pr.load(bad)
    bad.write_text(
        good.replace('where = "Latency tests table, latency_llama8B_tp1, mean latency (ms)"\n', "", 1)
    )
    with pytest.raises(pr.RunDataError, match=r"missing \['where'\]"):
        pr.load(bad)
