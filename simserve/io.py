"""Atomic file and directory writes: an interrupted run never leaves a partial output behind."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success rename it over `path`, on failure delete it.

    Works for files and for directories (the caller creates whatever it wants at the yielded path).
    NOTE: os.replace is atomic for files on POSIX; a directory that already exists is first moved aside,
    so a reader sees either the old directory or the new one, never a half-written one.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    target = tmp / path.name
    try:
        yield target
        if target.is_dir() and path.is_dir():
            old = tmp / ".old"
            os.replace(path, old)
            os.replace(target, path)
        else:
            os.replace(target, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)
