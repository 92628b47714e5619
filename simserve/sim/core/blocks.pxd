from simserve.sim.core.events cimport CoreEvents
from simserve.sim.core.rep cimport Rep


cdef class CoreBlocks(CoreEvents):
    cdef void _allocate(self, Rep rep, long long n) noexcept
    cdef void _release(self, Rep rep, long long n) noexcept
    cdef bint _can_allocate(self, Rep rep, long long n) noexcept
    cdef long long _num_tokens(self, long long rid) noexcept
    cdef long long _admission_blocks(self, long long rid) noexcept
    cdef long long _pages(self, long long tokens) noexcept
    cdef void _sync_radix(self, Rep rep)
