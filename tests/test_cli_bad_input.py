"""Bad input a new user types: each is refused in one line naming the problem and the fix, exit code 2,
before any work, with nothing written and nothing deleted."""

from __future__ import annotations

import os

import pytest
from cli_runner import cli


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
def test_a_bad_cache_setting_is_refused_and_nothing_is_deleted(
    capsys, tmp_path, monkeypatch, env, args, words
):
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
    code, _, err = cli(
        capsys, *args, *(["--out", str(tmp_path / "o")] if args[0] in ("sweep", "plan") else [])
    )
    assert code == 2 and err.count("\n") == 1 and words in err and "Traceback" not in err, err
    assert entry.exists() and file.read_text() == "mine" and not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "args, words",
    [
        (["run", "--trace", "/dev/null"], "/dev/null is not a regular file"),
        (["run", "--trace", "TMP"], "is a directory"),
        (["trace", "stats", "TMP"], "is a directory"),
        (["trace", "stats", "EMPTY"], "the trace is empty"),
        (["trace", "stats", "RAGGED"], "data row 3: 3 cells where the header has 2"),
        (["sweep", "--slo-grid", ""], "--slo-grid is empty"),
        (["sweep", "--slo-grid", " , "], "--slo-grid is empty"),
        (["sweep", "--vllm-max-batch", ""], "--vllm-max-batch is empty"),
    ],
)
def test_a_bad_trace_or_grid_is_named_for_what_it_is(capsys, tmp_path, args, words):
    (tmp_path / "empty.csv").write_text("")
    # a blank line is a data row, as every other trace error counts them (pandas said "line 4")
    (tmp_path / "ragged.csv").write_text("prompt_tokens,output_tokens\n100,10\n\n200,20,5\n")
    names = {
        "TMP": str(tmp_path),
        "EMPTY": str(tmp_path / "empty.csv"),
        "RAGGED": str(tmp_path / "ragged.csv"),
    }
    args = [names.get(a, a) for a in args]
    out = ["--out", str(tmp_path / "o")] if args[0] in ("run", "sweep") else []
    code, _, err = cli(capsys, *args, *out)
    assert code == 2 and err.count("\n") == 1 and words in err and "does not exist" not in err, err
    assert "no such file" not in err and "tokenizing" not in err and not (tmp_path / "o").exists()


def _help_commands() -> list[list[str]]:
    import typer

    from simserve.cli import _register, app

    _register()
    root = typer.main.get_command(app)
    commands = [[]]
    for name, command in root.commands.items():
        commands.append([name])
        commands += [[name, sub] for sub in (getattr(command, "commands", None) or {})]
    return commands


@pytest.mark.parametrize("command", _help_commands(), ids=" ".join)
def test_help_shows_plain_metavars(capsys, command):
    code, out, _ = cli(capsys, *command, "--help")
    assert code == 0 and "Usage:" in out
    # typer's annotation labels (`<bool>` after a flag, `<list[str]>`) and `{argument}` in the usage line
    for label in ("<bool>", "<str>", "<int>", "<float>", "<path>", "<list", "{"):
        assert label not in out, (label, out)


def test_help_shows_while_the_cache_settings_are_wrong(capsys, monkeypatch):
    monkeypatch.setenv("SIMSERVE_CACHE_MAX_MB", "abc")
    code, out, err = cli(capsys, "list", "--help")
    assert code == 0 and "Usage:" in out and err == ""
