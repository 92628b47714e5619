"""Options several commands share, defined once so that each validates its value the same way."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from simserve.errors import SimserveError


def _non_negative_seed(value: int) -> int:
    # numpy's generators take only seeds >= 0; without this check a negative one surfaced as numpy's own
    # ValueError and a traceback, minutes into a sweep or plan.
    if value < 0:
        raise SimserveError(f"--seed must be 0 or more, got {value}; give a non-negative integer")
    return value


def seed_option(help: str) -> Any:
    """The `--seed` option: a non-negative integer, refused in one line before any work starts."""
    return typer.Option(0, "--seed", help=help, callback=_non_negative_seed)


def _cache_dir(value: Path) -> Path:
    from simserve.io import check_out_dir

    # Before any work: a file here failed only at the first probe's write, naming an internal hashed path.
    return check_out_dir(value, force=True, option="--cache")


def cache_option(default: Path) -> Any:
    """The `--cache` option of the capacity searches: a directory simserve can write (checked up front)."""
    return typer.Option(
        default,
        "--cache",
        help="Probe cache directory (default $SIMSERVE_CACHE/probes).",
        callback=_cache_dir,
    )
