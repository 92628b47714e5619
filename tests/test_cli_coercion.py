"""simserve/cli/coercion.py: plain option values converted without pydantic give what typer's own conversion
gives, for every option of every command, and leave every other value to it (same result, same error)."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer._click.exceptions import BadParameter

from simserve.cli import _register, app, coercion

VALUES = [
    "0",
    "7",
    "-3",
    "0012",
    "1.5",
    "-2.25",
    "1e-3",
    "2E+2",
    "1.",
    ".5",
    "inf",
    "nan",
    " 4",
    "1_000",
    "abc",
    "",
    "x/y.csv",
    "-",
    "99999999999999999999",
    "true",
    "0x10",
]


def _options():
    _register()
    command = typer.main.get_command(app)
    groups = [command, *command.commands.values()]
    while groups:
        group = groups.pop()
        yield from ((group.name, p) for p in group.params if hasattr(p, "type_descriptor"))
        groups += list(getattr(group, "commands", {}).values())


def _typer(descriptor, value, param):
    from typer._coercion import build_runtime_param

    try:
        return build_runtime_param(descriptor)._coerce_value(value, param=param, ctx=None)
    except BadParameter as exc:
        return ("error", str(exc))


OPTIONS = list(_options())


def test_the_commands_have_plain_options():
    kinds = {coercion.kind_of(p.type_descriptor) for _, p in OPTIONS}
    assert {"str", "int", "float", "bool", "path", "strlist"} <= kinds


@pytest.mark.parametrize("value", VALUES)
def test_a_plain_conversion_is_typers_own(value, tmp_path):
    checked = 0
    for _, param in OPTIONS:
        d = param.type_descriptor
        kind = coercion.kind_of(d)
        if kind is None:
            continue
        given = [value] if kind == "strlist" else value
        ours = coercion.convert(kind, given, d, param, None)
        if ours is coercion._SLOW:
            continue  # typer's own conversion decides (what it gives is then the answer by construction)
        theirs = _typer(d, given, param)
        assert type(ours) is type(theirs) and ours == theirs, (param.name, kind, value)
        checked += 1
    if value in ("0", "7", "1.5", "abc"):
        assert checked


def test_defaults_and_non_string_values_convert_as_typer_does():
    for _, param in OPTIONS:
        d = param.type_descriptor
        kind = coercion.kind_of(d)
        if kind is None or param.default is None:
            continue
        ours = coercion.convert(kind, param.default, d, param, None)
        if ours is not coercion._SLOW:
            theirs = _typer(d, param.default, param)
            assert type(ours) is type(theirs) and ours == theirs, (param.name, param.default)
    path = next(p for _, p in OPTIONS if coercion.kind_of(p.type_descriptor) == "path")
    assert coercion.convert("path", Path("a/b"), path.type_descriptor, path, None) == Path("a/b")


def test_a_bad_value_still_gets_typers_message(tmp_path, capsys):
    from simserve.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["run", "--requests", "many", "--out", str(tmp_path / "o")])
    assert exc.value.code == 2
    assert "--requests" in capsys.readouterr().err
