"""simserve's cache directory: what is in it, how big it is, and keeping it bounded.

Everything under it can be recomputed: fitted predictors (`predictor/`), capacity probes (`probes/`) and
whatever else a stage caches in a folder of its own. Location: $SIMSERVE_CACHE, default ~/.cache/simserve.
With $SIMSERVE_CACHE_MAX_MB set, each command ends by deleting the least recently written entries until the
cache fits (an entry is re-made on its next miss, so a small bound costs time, never results).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

from simserve.errors import SimserveError


def cache_root() -> Path:
    env = os.environ.get("SIMSERVE_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "simserve"


def _check_root() -> None:
    # NOTE: a file in the cache's place made every cache write fail quietly (each cache treats a failed
    # write as a miss), so every run silently recomputed everything.
    root = cache_root()
    probe = root
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        where = "is a file" if probe == root else f"is under {probe}, a file"
        raise SimserveError(
            f"SIMSERVE_CACHE={root} {where}, not a directory; point it at a directory (or unset it for "
            f"~/.cache/simserve)"
        )


def max_bytes_from_env() -> int | None:
    """$SIMSERVE_CACHE_MAX_MB in bytes, or None when unset; anything but a number >= 0 is refused."""
    limit = os.environ.get("SIMSERVE_CACHE_MAX_MB")
    if limit is None or not limit.strip():
        return None
    try:
        max_mb = float(limit)
    except ValueError:
        max_mb = math.nan
    if not math.isfinite(max_mb) or max_mb < 0:
        raise SimserveError(
            f"SIMSERVE_CACHE_MAX_MB={limit} is not a size; set it to a number of megabytes >= 0 (e.g. 2000), "
            f"or unset it for no bound"
        )
    return int(max_mb * 2**20)


def check_env() -> None:
    """Refuse a bad $SIMSERVE_CACHE or $SIMSERVE_CACHE_MAX_MB before a command does any work."""
    _check_root()
    max_bytes_from_env()


@dataclass(frozen=True)
class KindUsage:
    kind: str
    files: int
    bytes: int
    oldest: float | None  # mtime, seconds since the epoch
    newest: float | None


def kinds(root: Path | None = None) -> list[str]:
    """The cache's kinds are its top-level folders: a stage that caches something new needs no
    registration."""
    root = root or cache_root()
    return sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


def _files(root: Path, kind: str | None = None) -> list[tuple[Path, os.stat_result]]:
    dirs = [root / kind] if kind else [root / k for k in kinds(root)]
    out = []
    for d in dirs:
        for f in d.rglob("*"):
            try:
                st = f.stat()
            except OSError:  # removed meanwhile by another process
                continue
            if f.is_file():
                out.append((f, st))
    return out


def usage(root: Path | None = None) -> list[KindUsage]:
    root = root or cache_root()
    rows = []
    for kind in kinds(root):
        stats = [st for _, st in _files(root, kind)]
        times = [st.st_mtime for st in stats]
        rows.append(
            KindUsage(
                kind,
                len(stats),
                sum(st.st_size for st in stats),
                min(times, default=None),
                max(times, default=None),
            )
        )
    return rows


@dataclass(frozen=True)
class Removal:
    """What a clear or trim removed, and what it could not (the first failure named: path and reason)."""

    files: int
    bytes: int
    failed: int = 0
    first_failure: str = ""


def clear(kind: str | None = None, older_than_days: float | None = None, root: Path | None = None) -> Removal:
    """Delete entries (of one kind, older than some days); what was removed and what could not be."""
    root = root or cache_root()
    if kind is not None and kind not in kinds(root):
        known = ", ".join(kinds(root)) or "none yet"
        raise SimserveError(f"no cache kind {kind!r} in {root}; kinds there: {known}")
    if older_than_days is not None and not (math.isfinite(older_than_days) and older_than_days >= 0):
        raise SimserveError(f"--older-than must be a number of days >= 0 (e.g. 30), got {older_than_days}")
    cutoff = time.time() - 86400 * older_than_days if older_than_days is not None else None
    return _remove([(f, st) for f, st in _files(root, kind) if cutoff is None or st.st_mtime < cutoff])


def trim(max_bytes: int, root: Path | None = None) -> Removal:
    """Delete the least recently written entries until the cache holds at most max_bytes."""
    entries = sorted(_files(root or cache_root()), key=lambda e: (e[1].st_mtime, str(e[0])))
    excess = sum(st.st_size for _, st in entries) - max_bytes
    doomed = []
    for f, st in entries:
        if excess <= 0:
            break
        doomed.append((f, st))
        excess -= st.st_size
    return _remove(doomed)


def trim_to_env_limit() -> None:
    """Apply $SIMSERVE_CACHE_MAX_MB, if set (the CLI checks it with `check_env` before the command runs)."""
    max_bytes = max_bytes_from_env()
    if max_bytes is not None:
        # best effort after the command: an entry it cannot delete stays, the run's answer stands
        trim(max_bytes)


def _remove(entries: list[tuple[Path, os.stat_result]]) -> Removal:
    files = size = failed = 0
    first = ""
    for f, st in entries:
        try:
            f.unlink()
        except FileNotFoundError:  # removed meanwhile by another process: gone, as asked
            continue
        except OSError as exc:
            failed += 1
            first = first or f"{f}: {exc.strerror or exc}"
            continue
        files, size = files + 1, size + st.st_size
    return Removal(files, size, failed, first)
