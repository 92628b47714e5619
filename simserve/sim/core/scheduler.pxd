from simserve.sim.core.sglang cimport CoreSGLang
from simserve.sim.core.rep cimport Rep


cdef class CoreScheduler(CoreSGLang):
    cdef bint _policy(self, Rep rep, double now)
    cdef void _sched_resume(self, Rep rep)
    cdef void _sched_loop(self, Rep rep)
    cdef tuple _count_batch(self, Rep rep, list prefills, list dec)
    cdef void _start_micro_batch(self, Rep rep, list prefills, list dec, double now)
    cdef double _with_draft(self, double d, list prefills, list dec)
    cdef void _stage_resume(self, Rep rep, int s)
    cdef void _hand_over(self, Rep rep, int s, tuple mb)
    cdef void _complete(self, Rep rep, list prefills, list dec)
