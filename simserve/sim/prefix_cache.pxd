# Types for prefix_cache.py (a plain Python module: this augmenting .pxd is what Cython compiles it with), so the
# compiled core (core/vllm_v1.py, core/transitions.py, core/stretch.py) calls a PrefixCache without a Python call.
cimport cython

from simserve.sim.kv_offload cimport CpuTier


@cython.final
cdef class PrefixCache:
    cdef readonly long long num_blocks
    cdef readonly long long watermark
    cdef readonly long long block_size
    cdef readonly object reqs
    cdef public CpuTier tier
    cdef dict _keys
    cdef long long[:] _ref
    cdef readonly list key
    cdef long long[:] _next
    cdef long long[:] _prev
    cdef readonly long long free
    cdef readonly dict cached
    cdef readonly dict held
    cdef readonly dict num_cached
    cdef public long long queries
    cdef public long long hits
    cdef public long long preempted_queries
    cdef public long long preempted_hits
    cdef public long long evictions

    cpdef bint can_allocate(self, long long blocks)

    cdef inline void _unlink(self, long long b) noexcept

    cdef inline void _link_after(self, long long at, long long b) noexcept

    cpdef object block_key(self, long long rid, long long k)

    @cython.locals(keys=list, runs=list)
    cpdef list keys(self, long long rid, long long n)

    @cython.locals(n=cython.longlong, k=cython.longlong, keys=list, cached=dict, out=list, blocks=list)
    cpdef list lookup(self, long long rid, long long num_tokens)

    @cython.locals(held=list, need=cython.longlong, n=cython.longlong, b=cython.longlong)
    cpdef long long blocks_to_allocate(self, long long rid, long long num_tokens, hits)

    cpdef void record(self, bint rid_preempted, long long num_tokens, long long hit_tokens)

    @cython.locals(ref="long long[:]", held=list, new=cython.longlong, bkey=list, front=cython.longlong,
                   b=cython.longlong, holders=list)
    cpdef long long allocate_slots(self, long long rid, hits, long long num_tokens, long long cache_tokens)

    @cython.locals(done=cython.longlong, keys=list, bkey=list, cached=dict, k=cython.longlong, b=cython.longlong,
                   holders=list)
    cdef void _cache_full_blocks(self, long long rid, list held, long long full)

    @cython.locals(held=list, ref="long long[:]", bkey=list, end=cython.longlong, at=cython.longlong,
                   i=Py_ssize_t, b=cython.longlong)
    cpdef void free_request(self, long long rid)
