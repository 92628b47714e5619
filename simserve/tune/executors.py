"""Where independent jobs run: in this process, in local worker processes, or as Ray tasks on a cluster.

`Runner.map(fn, jobs)` submits every job at once and yields (index, result) as each finishes, so the caller
can show progress and write results as they arrive. `fn` must be a module-level function (picklable by
reference) and the job arguments plain picklable data.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, as_completed, wait
from typing import Any

from simserve.errors import SimserveError
from simserve.heap import freeze_heap

EXECUTORS = ("local", "ray", "serial")
RAY_CONNECT_TIMEOUT_S = 3.0  # a cluster head on a reachable network answers a TCP connect well within this


def check_ray_address(address: str) -> None:
    """Fail in seconds, with one line, when nothing listens at a Ray address (ray.init would wait much
    longer)."""
    if address in ("auto", "local"):
        return
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise SimserveError(
            f"--address {address!r} is not HOST:PORT; use e.g. 10.0.0.5:6379, ray://10.0.0.5:10001 or auto"
        )
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=RAY_CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise SimserveError(
            f"no Ray cluster answers at {address} ({why}); start one with `ray start --head` or fix --address"
        ) from None


def _worker_signals(driver: int | None = None) -> None:
    """Worker start-up: Ctrl-C reaches the whole process group, but only the driver acts on it (it stops the
    workers itself, so no worker prints a traceback); SIGTERM kills a worker outright, whatever the driver
    had installed when it forked; and the worker dies with the driver (`_die_with`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if driver is not None:
        _die_with(driver)


# How often a worker looks whether its driver is still there (the fallback to the kernel's parent-death
# signal).
PARENT_POLL_S = 0.5


def _die_with(driver: int) -> None:
    """End this worker within a moment of its driver's death, however the driver died.

    NOTE: a driver killed by SIGKILL (or the OOM killer) runs no clean-up, and its workers, orphaned, ran
    their probes on for minutes. On Linux the kernel sends SIGKILL to this process when the thread that forked
    it ends (prctl PR_SET_PDEATHSIG; the pool forks from the driver's main thread, which lives until the
    driver ends); elsewhere, and as a fallback, a daemon thread looks every PARENT_POLL_S whether the parent
    changed (an orphan is re-parented) or the driver is gone (with a forkserver the parent is the server, not
    the driver)."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):  # no libc prctl: the thread below still does it
            pass
    parent = os.getppid()
    if not _alive(driver):  # it died before the signal was armed
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent and _alive(driver):
            time.sleep(PARENT_POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="simserve-driver-watch", daemon=True).start()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else (cannot be ours, but it is alive)
        return True
    return True


class Runner:
    """A context manager owning the worker pool or the Ray connection for the length of a sweep."""

    def __init__(self, kind: str = "local", workers: int | None = None, address: str | None = None):
        if kind not in EXECUTORS:
            raise SimserveError(f"unknown executor {kind!r}; use one of {', '.join(EXECUTORS)}")
        if workers is not None and workers < 1:
            raise SimserveError(f"--workers must be at least 1, got {workers}")
        if address is not None and kind != "ray":
            raise SimserveError("--address is for --executor ray; add --executor ray or drop --address")
        self.kind = kind
        self.workers = workers or os.cpu_count() or 1
        self.address = address
        self._pool: ProcessPoolExecutor | None = None
        self._ray_started = False

    @property
    def shares_filesystem(self) -> bool:
        """Whether workers see this machine's files (then they write the probe cache themselves)."""
        return self.kind != "ray" or self.address is None

    def __enter__(self) -> Runner:
        if self.kind == "ray":
            self._connect_ray()
        return self

    def __exit__(self, exc_type: type | None, *exc: object) -> None:
        if self._pool is not None:
            killed = exc_type is not None
            if killed:
                self._kill_workers()
            # NOTE: cancel what has not started, so an error does not wait for the whole queue; after a kill
            # there is nothing left to wait for.
            self._pool.shutdown(wait=not killed, cancel_futures=True)
            self._pool = None
        if self._ray_started:
            import ray

            ray.shutdown()
            self._ray_started = False

    def _kill_workers(self) -> None:
        """On an error or an interrupt, stop the workers now rather than wait for their running probes; a
        second Ctrl-C while this runs is ignored, so it cannot leave half the workers alive."""
        assert self._pool is not None
        old = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            procs = list((getattr(self._pool, "_processes", None) or {}).values())
            for p in procs:
                p.terminate()
            for p in procs:
                p.join(timeout=2)
                if p.is_alive():
                    p.kill()
        finally:
            signal.signal(signal.SIGINT, old)

    def _local_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            freeze_heap()  # NOTE: the workers fork from this process: their collections then skip its heap
            self._pool = ProcessPoolExecutor(
                max_workers=self.workers, initializer=_worker_signals, initargs=(os.getpid(),)
            )
        return self._pool

    @property
    def parallel(self) -> int:
        """How many jobs run at once."""
        return 1 if self.kind == "serial" or (self.kind == "local" and self.workers == 1) else self.workers

    def submit(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Start one job; returns a handle for `wait_any`. Serial runners run it here and now."""
        if self.kind == "serial" or (self.kind == "local" and self.workers == 1):
            done: Future = Future()
            done.set_result(fn(*args))
            return done
        if self.kind == "local":
            return self._local_pool().submit(fn, *args)
        import ray

        return ray.remote(num_cpus=1, max_retries=0)(fn).remote(*args)

    def wait_any(self, handles: Sequence[Any]) -> list[tuple[Any, Any]]:
        """Block until at least one of `handles` finishes; (handle, result) of every finished one."""
        if isinstance(handles[0], Future):
            done, _ = wait(handles, return_when=FIRST_COMPLETED)
            return [(h, h.result()) for h in handles if h in done]
        import ray

        ready, _ = ray.wait(list(handles), num_returns=1)
        return [(ref, _ray_get(ref)) for ref in ready]

    def _connect_ray(self) -> None:
        import ray

        if ray.is_initialized():  # a caller (a notebook, a test) already connected: use its session
            return
        if self.address is not None:
            check_ray_address(self.address)
        try:
            if self.address is None:  # a private local instance with `workers` CPUs
                ray.init(num_cpus=self.workers, include_dashboard=False, log_to_driver=False)
            else:
                ray.init(address=self.address, log_to_driver=False)
        except ConnectionError as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise SimserveError(
                f"cannot connect to Ray at {self.address} ({first}); check --address"
            ) from None
        self._ray_started = True

    def map(self, fn: Callable[..., Any], jobs: Sequence[tuple]) -> Iterator[tuple[int, Any]]:
        """Submit all jobs now; yield (job index, result) in completion order. A job's error is raised
        here."""
        if not jobs:
            return iter(())
        if self.kind == "serial" or (self.kind == "local" and (self.workers == 1 or len(jobs) == 1)):
            return ((i, fn(*args)) for i, args in enumerate(jobs))
        if self.kind == "local":
            pool = self._local_pool()
            futures: dict[Future, int] = {pool.submit(fn, *args): i for i, args in enumerate(jobs)}
            return ((futures[f], f.result()) for f in as_completed(futures))
        return self._ray_map(fn, jobs)

    def _ray_map(self, fn: Callable[..., Any], jobs: Sequence[tuple]) -> Iterator[tuple[int, Any]]:
        import ray

        remote = ray.remote(num_cpus=1, max_retries=0)(fn)
        pending = {remote.remote(*args): i for i, args in enumerate(jobs)}

        def results() -> Iterator[tuple[int, Any]]:
            try:
                while pending:
                    done, _ = ray.wait(list(pending), num_returns=1)
                    ref = done[0]
                    i = pending.pop(ref)
                    yield i, _ray_get(ref)
            finally:
                for ref in pending:
                    ray.cancel(ref)

        return results()


def _ray_get(ref: Any) -> Any:
    import ray

    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as exc:
        # Re-raise the task's own error (e.g. a SimserveError) rather than Ray's wrapper.
        cause = getattr(exc, "cause", None)
        if isinstance(cause, Exception):
            raise cause from None
        raise
