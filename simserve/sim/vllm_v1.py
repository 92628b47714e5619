"""The `vllm-v1` policy: vLLM 0.33.0's V1 scheduler (`Scheduler.schedule()`), one step at a time: one token
budget shared by decodes and prefill chunks, preemption by recompute when KV blocks run out, admission of the
whole sequence, and automatic prefix caching at admission (sim/prefix_cache.py).
"""

from __future__ import annotations

import numpy as np

from simserve.sim.state import ReplicaState


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
    k = cfg.spec_k
    i = 0
    while i < len(running) and budget > 0:
        rid = running[i]
        if rep.pp > 1 and r.inflight[rid]:
            i += 1  # vLLM: nothing new to schedule while its micro-batch is in flight
            continue
        computed, target = int(r.computed[rid]), int(r.target[rid])
        is_prefill = computed < target
        if k:  # speculative decoding: a decode verifies its drafts too (num_tokens_with_spec - computed)
            n = min(target - computed if is_prefill else 1 + int(r.spec[rid]), thr or budget, budget)
            # vLLM: the input position stays below max_model_len. NOTE: at least one token: a request already
            # at the max length (vLLM stops it there, check_stop; simserve's traces drop them) decodes on as
            # without speculation, never stalls
            n = min(n, max(cfg.max_model_len - computed - 1, 1))
            # allocate_slots with num_lookahead_tokens (capped at max_model_len); rejected drafts keep their
            # blocks
            slots = max(computed + n, min(computed + n + cfg.spec_lookahead, cfg.max_model_len))
            need = max(-(-slots // bs) - int(r.blocks[rid]), 0)
        else:
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
        elif n > 1:  # a verification: 1 + its scheduled drafts through the target, as a chunk over its KV
            r.spec_sched[rid] = n - 1
            prefills.append((rid, n))
        else:
            decodes.append(rid)
        if k:
            r.spec[rid] = 0  # vLLM: new drafts come with this step's output (update_draft_token_ids)
        budget -= n
        i += 1
    if preempted:
        if not prefills and not decodes and not running:
            return vllm_v1_batch(rep, now)  # the empty step that only preempted (see the note above)
        return prefills, np.array(decodes, dtype=np.int64)
    ran = bool(prefills or decodes)  # the running loop's: vLLM's scheduled_running_reqs, prefill_scheduled
    prefill_ran = any(int(r.computed[p]) < int(r.target[p]) for p, _ in prefills)
    rep.drop_too_long()
    if cache is not None and cache.tier is not None and cache.tier.loading:  # CPU-tier loads done by now
        cache.tier.promote(rep.waiting, now, False)
    skipped: list[int] = []  # deferred behind a CPU-tier load this step (vLLM's skip_request)
    while rep.waiting and budget > 0 and len(running) < rep.max_batch:
        rid = rep.waiting[0]
        if rep.pp > 1 and r.inflight[rid]:
            break  # preempted while in flight (see policies.py)
        want = rep.num_tokens(rid)
        if cache is not None:
            n = _admit_cached(rep, cache, rid, want, thr, budget, now)
            if n < 0:  # -1: its KV is loading from the CPU tier, it left waiting; -2: skipped this step
                if n == -2:
                    skipped.append(rep.waiting.popleft())
                rep.drop_too_long()
                continue
            if not n:
                break
        elif k:
            n, pad = _spec_admission(rep, want, ran, prefill_ran, thr, budget)
            if not n:
                break
            whole = -(-want // bs)
            # its chunk and lookahead
            first = -(-max(n, min(n + cfg.spec_lookahead, cfg.max_model_len)) // bs)
            if not rep.kv.can_allocate(whole if cfg.reserve_full_isl else first) or not rep.kv.can_allocate(
                first
            ):
                break
            if whole > rep.kv.num_blocks - rep.kv.watermark:
                break  # never fits even alone: see _NEVER_FITS
            rep.admit_head(now, first)
            r.spec_sched[rid] = -pad  # padding drafts: all rejected
        else:
            n = min(want, thr or budget, budget)
            whole = -(-want // bs)
            if not rep.kv.can_allocate(whole if cfg.reserve_full_isl else -(-n // bs)):
                # the whole sequence must fit (scheduler_reserve_full_isl), or before it its first chunk
                break
            if whole > rep.kv.num_blocks - rep.kv.watermark:
                break  # never fits even alone (implied above with reserve_full_isl): see _NEVER_FITS
            rep.admit_head(now, -(-n // bs))
        prefills.append((rid, n))
        budget -= n
        rep.drop_too_long()
    for rid in reversed(skipped):  # back at the front, in their order
        rep.waiting.appendleft(rid)
    if not prefills and not decodes and cache is not None and cache.tier is not None and cache.tier.loading:
        cache.tier.promote(rep.waiting, now, True)  # nothing else to run: await the earliest load
        return vllm_v1_batch(rep, now)
    return prefills, np.array(decodes, dtype=np.int64)


def _spec_admission(
    rep: ReplicaState, want: int, ran: bool, prefill_ran: bool, thr: int, budget: int
) -> tuple[int, int]:
    """A waiting request's first chunk with speculative decoding, and the drafts padding it: vLLM pads a
    one-token admission to 1 + K (placeholder drafts, for a uniform CUDA-graph decode batch) when the running
    loop scheduled something and none of it was a prefill chunk; it schedules nothing rather than an unpadded
    one when the budget is short ((0, 0): stop admitting)."""
    cfg = rep.cfg
    n = want
    if want == 1 and ran and not prefill_ran and 1 + cfg.spec_k + 1 <= cfg.max_model_len:
        if 1 + cfg.spec_k > budget:
            return 0, 0
        n = 1 + cfg.spec_k
    n = min(n, thr or budget, budget)
    return n, n - want if n > want else 0


# _NEVER_FITS: without scheduler_reserve_full_isl (vLLM 0.8.2) a prompt longer than the whole pool would be
# admitted on its first chunk, preempt itself when the pool runs out and be admitted again, forever. vLLM
# cannot meet one (it refuses to start unless max_model_len fits the pool); simserve's small pools can, so
# such a head is held, and ignored once nothing is resident (ReplicaState.drop_unfittable), as with
# reserve_full_isl.


def _admit_cached(rep: ReplicaState, cache, rid: int, want: int, thr: int, budget: int, now: float) -> int:
    """vLLM's waiting path with prefix caching: the longest cached prefix is taken as computed, the chunk
    starts after it, and the whole sequence (less the hit blocks already held by running requests) must fit.
    Admits the head and returns its chunk, or 0 when it does not fit; -1 when it started a load from the CPU
    tier (sim/kv_offload.py) and left waiting, -2 when it waits for another request's load (skip it)."""
    tier = cache.tier
    if tier is not None and rid in tier.loaded:
        return _admit_loaded(rep, cache, rid, want, thr, budget, now)
    hits = cache.lookup(rid, want)
    if tier is not None:
        preempted = bool(rep.reqs.preemptions[rid])
        blocks = tier.start_load(
            cache, rid, want, hits, rep.cfg.max_model_len, rep.cfg.reserve_full_isl, preempted, now
        )
        if blocks < 0:
            return 0 if blocks == -1 else -2
        if blocks:
            rep.waiting.popleft()
            rep.reqs.blocks[rid] = blocks
            return -1
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


def _admit_loaded(rep: ReplicaState, cache, rid: int, want: int, thr: int, budget: int, now: float) -> int:
    """A request whose CPU-tier load is done: scheduled from its loaded tokens on (vLLM's waiting path with
    num_computed_tokens > 0: no lookup), if the rest of its sequence fits."""
    computed = cache.tier.loaded[rid]
    n = min(want - computed, thr or budget, budget)
    whole = min(want, rep.cfg.max_model_len) if rep.cfg.reserve_full_isl else computed + n
    if cache.blocks_to_allocate(rid, whole, ()) > cache.free:
        return 0
    del cache.tier.loaded[rid]
    blocks = cache.allocate_slots(rid, (), computed + n, min(computed + n, want))
    rep.admit_head(now, blocks, computed)
    rep.reqs.cached_tokens[rid] = computed
    return n
