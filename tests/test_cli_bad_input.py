"""Bad input a new user types: each is refused in one line naming the problem and the fix, exit code 2,
before any work, with nothing written and nothing deleted."""

from __future__ import annotations

import os

import pytest

from simserve.cli import main


def cli(capsys, *args: str) -> tuple[int, str, str]:
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize(
    "args",
    [
        ["run", "--requests", "4"],
        ["sweep", "--policies", "sarathi"],
        ["plan"],
        ["fit", "profiles/a100-80gb/mistral-7b"],
        ["trace", "build", "arxiv", "--synthetic"],
    ],
)
def test_a_negative_seed_is_refused_in_one_line(capsys, tmp_path, args):
    out = ["--out", str(tmp_path / "o")] if args[0] != "fit" else []
    code, _, err = cli(capsys, *args, *out, "--seed", "-1")
    assert code == 2 and err.count("\n") == 1 and "--seed" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "env, args, words",
    [
        ({}, ["cache", "clear", "--older-than", "nan"], "--older-than"),
        ({}, ["cache", "clear", "--older-than", "-1"], "--older-than"),
        ({"SIMSERVE_CACHE": "FILE"}, ["cache", "info"], "SIMSERVE_CACHE"),
        ({"SIMSERVE_CACHE": "FILE/sub"}, ["list", "gpus"], "SIMSERVE_CACHE"),
        ({"SIMSERVE_CACHE_MAX_MB": "abc"}, ["list", "gpus"], "SIMSERVE_CACHE_MAX_MB"),
        ({"SIMSERVE_CACHE_MAX_MB": "-5"}, ["cache", "info"], "SIMSERVE_CACHE_MAX_MB"),
        ({"SIMSERVE_CACHE_MAX_MB": "nan"}, ["cache", "clear"], "SIMSERVE_CACHE_MAX_MB"),
        ({}, ["sweep", "--policies", "sarathi", "--cache", "FILE"], "--cache"),
        ({}, ["plan", "--cache", "FILE/probes"], "--cache"),
    ],
)
def test_a_bad_cache_setting_is_refused_and_nothing_is_deleted(capsys, tmp_path, monkeypatch, env, args, words):
    cache = tmp_path / "cache"
    entry = cache / "probes" / "ab" / "old.json"
    entry.parent.mkdir(parents=True)
    entry.write_text("{}")
    os.utime(entry, (0, 0))  # 1970: older than any --older-than
    file = tmp_path / "a-file"
    file.write_text("mine")
    monkeypatch.setenv("SIMSERVE_CACHE", str(cache))
    for name, value in env.items():
        monkeypatch.setenv(name, value.replace("FILE", str(file)))
    args = [a.replace("FILE", str(file)) for a in args]
    code, _, err = cli(capsys, *args, *(["--out", str(tmp_path / "o")] if args[0] in ("sweep", "plan") else []))
    assert code == 2 and err.count("\n") == 1 and words in err and "Traceback" not in err, err
    assert entry.exists() and file.read_text() == "mine" and not (tmp_path / "o").exists()
