"""PP = 1, one replica: the chunks of one prompt beside an unchanged set of decodes, run without the loop.

Most iterations carry a prefill chunk (a 1.7k-token prompt under a 512-token budget takes four), and while a
single prompt is being prefilled the batches that follow are known in advance: every decode again, plus the
prompt's next chunk of `budget - decodes` tokens. That holds until something changes the batch: an arrival
or an overload check (either may end the run or add work), a decode finishing, a KV shortage (it would
preempt), the prompt's last chunk (the request starts decoding), or a chunk smaller than the budget's room
while a request waits (it could be admitted beside it). This module runs such iterations with the
step-by-step path's own operations, iteration by iteration: the same timer call, the same float sums for
start and end times (one SimPy timeout each), one table row each, the same KV blocks, TBT gaps and work
counts. What it saves is the scheduler loop and the policy per iteration. Results are the same, bit for bit
(tests/test_sim_digests.py pins them; tests/test_sim_properties.py compares with `stretch=False`).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

from simserve.sim.histogram import LogHistogram

if TYPE_CHECKING:
    from simserve.sim.replica import Replica

POLICIES = ("sarathi", "hybrid")  # a decodes-first batch whose one partial prefill takes what the budget leaves
_count, _amin = np.count_nonzero, np.minimum.reduce
MIN_PLAN = 2.0  # iterations (of the last one's length) a quiet window must hold before a run is planned


def chunk_run(rep: Replica, rid: int, chunk: int, dec: np.ndarray, now: float) -> Generator[simpy.Event, Any, bool]:
    """Run the iteration the policy just formed (`chunk` tokens of request `rid` beside the decodes `dec`,
    their KV blocks allocated) and the ones that must follow it, if at least one must; False (and nothing
    changed) when none does, and the scheduler loop runs this iteration itself."""
    st, r = rep.state, rep.state.reqs
    n = len(dec)
    room = st.budget - n  # the chunk each later batch gives the prompt
    prefix, target = int(r.computed[rid]), int(r.target[rid])
    if room <= 0 or chunk != room or prefix + chunk >= target:
        return False  # a full chunk now, and at least one more after it, or there is nothing to plan
    if st.prefilling != [rid] or n != len(st.decoding) or rep.quiet_window is None:
        return False
    if r.last_token[rid] == r.last_token[rid]:
        return False  # a re-prefill after preemption: its last chunk adds a TBT gap of its own
    _, check, period, far = rep.quiet_window(now)  # far: the next arrival or an overload check that stops the run
    if far - now <= MIN_PLAN * rep.last_duration:
        return False  # too short to hold two iterations: planning would cost more than it saves
    stop = rep.tbt_headroom() if rep.tbt_headroom is not None else None
    cd = r.computed[dec]  # before this iteration: the decodes compute tokens cd, cd + 1, ...
    rem, prev = 1 << 62, 0.0
    if n:
        last = r.last_token[dec]
        if _count(last != last[0]):
            return False  # the gaps below assume every decode got its last token at the same time
        rem = int(_amin(r.output[dec] - r.generated[dec]))  # iteration rem - 1 finishes a decode
        prev = float(last[0])
    waiting, dynamic, bs, timer = bool(st.waiting), st.dynamic and n > 0, st.block_size, rep.timer
    free, used = st.kv.free, st.kv.used  # after this iteration's blocks
    kv = cd + 1
    rows: list[tuple[float, float, float, int, int, int]] = []  # start, duration, end, chunk, prefix, KV used
    t, i, allocated, above = now, 0, 0, 0  # above: weight of the planned TBT gaps the stop rule counts
    while True:
        n_need = 0
        if i:  # iteration i, as the policy would form it
            if prefix >= target or i >= rem:
                break  # the prompt is in (the request decodes now) or a decode finished
            chunk = min(target - prefix, room)
            if chunk < room and waiting:
                break  # the head of the queue might be admitted beside the last chunk
            if dynamic:  # schedule_decodes: a new block for each decode whose next token starts one
                n_need = int(_count((cd + i) % bs == 0))
                if free - n_need < 1:
                    break  # it would take the preempting path
            kv = cd + (1 + i)
        d = timer([(chunk, prefix)], kv, 0)
        end = t + d
        if not end < far:
            break  # an arrival, or a check that stops the run: the loop meets them
        if _passes_checks(check, period, t, end, stop, above) is None:
            break  # a check at this iteration's end, or one the TBT stop rule would end the run at
        while check < end:  # the watchdog's own float operation
            check = check + period
        if n and stop is not None and LogHistogram.bucket(end - prev) >= stop[0]:
            above += n
        prev = end
        free, used, allocated = free - n_need, used + n_need, allocated + n_need
        rows.append((t, d, end, chunk, prefix, used))
        prefix += chunk
        t = end
        i += 1
    if i < 2:
        return False
    # The iterations as Replica.schedule runs them: a row each, one timeout each (now + d lands on `end`).
    rep.bubble[0] += rep._inflight_time(now) - rep.idle_mark[0]  # each later one adds acc - acc = 0.0
    acc, log, index, env = rep.inflight_acc, rep.log, rep.index, rep.env
    rep.in_flight = 1
    for start, d, end, c, _, kv_used in rows:
        log.add(index, 0, start, end, c, n, 1 + n, kv_used)
        rep.busy_since = start
        yield env.timeout(d)
        acc += end - start
    rep.in_flight = 0
    rep.inflight_acc = rep.idle_mark[0] = acc
    rep.last_duration = rows[-1][1]
    # Their results, in the order Replica._complete applies them: the chunk, then the decodes.
    w = rep.work
    for _, _, end, c, p, _ in rows:
        w.tokens += c + n
        w.prefill_pairs += c * p + c * (c + 1) // 2
        w.prefill_kv += p + c
        st.complete_chunk(rid, c, end)
    w.micro_batches += i
    if n:
        s0 = int(np.add.reduce(cd)) + n  # KV the decodes read in the first iteration; n more in each next
        w.decode_kv += s0 * i + n * i * (i - 1) // 2
        if allocated:
            st.kv.allocate(allocated)
            r.blocks[dec] += (cd + i - 1) // bs - cd // bs  # steps 1..i-1 that start a block
        _apply_decodes(rep, dec, [row[2] for row in rows], i)
    return True


def _apply_decodes(rep: Replica, dec: np.ndarray, ends: list[float], k: int) -> None:
    """Each decode got one token at each of the `k` times in `ends`, as complete_decodes gives them."""
    st, r = rep.state, rep.state.reqs
    r.computed[dec] += k
    r.generated[dec] += k
    prev = float(r.last_token[dec[0]])  # every decode's, checked in chunk_run
    gaps = []
    for end in ends:
        gaps.append(end - prev)
        prev = end
    r.tbt_max[dec] = np.maximum(r.tbt_max[dec], max(gaps))
    r.last_token[dec] = prev
    st.tbt.add_each(gaps, len(dec))
    done = r.generated[dec] >= r.output[dec]
    if _count(done):
        for rid in dec[done].tolist():
            st.decoding.remove(rid)
            st.finish(rid, prev)
        st._decoding_array = None


def _passes_checks(check: float, period: float, start: float, end: float, stop, above: float) -> bool | None:
    """True when every overload check during the iteration (start, end) leaves the run going as it would step
    by step; None when one falls exactly at its end (the order of the two events would matter) or the TBT stop
    rule would end the run there (it counts the gaps of the iterations before this one: `above`)."""
    while check < end:
        if check > start and stop is not None and above >= stop[1]:
            return None
        check = check + period
    return None if check == end else True
