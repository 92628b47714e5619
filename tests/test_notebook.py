"""notebooks/capacity_plots.ipynb runs top to bottom on a small configuration (SIMSERVE_NOTEBOOK_SMALL=1)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("simserve.sim.scenario", reason="the notebook runs a sweep with the simulator")

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "capacity_plots.ipynb"


def _run(env: dict[str, str], cwd: Path) -> nbformat.NotebookNode:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    old = dict(os.environ)
    os.environ.update(env)  # the kernel inherits this process's environment
    try:
        nbclient.NotebookClient(
            nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}
        ).execute()
    finally:
        os.environ.clear()
        os.environ.update(old)
    return nb


def _images(nb: nbformat.NotebookNode) -> int:
    return sum(
        "image/png" in out.get("data", {})
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
    )


def test_notebook_runs_a_small_sweep_and_draws_the_plots(tmp_path: Path) -> None:
    nb = _run({"SIMSERVE_NOTEBOOK_SMALL": "1", "SIMSERVE_CACHE": str(tmp_path / "cache")}, tmp_path)
    errors = [
        o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"
    ]
    assert not errors
    assert _images(nb) >= 4  # per policy, vs budget, latency CDFs, tradeoff


def test_notebook_loads_a_sweep_directory(tmp_path: Path) -> None:
    from simserve.tune.capacity import SLO
    from simserve.tune.report import write_outputs
    from simserve.tune.sweep import SweepSpec, run_sweep
    from simserve.tune.toy import ToyScenario

    out = tmp_path / "sweep"
    write_outputs(
        run_sweep(
            SweepSpec(ToyScenario(), policies=("vllm", "sarathi"), budgets=(256, 512), slos=(SLO(0.1),)),
            executor="serial",
        ),
        out,
        plots=False,
    )
    nb = _run({"SIMSERVE_SWEEP_DIR": str(out)}, tmp_path)
    assert _images(nb) >= 3
