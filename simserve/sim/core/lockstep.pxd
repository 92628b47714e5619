from simserve.sim.core.stretch cimport CoreStretch
from simserve.sim.core.rep cimport Rep


cdef class CoreLockstep(CoreStretch):
    cdef void _lockstep_resume(self, int g)
    cdef void _lockstep_loop(self, int g)
    cdef bint _lockstep_batch(self, Rep rep, double now)
    cdef void _lockstep_start(self, int g, double now)
    cdef void _lockstep_rank(self, Rep rep)
