from simserve.sim.core.vllm_v1 cimport CoreVllmV1
from simserve.sim.core.rep cimport Rep


cdef class CoreSGLang(CoreVllmV1):
    cdef tuple _sglang(self, Rep rep, double now)
    cdef void _sg_merge(self, Rep rep)
    cdef list _sg_prefill(self, Rep rep, double now)
    cdef void _sg_sort_lpm(self, Rep rep)
    cdef list _sg_choose(self, Rep rep, double now, object pending)
    cdef object _sg_eos_state(self, Rep rep, long long rid)
    cdef list _sg_eos_states(self, Rep rep, object states, long long rid, list out)
    cdef bint _sg_outlasts(self, list states, double left_now)
    cdef long long _sg_decode_pages(self, list ids)
    cdef void _sg_room(self, Rep rep, long long tokens)
    cdef bint _sg_fits(self, Rep rep, list ids)
    cdef list _sg_mixed_decodes(self, Rep rep)
    cdef list _sg_decode(self, Rep rep)
    cdef list _sg_grow(self, Rep rep, list ids)
    cdef list _sg_verifications(self, list ids)
