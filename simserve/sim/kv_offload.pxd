# Types for kv_offload.py (a plain Python module: this augmenting .pxd is what Cython compiles it with), so
# PrefixCache and the compiled core call the tier without a Python call. Not final: a test subclasses it (its
# cpdef methods still reach a Python subclass's own). Ranks, keys and heap entries stay Python ints: a chained
# key needs 65 bits, a heap entry more.
cimport cython


cdef class CpuTier:
    cdef readonly long long capacity
    cdef readonly double block_s
    cdef readonly long long block_size
    cdef public object _key
    cdef public object _keys_of
    cdef dict _keys
    cdef object _prompt
    cdef readonly dict rank
    cdef readonly dict pinned
    cdef list _heap
    cdef long long _next_rank
    cdef dict _req_rank
    cdef dict _seen
    cdef readonly dict next_stored
    cdef readonly object loading
    cdef readonly dict loaded
    cdef readonly dict being_loaded
    cdef public long long reserved
    cdef public double stall
    cdef double _stall_at
    cdef public long long queries
    cdef public long long hits
    cdef public long long loads
    cdef public long long blocks_loaded
    cdef public long long stores
    cdef public long long evictions
    cdef public long long store_failures
    cdef public double load_s

    cpdef long long _request_rank(self, long long rid) except? -1

    @cython.locals(seen=dict, rank=dict, pinned=dict, heap=list)
    cpdef void _access(self, long long rid, keys)

    @cython.locals(heap=list, rank=dict, pinned=dict, chosen=list, deferred=list)
    cpdef object _evict(self, long long n, protected)

    @cython.locals(pinned=dict)
    cpdef void _rebuild(self)

    @cython.locals(rank=dict, new=list, need=cython.longlong, gone=list)
    cpdef void store(self, long long rid, keys)

    @cython.locals(seen=dict, rank=dict, pinned=dict, moved=list, pos=list)
    cpdef void finished(self, long long rid)

    @cython.locals(heap=list, rank=dict)
    cpdef void _update_heap(self, list moved)

    @cython.locals(start=cython.longlong, end=cython.longlong, keys=list)
    cpdef void scheduled(self, long long rid, long long tokens)

    @cython.locals(rank=dict, end=cython.longlong, keys=list, n=cython.longlong, k=cython.longlong)
    cpdef long long lookup(self, long long rid, long long gpu_blocks, long long num_tokens) except? -2

    @cython.locals(keys=list)
    cpdef list keys(self, long long rid, long long blocks)

    @cython.locals(own=list, keys=list, d=cython.double, tokens=cython.longlong)
    cpdef void _start(self, long long rid, double now, long long gpu_blocks, long long blocks, long long num_tokens,
                      long long rest)

    @cython.locals(keys=list, rest=cython.longlong, tokens=cython.longlong, c=cython.longlong)
    cpdef void _complete(self, long long rid)

    @cython.locals(done=list)
    cpdef list ready(self, double now)

    cpdef list force(self, double now)

    @cython.locals(s=cython.double)
    cpdef double take_stall(self, double now)

    @cython.locals(bs=cython.longlong, g=cython.longlong, m=cython.longlong, whole=cython.longlong,
                   need=cython.longlong)
    cpdef long long start_load(self, cache, long long rid, long long want, list hits, long long max_model_len,
                               bint full_isl, bint preempted, double now) except? -3

    @cython.locals(done=list)
    cpdef void promote(self, waiting, double now, bint force)
