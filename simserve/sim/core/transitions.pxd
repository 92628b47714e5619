from simserve.sim.core.routing cimport CoreRouting
from simserve.sim.core.rep cimport Rep


cdef class CoreTransitions(CoreRouting):
    cdef bint _complete_chunk(self, Rep rep, long long rid, long long chunk, double now)
    cdef void _complete_verify(self, Rep rep, long long rid, long long chunk, double now)
    cdef void _complete_decodes(self, Rep rep, list dec, double now)
    cdef void _finish(self, Rep rep, long long rid, double now)
    cdef long long _num_running(self, Rep rep)
    cdef bint _head_admissible(self, Rep rep, long long rid)
    cdef list _paused_decodes(self, Rep rep)
    cdef void _drop_too_long(self, Rep rep)
    cdef void _drop_unfittable(self, Rep rep)
    cdef long long _admit_head(self, Rep rep, double now, long long blocks)
    cdef void _preempt(self, Rep rep, long long rid, bint to_back=*)
    cdef void _abort(self, Rep rep, long long rid)
    cdef list _schedule_decodes(self, Rep rep)
    cdef list _schedule_decodes_preempting(self, Rep rep)
