from simserve.sim.core.scheduler cimport CoreScheduler
from simserve.sim.core.rep cimport Rep


cdef class CoreStretch(CoreScheduler):
    cdef void _decode_stretch(self, Rep rep)
    cdef double _stretch_limit(self, int slot)
    cdef void _stretch_start(self, Rep rep, int slot, double now, double d, Py_ssize_t nd)
    cdef void _verify_stretch(self, Rep rep)
    cdef bint _v1_stretchable(self, Rep rep, list dec)
    cdef bint _v1_grow(self, Rep rep, Py_ssize_t nd)
    cdef bint _sg_stretch_step(self, Rep rep, Py_ssize_t nd)
    cdef void _complete_ids(self, Py_ssize_t nd, double now) noexcept
    cdef void _complete_verify_ids(self, Py_ssize_t nd, double now) noexcept
