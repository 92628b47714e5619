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
from simserve.errors import Reported, SimserveError, Terminated

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
    from simserve.catalog.files import load_catalog_file, load_env_catalogs

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
    if argv is None:  # the console script: the process ends with the command, so it may freeze its heap
        from simserve import heap

        heap.FREEZE_HEAP = True
    # argv None: the console script, so the process ends when main() returns
    with _one_interrupt(ignore_after=argv is None):
        _main(argv)


# Which signal interrupted this run, if one did (SIGINT or SIGTERM): its word and exit code in the last line.
_SIGNALLED: list[int] = []


@contextlib.contextmanager
def _one_interrupt(ignore_after: bool) -> Iterator[None]:
    """The first Ctrl-C or SIGTERM interrupts the run; later ones are ignored (until the process ends if
    `ignore_after`). SIGTERM raises `Terminated` (a KeyboardInterrupt), so both stop the same way: workers
    stopped, nothing partial left, one line (a SIGTERM with the default action ended `plan` with no line).

    NOTE: the clean-up after the first (workers stopped, staging folders removed, the one line printed, the
    worker pool's threads joined at exit) must not be cut short by a second signal: that ended the process
    by SIGINT with no line, or with a traceback."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread handles signals
        yield
        return
    _SIGNALLED.clear()
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    # started with a signal ignored (`nohup`, a background job's Ctrl-C): keep it so
    handled = [sig for sig, action in previous.items() if action is not signal.SIG_IGN]

    def first(signum: int, frame: object) -> None:
        _SIGNALLED.append(signum)
        for sig in handled:
            signal.signal(sig, signal.SIG_IGN)
        raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt

    for sig in handled:
        signal.signal(sig, first)
    try:
        yield
    finally:
        if not (_SIGNALLED and ignore_after):
            for sig in handled:
                signal.signal(sig, previous[sig])


def terminated() -> bool:
    """Whether SIGTERM (not Ctrl-C) interrupted this run."""
    return _SIGNALLED[:1] == [signal.SIGTERM]


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
        # Not standalone: click's usage errors come here to be one line like every other error (standalone,
        # typer printed the usage, a hint and the message in a box: five lines).
        clicks = _click_exceptions()
        command = plain_metavars(typer.main.get_command(app))
        try:
            code = command.main(args=argv, prog_name="simserve", standalone_mode=False)
        except clicks.NoArgsIsHelpError as exc:  # `simserve` or `simserve cache` alone: the help, as before
            print(exc.ctx.get_help())
            code = 2
        except clicks.ClickException as exc:
            raise SimserveError(usage_line(exc, command, args)) from None
        except typer.Abort:
            raise KeyboardInterrupt from None
        finally:
            if uses_cache:
                trim_to_env_limit()
        # typer.Exit(n) returns n; typer turns Ctrl-C into 130; a command's own return value is None
        if code == 130:
            _interrupted()
        if isinstance(code, int) and code:
            sys.exit(code)
    except SimserveError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        _interrupted()
    except OSError as exc:
        # A full disk, a permission or a missing file deep in a write: the file system's own words, one line.
        where = f": {exc.filename}" if exc.filename else ""
        print(
            f"error: {exc.strerror or exc}{where}; check the path and free space, then rerun", file=sys.stderr
        )
        sys.exit(2)
    except SystemExit as exc:
        # a command's own exit (Reported: its line is printed) or a closed pipe's; a successful one returns,
        # so main() is callable from Python
        if exc.code not in (0, None):
            raise


def _click_exceptions():
    try:
        from typer._click import exceptions  # typer 0.2x carries its own click
    except ImportError:
        from click import exceptions
    return exceptions


def usage_line(exc, root, args: list[str]) -> str:
    """A usage error of the option parser (a bad value, a missing one, an unknown option or command) in one
    line, with where to look: the help of the command it was typed for, or the commands there are."""
    message = " ".join(exc.format_message().split()).rstrip(".")
    ctx = getattr(exc, "ctx", None)
    command, path = (ctx.command, ctx.command_path) if ctx is not None else _typed_command(root, args)
    names = getattr(command, "list_commands", None)
    if names is not None and "command" in message.lower():
        return (
            f"{message}; commands: {', '.join(sorted(getattr(command, 'commands', {})))} (see `{path} "
            "--help`)"
        )
    return f"{message}; see `{path} --help`"


def _typed_command(root, args: list[str]):
    """The (sub)command args name, and its path (a parse error before click made its context has none)."""
    command, path = root, ["simserve"]
    words = iter(args)
    for arg in words:
        if arg == "--catalog":  # the group's one option that takes a value
            next(words, None)
        elif not arg.startswith("-"):
            sub = (getattr(command, "commands", None) or {}).get(arg)
            if sub is None:
                break
            command, path = sub, [*path, arg]
    return command, " ".join(path)


def _interrupted() -> None:
    # Outputs land only when complete and all together (simserve.io), so each is either whole or absent.
    from simserve.io import LANDED

    word = "terminated" if terminated() else "interrupted"
    if LANDED:
        where = ", ".join(f"{p}/" for p in LANDED)
        line = f"{word} after the outputs were written: {where} holds this run's complete results"
    else:
        line = f"{word}; no output was written (results already cached are kept)"
    print(line, file=sys.stderr)
    raise Reported(143 if terminated() else 130)
