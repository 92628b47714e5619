"""Finding simserve's own files (package, shipped traces and profiles) however Python was started."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "command",
    [
        ["-c", "from simserve.cli import main; main(['list', 'traces'])"],
        ["-m", "simserve", "list", "traces"],
    ],
    ids=["import", "python -m"],
)
def test_started_beside_a_simserve_folder(tmp_path, command):
    """From the parent of a clone named `simserve`, `import simserve` finds that folder first and makes it a
    namespace package (no __file__); the shipped traces must still be found."""
    (tmp_path / "simserve").symlink_to(REPO, target_is_directory=True)
    env = {**os.environ, "SIMSERVE_CACHE": str(tmp_path / "cache")}
    env.pop("PYTHONPATH", None)
    done = subprocess.run([sys.executable, *command], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert "sharegpt" in done.stdout and "arxiv" in done.stdout and "Traceback" not in done.stderr


def test_shipped_folders_are_the_repositorys_in_a_clone():
    from simserve.profiling.schema import SHIPPED_PROFILES
    from simserve.shipped import package_dir
    from simserve.workload.trace import TRACES_DIR

    assert package_dir() == REPO / "simserve"
    assert TRACES_DIR == REPO / "traces" and SHIPPED_PROFILES == REPO / "profiles"


def test_a_wheel_carries_every_shipped_file():
    """`pip install .` (not -e) copies package data only: simserve/_shipped/ links to the repository's
    profiles/ and traces/, and pyproject's package-data patterns must reach every file through it."""
    tomllib = pytest.importorskip("tomllib")
    patterns = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    package = REPO / "simserve"
    packed = {p.resolve() for pattern in patterns["simserve"] for p in package.glob(pattern) if p.is_file()}
    shipped = {
        p.resolve() for name in ("profiles", "traces") for p in (REPO / name).rglob("*") if p.is_file()
    }
    assert shipped and shipped <= packed, sorted(shipped - packed)[:5]
