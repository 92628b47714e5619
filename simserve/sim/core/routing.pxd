from simserve.sim.core.blocks cimport CoreBlocks
from simserve.sim.core.rep cimport Rep


cdef class CoreRouting(CoreBlocks):
    cdef void _arrivals(self)
    cdef void _api_arrivals(self)
    cdef void _api_advance(self, double t)
    cdef void _wake_arrivals(self)
    cdef void _api_output(self, list ids)
    cdef void _api_step(self, long long[:] ids, Py_ssize_t n, double now)
    cdef void _itl_add(self, double value) noexcept
    cdef void _route_due(self, double now)
    cdef Rep _pick(self, long long rid)
    cdef void _notify(self, Rep rep)
    cdef void _on_done(self, long long rid)
    cdef void _lockstep_notify(self, Rep rep)
    cdef Rep _lockstep_pick(self, long long rid)
    cdef double _rank_load(self, Rep rep)
