"""The `sglang` policy: SGLang 0.5.23's scheduler (`python -m sglang.launch_server`), one step at a time.

Design note. SGLang keeps a waiting queue and a running (decode) batch, and each step
(`Scheduler.get_next_batch_to_run`, sglang/srt/managers/scheduler.py) either runs a prefill batch, when one
can be formed, or else decodes the whole running batch: `prefill.schedule(budget) or decode.schedule()`.
Ongoing decodes stall while prompts are prefilled, unless `--enable-mixed-chunk` lets them ride along.

  prefill  (`Scheduler._get_new_batch_prefill_raw` + `PrefillAdder`, managers/schedule_policy.py)
           Nothing when the waiting queue is empty and no request is half-prefilled, or when the running
           batch is full (max_running_requests). Otherwise the half-prefilled ("chunked") request first, then
           waiting requests in queue order, while three budgets last:
             chunk   --chunked-prefill-size tokens of prompt per step (only the last admitted request can be
                     cut short; it becomes the chunked request and continues first next step);
             input   --max-prefill-tokens (16384);
             memory  free KV tokens minus what admitted and running requests are expected to still need:
                     a running request holds back min(max_new_tokens − output so far, 4096) × new_token_ratio
                     (× 1 with ignore_eos), an admitted one its page-ceiled chunk + one page + (when it is not
                     cut short) min(max_new_tokens, 4096). A request is admitted only if its prompt + remaining
                     output + a page is strictly below what is left (`PrefillBudget.check_prefill`).
                     ignore_eos requests without the radix cache take another path
                     (`PrefillAdder.add_one_req_ignore_eos`): their page-ceiled prompt + a page must fit what is
                     left now, and the pool must outlast every request's outputs as requests finish
                     (`_outlasts`); a request longer than the chunk is cut to what is left of it, unfloored.
           With --enable-mixed-chunk each decode takes one token of the chunk and input budgets, and the
           decodes join the prefill batch when their next tokens fit in the KV pool.
  decode   (`Scheduler.update_running_batch`) Every running request, one token each. When the pool cannot
           give each a new token, `ScheduleBatch.retract_decode` retracts requests, fewest output tokens first
           (among equals the longest prompt), always at least one and never the last: their KV is freed,
           they go to the END of the waiting queue and are prefilled again with their outputs so far. Then
           new_token_ratio = min(1, (Σ outputs so far + 20·remaining) / (Σ max_new_tokens + 1)) over the
           requests that stayed; a decode step with no retraction lowers it by (init − min) / 600 down to
           min = 0.14·init, init = min(0.7 × --schedule-conservativeness, 1); an idle step resets it.

The KV pool counts tokens in pages of --page-size (1 by default on CUDA): a request holds its computed tokens,
page-ceiled. Requests carry max_new_tokens = their output length, as `sglang.bench_serving` sends them.
With --prefix-caching the pool is SGLang's radix cache (radix_cache.py): a waiting request starts with its
longest cached prefix computed, the chunked request publishes its computed pages each step, a finished one its
KV, and admission counts unlocked cached pages as free; `lpm` then orders the waiting queue by longest cached
prefix (at most 128 waiting; more fall back to fcfs), putting after the others a request that shares 32 or more
tokens with an earlier waiting one while its own cached prefix is 32 or less (in-batch prefix caching).
Without it (`--disable-radix-cache`) `lpm` is `fcfs`, as in SGLang. Not modelled (docs/engines.md): the
overlap scheduler, pipeline parallelism, priority scheduling.
"""

from __future__ import annotations

import numpy as np

from simserve.errors import SimserveError
from simserve.sim.kvcache import BlockManager
from simserve.sim.radix_cache import RadixCache
from simserve.sim.state import ReplicaState

# managers/schedule_policy.py: CLIP_MAX_NEW_TOKENS (env SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION, default 4096)
CLIP_MAX_NEW_TOKENS = 4096
# srt/environ.py defaults: SGLANG_INIT_NEW_TOKEN_RATIO, SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR,
# SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS, SGLANG_RETRACT_DECODE_STEPS
INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO_FACTOR = 0.14
NEW_TOKEN_RATIO_DECAY_STEPS = 600
RETRACT_DECODE_STEPS = 20
# managers/schedule_policy.py: IGNORE_EOS_RESERVE_TOKENS (tokens kept free per request still running)
IGNORE_EOS_RESERVE_TOKENS = 1
# managers/schedule_policy.py: WAITING_QUEUE_PREFIX_MATCH_MAX, IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD and
# IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD (env defaults)
LPM_MAX_WAITING = 128
IN_BATCH_CHECK = 32
IN_BATCH_DEPRIORITIZE = 32

_NONE = np.zeros(0, dtype=np.int64)


def default_max_running_requests(pool_tokens: int, context_len: int) -> int:
    """SGLang's max_running_requests when the flag is not given, from the KV pool's size in tokens
    (mem_cache/kv_cache_configurator.py, `resolve_max_num_reqs`): pool / context length × 512, clamped to
    [2048, 4096], and never above half the pool."""
    estimated = max(min(int(pool_tokens / context_len * 512), 4096), 2048)
    return max(min(estimated, pool_tokens // 2), 1)


class SGLangScheduler:
    """What SGLang's scheduler keeps between steps beyond the queues: new_token_ratio (NewTokenRatioTracker)."""

    __slots__ = ("init", "min", "decay", "ratio", "full", "finished_seen")

    def __init__(self, conservativeness: float):
        self.init = min(INIT_NEW_TOKEN_RATIO * conservativeness, 1.0)
        self.min = min(self.init * MIN_NEW_TOKEN_RATIO_FACTOR, 1.0)
        self.decay = (self.init - self.min) / NEW_TOKEN_RATIO_DECAY_STEPS
        self.ratio = self.init
        self.full = False  # ScheduleBatch.batch_is_full
        self.finished_seen = 0  # ReplicaState.num_finished when `full` was last looked at


def pool(cfg, num_blocks: int, pp: int) -> tuple[int, int]:
    """(KV pages, max_running_requests) of a replica whose pool was sized as `num_blocks` of simserve's
    blocks; the compiled core (core_run.py) reads the same."""
    if pp > 1:
        raise SimserveError(
            "--policy sglang models SGLang without pipeline parallelism (its PP micro-batching is not modelled): "
            "use --pp 1"
        )
    # The pool was sized in simserve's 16-token blocks (memory.plan_memory); SGLang counts it in pages.
    tokens = num_blocks * cfg.block_size
    # kv_cache_configurator.resolve_max_num_reqs: a --max-running-requests above half the pool is lowered to it
    max_running = (
        max(min(cfg.max_batch, tokens // 2), 1)
        if cfg.max_batch
        else default_max_running_requests(tokens, cfg.max_model_len)
    )
    return tokens // cfg.page_size, max_running


def setup(rep: ReplicaState) -> None:
    """Give a replica SGLang's token pool, its max_running_requests default and its scheduler state."""
    cfg = rep.cfg
    pages, rep.max_batch = pool(cfg, rep.kv.num_blocks, rep.pp)
    if cfg.prefix_caching:  # SGLang's radix cache is the pool (vLLM's block pool is not used)
        rep.kv = rep.radix = RadixCache(pages, cfg.page_size, rep.reqs)
        rep.prefix = None
    else:
        rep.kv = BlockManager(pages, 0.0)
    rep.block_size = cfg.page_size
    rep.sglang = SGLangScheduler(cfg.schedule_conservativeness)


def _pages(tokens: int, page: int) -> int:
    return -(-tokens // page)


def sglang_batch(rep: ReplicaState, now: float) -> tuple[list[tuple[int, int]], np.ndarray]:
    prefills = _prefill(rep, now)
    if prefills:
        return prefills, _mixed_decodes(rep) if rep.cfg.enable_mixed_chunk else _NONE
    decodes = _decode(rep)
    if not len(decodes) and not rep.waiting and not rep.prefilling:
        rep.sglang.ratio = rep.sglang.init  # Scheduler.on_idle: NewTokenRatioTracker.reset
    return [], decodes


def _prefill(rep: ReplicaState, now: float) -> list[tuple[int, int]]:
    radix = rep.radix
    if radix is None:
        return _choose_prefill(rep, now, None)
    if rep.prefilling:  # Scheduler.stash_chunked_request: the chunked request publishes what it computed
        rid = rep.prefilling[0]
        radix.checkpoint(rid, int(rep.reqs.computed[rid]))
    # SGLang chooses the whole prefill batch first, locking each admitted request's prefix as it commits it,
    # and allocates after (prepare_for_extend): one admission's allocation cannot evict what a later one matched
    pending: list[int] = []  # pages to allocate
    out = _choose_prefill(rep, now, pending)
    radix.allocate(sum(pending))
    return out


def _choose_prefill(rep: ReplicaState, now: float, pending: list | None) -> list[tuple[int, int]]:
    cfg, r, page, s = rep.cfg, rep.reqs, rep.block_size, rep.sglang
    radix = rep.radix
    chunked = rep.prefilling[0] if rep.prefilling else -1  # at most one: only the last admitted is cut short
    running = rep.decoding
    # ScheduleBatch.batch_is_full: set when admission ran out of room, cleared when a request leaves the batch
    if rep.num_finished != s.finished_seen or not running:
        s.full = False
        s.finished_seen = rep.num_finished
    if chunked < 0 and (s.full or not rep.waiting):
        return []
    if chunked < 0 and len(running) >= rep.max_batch:  # get_num_allocatable_reqs <= 0
        s.full = True
        return []
    if cfg.schedule_policy == "lof":  # SchedulePolicy._sort_by_longest_output: max_new_tokens, descending
        rep.waiting = type(rep.waiting)(sorted(rep.waiting, key=lambda i: -int(r.output[i])))
    elif cfg.schedule_policy == "lpm" and radix is not None and len(rep.waiting) <= LPM_MAX_WAITING:
        _sort_by_longest_prefix(rep)
    mixed = len(running) if cfg.enable_mixed_chunk else 0  # each decode takes a token of both budgets
    rem_chunk = rep.budget - mixed
    rem_input = cfg.max_prefill_tokens - mixed
    ratio = 1.0 if cfg.ignore_eos else s.ratio
    held = 0.0  # PrefillAdder: running requests' expected future tokens (_get_running_request_total_token_offset)
    for rid in running:
        held += min(int(r.output[rid] - r.generated[rid]), CLIP_MAX_NEW_TOKENS) * ratio
    # NOTE: SGLang allocates after the adder has chosen, so the free pool it compares against stays fixed
    # while the offsets grow; simserve allocates as it admits, so it reads the pool once.
    free = rep.kv.free * page
    total_offset = mixed + held
    current_offset = float(mixed)
    out: list[tuple[int, int]] = []
    # PrefillAdder.add_one_req: ignore_eos requests with the radix cache off are admitted by
    # add_one_req_ignore_eos; `states` is its req_states, built at its first call of the step
    eos_path = cfg.ignore_eos and radix is None
    states: list[tuple[int, int]] | None = None
    if chunked >= 0:  # PrefillAdder.add_chunked_req
        want = int(r.target[chunked] - r.computed[chunked])
        room = min(rem_chunk, int(free - total_offset))
        room = room if room > 0 else rem_chunk  # a continuation must progress to release its KV
        n = min(want, room)
        need = _pages(int(r.computed[chunked]) + n, page) - int(r.blocks[chunked])
        if need > rep.kv.free:
            # NOTE: SGLang's allocation would fail here (only reachable when mixed-chunk decodes ate the room
            # the admission check left); simserve takes what fits, or lets a decode step retract first.
            n = (int(r.blocks[chunked]) + rep.kv.free) * page - int(r.computed[chunked])
            if n <= 0:
                return []
            need = rep.kv.free
        if pending is None:
            rep.kv.allocate(need)
        else:
            pending.append(need)
        r.blocks[chunked] += need
        out.append((chunked, n))
        ext = _pages(n, page) * page
        # NOTE: the reservation takes max_new_tokens whole, not what is left of it (add_chunked_req)
        rest = 0 if n < want else min(int(r.output[chunked]), CLIP_MAX_NEW_TOKENS)
        total_offset += ext + page + rest
        current_offset += ext + page
        rem_chunk -= ext
        rem_input -= ext
    rep.drop_too_long()
    while rep.waiting:  # Scheduler._get_new_batch_prefill_raw's loop over the waiting queue
        # PrefillAdder.budget_state: out of memory (NO_TOKEN) is checked first, and only OTHER (a compute
        # budget spent) stops the loop here; NO_TOKEN falls through to the admission check below.
        no_token = free - total_offset <= 0 or free - current_offset <= 0
        if not no_token and (rem_input <= 0 or rem_chunk <= 0):
            break
        if len(out) + len(running) >= rep.max_batch:  # get_num_allocatable_reqs: the batch is full
            s.full = True
            break
        rid = rep.waiting[0]
        extend = rep.num_tokens(rid)
        hit, node, pinned = 0, None, 0
        if radix is not None:  # Req.init_next_round_input: its longest cached prefix
            hit, node = radix.match(rid, extend)
            pinned = radix.unlocked_pages(node) * page  # the check pins the prefix: not evictable for it
            extend -= hit * page
        # the checks count the outputs still to come; the reservation max_new_tokens whole, or nothing for a
        # request cut short (PrefillAdder._select_prefill_admission, add_one_req_ignore_eos)
        n = extend
        if eos_path:  # PrefillAdder.add_one_req_ignore_eos
            paged = _pages(extend, page) * page + page
            fits = paged <= min(free - current_offset, free - total_offset)  # PrefillBudget.can_allocate_prefill
            if fits:
                states = _eos_states(rep, states, rid, [i for i, _ in out])
            if not fits or not _outlasts(states, free - current_offset - paged):
                s.full = bool(out) or bool(running)  # NO_TOKEN
                break
            rest = min(int(r.output[rid]), CLIP_MAX_NEW_TOKENS)
            if extend > rem_chunk:  # cut to what is left of the chunk, not floored to a page
                n = rem_chunk
                if n <= 0:
                    break
                rest = 0
        else:
            rest = min(int(r.output[rid] - r.generated[rid]), CLIP_MAX_NEW_TOKENS)
            if not extend + rest + page < free - pinned - total_offset:  # PrefillBudget.check_prefill: NO_TOKEN
                s.full = bool(out) or bool(running)
                break
            rest = min(int(r.output[rid]), CLIP_MAX_NEW_TOKENS)
            if _pages(extend, page) * page > rem_chunk:  # cut it short
                n = rem_chunk // page * page
                if n <= 0:
                    break
                rest = 0
        if radix is None:
            rep.admit_head(now, _pages(n, page))
        else:  # _commit_prefill_admission: the prefix is locked now, so it is no longer free for the next ones
            radix.admit(rid, hit, node, extend + hit * page, bool(r.preemptions[rid]))
            rep.admit_head(now, hit + _pages(n, page), hit * page)
            pending.append(_pages(n, page))
            free = rep.kv.free * page  # available + evictable: only the lock changed it (nothing allocated yet)
        out.append((rid, n))
        ext = _pages(n, page) * page
        total_offset += ext + page + rest
        current_offset += ext + page
        rem_chunk -= ext
        rem_input -= ext
        if free - total_offset <= 0 or free - current_offset <= 0:  # add_one_req's verdict: NO_TOKEN
            s.full = True
            break
        rep.drop_too_long()
    return out


def _eos_state(rep: ReplicaState, rid: int) -> tuple[int, int] | None:
    """add_one_req_ignore_eos's `add_req_state`: (outputs still to come, tokens it holds once prefilled) —
    max_new_tokens × 1 (ignore_eos) less the outputs so far, not clipped; prompt + outputs so far. None for a
    request with nothing left to generate."""
    r = rep.reqs
    left = int(r.output[rid] - r.generated[rid])
    return (left, int(r.prompt[rid] + r.generated[rid])) if left > 0 else None


def _eos_states(rep: ReplicaState, states: list | None, rid: int, admitted: list[int]) -> list:
    """req_states with the candidate `rid` added: at the step's first call the candidate, the running batch
    and the requests admitted so far, sorted stably by outputs to come; later calls insert the candidate."""
    if states is None:
        states = [x for x in map(lambda i: _eos_state(rep, i), [rid, *rep.decoding, *admitted]) if x]
        states.sort(key=lambda x: x[0])
        return states
    new = _eos_state(rep, rid)
    if new is not None:
        # NOTE: SGLang's insertion loop leaves i at the last index when no entry is ≥ the new one, so the
        # longest goes in before the last entry, not after it; kept, as the order decides what is freed when.
        i = 0
        for i in range(len(states)):
            if new[0] <= states[i][0]:
                break
        states.insert(i, new)
    return states


def _outlasts(states: list, left_now: float) -> bool:
    """add_one_req_ignore_eos's look ahead: walking the requests in the order they finish (fewest outputs to
    come first), the pool must keep more than IGNORE_EOS_RESERVE_TOKENS per request still running after each
    of them has grown by the outputs of the one finishing, counting what the ones finished before free."""
    freed = 0
    for i, (left, held) in enumerate(states):
        alive = len(states) - i
        if left_now + freed - left * alive <= IGNORE_EOS_RESERVE_TOKENS * alive:
            return False
        freed += held
    return True


def _sort_by_longest_prefix(rep: ReplicaState) -> None:
    """SchedulePolicy.calc_priority for `lpm`: match every waiting request (which touches and splits the tree
    as SGLang's matching does), then sort by cached prefix, longest first, stably; a request whose cached prefix
    is at most IN_BATCH_CHECK tokens but which shares IN_BATCH_DEPRIORITIZE or more tokens with an earlier
    waiting request goes last (computing one of them first lets the others hit)."""
    radix, r = rep.radix, rep.reqs
    matched: dict[int, float] = {}
    queued: dict[int, int] = {}  # the waiting-queue tree: per stream, the longest run an earlier request put in it
    for rid in rep.waiting:
        n = rep.num_tokens(rid)
        hit = radix.match(rid, n)[0] * rep.block_size
        matched[rid] = -hit
        if hit > IN_BATCH_CHECK:
            continue
        g = int(r.prefix_group[rid])
        mine = min(int(r.prefix_tokens[rid]), n) if g >= 0 else 0  # its tokens on a shared stream
        if g >= 0 and min(mine, queued.get(g, 0)) >= IN_BATCH_DEPRIORITIZE:
            matched[rid] = float("inf")
        elif g >= 0:
            queued[g] = max(queued.get(g, 0), mine)
    rep.waiting = type(rep.waiting)(sorted(rep.waiting, key=matched.__getitem__))


def _decode_pages(rep: ReplicaState, ids) -> int:
    """Pages the next decode step of `ids` needs: one for each whose computed tokens fill their pages."""
    page, computed = rep.block_size, rep.reqs.computed
    return sum(1 for rid in ids if computed[rid] % page == 0)


def _mixed_decodes(rep: ReplicaState) -> np.ndarray:
    """--enable-mixed-chunk: the running batch joins the prefill batch if its next tokens fit (otherwise it
    sits this step out; a mixed step never retracts)."""
    running = rep.decoding
    if not running:
        return _NONE
    need = _decode_pages(rep, running)
    if need > rep.kv.free:
        return _NONE
    return _grow(rep, list(running), need)


def _decode(rep: ReplicaState) -> np.ndarray:
    """Scheduler.update_running_batch: decode every running request, retracting when the pool is short."""
    keep = list(rep.decoding)
    if not keep:
        return _NONE
    s, r = rep.sglang, rep.reqs
    if _decode_pages(rep, keep) <= rep.kv.free:
        s.ratio = max(s.ratio - s.decay, s.min)  # NewTokenRatioTracker.decay_step
        return _grow(rep, keep, _decode_pages(rep, keep))
    # ScheduleBatch._get_decode_retraction_order: keep most (output so far, −prompt) first, retract from the
    # end. NOTE: ties fall to request id order (SGLang: the running batch's order, i.e. admission order).
    keep.sort(key=lambda i: (int(r.generated[i]), -int(r.prompt[i])), reverse=True)
    first = True
    while first or _decode_pages(rep, keep) > rep.kv.free:
        if len(keep) == 1:
            break  # always keep one
        first = False
        rep.preempt(keep.pop(), to_back=True)
    s.full = False  # the batch shrank
    if _decode_pages(rep, keep) > rep.kv.free:
        # Even one request cannot grow: SGLang aborts it ("Out of memory even after retracting ...").
        rep.abort(keep.pop())
    # NewTokenRatioTracker.estimate_new_token_ratio_after_retract over the requests that stayed
    decoded = sum(int(r.generated[i]) for i in keep)
    wanted = sum(int(r.output[i]) for i in keep)
    s.ratio = min(1.0, (decoded + RETRACT_DECODE_STEPS * len(keep)) / (wanted + 1))
    keep.sort()
    return _grow(rep, keep, _decode_pages(rep, keep))


def _grow(rep: ReplicaState, ids: list[int], need: int) -> np.ndarray:
    """Allocate the decode step's new pages; returns the ids as the batch's decodes."""
    dec = np.array(ids, dtype=np.int64)
    if need:
        full = rep.reqs.computed[dec] % rep.block_size == 0
        rep.kv.allocate(need)
        rep.reqs.blocks[dec[full]] += 1
    return dec
