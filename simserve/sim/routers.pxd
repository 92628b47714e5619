# Types for routers.py (a plain Python module: this augmenting .pxd is what Cython compiles it with), so the
# compiled core (core/routing.py) calls a Router without a Python call.
cimport cython


cdef double _clamp(double x) noexcept


@cython.final
cdef class Router:
    cdef readonly int kind
    cdef readonly Py_ssize_t num
    cdef readonly bint needs_view
    cdef long long rr
    cdef object reqs
    cdef long long block_size
    cdef readonly long long capacity
    cdef readonly double w_queue
    cdef readonly double w_kv
    cdef readonly double w_prefix
    cdef object rng
    cdef long long[:] outstanding
    cdef long long[:] waiting
    cdef long long[:] kv_used
    cdef long long[:] kv_total
    cdef readonly double[:] score
    cdef readonly long long[:] match
    cdef readonly dict pods
    cdef readonly list lru
    cdef long long[:] serving  # the replicas it may pick (sim/autoscale.py), in index order
    cdef readonly Py_ssize_t num_serving

    cpdef void set_serving(self, indices)

    cpdef void observe(self, Py_ssize_t i, long long outstanding, long long waiting, long long kv_used,
                       long long kv_total)

    @cython.locals(i=Py_ssize_t, best=Py_ssize_t, k=Py_ssize_t)
    cpdef Py_ssize_t pick(self, long long rid) except -1

    @cython.locals(total=Py_ssize_t, i=Py_ssize_t, k=Py_ssize_t, low=cython.longlong, high=cython.longlong, queue=double,
                   kv=double, prefix=double, s=double, best=Py_ssize_t, keys=list)
    cpdef Py_ssize_t _prefix_pick(self, long long rid) except -1

    @cython.locals(top=double, count=Py_ssize_t, i=Py_ssize_t, j=Py_ssize_t, k=Py_ssize_t)
    cpdef Py_ssize_t _best(self) except -1

    @cython.locals(prompt=cython.longlong, blocks=cython.longlong)
    cpdef list _hashes(self, long long rid)

    @cython.locals(lru=object)
    cpdef void _remember(self, list keys, Py_ssize_t pod)
