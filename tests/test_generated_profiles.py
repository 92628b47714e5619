"""`simserve run` and `simserve sweep` build the profile they need when none is shipped (as `plan` does):
measured from NVIDIA's tables when it can, roofline otherwise, once per cache, and say which; an explicit
--profiles is the user's own set and is never replaced."""

from __future__ import annotations

import json

import pytest

from simserve.cli import main
from simserve.profiling import measured

needs_db = pytest.mark.skipif(
    not measured.installed(), reason=f"needs {measured.PACKAGE} ({measured.INSTALL_HINT})"
)
RUN = [
    "run",
    "--gpu",
    "b200",
    "--model",
    "mistral-7b",
    "--requests",
    "20",
    "--qps",
    "1",
    "--max-model-len",
    "4096",
]


def _run(capsys, *args: str) -> tuple[int, str, str]:
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = exc.code or 0
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SIMSERVE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SIMSERVE_PROFILES", raising=False)
    return tmp_path / "cache"


@needs_db
def test_a_run_on_a_gpu_with_tables_but_no_shipped_profile_builds_a_measured_one_once(
    cache, tmp_path, capsys
):
    code, out, err = _run(capsys, *RUN, "--out", str(tmp_path / "a"))
    assert code == 0, err
    line = next(s for s in out.splitlines() if s.startswith("no shipped profile"))
    assert (
        "Mistral-7B on B200: generated a measured profile (aiconfigurator-core" in line and "kernels)" in line
    )
    summary = json.loads((tmp_path / "a/summary.json").read_text())
    assert (
        summary["profile"].startswith("generated measured (aiconfigurator-core")
        and summary["summary"]["completed"] == 20
    )
    prov = next(cache.glob("plan-profiles/*/b200/mistral-7b/provenance.json"))
    written = prov.read_bytes()
    # the second run reads the cached profile: it says so and writes nothing new
    code, out, err = _run(capsys, *RUN, "--out", str(tmp_path / "b"))
    assert code == 0, err
    assert "reused the measured profile" in out and prov.read_bytes() == written
    again = json.loads((tmp_path / "b/summary.json").read_text())
    assert again["summary"] == summary["summary"]


def test_without_the_package_a_run_builds_a_roofline_profile_and_says_why(
    cache, tmp_path, capsys, monkeypatch
):
    monkeypatch.setattr(measured, "installed", lambda: False)
    code, out, err = _run(capsys, *RUN, "--out", str(tmp_path / "a"))
    assert code == 0, err
    assert (
        "no shipped profile for Mistral-7B on B200: generated an analytic roofline profile (not measured: "
        "measured tables need pip install" in out
    )
    summary = json.loads((tmp_path / "a/summary.json").read_text())
    assert summary["profile"].startswith("generated roofline") and "not measured" in summary["profile"]
    # the second run reuses it (installing the package would make it stale: tests/test_plan.py)
    code, out, _ = _run(capsys, *RUN, "--out", str(tmp_path / "b"))
    assert code == 0 and "reused the analytic roofline profile" in out


def test_an_explicit_profiles_root_is_never_replaced(cache, tmp_path, capsys, monkeypatch):
    code, out, err = _run(capsys, *RUN, "--profiles", str(tmp_path / "mine"), "--out", str(tmp_path / "a"))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "simserve profile --gpu b200" in err
    monkeypatch.setenv("SIMSERVE_PROFILES", str(tmp_path / "mine"))
    code, out, err = _run(capsys, *RUN, "--out", str(tmp_path / "b"))
    assert code == 2 and "simserve profile --gpu b200" in err
    assert not cache.exists() or not list(cache.glob("plan-profiles/*/b200"))
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_sweep_builds_the_profile_and_its_title_names_it(cache, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(measured, "installed", lambda: False)  # the roofline backend: no package needed, fast
    code, out, err = _run(
        capsys,
        "sweep",
        "--gpu",
        "b200",
        "--model",
        "mistral-7b",
        "--policies",
        "sarathi",
        "--budgets",
        "512",
        "--requests",
        "64",
        "--executor",
        "serial",
        "--no-plots",
        "--no-cache",
        "--out",
        str(tmp_path / "s"),
    )
    assert code == 0, err
    assert "no shipped profile for Mistral-7B on B200: generated an analytic roofline profile" in out
    assert "generated roofline" in out  # the table's title


@needs_db
def test_a_model_the_tables_cannot_serve_gets_a_roofline_profile_labelled_with_why(
    cache, tmp_path, capsys, monkeypatch
):
    from simserve.errors import SimserveError
    from simserve.profiling import measured_backend

    def lacks_rows(*args, **kwargs):
        raise SimserveError("no prefill rows for head dim 64")

    monkeypatch.setattr(measured_backend, "profile", lacks_rows)
    code, out, err = _run(capsys, *RUN, "--out", str(tmp_path / "a"))
    assert code == 0, err
    assert "generated an analytic roofline profile (not measured: no prefill rows for head dim 64)" in out
    summary = json.loads((tmp_path / "a/summary.json").read_text())
    assert (
        summary["profile"] == "generated roofline (analytic); not measured: no prefill rows for head dim 64"
    )


A100 = [
    "run",
    "--gpu",
    "a100",
    "--model",
    "mistral-7b",
    "--requests",
    "20",
    "--qps",
    "1",
    "--max-model-len",
    "4096",
]
A100_TP8 = [*A100, "--tp", "8", "--node", "dgx-a100"]


def test_a_shipped_profile_lacking_the_tp_degree_gets_it_built_and_says_so(
    cache, tmp_path, capsys, monkeypatch
):
    monkeypatch.setattr(measured, "installed", lambda: False)  # the roofline backend: fast, no package needed
    code, out, err = _run(capsys, *A100_TP8, "--out", str(tmp_path / "a"))
    assert code == 0, err
    line = next(s for s in out.splitlines() if s.startswith("the shipped profile"))
    assert (
        "mistral-7b has TP 1, 2, 4, not TP 8: generated an analytic roofline profile (not measured:" in line
    )
    prov = json.loads(next(cache.glob("plan-profiles/*/a100-80gb/mistral-7b/provenance.json")).read_text())
    assert 8 in prov["deployment"]["tp"] and prov["backend"].startswith("roofline")
    summary = json.loads((tmp_path / "a/summary.json").read_text())
    assert summary["profile"].startswith("generated roofline") and summary["summary"]["completed"] == 20
    # a TP degree the shipped profile has still runs on it, with no line
    code, out, err = _run(capsys, *A100, "--tp", "4", "--out", str(tmp_path / "b"))
    assert code == 0 and "the shipped profile" not in out and "no shipped profile" not in out
    assert not json.loads((tmp_path / "b/summary.json").read_text())["profile"].startswith("generated")


def test_the_users_own_profile_lacking_the_tp_degree_stays_an_error_with_its_fix(cache, tmp_path, capsys):
    import shutil

    from simserve.shipped import shipped_dir

    mine = tmp_path / "mine"
    shutil.copytree(shipped_dir("profiles") / "a100-80gb" / "mistral-7b", mine / "a100-80gb" / "mistral-7b")
    code, out, err = _run(capsys, *A100_TP8, "--profiles", str(mine), "--out", str(tmp_path / "a"))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "has no TP 8 rows (it has TP 1, 2, 4)" in err and "simserve profile --gpu a100-80gb" in err
    assert not (tmp_path / "a").exists()


@needs_db
def test_plan_falls_back_to_a_roofline_profile_when_the_measured_one_cannot_be_built(cache, monkeypatch):
    from simserve import resolve
    from simserve.deployment import Deployment
    from simserve.errors import SimserveError
    from simserve.profiling import measured_backend

    def lacks_shapes(*args, **kwargs):
        raise SimserveError("the measured attention tables have no head dim 128 rows for this engine release")

    monkeypatch.setattr(measured_backend, "profile", lacks_shapes)
    dep = Deployment.create("mistral-7b", "b200", 1, 1)
    label = resolve.resolve_profiles([dep])[dep].label
    assert label == (
        "generated roofline (analytic); not measured: the measured attention tables have no head dim "
        "128 rows for this engine release"
    )
    # written once: the next plan reuses the fallback (the same package release would fail the same way)
    prov = next(cache.glob("plan-profiles/*/b200/mistral-7b/provenance.json"))
    written = prov.read_bytes()
    assert resolve.resolve_profiles([dep])[dep].label == label and prov.read_bytes() == written


def test_profile_csvs_are_the_bytes_pandas_would_write(tmp_path):
    """schema.write_csv writes what df.to_csv(index=False, float_format="%.6g") writes, byte for byte:
    profiles (and so their content hashes, which key the fitted-predictor and probe caches) do not depend on
    which."""
    import numpy as np
    import pandas as pd

    from simserve.profiling.schema import FLOAT_FORMAT, SHIPPED_PROFILES, TABLES, write_csv

    frames = {
        "crafted": pd.DataFrame(
            {
                "op": ["a,b", 'q"x', "plain", "new\nline", "é"],
                "tp": [1, 2, 4, 8, 16],
                "time_ms": [1e-9, np.nan, -0.0, np.inf, 123456789.123],
                "x": [0.1, 2.5e-7, 3.0, 1e22, 7.25],
            }
        ),
        "mixed": pd.DataFrame({"op": ["a", None], "time_ms": [1.0, 2.0]}),  # not all text: pandas writes it
        **{t: pd.read_csv(SHIPPED_PROFILES / "h200" / "llama2-70b" / f"{t}.csv") for t in TABLES},
    }
    for name, df in frames.items():
        write_csv(df, tmp_path / f"{name}-ours.csv")
        df.to_csv(tmp_path / f"{name}-pandas.csv", index=False, float_format=FLOAT_FORMAT)
        assert (tmp_path / f"{name}-ours.csv").read_bytes() == (
            tmp_path / f"{name}-pandas.csv"
        ).read_bytes(), name
