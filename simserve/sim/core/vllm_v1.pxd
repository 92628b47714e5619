from simserve.sim.core.paper_policies cimport CorePaperPolicies
from simserve.sim.core.rep cimport Rep


cdef class CoreVllmV1(CorePaperPolicies):
    cdef tuple _vllm_v1(self, Rep rep, double now)
    cdef long long _admit_cached(self, Rep rep, long long rid, long long want, long long thr, long long budget, double now)
    cdef long long _admit_loaded(self, Rep rep, long long rid, long long want, long long thr, long long budget, double now)
    cdef void _release_finished(self, Rep rep)
