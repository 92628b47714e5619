"""Bad input a new user types: each is refused in one line naming the problem and the fix, exit code 2,
before any work, with nothing written and nothing deleted."""

from __future__ import annotations

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
