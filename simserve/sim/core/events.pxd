from simserve.sim.core.rep cimport Rep
from simserve.sim.core.timer cimport Timer
from simserve.sim.routers cimport Router


cdef class CoreEvents:
    # the shared request arrays (request.Requests)
    cdef long long[:] prompt
    cdef long long[:] output
    cdef double[:] arrived
    cdef double[:] scheduled
    cdef double[:] first_token
    cdef double[:] completed
    cdef double[:] last_token
    cdef double[:] tbt_max
    cdef long long[:] computed
    cdef long long[:] target
    cdef long long[:] generated
    cdef long long[:] blocks
    cdef long long[:] req_preemptions
    cdef unsigned char[:] inflight
    cdef signed char[:] status
    cdef long long[:] replica
    cdef long long[:] stamp  # the batch each request was last put in (the scheduled-twice check)
    cdef long long[:] cached_tokens
    cdef long long[:] prefix_group  # the prefix-sharing identity (sglang's lpm reads it)
    cdef long long[:] prefix_tokens
    # speculative decoding (vllm-v1; request.Requests' spec arrays, SimConfig's spec_* fields; spec_k 0: off)
    cdef long long[:] spec
    cdef long long[:] spec_sched
    cdef long long[:] spec_steps
    cdef long long[:] spec_off
    cdef short[:] spec_draws
    cdef long long spec_k
    cdef long long spec_lookahead
    cdef double spec_fraction
    cdef long long spec_passes
    cdef double spec_cpu_s
    cdef long long b_verify  # _count_batch: the batch's verification tokens, and verifications (requests)
    cdef long long b_verifies
    # the TBT histogram (histogram.LogHistogram: counts shared, zeros mirrored)
    cdef double[:] counts
    cdef double zeros
    cdef double[:] gaps  # one decode batch's TBT gaps (_complete_decodes)
    cdef double log_gamma
    cdef long long offset
    cdef long long num_buckets
    # config
    cdef long long n
    cdef int pp
    cdef int policy
    cdef bint dynamic
    cdef long long block_size
    cdef long long block_mask  # block_size - 1 when it is a power of two (16), else -1
    cdef long long reserve
    cdef long long budget  # orca/fcfs have no token limit: a number no batch reaches
    cdef bint unlimited
    cdef long long max_batch
    cdef long long prompt_limit
    cdef long long max_model_len
    cdef Router router  # sim/routers.py, the reference's router (compiled beside the core)
    cdef double check_period
    cdef double sched_delay_slo
    cdef double tbt_target
    cdef double overload_wait
    cdef long long pressure_floor
    cdef long long long_threshold
    cdef bint long_adaptive
    cdef bint full_isl  # SimConfig.reserve_full_isl
    cdef double equal_limit
    # sglang (sglang.py; block_size is its page size there)
    cdef bint sg_mixed  # --enable-mixed-chunk
    cdef bint sg_lof  # --schedule-policy lof
    cdef unsigned char[:] sg_eos  # per request: SamplingParams.ignore_eos
    cdef long long sg_max_prefill  # --max-prefill-tokens
    cdef double sg_init  # new_token_ratio's start, floor and decay per decode step
    cdef double sg_min
    cdef double sg_decay
    cdef long long sg_clip  # sglang.CLIP_MAX_NEW_TOKENS
    cdef long long sg_retract_steps  # sglang.RETRACT_DECODE_STEPS
    cdef long long sg_reserve  # EAGLE: sglang.spec_reserve (0: no speculation)
    cdef bint sg_lpm  # --schedule-policy lpm (with the radix cache; fcfs without)
    cdef long long sg_lpm_max  # sglang.LPM_MAX_WAITING, IN_BATCH_CHECK, IN_BATCH_DEPRIORITIZE
    cdef long long sg_refresh_every  # sglang_admission.WAITING_REFRESH_INTERVAL
    cdef long long sg_in_batch_check
    cdef long long sg_in_batch_dep
    cdef long long sg_eos_reserve  # sglang.IGNORE_EOS_RESERVE_TOKENS
    cdef Timer timer
    # attention-DP lockstep (sim/lockstep.py): each run of `dp` consecutive replicas is one deployment's ranks,
    # stepped together by one process per group (its event slot is the group's number); dp 1: no lockstep
    cdef int dp
    cdef int num_groups
    cdef long long[:] ls_sizes  # vLLM's captured CUDA-graph sizes, ascending (none: no padding)
    cdef Py_ssize_t ls_num_sizes
    cdef bint ls_in_turn  # SGLang's DP controller: a group's ranks in turn; else vLLM's least-loaded rank
    cdef unsigned char[:] g_waits  # per group: its process waits for a notify (DpGroup.wake)
    cdef unsigned char[:] g_busy  # per group: a step is in flight (its timeout pending)
    cdef long long[:] g_next  # per group: SGLang's next rank (DpGroup.next_rank)
    # disaggregation: this core runs one pool of a DisaggCore (`owner`), which counts the run's requests,
    # routes between the pools and moves the KV (ROLE_PREFILL / ROLE_DECODE); ROLE_AGGREGATED: a whole run
    cdef int role
    cdef object owner
    # the event loop
    cdef double now
    cdef long long eid
    cdef double[:] ev_time  # per slot: the pending event's key (time, priority, id), or none
    cdef int[:] ev_prio
    cdef long long[:] ev_eid
    cdef unsigned char[:] ev_on
    cdef int num_slots
    cdef int slot0  # the first slot after the replicas'
    cdef bint watchdog_started
    cdef list reps
    cdef bint scaled  # an autoscaled run: the autoscaler's event slot exists (slot0 + SLOT_SCALE)
    cdef long long next  # next request to arrive
    # the closed-loop client (cluster.Cluster, cfg.max_concurrency): requests it may have sent (n: open loop),
    # whether the arrivals process waits for a slot to free, the front end's delay on the next one's way in
    cdef long long released
    cdef bint slot_waits
    cdef double frontend
    # answer-driven conversations (cluster.Cluster's `follow`, conversation.py): per request its next round's id
    # (-1: none) and think time; the released rounds not yet arrived, a heap of (arrival, id) as the
    # reference's `due`; and the ids in routing order (the overload scan's order; ids themselves otherwise)
    cdef bint conversation
    cdef bint heap_route  # routing by the heap `due`: conversations, or the API servers' engine entries
    # the API servers (api_server.ApiServers, the reference's own object): sends, engine entries, what the
    # clients see; None: no API-server model
    cdef object api
    # api.pending() as of the last call that could change it (advance, answered, failed): advance(t) is a no-op for any
    # t before it, so the per-step calls skip it (3.7M Python calls in a day's replay, ~1/3 of the API's cost)
    cdef double api_next
    # the open loop's input side (no closed-loop slots, no conversations: an answer changes nothing there),
    # twinned here for speed (_api_advance; ApiServers.advance is the reference's) so that neither a send nor an
    # answer calls Python: the sends processed, the ApiServers' own arrays, each process's requests and prompt
    # tokens (added to ApiServers.requests / prompt_tokens when the run ends: api_finish)
    cdef bint api_open
    cdef long long api_send
    cdef double[:] api_sent
    cdef double[:] api_wait
    cdef long long[:] api_requests
    cdef long long[:] api_prompt_tokens
    cdef double api_request_s
    cdef double api_prompt_token_s
    cdef long long[:] child
    cdef double[:] think
    cdef list due
    cdef long long[:] routed
    cdef long long num_done
    cdef long long num_ignored
    cdef bint finished  # the `finished` event was triggered (scheduled)
    cdef double next_check
    # what the watchdog's rules look at (_check_due): set by configure_watch() and, after each check the
    # caller evaluated, watch()
    cdef bint watch_always  # a progress callback: every check returns
    cdef bint watch_overload  # the overload rule is still evaluated (the run is not yet overloaded)
    cdef double cap  # the trial cap (inf: none)
    cdef long long tbt_bucket  # the TBT stop rule: its first bucket above the limit (-1: no rule) ...
    cdef double tbt_need  # ... and how many gaps there settle it
    cdef double tbt_above  # gaps counted from tbt_bucket up (the rule's count_from, kept as they arrive)
    cdef long long w_late  # the overload rule's scan (Watchdog.positions()) at the last evaluated check
    cdef long long w_ptr
    cdef long long w_oldest
    # the TBT histogram's last bucket, and the values surely inside it (_hist_add skips the log for them)
    cdef long long h_index
    cdef double h_lo
    cdef double h_hi
    cdef long long batch_no
    cdef list b_prefills  # the batch the policy formed (_policy)
    cdef list b_decodes
    cdef long long b_tokens  # _partial_prefills: the tokens so far
    # decode stretches (_decode_stretch): whether this run's policy and PP allow them, whether its decodes grow
    # their KV a block at a time, and the ids of the stretch's batch as a C array
    cdef bint stretch_ok
    cdef bint stretch_grow
    cdef long long[:] ids
    cdef object _ids_obj
    # their output side, twinned here for speed (_api_step; ApiServers.output is the reference's): the
    # ApiServers' own arrays, a histogram of the client's gaps, and scratch per process and per request
    cdef long long api_count
    cdef double api_token_s
    cdef double api_residual
    cdef double[:] api_free
    cdef long long[:] api_tokens
    cdef double[:] api_out
    cdef double[:] api_first
    cdef double[:] api_last
    cdef double[:] api_done
    cdef double[:] api_itl_max
    cdef double[:] itl_counts
    cdef double itl_zeros
    cdef long long[:] api_share
    cdef double[:] api_ends
    cdef long long[:] api_ids
    cdef readonly int error
    # iteration rows not yet handed to the IterationLog
    cdef long long[:, :] row_ints
    cdef double[:, :] row_floats
    cdef Py_ssize_t num_rows
    cdef object log
    cdef object _row_ints_obj
    cdef object _row_floats_obj

    cdef void _schedule(self, double t, int priority, int slot) noexcept
    cpdef void flush_rows(self)
    cdef void _row(self, Rep rep, int stage, double start, double end, long long prefill, long long decode, long long requests, long long kv_used)
    cdef double _inflight_time(self, Rep rep, double t) noexcept
    cdef void _hist_add(self, double value, double weight) noexcept
