"""The `simserve` command line. Each command group lives in its own module of this package."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator

import typer

from simserve.cli.coercion import install as _plain_option_values
from simserve.cli.metavars import plain_metavars
from simserve.errors import Reported, SimserveError

_plain_option_values()  # str/int/float/bool/Path options converted without importing pydantic (coercion.py)

app = typer.Typer(
    name="simserve",
    help="Simulate LLM inference serving and tune the token budget.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _options(
    catalog: list[str] = typer.Option(
        [],
        "--catalog",
        metavar="FILE",
        help="YAML/TOML file adding models, GPUs, nodes or networks (repeatable; also $SIMSERVE_CATALOG).",
    ),
) -> None:
    from simserve.catalog.table import load_catalog_file, load_env_catalogs

    load_env_catalogs()
    for path in catalog:
        load_catalog_file(path)


def _register() -> None:
    # NOTE: imported here so `simserve --help` works even while one command's optional deps are missing.
    import importlib
    import pkgutil

    import simserve.cli as package

    for mod in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"simserve.cli.{mod.name}")


# Command -> the module of this package that registers it. `simserve <command>` imports only that module
# (the others' imports were ~0.06 CPU-s of a warm `simserve run`); anything else (--help, a command missing
# here, a typo) imports them all, so a stale entry costs time, never a command.
COMMAND_MODULES = {
    "cache": "cache",
    "fit": "predict",
    "list": "listing",
    "plan": "plan",
    "profile": "profile",
    "regress": "sweep",
    "run": "run",
    "sweep": "sweep",
    "trace": "trace",
    "vidur": "vidur",
}


def _register_for(argv: list[str]) -> None:
    """Register the command that argv names, or every command when that is not clear."""
    import importlib

    args = iter(argv)
    for arg in args:
        if arg == "--catalog":  # the group's one option that takes a value
            next(args, None)
        elif not arg.startswith("-"):
            module = COMMAND_MODULES.get(arg)
            if module is not None:
                importlib.import_module(f"simserve.cli.{module}")
                return
            break
    _register()


def main(argv: list[str] | None = None) -> None:
    """Console entry point: bad input becomes one line on stderr and exit code 2, never a traceback."""
    _register_for(sys.argv[1:] if argv is None else argv)
    # argv None: the console script, so the process ends when main() returns
    with _one_interrupt(ignore_after=argv is None):
        _main(argv)


@contextlib.contextmanager
def _one_interrupt(ignore_after: bool) -> Iterator[None]:
    """The first Ctrl-C interrupts the run; later ones are ignored (until the process ends if `ignore_after`).

    NOTE: the clean-up after the first (workers stopped, staging folders removed, the one line printed, the
    worker pool's threads joined at exit) must not be cut short by a second Ctrl-C: that ended the process
    by SIGINT with no line, or with a traceback."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread handles signals
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.SIG_IGN:  # started with Ctrl-C ignored (`nohup`, a background job): keep it so
        yield
        return
    fired = []

    def first(signum: int, frame: object) -> None:
        fired.append(signum)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, first)
    try:
        yield
    finally:
        if not (fired and ignore_after):
            signal.signal(signal.SIGINT, previous)


def _main(argv: list[str] | None) -> None:
    from simserve.io import LANDED

    LANDED.clear()  # main() may run several times in one Python process (tests, notebooks)
    try:
        from simserve.cachedir import check_env, trim_to_env_limit

        args = sys.argv[1:] if argv is None else argv
        # Help needs no cache, and should show even while the cache settings are wrong.
        uses_cache = bool(args) and "--help" not in args
        if uses_cache:
            check_env()
        # standalone mode: click reports its own usage errors (exit 2) and turns return into sys.exit
        try:
            plain_metavars(typer.main.get_command(app))(args=argv, prog_name="simserve")
        finally:
            if uses_cache:
                trim_to_env_limit()
    except SimserveError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        _interrupted()
    except OSError as exc:
        # A full disk, a permission or a missing file deep in a write: the file system's own words, one line.
        where = f": {exc.filename}" if exc.filename else ""
        print(f"error: {exc.strerror or exc}{where}; check the path and free space, then rerun", file=sys.stderr)
        sys.exit(2)
    except SystemExit as exc:
        # click ends every run with sys.exit; let a successful one return, so main() is callable from Python
        if exc.code == 130 and not isinstance(exc, Reported):  # typer turns Ctrl-C into a silent exit 130
            _interrupted()
        if exc.code not in (0, None):
            raise


def _interrupted() -> None:
    # Outputs land only when complete and all together (simserve.io), so each is either whole or absent.
    from simserve.io import LANDED

    if LANDED:
        where = ", ".join(f"{p}/" for p in LANDED)
        line = f"interrupted after the outputs were written: {where} holds this run's complete results"
    else:
        line = "interrupted; no output was written (results already cached are kept)"
    print(line, file=sys.stderr)
    sys.exit(130)
