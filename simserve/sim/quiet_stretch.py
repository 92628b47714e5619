"""PP = 1, one replica: the decode segments between two arrivals, planned in plain Python floats.

At light load a replica decodes its few residents for seconds between arrivals, and the step-by-step
simulation breaks that time into segments: a stretch up to each overload check (fastpath.py), and a
single iteration whenever the next check is nearer than MIN_GAIN iterations (Replica._stretch). The table
keeps one row per segment, so the segments stay; what this module removes is their cost. While nothing
can change the batch (no arrival, no completion, no KV shortage, no overload check that stops the run),
every segment is determined in advance: its iteration times come from one vectorised timer call over the
arithmetic progression of KV sums, its boundaries from repeating the step-by-step path's float operations
in the same order (the same cumulative sums from each segment's start, the same `now + delay` SimPy
computes), and its KV blocks from counts per block residue. The segments are logged as the step-by-step
path logs them, the per-request arrays are updated once, and the replica sleeps through all of them in
one SimPy timeout. Results are the same, bit for bit (tests/test_sim_digests.py).
"""

from __future__ import annotations

import bisect
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

from simserve.sim.fastpath import MAX_STRETCH
from simserve.sim.histogram import LogHistogram

if TYPE_CHECKING:
    from simserve.sim.replica import Replica

_count, _amin, _sum = np.count_nonzero, np.minimum.reduce, np.add.reduce  # cheaper on small arrays
MAX_QUIET = 1 << 16  # iterations one quiet run may plan (bounds the arrays it allocates)


def quiet_segments(
    rep: Replica, dec: np.ndarray, now: float, allocated: bool
) -> Generator[simpy.Event, Any, int]:
    """Run the segments that follow `now` while nothing outside can change the batch: 0 if none, 1 if
    some, 2 if the last of them finished a request.

    Called where the step-by-step path would call the policy again with the same residents, none of
    them finishing and nothing routed since (`allocated`: it did, and allocated step 0's blocks); stops
    after the segment that reaches the next arrival or finishes a request, and before one that would need
    a preemption or pass a check that may stop the run (those go the usual way).
    """
    from simserve.sim.replica import MIN_GAIN

    window = rep.quiet_window(now)
    if window is None:
        return 0
    arrival, check, period, far = window
    st, r, bs = rep.state, rep.state.reqs, rep.state.block_size
    n = len(dec)
    c0 = r.computed[dec]
    last_token = r.last_token[dec]
    if _count(last_token != last_token[0]):
        return 0  # the plan assumes every resident got its last token at the same time
    if st.dynamic and _count(r.blocks[dec] != -(-(c0 + allocated) // bs)):
        return 0  # ... and holds exactly the blocks its computed tokens fill
    rem = int(_amin(r.output[dec] - r.generated[dec]))  # the segment reaching this many steps finishes one
    if rem < 1:
        return 0
    s0 = int(_sum(c0)) + n  # KV read by step 0; step g reads s0 + n·g
    # One timer call for every step a finishing request allows; the first step's time then bounds the plan.
    # (Element by element the same floats as timing each step alone: the timer's operations are elementwise.)
    dur = rep.timer.decode_stretch(n, s0 + n * np.arange(min(rem, MAX_QUIET)))
    d_first = float(dur[0])
    if not d_first > 0:
        return 0
    total = min(rem, MAX_QUIET, int((far - now) / d_first) + 2)
    if total < 1:
        return 0
    dur = dur[:total]
    if _count(dur > 0) != total:  # the plan below relies on increasing segment ends
        return 0
    D = dur.tolist()  # single iterations and d0 read these as Python floats
    if st.dynamic:  # blocks newly needed by the step g: one per request with c0 + g ≡ 0 (mod bs)
        per_residue = np.bincount((-c0) % bs, minlength=bs)
        need = per_residue[np.arange(total) % bs]
        need_cum = [0, *np.cumsum(need).tolist()]  # need_cum[g + 1] = blocks needed by steps 0..g
    free, used0 = st.kv.free, st.kv.used
    kv_total = st.kv.num_blocks
    rows: list[tuple] = []
    unit_gaps: list[float] = []  # gaps the step-by-step path adds with LogHistogram.add (weight n)
    short_gaps: list[np.ndarray] = []  # a stretch's inner gaps when it has at most 64 (add, as above)
    long_gaps: list[np.ndarray] = []  # ... when it has more (add_each on the array)
    worst = 0.0
    acc, idle, bubble = rep.inflight_acc, rep.idle_mark[0], rep.bubble[0]
    last_dur, last = rep.last_duration, float(last_token[0])
    t, g = now, 0
    kv_read = 0  # decode KV tokens read, for Work
    while True:
        while check <= t:  # the watchdog has already fired every check up to now
            check = check + period
        cap = min(arrival, check)
        if cap > far or (cap == far and cap != arrival):
            break
        # The policy's schedule_decodes: step g's new blocks, unless that leaves none (it would preempt).
        n_need = need_cum[g + 1] - need_cum[g] if st.dynamic else 0
        if g == 0 and allocated:
            free += n_need  # planned as if not yet allocated (the final allocation counts from used0)
        elif free - n_need < 1 and st.dynamic:
            break
        if cap - t <= MIN_GAIN * last_dur:  # Replica._stretch declines: one plain iteration
            k, d = 1, D[g]
            end = t + d
            t_next = end
            seg_free = free - n_need
            first, inner = end - last, None
        else:
            kmax = min(rem - g, MAX_STRETCH)
            d0 = D[g]
            if cap < np.inf:
                kmax = min(kmax, int((cap - t) / d0) + 2)
            if g + kmax > total:
                break
            if st.dynamic and kmax > 1:  # fastpath's KV limit: steps 1..j fit in the blocks left after step 0
                room = need_cum[g + 1] + free - n_need - 1
                kmax = 1 + bisect.bisect_right(need_cum, room, g + 2, g + kmax + 1) - (g + 2)
            ends = np.cumsum(np.concatenate(([t], dur[g : g + kmax])))[1:]  # fastpath's own operations
            k = 1 + int(np.searchsorted(ends[:-1], cap, side="left"))
            end = float(ends[k - 1])
            t_next = t + (end - t)
            seg_free = free - (need_cum[g + k] - need_cum[g]) if st.dynamic else free
            first = float(ends[0]) - last
            inner = ends[1:k] - ends[: k - 1] if k > 1 else None  # np.diff's own subtraction
        finishing = g + k >= rem  # a request gets its last token: the last segment
        if cap == arrival:  # the segment that reaches the next arrival is the last: no check inside it
            if t_next >= check:
                break
        elif t_next >= far:
            break  # it would pass a check that may stop the run
        if now + (t_next - now) != t_next:
            break  # one timeout from now would not land on this segment's end
        # commit the segment, in the step-by-step path's order of float operations
        free = seg_free
        bubble += acc - idle
        rows.append((t, end, n * k, kv_total - free, k))
        kv_read += (s0 + n * g) * k + n * k * (k - 1) // 2
        acc += t_next - t
        idle = acc
        unit_gaps.append(first)
        worst = max(worst, first)
        if inner is not None:
            (long_gaps if len(inner) > 64 else short_gaps).append(inner)
            worst = max(worst, float(inner.max()))
        last_dur = D[g + k - 1]
        last = end
        g += k
        t = t_next
        if cap == arrival or finishing:
            break
    if not rows:
        return 0
    tbt_stop = rep.tbt_headroom() if rep.tbt_headroom is not None else None
    if tbt_stop is not None and (tbt_stop[1] <= 0 or LogHistogram.bucket(worst) >= tbt_stop[0]):
        # The TBT stop rule may end the run at a check inside these segments (it has counted enough gaps
        # already, or these add some it counts): leave them to decode_stretch, whose checks see every gap
        # as it happens (fastpath.settle).
        return 0
    # Apply everything at once: nothing else reads these until the replica wakes at t (the checks inside
    # read only the TBT gaps in buckets the stop rule counts, and these add none there).
    log, index = rep.log, rep.index
    for start, stop, tokens, kv_used, k in rows:
        log.add(index, 0, start, stop, 0, tokens, n, kv_used, k)
    w = rep.work
    w.tokens += n * g
    w.decode_kv += kv_read
    w.micro_batches += g
    if st.dynamic:
        st.kv.allocate((kv_total - free) - used0)
        r.blocks[dec] = -(-(c0 + g) // bs)
    r.computed[dec] += g
    r.generated[dec] += g
    r.tbt_max[dec] = np.maximum(r.tbt_max[dec], worst)
    r.last_token[dec] = last
    tbt = st.tbt
    for inner in short_gaps:
        unit_gaps += inner.tolist()
    tbt.add_each(unit_gaps, n)
    for inner in long_gaps:
        tbt.add_each(inner, n)
    rep.bubble[0] = bubble
    rep.last_duration = last_dur
    rep.in_flight = 1  # asleep through the segments, as the step-by-step path is during each
    yield rep.env.timeout(t - now)
    rep.in_flight = 0
    rep.inflight_acc, rep.idle_mark[0] = acc, idle
    done = r.generated[dec] >= r.output[dec]
    if not done.any():
        return 1
    for rid in dec[done].tolist():  # as fastpath's stretch or State.complete_decodes finish them
        st.decoding.remove(rid)
        st.finish(rid, last)
    st._decoding_array = None
    return 2
