from simserve.sim.core.driver cimport Core
from simserve.sim.core.rep cimport Rep


cdef class DisaggCore:
    cdef Core pre
    cdef Core dec
    cdef long long n
    cdef long long num_prefill
    cdef double now
    cdef long long eid
    cdef Py_ssize_t num_rows
    cdef readonly int error
    cdef double[:] ev_time
    cdef int[:] ev_prio
    cdef long long[:] ev_eid
    cdef unsigned char[:] ev_on
    cdef int num_slots
    cdef int dec_off  # the decode pool's slot 0 in the shared arrays
    cdef int own  # D_WATCHDOG's slot
    cdef long long num_done
    cdef long long num_ignored
    cdef bint finished
    cdef bint watchdog_started
    cdef double check_period
    # the watchdog's rules (Core's fields of the same names; the TBT stop count is the decode pool's tbt_above)
    cdef bint watch_always
    cdef bint watch_overload
    cdef double cap
    cdef double sched_delay_slo
    cdef double overload_wait
    cdef long long w_late
    cdef long long w_ptr
    cdef long long w_oldest
    # the link (kvlink.KVLink): bytes per second, one-way latency; what is on it
    cdef double bytes_per_s
    cdef double latency
    cdef double kv_token_bytes
    cdef double link_free_at
    cdef long long active_transfers
    cdef object inits  # deque of (eid, decode replica, request, queued at)
    cdef list ends  # heap of (end time, eid, decode replica, request)
    # per request (disagg.Transfers)
    cdef double[:] t_prefilled
    cdef double[:] t_queued
    cdef double[:] t_start
    cdef double[:] t_end
    cdef double[:] t_nbytes
    cdef long long[:] t_prefill_replica
    # the decode router and each decode replica's prefilled requests waiting for KV blocks
    cdef int router
    cdef long long rr
    cdef list incoming

    cdef void _at(self, double t, int priority, int slot) noexcept
    cdef void _lend(self, Core core) noexcept
    cdef void _take(self, Core core) noexcept
    cpdef int run(self)
    cpdef void next_check_at(self)
    cdef bint _check_due(self)
    cpdef bint end_run(self)
    cpdef void flush_rows(self)
    cpdef void pool_done(self, Core core, long long rid)
    cdef void _count_done(self)
    cpdef void prefilled(self, Core pre, Rep rep, long long rid, double now)
    cdef Py_ssize_t _pick_decode(self)
    cdef long long _incoming_blocks(self, Py_ssize_t j)
    cpdef void admit_incoming(self, Core dec, Rep rep, double now)
    cdef void _release_prefill(self, long long rid)
    cdef void _start_transfer(self)
    cdef void _head_end(self)
    cdef void _end_transfer(self)
