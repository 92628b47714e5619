from simserve.sim.core.transitions cimport CoreTransitions
from simserve.sim.core.rep cimport Rep


cdef class CorePaperPolicies(CoreTransitions):
    cdef tuple _chunked(self, Rep rep, double now)
    cdef list _prefills_only(self, Rep rep, double now)
    cdef list _partial_prefills(self, Rep rep, long long tokens)
    cdef list _admit_chunked(self, Rep rep, double now, long long tokens)
    cdef list _admit_whole(self, Rep rep, double now, bint limited)
    cdef list _fill_chunks(self, Rep rep, double now, long long tokens, list decodes)
    cdef bint _fits(self, list chunks, list prefixes, long long c, long long prefix, long long nd, long long kv_sum)
    cdef long long _largest_fitting(self, list chunks, list prefixes, long long hi, long long prefix, long long nd, long long kv_sum)
    cdef long long _size(self, list chunks, list prefixes, long long tokens, long long prefix, long long want, long long nd, long long kv_sum, long long budget)
    cdef long long _pressure_budget(self, Rep rep, double now)
