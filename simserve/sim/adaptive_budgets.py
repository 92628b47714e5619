"""The adaptive policies' per-iteration prefill budgets: each chunk sized with the replica's BatchTimer.

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
