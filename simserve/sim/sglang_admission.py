"""SGLang 0.5.23's admission rules for the `sglang` policy: which waiting requests one prefill batch takes.

`choose_prefill` is `Scheduler._get_new_batch_prefill_raw` with its `PrefillAdder`
(managers/schedule_policy.py): the half-prefilled request first, then the waiting queue in `--schedule-policy`
order while the chunk, input and memory budgets last (PrefillBudget.check_prefill), and the ignore_eos path
without the radix cache (`add_one_req_ignore_eos`: `eos_states`, `outlasts`). `sort_by_longest_prefix` is
`lpm`'s queue order. The decode step, retraction and new_token_ratio stay in sglang.py, whose design note
covers both halves.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the state calls sglang.setup when it is built: annotations only here
    from simserve.sim.state import ReplicaState


# managers/schedule_policy.py: CLIP_MAX_NEW_TOKENS (env SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION, default 4096)
CLIP_MAX_NEW_TOKENS = 4096
# managers/schedule_policy.py: IGNORE_EOS_RESERVE_TOKENS (tokens kept free per request still running)
IGNORE_EOS_RESERVE_TOKENS = 1
# managers/schedule_policy.py: WAITING_QUEUE_PREFIX_MATCH_MAX, IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD and
# IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD (env defaults)
LPM_MAX_WAITING = 128
# managers/schedule_policy.py: WAITING_PREFIX_REFRESH_INTERVAL (scheduling passes between refreshes of the
# waiting requests' prefixes; srt/environ.py SGLANG_ENABLE_WAITING_PREFIX_REFRESH, on by default)
WAITING_REFRESH_INTERVAL = 32
IN_BATCH_CHECK = 32
IN_BATCH_DEPRIORITIZE = 32


def pages(tokens: int, page: int) -> int:
    return -(-tokens // page)


def choose_prefill(rep: ReplicaState, now: float, pending: list | None) -> list[tuple[int, int]]:
    cfg, r, page, s = rep.cfg, rep.reqs, rep.block_size, rep.sglang
    radix = rep.radix
    chunked = rep.prefilling[0] if rep.prefilling else -1  # at most one: only the last admitted is cut short
    running = s.running  # the running batch, in its own order (sglang.merge_last_batch)
    # ScheduleBatch.batch_is_full: set when admission runs out of room, cleared when a request leaves the
    # batch (sglang.merge_last_batch) and here when the batch is empty
    if not running:
        s.full = False
    if chunked < 0 and (s.full or not rep.waiting):
        return []
    if chunked < 0 and len(running) >= rep.max_batch:  # get_num_allocatable_reqs <= 0
        s.full = True
        return []
    if cfg.schedule_policy == "lof":  # SchedulePolicy._sort_by_longest_output: max_new_tokens, descending
        rep.waiting = type(rep.waiting)(sorted(rep.waiting, key=lambda i: -int(r.output[i])))
    if cfg.schedule_policy == "lpm" and radix is not None and len(rep.waiting) <= LPM_MAX_WAITING:
        sort_by_longest_prefix(rep)
    elif radix is not None and rep.waiting:  # fcfs, lof, or lpm over a long queue
        refresh_waiting_prefixes(rep)
    mixed = len(running) if cfg.enable_mixed_chunk else 0  # each decode takes a token of both budgets
    rem_chunk = rep.budget - mixed
    rem_input = cfg.max_prefill_tokens - mixed
    eos = s.eos
    # PrefillAdder: running requests' expected future tokens (_get_running_request_total_token_offset)
    held = 0.0
    for rid in running:  # NOTE: in the batch's order, as SGLang sums them (the float sum's last bits)
        held += min(int(r.output[rid] - r.generated[rid]), CLIP_MAX_NEW_TOKENS) * (
            1.0 if eos[rid] else s.ratio
        )
    # NOTE: SGLang allocates after the adder has chosen, so the free pool it compares against stays fixed
    # while the offsets grow; simserve allocates as it admits, so it reads the pool once.
    free = rep.kv.free * page
    total_offset = mixed + held
    current_offset = float(mixed)
    out: list[tuple[int, int]] = []
    # PrefillAdder.add_one_req: ignore_eos requests with the radix cache off are admitted by
    # add_one_req_ignore_eos; `states` is its req_states, built at its first call of the step
    states: list[tuple[int, int]] | None = None
    if chunked >= 0:  # PrefillAdder.add_chunked_req
        want = int(r.target[chunked] - r.computed[chunked])
        room = min(rem_chunk, int(free - total_offset))
        room = room if room > 0 else rem_chunk  # a continuation must progress to release its KV
        n = min(want, room)
        need = pages(int(r.computed[chunked]) + n, page) - int(r.blocks[chunked])
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
        ext = pages(n, page) * page
        # NOTE: the reservation takes max_new_tokens whole, not what is left of it (add_chunked_req)
        rest = 0 if n < want else min(int(r.output[chunked]), CLIP_MAX_NEW_TOKENS)
        total_offset += ext + page + rest
        current_offset += ext + page
        rem_chunk -= ext
        rem_input -= ext
    rep.drop_too_long()
    cut: tuple[int, int] | None = None  # the request this loop cut short, and its tokens this step
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
        if eos[rid] and radix is None:  # PrefillAdder.add_one_req_ignore_eos
            paged = pages(extend, page) * page + page
            # PrefillBudget.can_allocate_prefill
            fits = paged <= min(free - current_offset, free - total_offset)
            if fits:
                states = eos_states(rep, states, rid, [i for i, _ in out])
            if not fits or not outlasts(states, free - current_offset - paged):
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
            # PrefillBudget.check_prefill: NO_TOKEN
            if not extend + rest + page < free - pinned - total_offset:
                s.full = bool(out) or bool(running)
                break
            rest = min(int(r.output[rid]), CLIP_MAX_NEW_TOKENS)
            if pages(extend, page) * page > rem_chunk:  # cut it short
                n = rem_chunk // page * page
                if n <= 0:
                    break
                rest = 0
        if radix is None:
            rep.admit_head(now, pages(n, page))
        # _commit_prefill_admission: the prefix is locked now, so it is no longer free for the next ones
        else:
            radix.admit(rid, hit, node, extend + hit * page, bool(r.preemptions[rid]))
            rep.admit_head(now, hit + pages(n, page), hit * page)
            pending.append(pages(n, page))
            # available + evictable: only the lock changed it (nothing allocated yet)
            free = rep.kv.free * page
        if n < extend:  # cut short: PrefillAdder.new_chunked_req
            if cut is not None:
                # NOTE: SGLang 0.5.23 keeps one chunked request, the last one cut: a request without
                # ignore_eos cut to the page can leave less than a page of the chunk, which an ignore_eos one
                # then takes unfloored. The first runs on as if prefilled, with the tokens it computed (the
                # rest of its prompt never is: a bug of the release, followed here).
                r.target[cut[0]] = int(r.computed[cut[0]]) + cut[1]
            cut = (rid, n)
        out.append((rid, n))
        ext = pages(n, page) * page
        total_offset += ext + page + rest
        current_offset += ext + page
        rem_chunk -= ext
        rem_input -= ext
        if free - total_offset <= 0 or free - current_offset <= 0:  # add_one_req's verdict: NO_TOKEN
            s.full = True
            break
        rep.drop_too_long()
    return out


def eos_state(rep: ReplicaState, rid: int) -> tuple[float, int] | None:
    """add_one_req_ignore_eos's `add_req_state`: (outputs still to come, tokens it holds once prefilled) —
    max_new_tokens × its ratio (1 for an ignore_eos request, else new_token_ratio) less the outputs so far,
    not clipped; prompt + outputs so far. None for a request with nothing left to generate."""
    r, s = rep.reqs, rep.sglang
    left = int(r.output[rid]) * (1.0 if s.eos[rid] else s.ratio) - int(r.generated[rid])
    return (left, int(r.prompt[rid] + r.generated[rid])) if left > 0 else None


def eos_states(rep: ReplicaState, states: list | None, rid: int, admitted: list[int]) -> list:
    """req_states with the candidate `rid` added: at the step's first call the candidate, the running batch
    (in its order) and the requests admitted so far, sorted stably by outputs to come; later calls insert the
    candidate."""
    if states is None:
        states = [x for x in map(lambda i: eos_state(rep, i), [rid, *rep.sglang.running, *admitted]) if x]
        states.sort(key=lambda x: x[0])
        return states
    new = eos_state(rep, rid)
    if new is not None:
        # NOTE: SGLang's insertion loop leaves i at the last index when no entry is ≥ the new one, so the
        # longest goes in before the last entry, not after it; kept, as the order decides what is freed when.
        i = 0
        for i in range(len(states)):
            if new[0] <= states[i][0]:
                break
        states.insert(i, new)
    return states


def outlasts(states: list, left_now: float) -> bool:
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


def refresh_waiting_prefixes(rep: ReplicaState) -> None:
    """SchedulePolicy._touch_waiting_prefixes: with the radix cache and an order that does not match the queue
    (fcfs, lof, lpm over more than LPM_MAX_WAITING), every WAITING_REFRESH_INTERVAL-th time the queue is
    ordered its first LPM_MAX_WAITING requests touch their cached prefixes, the head last: LRU eviction then
    takes what the queue will not need soon first."""
    s = rep.sglang
    s.refresh_calls += 1
    if (s.refresh_calls - 1) % WAITING_REFRESH_INTERVAL:
        return
    head = list(itertools.islice(rep.waiting, LPM_MAX_WAITING))
    for rid in reversed(head):
        rep.radix.touch(rid, rep.num_tokens(rid))


def sort_by_longest_prefix(rep: ReplicaState) -> None:
    """SchedulePolicy.calc_priority for `lpm`: match every waiting request (which touches and splits the tree
    as SGLang's matching does), then sort by cached prefix, longest first, stably; a request whose cached
    prefix is at most IN_BATCH_CHECK tokens but which shares IN_BATCH_DEPRIORITIZE or more tokens with an
    earlier waiting request goes last (computing one of them first lets the others hit)."""
    radix = rep.radix
    matched: dict[int, float] = {}
    # the waiting-queue tree: per label, the longest run an earlier request put in it
    queued: dict[int, int] = {}
    for rid in rep.waiting:
        n = rep.num_tokens(rid)
        hit = radix.match(rid, n)[0] * rep.block_size
        matched[rid] = -hit
        if hit <= IN_BATCH_CHECK and radix.waiting_deprioritized(rid, n, queued, IN_BATCH_DEPRIORITIZE):
            matched[rid] = float("inf")
    rep.waiting = type(rep.waiting)(sorted(rep.waiting, key=matched.__getitem__))
