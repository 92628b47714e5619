"""`simserve profile` never silently rewrites shipped profiles and never drops TP degrees it was not asked
about."""

from __future__ import annotations

import hashlib
import json

import pandas as pd
import pytest
from cli_runner import cli as run_cli

from simserve.deployment import Deployment
from simserve.errors import SimserveError
from simserve.predictor import load_timer
from simserve.profiling.schema import SHIPPED_PROFILES

QUICK = ["--gpu", "a100", "--model", "mistral-7b", "--quick"]


def cli(capsys, *args: str) -> tuple[int, str]:
    code, _, err = run_cli(capsys, "profile", *args)
    return code, err


def test_a_new_tp_degree_is_merged_beside_the_old_ones(capsys, tmp_path):
    assert cli(capsys, *QUICK, "--tp", "1", "--out", str(tmp_path))[0] == 0
    assert cli(capsys, *QUICK, "--tp", "2", "--out", str(tmp_path))[0] == 0
    target = tmp_path / "a100-80gb" / "mistral-7b"
    assert sorted(pd.read_csv(target / "linear.csv")["tp"].unique()) == [1, 2]
    prov = json.loads((target / "provenance.json").read_text())
    assert prov["deployment"]["tp"] == [1, 2] and "--tp 1" in prov["earlier_commands"][0]
    # Re-profiling TP 2 replaces its rows instead of duplicating them.
    rows = len(pd.read_csv(target / "linear.csv"))
    assert cli(capsys, *QUICK, "--tp", "2", "--out", str(tmp_path))[0] == 0
    assert len(pd.read_csv(target / "linear.csv")) == rows


def test_a_profile_made_differently_is_not_mixed_in(capsys, tmp_path):
    assert cli(capsys, *QUICK, "--tp", "1", "--out", str(tmp_path))[0] == 0
    code, err = cli(capsys, *QUICK, "--tp", "2", "--max-tokens", "4096", "--out", str(tmp_path))
    assert code == 2 and "made differently" in err and "--force" in err
    assert cli(capsys, *QUICK, "--tp", "2", "--max-tokens", "4096", "--out", str(tmp_path), "--force")[0] == 0
    assert list(pd.read_csv(tmp_path / "a100-80gb" / "mistral-7b" / "linear.csv")["tp"].unique()) == [2]


@pytest.mark.skipif(not (SHIPPED_PROFILES / "a100-80gb" / "mistral-7b").is_dir(), reason="no shipped profile")
def test_shipped_profiles_are_refused_without_force(capsys):
    shipped = SHIPPED_PROFILES / "a100-80gb" / "mistral-7b"
    before = {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in shipped.iterdir()}
    code, err = cli(capsys, *QUICK, "--tp", "8", "--out", str(SHIPPED_PROFILES))
    assert code == 2 and "shipped profile" in err and "--profiles my-profiles" in err
    assert {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in shipped.iterdir()} == before


def test_missing_tp_hint_keeps_the_users_root_and_adds_rather_than_replaces(capsys, tmp_path):
    assert cli(capsys, *QUICK, "--tp", "1", "--out", str(tmp_path))[0] == 0
    with pytest.raises(SimserveError) as exc:
        load_timer(Deployment.create("mistral-7b", "a100", tp=2), profiles_root=tmp_path)
    hint = str(exc.value)
    assert f"--tp 2 --node a100-pairwise-nvlink --out {tmp_path}" in hint
    assert hint.count("--node") == 1
