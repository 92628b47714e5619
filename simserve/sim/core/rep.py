"""One replica's scheduling state in the core (state.py's ReplicaState, replica.py's bookkeeping), and the
sorted id lists' bisect helpers.
"""

from __future__ import annotations

from collections import deque

import cython
import numpy as np


@cython.cclass
class Rep:
    """One replica's scheduling state (state.py's ReplicaState) and its loop's bookkeeping (replica.py)."""

    def __init__(
        self,
        index: cython.int,
        num_blocks: cython.longlong,
        watermark: cython.longlong,
        pp: cython.int,
        cache: object = None,
    ):
        self.index = index
        self.waiting = deque()
        self.prefilling = []
        self.decoding = []
        self.running = []
        self.cache = cache
        self.radix = None
        self.finished = []
        self.admit_seq = {}
        self.admitted = 0
        self.free = num_blocks
        self.num_blocks = num_blocks
        self.watermark = watermark
        self.turn_prefill = True
        self.preemptions = 0
        self.sg_ratio = 0.0
        self.sg_full = False
        self.sg_running = []
        self.sg_last = None
        self.sg_refresh_calls = 0
        self.stale = set()
        self.outstanding = 0
        self.held = 0
        self.in_flight = 0
        self.sched_waits = False
        self.busy0 = False
        self.stage0 = None
        self.prefills0 = []
        self.decodes0 = []
        self.busy_since = 0.0
        self.inflight_acc = 0.0
        self.bubble = np.zeros(pp)
        self.idle_mark = np.zeros(pp)
        self.queues = [deque() for _ in range(pp)]
        self.stage_waits = [False] * pp
        self.current = [None] * pp
        self.w_tokens = 0
        self.w_prefill_pairs = 0
        self.w_prefill_kv = 0
        self.w_decode_kv = 0
        self.w_micro_batches = 0
        self.ls_tokens = 0
        self.ls_base = 0.0
        self.ls_prefill = 0


@cython.cfunc
def _insort(a: list, x: cython.longlong) -> cython.void:
    """bisect.insort on a sorted list of ids."""
    lo: cython.Py_ssize_t = 0
    hi: cython.Py_ssize_t = len(a)
    mid: cython.Py_ssize_t
    while lo < hi:
        mid = (lo + hi) // 2
        if x < a[mid]:
            hi = mid
        else:
            lo = mid + 1
    a.insert(lo, x)


@cython.cfunc
def _remove_sorted(a: list, x: cython.longlong) -> cython.bint:
    """Remove x from a sorted list of ids if it is there (ReplicaState._remove's bisect)."""
    lo: cython.Py_ssize_t = 0
    hi: cython.Py_ssize_t = len(a)
    mid: cython.Py_ssize_t
    while lo < hi:
        mid = (lo + hi) // 2
        if a[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    if lo < len(a) and a[lo] == x:
        del a[lo]
        return True
    return False
