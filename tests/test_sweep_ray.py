"""The sweep on a local Ray instance (2 CPUs): same answers as one process, and nothing left running."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from simserve.tune.capacity import SLO
from simserve.tune.sweep import SweepSpec, run_sweep
from simserve.tune.toy import ToyScenario

ray = pytest.importorskip("ray")

SPEC = SweepSpec(
    ToyScenario(num_requests=64), policies=("vllm", "sarathi"), budgets=(256, 512), slos=(SLO(0.1),)
)


def test_ray_sweep_matches_the_serial_sweep_and_shuts_down(tmp_path: Path) -> None:
    assert not ray.is_initialized()
    try:
        # The runner starts a private instance: ray.init(num_cpus=2, include_dashboard=False).
        on_ray = run_sweep(SPEC, executor="ray", workers=2, cache_dir=tmp_path)
        assert not ray.is_initialized()  # the runner shut down the instance it started
    finally:
        if ray.is_initialized():
            ray.shutdown()
    serial = run_sweep(SPEC, executor="serial")
    pd.testing.assert_frame_equal(on_ray.rows, serial.rows)
    # every probe a search used was simulated once; idle workers may add look-ahead probes nobody used
    s = on_ray.stats
    assert s["probes_simulated"] - s["probes_wasted"] == int(serial.rows["probes"].sum())
    assert list(tmp_path.glob("*/*.json"))  # local Ray workers share this disk: they wrote the cache
