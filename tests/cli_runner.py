"""`simserve ARGS…` run in-process for the CLI tests: what a user sees (exit code, stdout, stderr)."""

from __future__ import annotations

from simserve.cli import main


def cli(capsys, *args: str) -> tuple[int, str, str]:
    """Run the command line `args` (a finished run is exit code 0; an error's SystemExit gives its code) and
    return (exit code, stdout, stderr) as captured by pytest's capsys."""
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = 0 if exc.code is None else exc.code
    out = capsys.readouterr()
    return code, out.out, out.err
