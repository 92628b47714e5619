"""The one error type a user sees: a single line naming the problem and the fix (exit code 2)."""


class SimserveError(Exception):
    """Bad input or an impossible request. The CLI prints `error: <message>` and exits with code 2.

    Messages are one line: what is wrong, and what to do about it.
    """


class Reported(SystemExit):
    """An exit whose one-line explanation has already been printed (e.g. a sweep's interrupt line)."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread like Ctrl-C, so the same clean-up runs (workers stopped, staging
    folders removed, one line printed); the exit code is then 143, not 130."""
