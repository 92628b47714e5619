"""`simserve cache info|clear`: see and bound what simserve keeps in its cache directory."""

from __future__ import annotations

import datetime

import typer

from simserve.cli import app

cache_app = typer.Typer(
    help="Show or clear the cache (fitted predictors, capacity probes, ...).", no_args_is_help=True
)
app.add_typer(cache_app, name="cache")


def _mb(n: int) -> str:
    return f"{n / 2**20:.1f} MB"


def _day(t: float | None) -> str:
    return "" if t is None else datetime.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M")


@cache_app.command("info")
def info() -> None:
    """Size, entries and age per kind of cache entry ($SIMSERVE_CACHE, default ~/.cache/simserve)."""
    from rich.table import Table

    from simserve.cachedir import cache_root, usage
    from simserve.cli.console import console as make_console

    rows = usage()
    table = Table(title=f"{cache_root()}")
    for col in ("kind", "entries", "size", "oldest", "newest"):
        table.add_column(col, justify="left" if col == "kind" else "right")
    for r in rows:
        table.add_row(r.kind, str(r.files), _mb(r.bytes), _day(r.oldest), _day(r.newest))
    table.add_row("total", str(sum(r.files for r in rows)), _mb(sum(r.bytes for r in rows)), "", "")
    make_console(soft_wrap=True).print(table)
    typer.echo(
        "bound it with $SIMSERVE_CACHE_MAX_MB; free it with `simserve cache clear [--kind K] [--older-than "
        "DAYS]`"
    )


@cache_app.command("clear")
def clear_command(
    kind: str | None = typer.Option(None, "--kind", help="Only this kind (a folder `cache info` lists)."),
    older_than: float | None = typer.Option(
        None, "--older-than", help="Only entries older than this many days."
    ),
) -> None:
    """Delete cache entries; everything in the cache is recomputed on its next use."""
    from simserve.cachedir import cache_root, clear
    from simserve.errors import SimserveError

    done = clear(kind, older_than)
    removed = f"removed {done.files} entries ({_mb(done.bytes)}) from {cache_root()}"
    if done.failed:  # NOTE: said "removed 0 entries" and exit 0 when none could be deleted, 423 left behind
        raise SimserveError(
            f"{removed}, but {done.failed} could not be removed (first: {done.first_failure}); fix their "
            f"permissions (or run as their owner) and rerun `simserve cache clear`"
        )
    typer.echo(removed)
