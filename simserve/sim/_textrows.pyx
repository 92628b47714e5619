# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""The text of the output tables' rows and of trace.json's batch events, compiled (an optional accelerator).

writers.py and perfetto.py format a warm `simserve run`'s 140,000 iteration rows twice (iterations.csv and
trace.json); in Python that was three fifths of the run. This module writes the same text from the same
arrays: floats through PyOS_double_to_string(x, 'r', 0, Py_DTSF_ADD_DOT_0), which is what Python's repr(float)
calls, integers in decimal, so the bytes are those of the Python formatting beside it (which stays the
fallback when this extension is not built; tests/test_sim_writers.py compares the two).
"""

from cpython.conversion cimport Py_DTSF_ADD_DOT_0, PyOS_double_to_string
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from libc.math cimport signbit
from libc.string cimport memcpy, strlen

import numpy as np


cdef struct Buf:
    char* data
    Py_ssize_t size
    Py_ssize_t cap
    # the last float written and its text: iteration rows repeat a row's end as the next row's start
    double last
    char last_text[40]
    Py_ssize_t last_len
    bint has_last


cdef int _grow(Buf* b, Py_ssize_t need) except -1:
    cdef Py_ssize_t cap
    cdef char* data
    if b.size + need <= b.cap:
        return 0
    cap = max(2 * b.cap, b.size + need + 4096)
    data = <char*>PyMem_Realloc(b.data, cap)
    if data == NULL:
        raise MemoryError()
    b.data = data
    b.cap = cap
    return 0


cdef inline int _put(Buf* b, const char* s, Py_ssize_t n) except -1:
    _grow(b, n)
    memcpy(b.data + b.size, s, n)
    b.size += n
    return 0


cdef inline int _char(Buf* b, char c) except -1:
    _grow(b, 1)
    b.data[b.size] = c
    b.size += 1
    return 0


cdef int _int(Buf* b, long long v) except -1:
    cdef char tmp[24]
    cdef int i = 24
    cdef unsigned long long u
    cdef bint neg = v < 0
    u = <unsigned long long>(-(v + 1)) + 1 if neg else <unsigned long long>v
    while True:
        i -= 1
        tmp[i] = <char>(48 + u % 10)
        u //= 10
        if u == 0:
            break
    if neg:
        i -= 1
        tmp[i] = 45  # '-'
    return _put(b, tmp + i, 24 - i)


cdef int _float(Buf* b, double x) except -1:
    """repr(x): the shortest text that reads back as x."""
    cdef char* s
    cdef Py_ssize_t n
    if b.has_last and x == b.last and signbit(x) == signbit(b.last):  # the same value (and sign of a zero)
        return _put(b, b.last_text, b.last_len)
    s = PyOS_double_to_string(x, b'r', 0, Py_DTSF_ADD_DOT_0, NULL)
    n = strlen(s)
    try:
        _put(b, s, n)
        if n < 40:
            memcpy(b.last_text, s, n)
            b.last_len = n
            b.last = x
            b.has_last = True
        else:
            b.has_last = False
    finally:
        PyMem_Free(s)
    return 0


cdef int _float_milli(Buf* b, double x) except -1:
    """repr(x) for a value with at most 3 decimals (trace.json's microseconds, np.round(..., 3)), from integers.

    When x is the double nearest k/1000 for an integer k (fl(k / 1000.0) == x, division being correctly
    rounded) and 0 <= x < 1e12, repr(x) is k/1000 in decimal, trailing zeros dropped: below 1e12 doubles are
    at most 2**-13 apart, so no other decimal with at most 3 places reads back as x, and any decimal that does
    has more significant digits; and repr writes such values without an exponent. Anything else (a value
    np.round left off the nearest double, -0.0, NaN, huge) goes through repr's own algorithm."""
    cdef long long k, r
    cdef char tmp[4]
    cdef int i, end
    if not (0.0 <= x < 1e12) or signbit(x):
        return _float(b, x)
    k = <long long>(x * 1000.0 + 0.5)
    if <double>k / 1000.0 != x:
        return _float(b, x)
    _int(b, k // 1000)
    _char(b, 46)  # '.'
    r = k % 1000
    if r == 0:
        return _char(b, 48)  # '0'
    for i in range(3):
        tmp[2 - i] = <char>(48 + r % 10)
        r //= 10
    end = 3
    while tmp[end - 1] == 48:
        end -= 1
    return _put(b, tmp, end)


cdef str _finish(Buf* b):
    """The text written (the caller frees b.data if this raises)."""
    cdef str text = b.data[: b.size].decode("ascii")
    PyMem_Free(b.data)
    b.data = NULL
    return text


cdef int _start(Buf* b, Py_ssize_t cap) except -1:
    b.data = <char*>PyMem_Malloc(max(cap, 64))
    if b.data == NULL:
        raise MemoryError()
    b.size = 0
    b.cap = max(cap, 64)
    b.has_last = False
    return 0


cdef inline int _lit(Buf* b, bytes s) except -1:
    return _put(b, s, len(s))


def csv_rows(list columns, bytes kinds, Py_ssize_t n):
    """CSV lines of n rows. columns[k] is a float64 array (kind b"f": repr, NaN an empty field), an int64
    array (b"i") or a list of str (b"s"), all of length n."""
    cdef Py_ssize_t i, k, ncol = len(columns)
    cdef Buf b
    cdef double x
    cdef const double[::1] f
    cdef const long long[::1] v
    cdef const unsigned char* kind = kinds
    cdef list keep = []  # the contiguous arrays the pointers below point into
    cdef list texts = []
    cdef bytes s
    cdef const double** fp = <const double**>PyMem_Malloc(max(ncol, 1) * sizeof(double*))
    cdef const long long** ip = <const long long**>PyMem_Malloc(max(ncol, 1) * sizeof(long long*))
    if fp == NULL or ip == NULL:
        PyMem_Free(fp)
        PyMem_Free(ip)
        raise MemoryError()
    b.data = NULL
    try:
        for k in range(ncol):
            fp[k] = NULL
            ip[k] = NULL
            if kind[k] == 102 and n:  # 'f'
                f = np.ascontiguousarray(columns[k], dtype=np.float64)
                keep.append(f)
                fp[k] = &f[0]
            elif kind[k] == 105 and n:  # 'i'
                v = np.ascontiguousarray(columns[k], dtype=np.int64)
                keep.append(v)
                ip[k] = &v[0]
            texts.append([t.encode("ascii") for t in columns[k]] if kind[k] == 115 else None)
        _start(&b, n * ncol * 8)
        for i in range(n):
            for k in range(ncol):
                if k:
                    _char(&b, 44)  # ','
                if kind[k] == 102:
                    x = fp[k][i]
                    if x == x:  # NaN: an empty field
                        _float(&b, x)
                elif kind[k] == 105:
                    _int(&b, ip[k][i])
                else:
                    s = texts[k][i]
                    _lit(&b, s)
            _char(&b, 10)  # '\n'
        return _finish(&b)
    except BaseException:
        PyMem_Free(b.data)
        raise
    finally:
        PyMem_Free(fp)
        PyMem_Free(ip)


def batch_events(list names, const long long[:] name_of, const long long[:] pid, const long long[:] tid,
                 const double[:] ts, const double[:] dur, const long long[:] prefill, const long long[:] decode,
                 const long long[:] requests, const long long[:] kv, const long long[:] iters):
    """perfetto._EVENT for each row, joined by ','; names[name_of[i]] is row i's JSON-quoted name; ts and dur
    are microseconds rounded to 3 decimals (their repr mostly written from integers: _float_milli)."""
    cdef Py_ssize_t i, n = len(ts)
    cdef Buf b
    cdef list encoded = [t.encode("ascii") for t in names]
    _start(&b, n * 220)
    try:
        for i in range(n):
            if i:
                _char(&b, 44)
            _lit(&b, b'{"name":')
            _lit(&b, encoded[name_of[i]])
            _lit(&b, b',"cat":"batch","ph":"X","pid":')
            _int(&b, pid[i])
            _lit(&b, b',"tid":')
            _int(&b, tid[i])
            _lit(&b, b',"ts":')
            _float_milli(&b, ts[i])
            _lit(&b, b',"dur":')
            _float_milli(&b, dur[i])
            _lit(&b, b',"args":{"prefill_tokens":')
            _int(&b, prefill[i])
            _lit(&b, b',"decode_tokens":')
            _int(&b, decode[i])
            _lit(&b, b',"requests":')
            _int(&b, requests[i])
            _lit(&b, b',"kv_blocks_used":')
            _int(&b, kv[i])
            _lit(&b, b',"iterations":')
            _int(&b, iters[i])
            _lit(&b, b'}}')
        return _finish(&b)
    except BaseException:
        PyMem_Free(b.data)
        raise
