"""Every option and argument of every command says what it is for: `--help` is the manual."""

from __future__ import annotations

import typer.main

from simserve.cli import _register, app


def _commands(cmd, path: str = "simserve"):
    yield path, cmd
    for name, sub in getattr(cmd, "commands", {}).items():
        yield from _commands(sub, f"{path} {name}")


def test_every_option_of_every_command_has_help():
    _register()
    root = typer.main.get_command(app)
    missing = [
        f"{path} {p.opts[0] if p.opts else p.name}"
        for path, cmd in _commands(root)
        for p in cmd.params
        # NOTE: typer's options are not click.Option instances (it ships its own click core): ask the kind.
        if not getattr(p, "hidden", False) and not (getattr(p, "help", None) or "").strip()
    ]
    assert missing == []


def test_every_command_has_a_docstring():
    _register()
    root = typer.main.get_command(app)
    assert [path for path, cmd in _commands(root) if not (cmd.help or "").strip()] == []
