"""Start-up cost of `simserve run` (issue 11, item 1; issue 22 item 4): a warm run loads the compiled timer
and the parsed trace from the cache, and imports neither scikit-learn nor pandas nor pydantic.

Checked in a fresh interpreter, since this test session has long since imported everything.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HAS_PROFILE = (REPO / "profiles" / "a100-80gb" / "mistral-7b").is_dir()

# Runs `simserve run` in-process, then reports which heavy top-level packages it imported.
PROBE = """
import json, sys
from simserve.cli import main
main(["run", "--requests", "50", "--qps", "2", "--out", sys.argv[1]])
HEAVY = {"sklearn", "scipy", "matplotlib", "torch", "pandas", "pyarrow", "pydantic"}
heavy = sorted({m.split(".")[0] for m in sys.modules} & HEAVY)
# other commands' modules; options, metavars, coercion, console and outputs are what commands share,
# not commands
SHARED = {"simserve.cli.run", "simserve.cli.options", "simserve.cli.metavars", "simserve.cli.coercion",
          "simserve.cli.console", "simserve.cli.outputs"}
heavy += sorted(m for m in sys.modules if m.startswith("simserve.cli.") and m not in SHARED)
print("HEAVY=" + json.dumps(heavy))
"""


def _heavy_imports(cache: Path, out: Path) -> list[str]:
    env = {**os.environ, "SIMSERVE_CACHE": str(cache), "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(out)], env=env, capture_output=True, text=True, check=True, cwd=REPO
    )
    line = [x for x in proc.stdout.splitlines() if x.startswith("HEAVY=")][-1]
    return json.loads(line[len("HEAVY=") :])


@pytest.mark.skipif(not HAS_PROFILE, reason="needs the shipped mistral-7b/a100 profile")
def test_a_warm_run_imports_no_scikit_learn(tmp_path):
    cold = _heavy_imports(tmp_path / "cache", tmp_path / "a")
    # the first run fits (or loads the fit) and parses the trace: the test would catch a broken cache
    assert {"sklearn", "pandas"} <= set(cold)
    assert not [m for m in cold if m.startswith("simserve.cli.")]  # only the run command was imported
    assert list((tmp_path / "cache" / "timer").glob("*.pkl"))
    assert list((tmp_path / "cache" / "trace").glob("*.npz"))
    warm = _heavy_imports(tmp_path / "cache", tmp_path / "b")
    assert warm == []
    for name in ("requests.csv", "iterations.csv", "summary.json", "trace.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


# Imports every module a warm `simserve run` uses, without running anything.
IMPORT_PROBE = """
import json, sys
import simserve.cli.run, simserve.sim.scenario, simserve.sim.writers, simserve.sim.perfetto
import simserve.sim.metrics, simserve.workload, simserve.predictor.timer_cache
from simserve.cli import _register
_register()  # every command module, as `simserve ...` loads them
print("MODULES=" + json.dumps(sorted({m.split(".")[0] for m in sys.modules})))
"""


def test_the_run_path_modules_import_neither_scikit_learn_nor_pandas():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-c", IMPORT_PROBE], env=env, capture_output=True, text=True, check=True, cwd=REPO
    )
    line = [x for x in proc.stdout.splitlines() if x.startswith("MODULES=")][-1]
    loaded = set(json.loads(line[len("MODULES=") :]))
    assert "simserve" in loaded and "numpy" in loaded  # the probe did import the run path
    assert not loaded & {"sklearn", "scipy", "pandas", "pyarrow", "matplotlib", "torch"}


def test_a_corrupt_timer_cache_entry_is_rebuilt(tmp_path, monkeypatch):
    from simserve.predictor import timer_cache

    monkeypatch.setenv("SIMSERVE_CACHE", str(tmp_path))
    (tmp_path / "timer").mkdir()
    (tmp_path / "timer" / "abc-def.pkl").write_bytes(b"not a pickle")
    assert timer_cache.load("abc-def") is None
    assert timer_cache.load("missing") is None


def test_each_command_named_in_the_fast_path_map_is_registered_by_that_module():
    from simserve.cli import COMMAND_MODULES, _register, app

    _register()
    registered = {c.name or c.callback.__name__: c.callback.__module__ for c in app.registered_commands}
    registered |= {
        g.name: g.typer_instance.registered_commands[0].callback.__module__ for g in app.registered_groups
    }
    assert {cmd: f"simserve.cli.{mod}" for cmd, mod in COMMAND_MODULES.items()} == {
        cmd: registered.get(cmd) for cmd in COMMAND_MODULES
    }


def test_the_command_is_found_after_the_group_option_and_unknown_ones_still_get_the_usual_error(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "SIMSERVE_CACHE": str(tmp_path / "cache")}
    catalog = tmp_path / "c.yaml"
    catalog.write_text("{}\n")
    ok = subprocess.run(
        [
            sys.executable,
            "-c",
            "from simserve.cli import main; main()",
            "--catalog",
            str(catalog),
            "list",
            "gpus",
        ],
        env=env,
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert ok.returncode == 0, ok.stderr
    assert "a100" in ok.stdout.lower()
    bad = subprocess.run(
        [sys.executable, "-c", "from simserve.cli import main; main()", "rnu"],
        env=env,
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert bad.returncode == 2 and "rnu" in bad.stderr
