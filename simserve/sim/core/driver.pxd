from simserve.sim.core.lockstep cimport CoreLockstep
from simserve.sim.core.rep cimport Rep


cdef class Core(CoreLockstep):
    cpdef int run(self)
    cpdef void next_check_at(self)
    cdef bint _check_due(self)
    cpdef bint end_run(self)
