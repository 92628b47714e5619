"""`simserve list`: a table that reads at 80 and 120 columns and when piped (no number split or cut)."""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys

import pytest


@functools.lru_cache
def _built_in(table: str, field: str) -> dict[str, str]:
    """Name -> the field as shown, of the built-in entries (read afresh: other tests add catalog entries
    to this process's tables, and the listed command sees only the built-in ones)."""
    code = (
        f"import json; from simserve.catalog import {table} as t; "
        f"print(json.dumps({{s.name: getattr(s, {field!r}) for s in t}}))"
    )
    values = json.loads(
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    )
    return {k: f"{v:g}" if isinstance(v, float) else str(v) for k, v in values.items()}


def _list(*args: str, tty_columns: int | None = None) -> str:
    """The command's stdout, piped, or through a pseudo-terminal `tty_columns` wide."""
    cmd = [sys.executable, "-c", "from simserve.cli import main; main()", "list", *args]
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR")}
    if tty_columns is None:
        return subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout
    pty = pytest.importorskip("pty")
    import fcntl
    import struct
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, tty_columns, 0, 0))
    proc = subprocess.Popen(cmd, stdout=follower, stderr=subprocess.PIPE, env=env)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed: the command ended
            break
        if not chunk:
            break
        chunks.append(chunk)
    assert proc.wait() == 0, proc.stderr.read()
    os.close(leader)
    return re.sub(r"\x1b\[[0-9;]*m", "", b"".join(chunks).decode()).replace("\r", "")


def _rows(text: str) -> dict[str, list[str]]:
    """Table rows by their first cell (an entry's name) -> the row's cells."""
    return {line.split()[0]: line.split() for line in text.splitlines() if line.strip()}


@pytest.mark.parametrize("columns", [80, 120, None], ids=["80 columns", "120 columns", "piped"])
@pytest.mark.parametrize(
    "kind, table, field",
    [
        ("models", "MODELS", "ffn"),
        ("models", "MODELS", "vocab"),
        ("gpus", "GPU", "hbm_gbps"),
        ("nodes", "NODES", "gpu"),
    ],
)
def test_every_entry_is_one_row_with_whole_values(kind, table, field, columns):
    text = _list(kind, tty_columns=columns)
    rows = _rows(text)
    for name, shown in _built_in(table, field).items():
        assert name in rows and shown in rows[name], (name, shown, text)
    assert max(len(line) for line in text.splitlines()) <= (columns or 10_000)
    assert "\x1b" not in _list(kind)  # piped: no colour codes


def test_wide_adds_the_detail_fields_and_the_aliases():
    text = _list("models", "--wide")
    assert "norm" in text and "window" in text
    assert "Mistral-7B also: mistral-7b, mistral," in text
    assert "source:" not in text and "source: https://" in _list("models", "--sources")
