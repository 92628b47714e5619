from simserve.sim.prefix_cache cimport PrefixCache


cdef class Rep:
    cdef int index
    cdef object waiting  # deque of ids
    cdef list prefilling  # sorted ids
    cdef list decoding  # sorted ids
    cdef list running  # vllm-v1: ids in admission order (ReplicaState.running); unused otherwise
    # vllm-v1 with prefix caching: the same PrefixCache object the reference uses (sim/prefix_cache.py); `free`
    # mirrors its free queue after every change. finished / admit_seq / admitted: ReplicaState's.
    cdef PrefixCache cache
    # sglang with --prefix-caching: the reference's own RadixCache (sim/radix_cache.py), which is also the
    # pool; `free` mirrors its free pages (available + evictable) after every change (_sync_radix)
    cdef object radix
    cdef list finished
    cdef dict admit_seq
    cdef long long admitted
    cdef long long free
    cdef long long num_blocks
    cdef long long watermark
    cdef bint turn_prefill
    cdef long long preemptions
    # sglang: its scheduler's state (sglang.SGLangScheduler): new_token_ratio, the running batch (its requests in
    # its own order, its batch_is_full) and the last step's prefill batch (a list, or None)
    cdef double sg_ratio
    cdef bint sg_full
    cdef list sg_running
    cdef object sg_last
    cdef long long sg_refresh_calls  # SchedulePolicy._waiting_prefix_refresh_calls (radix cache)
    cdef set stale
    cdef long long outstanding
    # disaggregation (DisaggCore): requests resident here because of a KV transfer, counted as running — on a
    # prefill replica, prefilled requests whose blocks wait for the decode side to read them; on a decode
    # replica, admitted requests whose KV is on the link (disagg.PrefillState.held / DecodeState.transferring)
    cdef long long held
    # the scheduler loop
    cdef int in_flight
    cdef bint sched_waits  # `yield self.wake` (notify schedules its resumption)
    cdef bint busy0  # a micro-batch is on stage 0 (its timeout pending):
    cdef object stage0  # ... PP > 1: (prefills, decodes, durations per stage, prefill tokens, KV used)
    cdef list prefills0  # ... PP = 1: its prefills and decodes (no tuple: the hot path at PP = 1)
    cdef list decodes0
    cdef double busy_since
    cdef double inflight_acc
    cdef double[:] bubble
    cdef double[:] idle_mark
    cdef list queues  # per stage ≥ 1: deque of micro-batches
    cdef list stage_waits  # per stage: waiting for a hand-over
    cdef list current  # per stage ≥ 1: the micro-batch on it (its timeout pending), or None
    # Work (replica.Work)
    cdef long long w_tokens
    cdef long long w_prefill_pairs
    cdef long long w_prefill_kv
    cdef long long w_decode_kv
    cdef long long w_micro_batches
    # attention-DP lockstep: this rank's part of the step being formed (Core._lockstep_start); its batch is
    # prefills0/decodes0, busy0 while it is in the step (False: a dummy batch)
    cdef long long ls_tokens  # prefill chunk tokens + decodes
    cdef double ls_base  # Timer.own_base of the batch
    cdef long long ls_prefill  # prefill chunk tokens


cdef void _insort(list a, long long x)
cdef bint _remove_sorted(list a, long long x)
