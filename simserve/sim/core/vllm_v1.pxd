from simserve.sim.core.paper_policies cimport CorePaperPolicies
from simserve.sim.core.rep cimport Rep


cdef class CoreVllmV1(CorePaperPolicies):
    cdef list v_pairs  # speculative decoding: per request, its last verification's (id, chunk) (_verify_pair)

    cdef tuple _vllm_v1(self, Rep rep, double now)
    cdef long long _spec_tokens(self, long long want, long long computed, long long budget, long long thr) noexcept
    cdef long long _spec_need(self, long long rid, long long computed, long long n) noexcept
    cdef tuple _verify_pair(self, long long rid, long long n)
    cdef long long _admit_cached(self, Rep rep, long long rid, long long want, long long thr, long long budget, double now)
    cdef long long _admit_loaded(self, Rep rep, long long rid, long long want, long long thr, long long budget, double now)
    cdef void _release_finished(self, Rep rep)
