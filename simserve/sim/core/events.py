"""The compiled core's state and its event slots (SimPy's event queue), the TBT histogram and the iteration
rows.

CoreEvents is the base of the core's class chain (docs/architecture.md, "The compiled core"): every field of a
Core is declared in events.pxd, each module below adds the methods of one concern, and driver.Core is the
class a run builds. What the reference does with SimPy's heap (`_schedule`: one slot per process, keyed by
(time, priority, id) as SimPy's events are), histogram.LogHistogram.add (`_hist_add`) and
iterations.IterationLog (`_row`), float for float.
"""

from __future__ import annotations

import cython

if cython.compiled:
    from cython.cimports.libc.math import ceil, exp, log
    from cython.cimports.simserve.sim.core.rep import Rep
else:
    from math import ceil, exp, log

    from .rep import Rep

from .consts import ROW_BUFFER


@cython.cclass
class CoreEvents:
    """A Core's fields (events.pxd), its event slots, TBT histogram and iteration rows."""

    # -- the event loop -----------------------------------------------------------------------------------
    @cython.cfunc
    @cython.exceptval(check=False)  # NOTE: arithmetic only; no Python error to check for
    def _schedule(self, t: cython.double, priority: cython.int, slot: cython.int) -> cython.void:
        self.ev_time[slot] = t
        self.ev_prio[slot] = priority
        self.ev_eid[slot] = self.eid
        self.ev_on[slot] = 1
        self.eid += 1

    @cython.ccall
    def flush_rows(self) -> cython.void:
        if self.num_rows:
            self.log.add_rows(self._row_ints_obj[: self.num_rows], self._row_floats_obj[: self.num_rows])
            self.num_rows = 0

    @cython.cfunc
    def _row(
        self,
        rep: Rep,
        stage: cython.int,
        start: cython.double,
        end: cython.double,
        prefill: cython.longlong,
        decode: cython.longlong,
        requests: cython.longlong,
        kv_used: cython.longlong,
    ) -> cython.void:
        k: cython.Py_ssize_t = self.num_rows
        self.row_ints[k, 0] = rep.index
        self.row_ints[k, 1] = stage
        self.row_ints[k, 2] = prefill
        self.row_ints[k, 3] = decode
        self.row_ints[k, 4] = requests
        self.row_ints[k, 5] = kv_used
        self.row_ints[k, 6] = 1
        self.row_floats[k, 0] = start
        self.row_floats[k, 1] = end
        self.num_rows = k + 1
        if self.num_rows == ROW_BUFFER:
            self.flush_rows()

    @cython.cfunc
    @cython.exceptval(check=False)  # NOTE: arithmetic only; no Python error to check for
    def _inflight_time(self, rep: Rep, t: cython.double) -> cython.double:
        if rep.in_flight:
            return rep.inflight_acc + (t - rep.busy_since)
        return rep.inflight_acc + 0.0

    # -- the TBT histogram (LogHistogram.add) ---------------------------------------------------------------
    @cython.cfunc
    @cython.exceptval(check=False)  # NOTE: arithmetic only; no Python error to check for
    def _hist_add(self, value: cython.double, weight: cython.double) -> cython.void:
        i: cython.longlong
        j: cython.double
        if value <= 0.0:
            self.zeros += weight
            return
        if self.h_lo < value < self.h_hi:  # NOTE: most gaps fall in the last one's bucket: no log for them
            i = self.h_index
        else:
            i = cython.cast(cython.longlong, ceil(log(value) / self.log_gamma)) - self.offset
            if i < 0:
                i = 0
            if i > self.num_buckets - 1:
                i = self.num_buckets - 1
            # bucket i holds (gamma^(j-1), gamma^j], j = i + offset; the interval kept is narrower by a
            # relative 1e-9, which moves log(v) / log_gamma by ~5e-7, far above the ~1e-12 rounding of that
            # expression: a value inside it takes bucket i through the log too. Clamped buckets: never kept.
            self.h_index = i
            self.h_lo = self.h_hi = 0.0
            if 0 < i < self.num_buckets - 1:
                j = i + self.offset
                self.h_lo = exp((j - 1) * self.log_gamma) * (1.0 + 1e-9)
                self.h_hi = exp(j * self.log_gamma) * (1.0 - 1e-9)
        self.counts[i] += weight
        if self.tbt_bucket >= 0 and i >= self.tbt_bucket:
            self.tbt_above += weight
