"""Atomic file and directory writes: an interrupted run never leaves a partial output behind; exact CSV
reads."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success rename it over `path`, on failure delete it.

    Works for files and for directories (the caller creates whatever it wants at the yielded path).
    NOTE: os.replace is atomic for files on POSIX; a directory that already exists is first moved aside,
    so a reader sees either the old directory or the new one, never a half-written one.
    The temporary name is fresh and nothing is created for it: a file write costs one rename (a plan writes
    hundreds of cache entries, and making and removing a temporary directory per entry cost ~1 s of system
    time). Writers name their format (savefig's `format=`): the temporary name ends in `.tmp`.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(6)}.tmp"
    try:
        yield tmp
        if tmp.is_dir() and path.is_dir():
            old = tmp.with_name(tmp.name + ".old")
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    finally:
        if tmp.is_dir() and not tmp.is_symlink():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


# The output directories this process has written in full: what the CLI's interrupt line reports.
LANDED: list[Path] = []


@contextlib.contextmanager
def _interrupt_held() -> Iterator[None]:
    """Hold a Ctrl-C that arrives inside the block until the block is done, then deliver it.

    A handful of renames takes milliseconds; holding them makes an interrupted run's outputs all there or
    all absent, never some of them."""
    held: list[int] = []
    try:
        handler = signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    except ValueError:  # not the main thread, which is where Python runs signal handlers: nothing to hold
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, handler)
    if held and callable(handler):
        handler(signal.SIGINT, None)


# Every output directory simserve writes holds this file, listing the files it wrote there. It is how a later
# run knows the directory is simserve's own (so writing into it again is safe) and which stale outputs it may
# remove; files it does not list are never touched.
MARKER = ".simserve-output"


def _listed(path: Path) -> set[str]:
    try:
        lines = (path / MARKER).read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return set()
    # A damaged marker must never reach outside the directory.
    return {line for line in lines if line and not Path(line).is_absolute() and ".." not in Path(line).parts}


def check_out_dir(path: str | os.PathLike, force: bool = False, option: str = "--out") -> Path:
    """Refuse, before any work starts, an output directory simserve could not or should not write into.

    A new path is fine when its nearest existing parent is a writable directory; an existing one must be a
    writable directory that is empty or holds simserve's marker — or the user passed --force, and then
    simserve writes beside the files already there (it never deletes a file it did not write).
    """
    from simserve.errors import SimserveError

    path = Path(path)
    if path.exists() and not path.is_dir():
        raise SimserveError(f"{option} {path} is a file; give a directory path")
    probe = path
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise SimserveError(f"{option} {path}: {probe} is a file, not a directory; choose another {option}")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise SimserveError(f"{option} {path}: {probe} is not writable; choose a directory you can write")
    if probe == path and not force and not (path / MARKER).exists() and any(path.iterdir()):
        raise SimserveError(
            f"{option} {path} holds files simserve did not write; choose a new or empty directory, "
            f"or pass --force to write beside them (nothing is deleted)"
        )
    return path


@contextlib.contextmanager
def output_dir(path: str | os.PathLike, force: bool = False, option: str = "--out") -> Iterator[Path]:
    """Yield an empty staging directory; on success move what was written there into `path`.

    Each file lands by an atomic rename, so a reader never sees a half-written file; on failure or Ctrl-C
    nothing is moved. Files a previous simserve run listed in the marker and this run did not rewrite are
    removed as stale; every other file in `path` stays.
    """
    path = check_out_dir(path, force, option)
    path.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path))
    try:
        yield tmp
        written = sorted(str(f.relative_to(tmp)) for f in tmp.rglob("*") if f.is_file())
        with _interrupt_held():  # the outputs land all together or not at all, so `LANDED` tells the truth
            for rel in written:
                (path / rel).parent.mkdir(parents=True, exist_ok=True)
                os.replace(tmp / rel, path / rel)
            for rel in _listed(path) - set(written):
                with contextlib.suppress(OSError):
                    (path / rel).unlink()
            write_text_atomic(path / MARKER, "".join(f"{rel}\n" for rel in written))
            LANDED.append(path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def exact_floats() -> dict:
    """Keyword arguments for `pd.read_csv` that parse every float to the nearest double on every pandas
    release.

    pandas 3 parses floats correctly rounded by default (and deprecates `float_precision`); pandas 2's default
    parser can miss the last bit (a replayed arrival time 3.1099981900000003 read back as its neighbour), so
    there Python's own parser is asked for. Results must not depend on which pandas a machine has.
    """
    import pandas as pd

    return {} if int(pd.__version__.split(".")[0]) >= 3 else {"float_precision": "round_trip"}
