"""The fast path at PP = 1, and what both fast paths share (the PP = 2 one is in pipeline_stretch.py).

A stretch is a run of decode-only iterations the policy would form identically until something happens
(an arrival, an overload check, a completion, a KV shortage); it is advanced in one SimPy timeout. Both
fast paths compute every iteration's time with the same float operations as the step-by-step simulation,
so request times, TBT gaps and bubbles come out equal (tests/test_sim_properties.py and
tests/test_sim_pipeline_stretch.py compare the two). At PP = 1 the k iterations of the batch that holds
every resident request are timed with the timer's vectorised `decode_stretch` (the same arithmetic as its
`__call__`, element by element) and logged as one row of the iteration table with `num_iterations = k`.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

if TYPE_CHECKING:
    from simserve.sim.histogram import LogHistogram
    from simserve.sim.replica import Replica

MAX_STRETCH = 4096  # iterations per compressed step: bounds the arrays one step allocates


def admission_blocked(rep: Replica) -> bool:
    """Would every later policy call, until a completion or an arrival, admit nothing?

    True when nothing waits, or the head cannot be admitted for a reason that only gets worse while the
    residents decode (free KV blocks only shrink, the resident count stays). Not for SimpleChunking with a
    queue: its turns alternate, so one call does not show what the next will do.
    """
    st = rep.state
    if not st.waiting:
        return True
    if st.cfg.policy == "chunked":
        return False
    if st.cfg.policy == "fcfs":
        return st.num_running > 0
    head = st.waiting[0]
    if rep.pp > 1 and st.reqs.inflight[head]:
        return False
    return st.num_running >= st.max_batch or not st.kv.can_allocate(st.admission_blocks(head))


def decode_stretch(
    rep: Replica, dec: np.ndarray, now: float, cap: float
) -> Generator[simpy.Event, Any, None]:
    """PP = 1: steady decoding of `dec` from `now`, segment by segment, until something changes the batch.

    The first segment runs up to the first completion, KV shortage or `cap` (the next arrival or overload
    check). If it ends at an overload check with nothing else changed, the scheduler loop would only form
    the same batch again, so the next segment follows here at once: the same step-0 block allocation the
    policy would make, then one plain iteration when the next check or arrival is near (the loop's
    MIN_GAIN rule) or another stretch. One SimPy timeout per segment, as before, so event order and times
    are unchanged; what this saves is the scheduler loop's routing, policy call and planning per segment.
    """
    from simserve.sim.quiet_stretch import quiet_segments
    from simserve.sim.replica import MIN_GAIN

    st, r, bs = rep.state, rep.state.reqs, rep.state.block_size
    routed = st.outstanding  # grows when the arrivals process routes a request here
    allocated = True  # step 0's blocks: the policy allocated them for the first segment
    while True:
        # quiet_stretch plans the segments up to the next thing that may change the batch at once
        quiet = 0 if rep.quiet_window is None else (yield from quiet_segments(rep, dec, now, allocated))
        if quiet == 2:
            return  # a request finished
        if not quiet:
            if (
                not allocated and st.dynamic
            ):  # the policy's schedule_decodes: a block per decode that needs one
                need = r.computed[dec] % bs == 0
                n_need = int(np.count_nonzero(need))
                if st.kv.free - n_need < 1:
                    return  # it would preempt: leave that to the loop
                st.kv.allocate(n_need)
                r.blocks[dec[need]] += 1
            if cap - now <= MIN_GAIN * rep.last_duration:  # Replica._stretch's rule (never for the first)
                done = yield from _one_iteration(rep, dec, now)
            else:
                done = yield from _stretch_segment(rep, dec, now, cap)
            if done:
                return
        now = rep.env.now
        cap = rep.stretch_until(now, False)
        if cap <= now or st.outstanding != routed:
            return  # an arrival is due or was routed here: the loop calls the policy
        allocated = False


def _one_iteration(rep: Replica, dec: np.ndarray, now: float) -> Generator[simpy.Event, Any, bool]:
    """One decode-only iteration exactly as Replica.schedule runs it (PP = 1); True if a request finished."""
    st = rep.state
    kv = st.reqs.computed[dec] + 1
    d = rep.timer([], kv, 0)
    rep._count_work([], kv)
    rep.bubble[0] += rep._inflight_time(now) - rep.idle_mark[0]
    rep._start_flight(now)
    rep.last_duration = d
    n = len(dec)
    rep.log.add(rep.index, 0, now, now + d, 0, n, n, st.kv.used)
    yield rep.env.timeout(d)
    t = rep.env.now
    rep._end_flight(t)
    before = len(st.decoding)
    st.complete_decodes(dec, t)
    rep.idle_mark[0] = rep._inflight_time(t)
    return len(st.decoding) != before


def _stretch_segment(
    rep: Replica, dec: np.ndarray, now: float, cap: float
) -> Generator[simpy.Event, Any, bool]:
    """Up to the first completion, KV shortage or `cap`, in one timeout and one table row; True if a
    request finished."""
    st, r, bs = rep.state, rep.state.reqs, rep.state.block_size
    n = len(dec)
    c = r.computed[dec]  # step j computes token c + j and reads c + j + 1 KV entries
    s0 = int(c.sum()) + n
    kmax = min(int((r.output[dec] - r.generated[dec]).min()), MAX_STRETCH)
    steps = rep.timer.decode_stretch(n, s0 + n * np.arange(max(kmax, 1)))  # elementwise: each step alone
    d0 = float(steps[0])
    if d0 > 0 and cap < np.inf:
        kmax = min(kmax, int((cap - now) / d0) + 2)
    if st.dynamic and kmax > 1:  # step 0's blocks are allocated; step j ≥ 1 needs one where c + j ≡ 0
        per_residue = np.bincount((-c) % bs, minlength=bs)
        cum = np.cumsum(per_residue[np.arange(1, kmax) % bs])
        kmax = 1 + int(np.searchsorted(cum, st.kv.free - 1, side="right"))
    durations = steps[:kmax]
    ends = np.cumsum(np.concatenate(([now], durations)))[1:]
    k = 1 + int(np.searchsorted(ends[:-1], cap, side="left"))  # iterations that start before cap
    ends = ends[:k]
    end = float(ends[-1])
    if st.dynamic:
        blocks = -(-(c + k) // bs)
        st.kv.allocate(int((blocks - r.blocks[dec]).sum()))
        r.blocks[dec] = blocks
    w = rep.work
    w.tokens += n * k
    w.decode_kv += s0 * k + n * k * (k - 1) // 2
    w.micro_batches += k
    rep.bubble[0] += rep._inflight_time(now) - rep.idle_mark[0]
    rep.log.add(rep.index, 0, now, end, 0, n * k, n, st.kv.used, k)
    rep.last_duration = float(durations[k - 1])
    rep._start_flight(now)
    rep.unsettled.append(entry := [dec, ends, 0])
    yield rep.env.timeout(end - now)
    rep.unsettled.clear()
    rep._end_flight(rep.env.now)
    rep.idle_mark[0] = rep._inflight_time(rep.env.now)
    apply_tokens(rep, dec, ends, entry[2])
    gen = r.generated[dec]
    done = gen >= r.output[dec]
    if done.any():
        for rid in dec[done].tolist():
            st.decoding.remove(rid)
            st.finish(rid, end)
        st._decoding_array = None
        return True
    return False


def apply_tokens(rep: Replica, dec: np.ndarray, ends: np.ndarray, settled: int = 0) -> None:
    """The requests in `dec` each got one token at every time in `ends` (ascending); the TBT gaps of the
    first `settled` of those iterations are already in the histogram (`settle`)."""
    st, r, k = rep.state, rep.state.reqs, len(ends)
    r.computed[dec] += k
    r.generated[dec] += k
    first = ends[0] - r.last_token[dec]
    gaps = np.diff(ends)
    r.tbt_max[dec] = np.maximum(np.maximum(r.tbt_max[dec], first), gaps.max() if k > 1 else 0.0)
    r.last_token[dec] = ends[-1]
    _add_gaps(st.tbt, None if settled else first, gaps[max(settled - 1, 0) :], len(dec))


def settle(rep: Replica, t: float) -> None:
    """Put into the TBT histogram the gaps of the in-flight stretches' iterations that ended before `t`.

    A stretch applies its tokens when its one timeout ends, but step by step an overload check at `t` has
    already counted every iteration that ended before it. The cluster calls this at each check that reads
    the TBT stop rule or ends the run, so that the check sees the same counts, and a run that stops
    mid-stretch keeps the same gaps. An iteration ending exactly at `t` is left out: the check's timeout,
    scheduled a period earlier, fires before the replica's.
    """
    tbt, last_token = rep.state.tbt, rep.state.reqs.last_token
    for entry in rep.unsettled:
        dec, ends, done = entry
        k = int(np.searchsorted(ends, t, side="left"))  # iterations that ended before t
        if k > done:
            first = None if done else ends[0] - last_token[dec]  # apply_tokens' own operations
            _add_gaps(tbt, first, np.diff(ends[:k])[max(done - 1, 0) :], len(dec))
            entry[2] = k


def _add_gaps(tbt: LogHistogram, first: np.ndarray | None, inner: np.ndarray, n: int) -> None:
    """Iteration 0's gap per request (`first`, None once settled), then later iterations' gaps, each shared
    by the n requests, in the buckets complete_decodes' add() gives them (add_each: math.log's buckets)."""
    if first is not None:
        tbt.add_many(first)
    if len(inner):
        tbt.add_each(inner, n)
