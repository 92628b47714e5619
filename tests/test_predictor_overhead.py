"""The CPU overhead model: its error against Vidur's measured Sarathi-Serve overheads, and stage charging."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simserve.predictor.overhead import COMPONENTS, CpuOverhead

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
MEASURED = SHARED / "reference" / "vidur" / "profiling" / "legacy" / "a100" / "cpu_overheads.csv"
COLUMN = {
    "schedule": "schedule_median",
    "prepare_inputs": "prepare_inputs_e2e_median",
    "sampler": "sampler_e2e_median",
    "process_outputs": "process_model_outputs_median",
}
# The error recorded in overhead.py and docs/predictor.md (mean / max APE, %); the test fails if it drifts up.
DOCUMENTED = {
    "schedule": (1.6, 3.7),
    "prepare_inputs": (5.5, 15.9),
    "sampler": (1.8, 4.3),
    "process_outputs": (3.8, 9.1),
    "ray_comm": (1.7, 5.2),
}


@pytest.mark.skipif(not MEASURED.is_file(), reason="../shared reference data is absent (a fresh clone)")
def test_error_against_the_measured_overheads():
    df = pd.read_csv(MEASURED)
    model = CpuOverhead(include_ray_comm=True)
    for name in COMPONENTS:
        measured = df[COLUMN[name]].to_numpy()
        predicted = np.array([model.ms(name, int(b)) for b in df["batch_size"]])
        ape = np.abs(predicted / measured - 1) * 100
        mean, worst = DOCUMENTED[name]
        assert ape.mean() <= mean + 0.1 and ape.max() <= worst + 0.1, (name, ape.mean(), ape.max())
    ray = np.abs(
        np.array([model.ms("ray_comm", int(b)) for b in df["batch_size"]]) / df["ray_comm_time_mean"] - 1
    )
    assert ray.mean() * 100 <= DOCUMENTED["ray_comm"][0] + 0.1
    total = sum(df[c] for c in COLUMN.values()).to_numpy()
    predicted_total = np.array([CpuOverhead().total_ms(int(b)) for b in df["batch_size"]])
    assert np.abs(predicted_total / total - 1).mean() * 100 <= 2.4  # documented: 2.4 % mean, 5.5 % max


def test_overhead_grows_with_the_batch():
    ov = CpuOverhead()
    assert ov.total_ms(128) > ov.total_ms(8) > 0
    assert CpuOverhead(include_ray_comm=True).total_ms(32) > ov.total_ms(32) + 2.0


def test_stages_split_the_overhead_and_it_is_all_charged():
    ov = CpuOverhead(include_ray_comm=True)
    for pp in (1, 2, 4):
        a = sum(ov.stage_coefficients(s, pp).serial[0] for s in range(pp))
        b = sum(ov.stage_coefficients(s, pp).serial[1] for s in range(pp))
        assert (a + b * 40) * 1e3 == pytest.approx(ov.total_ms(40))
    assert ov.stage_components(0, 2) == ("schedule", "prepare_inputs", "ray_comm")
    assert ov.stage_components(1, 2) == ("sampler", "process_outputs")
    assert ov.stage_components(1, 3) == ()
