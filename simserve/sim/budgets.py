"""Per-iteration prefill budgets for the adaptive policies, and vLLM v1's shared token budget.

The adaptive policies keep Sarathi's batch shape (every decode, then chunks of partial prefills, then chunks
of new requests in FIFO order) but size each chunk per iteration with the replica's BatchTimer
(`ReplicaState.timer`) instead of a fixed budget:

  slo-aware   the largest chunk whose predicted iteration time (summed over pipeline stages: a token's gap
              spans every stage) stays under `tbt_target_s`.
  pressure    a budget that grows with the queue (floor × (1 + waiting requests), the cap once the oldest
              waiting request has waited half the scheduling-delay SLO) and halves while the predicted
              iteration time exceeds the TBT target, never below the floor.
  equal-cost  for pipeline parallelism: each chunk's own predicted cost (stage 0) is at most that of a
              cap-sized chunk with no prefix, so chunks shrink as the prefix grows and stages stay balanced.

vllm-v1: vLLM 0.33.0's V1 `Scheduler.schedule()` (see the design note at `vllm_v1_batch`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from simserve.sim.state import ReplicaState

# (prefills so far, tokens so far, prefix of this request, tokens it wants) -> chunk tokens (≤ want)
ChunkSize = Callable[[list[tuple[int, int]], int, int, int], int]

# slo-aware: a batch that would be empty still gets this many prompt tokens, so an unreachable TBT target
# cannot stall the replica forever (one KV block's worth).
PROGRESS_FLOOR = 16


def predicted_time(rep: ReplicaState, prefills: list[tuple[int, int]], kv: np.ndarray) -> float:
    """Seconds the batch takes through every pipeline stage (a decode token waits for all of them)."""
    t = rep.timer
    return sum(t(prefills, kv, s) for s in range(rep.pp))


def largest_fitting(fits: Callable[[int], bool], hi: int) -> int:
    """The largest n in [0, hi] with fits(n), assuming fits is monotone (true up to some n); 0 if none."""
    if hi <= 0 or fits(hi):
        return max(hi, 0)
    lo = 0  # NOTE: fits(0) is not asked; a zero chunk is simply no chunk
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo


def fill_chunks(rep: ReplicaState, now: float, tokens: int, size: ChunkSize) -> list[tuple[int, int]]:
    """Sarathi's prefill part with chunk sizes from `size`: partial prefills first, then new requests."""
    r = rep.reqs
    out: list[tuple[int, int]] = []  # (request, chunk)
    timed: list[tuple[int, int]] = []  # (chunk, prefix): the timer's view of the same prefills
    for rid in rep.prefilling:
        if rep.pp > 1 and r.inflight[rid]:
            continue
        prefix = int(r.computed[rid])
        n = size(timed, tokens, prefix, int(r.target[rid]) - prefix)
        if n > 0:
            out.append((rid, n))
            timed.append((n, prefix))
            tokens += n
    rep.drop_too_long()
    while rep.waiting:
        rid = rep.waiting[0]
        if not rep.head_admissible(rid):
            break
        n = size(timed, tokens, 0, rep.num_tokens(rid))
        if n <= 0:
            break
        rep.admit_head(now)
        out.append((rid, n))
        timed.append((n, 0))
        tokens += n
        rep.drop_too_long()
    return out


def slo_aware_size(rep: ReplicaState, decodes: np.ndarray) -> ChunkSize:
    kv = rep.reqs.computed[decodes] + 1
    target = rep.cfg.tbt_target_s

    def size(timed, tokens, prefix, want):
        hi = min(want, rep.budget - tokens)
        n = largest_fitting(lambda c: predicted_time(rep, [*timed, (c, prefix)], kv) <= target, hi)
        if n == 0 and not timed and not len(decodes):
            n = min(want, PROGRESS_FLOOR)
        return n

    return size


def pressure_budget(rep: ReplicaState, now: float) -> int:
    """The queue's budget before the TBT check: grows with waiting requests and with their wait."""
    floor, cap = rep.cfg.pressure_floor(), rep.budget
    if not rep.waiting:
        return floor
    if now - rep.reqs.arrived[rep.waiting[0]] > rep.cfg.sched_delay_slo_s / 2:
        return cap
    return min(cap, floor * (1 + len(rep.waiting)))


def pressure_size(rep: ReplicaState, decodes: np.ndarray, now: float) -> ChunkSize:
    kv = rep.reqs.computed[decodes] + 1
    target, floor = rep.cfg.tbt_target_s, rep.cfg.pressure_floor()
    budget = pressure_budget(rep, now)

    def size(timed, tokens, prefix, want):
        n = min(want, budget - tokens)
        # Out of TBT slack: halve, but keep at least the floor's share (the queue must still drain).
        while n > 0 and tokens + n > floor and predicted_time(rep, [*timed, (n, prefix)], kv) > target:
            n = max(n // 2, floor - tokens)
        return n

    return size


def equal_cost_size(rep: ReplicaState) -> ChunkSize:
    t = rep.timer
    none = np.zeros(0, dtype=np.int64)
    limit = t([(rep.budget, 0)], none, 0)

    def size(timed, tokens, prefix, want):
        hi = min(want, rep.budget - tokens)
        n = largest_fitting(lambda c: t([(c, prefix)], none, 0) <= limit, hi)
        if n == 0 and not timed and not tokens:
            # Even one token over this prefix costs more than a budget-sized chunk at prefix 0 (a tiny
            # budget): take the cheapest chunk there is, or the replica would wait for nothing forever.
            n = min(hi, 1)
        return n

    return size


# -- vllm-v1 ------------------------------------------------------------------------------------------
# Design note: vLLM 0.33.0's V1 scheduler (vllm/v1/core/sched/scheduler.py, `Scheduler.schedule`, FCFS
# policy, no speculative decoding, no KV connector), step by step:
#   1. One budget, max_num_batched_tokens, for everything. `long_prefill_token_threshold` caps one request's
#      chunk, but only when more than one request is running or waiting ("nobody to starve" otherwise);
#      with `long_prefill_token_threshold_adaptive`, never below budget // (running + waiting).
#   2. RUNNING requests in `running` order (admission order; a readmitted request goes to the end): each
#      takes min(tokens it still wants (a decode: 1), threshold, budget left) while budget lasts, and gets
#      the KV blocks that chunk needs: ceil((computed + chunk) / block) minus the blocks it holds. Out of
#      blocks, the last of `running` is preempted (recompute: KV freed, to the front of waiting) until the
#      chunk fits; when the request itself was the last, the running loop stops there.
#   3. WAITING requests in FIFO order, only if nothing was preempted this step: while budget lasts and
#      fewer than max_num_seqs run, the head is admitted if the blocks of its whole sequence fit
#      (`scheduler_reserve_full_isl`, default True; watermark 0.0 by default), but only its first chunk's
#      blocks are allocated. Several prefills share a step (V1 has no max_num_partial_prefills). Before that
#      option (SimConfig.reserve_full_isl False: vLLM 0.8.2's V1 scheduler, allocate_slots of the chunk),
#      the head is admitted if its first chunk's blocks fit.
#   4. With prefix caching (`rep.prefix`, sim/prefix_cache.py): a waiting request first takes the longest run
#      of cached blocks (at most num_tokens - 1 tokens) as computed (`_admit_cached`); every allocation caches
#      the full blocks of the tokens it schedules; finished requests' blocks go back before the next step, in
#      the order they were scheduled.
# Checked step by step against the real Scheduler by tests/conformance/ (docs/engines.md).
# NOTE: a step of vLLM's that only preempts (the running set emptied itself) schedules nothing; the engine
# steps again at once. Here that empty step costs no time, so the next step is formed right away.
def vllm_v1_batch(rep: ReplicaState, now: float) -> tuple[list[tuple[int, int]], np.ndarray]:
    cfg, r, bs = rep.cfg, rep.reqs, rep.block_size
    running = rep.running
    assert running is not None, "vllm-v1 needs ReplicaState.running"
    cache = rep.prefix
    if cache is not None and rep.finished:
        rep.release_finished()  # vLLM frees them when the step's output comes back, before it schedules
    budget = rep.budget
    eligible = len(running) + len(rep.waiting)
    thr = cfg.long_prefill_token_threshold if eligible > 1 else 0
    if thr and cfg.long_prefill_token_threshold_adaptive:
        thr = max(thr, rep.budget // eligible)  # never below a fair share of the budget
    prefills: list[tuple[int, int]] = []
    decodes: list[int] = []
    preempted = False
    i = 0
    while i < len(running) and budget > 0:
        rid = running[i]
        if rep.pp > 1 and r.inflight[rid]:
            i += 1  # vLLM: nothing new to schedule while its micro-batch is in flight
            continue
        computed, target = int(r.computed[rid]), int(r.target[rid])
        is_prefill = computed < target
        n = min(target - computed if is_prefill else 1, thr or budget, budget)
        need = -(-(computed + n) // bs) - int(r.blocks[rid])
        while rep.kv.free < need:
            victim = running[-1]  # NOTE: never one scheduled already: those are before index i
            rep.preempt(victim)
            preempted = True
            if victim == rid:
                break
        if i >= len(running):
            break  # it preempted itself (it was the last): vLLM stops scheduling running requests
        if cache is None:
            rep.kv.allocate(need)
            r.blocks[rid] += need
        else:  # its new blocks, and the full blocks of what this step computes join the cache
            r.blocks[rid] = cache.allocate_slots(
                rid, (), computed + n, min(computed + n, rep.num_tokens(rid))
            )
        if is_prefill:
            prefills.append((rid, n))
        else:
            decodes.append(rid)
        budget -= n
        i += 1
    if preempted:
        if not prefills and not decodes and not running:
            return vllm_v1_batch(rep, now)  # the empty step that only preempted (see the note above)
        return prefills, np.array(decodes, dtype=np.int64)
    rep.drop_too_long()
    while rep.waiting and budget > 0 and len(running) < rep.max_batch:
        rid = rep.waiting[0]
        if rep.pp > 1 and r.inflight[rid]:
            break  # preempted while in flight (see policies.py)
        want = rep.num_tokens(rid)
        if cache is not None:
            n = _admit_cached(rep, cache, rid, want, thr, budget, now)
            if not n:
                break
        else:
            n = min(want, thr or budget, budget)
            whole = -(-want // bs)
            if not rep.kv.can_allocate(whole if cfg.reserve_full_isl else -(-n // bs)):
                break  # the whole sequence must fit (scheduler_reserve_full_isl), or before it its first chunk
            if whole > rep.kv.num_blocks - rep.kv.watermark:
                break  # never fits even alone (implied above with reserve_full_isl): see _NEVER_FITS
            rep.admit_head(now, -(-n // bs))
        prefills.append((rid, n))
        budget -= n
        rep.drop_too_long()
    return prefills, np.array(decodes, dtype=np.int64)


# _NEVER_FITS: without scheduler_reserve_full_isl (vLLM 0.8.2) a prompt longer than the whole pool would be
# admitted on its first chunk, preempt itself when the pool runs out and be admitted again, forever. vLLM cannot
# meet one (it refuses to start unless max_model_len fits the pool); simserve's small pools can, so such a head
# is held, and ignored once nothing is resident (ReplicaState.drop_unfittable), as with reserve_full_isl.


def _admit_cached(rep: ReplicaState, cache, rid: int, want: int, thr: int, budget: int, now: float) -> int:
    """vLLM's waiting path with prefix caching: the longest cached prefix is taken as computed, the chunk
    starts after it, and the whole sequence (less the hit blocks already held by running requests) must fit.
    Admits the head and returns its chunk, or 0 when it does not fit."""
    hits = cache.lookup(rid, want)
    hit = len(hits) * rep.block_size
    n = min(want - hit, thr or budget, budget)
    full = rep.cfg.reserve_full_isl
    if full and cache.blocks_to_allocate(rid, min(want, rep.cfg.max_model_len), hits) > cache.free:
        return 0  # scheduler_reserve_full_isl, counting hit blocks that would leave the free queue
    if not full and -(-min(want, rep.cfg.max_model_len) // rep.block_size) > cache.num_blocks:
        return 0  # never fits even alone (implied above with reserve_full_isl): see _NEVER_FITS
    if cache.blocks_to_allocate(rid, hit + n, hits) > cache.free:
        return 0
    cache.record(bool(rep.reqs.preemptions[rid]), want, hit)
    blocks = cache.allocate_slots(rid, hits, hit + n, min(hit + n, want))
    rep.admit_head(now, blocks, hit)
    rep.reqs.cached_tokens[rid] = hit
    return n
