
cdef class Timer:
    cdef int kind
    cdef int num_stages
    # T_TABLES
    cdef double[:, :] tok
    cdef long long tend
    cdef double[:] tslope
    cdef double[:, :] dec
    cdef double dl
    cdef long long bmax
    cdef long long bhalf
    cdef long long jlast
    cdef double[:, :] pre
    cdef double dc
    cdef double dp
    cdef long long ilast
    cdef long long klast
    # the step's composition (predictor/step.py): per stage, (a, b, c) of each CPU role and per-mode launch costs
    cdef double[:, :] cpu_gpu
    cdef double[:, :] cpu_ovl
    cdef double[:, :] cpu_ser
    cdef double[:, :] cpu_pre  # per prefill chunk: (gpu, overlap, serial) seconds
    cdef double[:, :] launch_gpu
    cdef double[:, :] launch_cpu
    cdef long long launch_cap
    cdef bint plain  # no overlapping, GPU-stream or per-token CPU work and no launch costs: kernels + a + b·n
    # T_LINEAR / T_CONSTANT
    cdef double a
    cdef double b
    cdef double c
    # attention-DP lockstep (BatchTimer.own_time / experts_time): a rank's own per-token table and the experts'
    # table over all ranks' tokens (T_TABLES); the experts' seconds per token (T_LINEAR: LinearTimer.e)
    cdef double[:] own
    cdef double own_slope
    cdef double[:] experts
    cdef long long experts_last
    cdef double experts_slope
    cdef double e
    cdef double undrafted  # verify_times' second result
    cdef double dummy_base  # own_base of an idle rank's dummy batch (lockstep.DUMMY_KV)

    cdef double _decode_row(self, long long b, double mean_kv) noexcept
    cdef double _decode(self, long long nd, double kv_sum) noexcept
    cdef double _prefill(self, long long chunk, long long prefix) noexcept
    cdef double time(self, list chunks, list prefixes, long long nd, long long kv_sum, long long drafts, int stage)
    cdef double _tables_time(self, long long t, double attn, long long n, long long nd, long long kv_sum, long long drafts, int stage) noexcept
    cdef double _compose(self, double kernels, long long num_prefills, long long n, long long t, int stage) noexcept
    cdef double decode_time(self, long long nd, long long kv_sum, long long drafts, int stage) noexcept
    cdef double _tokens_time(self, long long t, double attn, long long n, long long nd, long long drafts, int stage) noexcept
    cdef double verify_times(self, long long nd, long long kv_sum, long long drafts, int stage) noexcept
    cdef double through(self, list chunks, list prefixes, long long nd, long long kv_sum)
    cdef double own_base(self, list chunks, list prefixes, long long nd, long long kv_sum)
    cdef double own_time(self, long long t, double base, long long num_prefills, long long n, long long pad) noexcept
    cdef double dummy_time(self, long long pad) noexcept
    cdef double experts_time(self, long long tokens) noexcept
