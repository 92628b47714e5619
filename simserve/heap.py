"""The cyclic garbage collector around a command's start-up and its worker processes (CPU, not memory).

A cold `plan` spent ~0.3 CPU-s in collections before its searches began, and each forked worker ~0.17 CPU-s in
one full collection walking the driver's heap (the objects pandas, matplotlib and scikit-learn made at import,
copied page by page as the walk touched them): docs/planner.md, Speed.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

# Whether this process may freeze its heap (gc.freeze: the objects that exist go to the collector's permanent
# generation, never walked, nor collected, again). Only a process that ends with its command may: the console
# script (simserve.cli.main sets it); a long-lived one (a test session, a notebook) would keep the cyclic
# garbage of every command that froze.
FREEZE_HEAP = False


def freeze_heap() -> None:
    """gc.freeze() where FREEZE_HEAP allows it: later full collections, this process's, its forked workers'
    and the one at exit, then skip what exists now (the imported libraries: ~0.15 CPU-s a walk with pandas,
    matplotlib and scikit-learn loaded), and a worker's collections leave the pages it shares unwritten."""
    if FREEZE_HEAP:
        gc.freeze()


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off while a command imports its libraries, then (freeze_heap) what they
    made frozen, and the collector back on. Imports make long-lived objects, not cyclic garbage, yet every 700
    allocations start a collection and a growing heap a full one: ~500 collections, 0.3 CPU-s of a cold
    `plan` before its searches start."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        freeze_heap()
        if enabled:
            gc.enable()
