"""The fast path at PP = 2: steady decoding in two alternating groups, emulated tick by tick.

With no prefill work, admission blocked and two micro-batches in flight, the decoding requests form two
groups, A (the batch the policy just formed) and B (the micro-batch on stage 1), which take turns: at each
tick stage 0 starts one group and stage 1 the other, and the next tick is whichever stage ends later. Until
a completion finishes a request, a block runs short, or `cap` (the next arrival or overload check), the
policy would form exactly these batches, so the ticks are emulated in a plain loop instead of three SimPy
events per micro-batch: the timer is called as the step-by-step path calls it, the float operations of
`Replica.schedule`/`stage` are repeated in the same order (times, bubbles), each micro-batch still gets one
row per stage in the same order, and the per-request updates are applied per group in vector operations
when the stretch ends. The results are the same, bit for bit (tests/test_sim_properties.py).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import simpy

from simserve.sim.fastpath import MAX_STRETCH, admission_blocked, apply_tokens

if TYPE_CHECKING:
    from simserve.sim.replica import MicroBatch, Replica


class PipelinePlan(NamedTuple):
    groups: tuple[np.ndarray, np.ndarray]  # A, then B; micro-batch i holds A for even i, B for odd i
    pending: MicroBatch  # B's micro-batch on stage 1 (stage 1 finishes it at tick 0's s1_end)
    queued: bool  # handed over just now, stage 1 has not taken it yet (else stage 1 is timing it)
    logged: bool  # its stage-1 row (and bubble) is done: stage 1 started it, or a stretch ending did
    start: list[float]  # tick i: stage 0 starts micro-batch i; stage 1 starts micro-batch i - 1
    durations: list[list[float]]  # of micro-batch i, per stage
    s1_end: list[float]  # tick i: when stage 1 finishes what it started
    kv_used: list[int]  # blocks in use once micro-batch i is formed
    end: float  # tick m, where the step-by-step simulation resumes
    stage0_last: bool  # at tick m stage 0 finished last (else stage 1)


def plan_pipeline(rep: Replica, dec: np.ndarray, now: float, cap: float) -> PipelinePlan | None:
    """The ticks from now until the first of: a completion that finishes a request (it may be the last
    event), a KV shortage, `cap`, an exact tie between the stages (SimPy's event order would decide what
    happens first), MAX_STRETCH. None when there is no such stretch of at least two ticks."""
    st, r = rep.state, rep.state.reqs
    if rep.in_flight != 1 or st.stale or st.prefilling:
        return None
    q = rep.queues[1]
    if q:  # handed over just now: stage 1 will start it after this step
        if len(q) != 1 or rep.current[1] is not None:
            return None
        pending, queued = q[0], True
        p_end = now + pending.durations[1]
    else:
        pending, queued, p_end = rep.current[1], False, rep.stage_end[1]
        if pending is None:
            return None
    b = pending.decodes
    if pending.prefills or not len(b) or len(dec) + len(b) != len(st.decoding) or not admission_blocked(rep):
        return None
    # Completions before tick m: A's at odd ticks < m - 1, B's at even ones; only the last may finish one.
    rem_a = int((r.output[dec] - r.generated[dec]).min())
    rem_b = int((r.output[b] - r.generated[b]).min())
    m_max = min(2 * rem_a, 2 * rem_b - 1, MAX_STRETCH)
    if m_max < 2:
        return None
    timer, bs = rep.timer, st.block_size
    kv = (r.computed[dec] + 1, r.computed[b] + 1)  # KV read by A's step 0 and B's (the pending one)
    need = None
    if st.dynamic:  # step j ≥ 1 of a group needs a block for each request whose c + j is a block boundary
        need = [np.bincount((1 - k) % bs, minlength=bs).tolist() for k in kv]
    free, num_blocks = st.kv.free, st.kv.num_blocks
    start, s1_end, kv_used = [now], [p_end], [num_blocks - free]
    durations = [[timer([], kv[0], 0), timer([], kv[0], 1)]]
    m, end, stage0_last = 0, now, True
    for i in range(1, m_max + 1):
        e0, e1 = start[-1] + durations[-1][0], s1_end[-1]
        if e0 == e1 or not min(durations[-1]) > 0:
            break
        t = e0 if e0 > e1 else e1
        if not t < cap:
            break
        if now + (t - now) == t:  # the timeout to tick i ends exactly there
            m, end, stage0_last = i, t, e0 > e1
        g, j = i % 2, (i + 1) // 2  # micro-batch i: step j of group g
        if i == m_max or (need is not None and free - need[g][j % bs] < 1):
            break
        if need is not None:
            free -= need[g][j % bs]
        step_kv = kv[g] + j
        durations.append([timer([], step_kv, 0), timer([], step_kv, 1)])
        start.append(t)
        s1_end.append(t + durations[-2][1])
        kv_used.append(num_blocks - free)
    if m < 2:
        return None
    return PipelinePlan(
        (dec, b),
        pending,
        queued,
        not queued or pending.logged,
        start[:m],
        durations[:m],
        s1_end[:m],
        kv_used[:m],
        end,
        stage0_last,
    )


def plan_tokens(plan: PipelinePlan) -> int:
    """An upper bound on the TBT gaps the stretch adds: every micro-batch at the larger group's size."""
    return len(plan.start) * max(len(plan.groups[0]), len(plan.groups[1]))


def pipeline_stretch(rep: Replica, plan: PipelinePlan) -> Generator[simpy.Event, Any, None]:
    """Run a planned stretch in one timeout and leave the replica as the step-by-step path would at tick m."""
    from simserve.sim.replica import MicroBatch

    st, r, log, idx = rep.state, rep.state.reqs, rep.log, rep.index
    start, durations, s1_end, kv_used = plan.start, plan.durations, plan.s1_end, plan.kv_used
    m, now, end = len(start), start[0], plan.end
    groups, pending = plan.groups, plan.pending
    if plan.queued:
        rep.queues[1].popleft()  # stage 1 has a wake-up pending and will find its queue empty
    else:
        pending.claimed = True  # NOTE: stage 1 is timing it and will leave its results to us
    # NOTE: the float operations of Replica.schedule/stage/_inflight_time, in their order; a micro-batch is
    # in flight throughout, so in-flight time up to t is acc + (t - since).
    acc, since = rep.inflight_acc, rep.busy_since
    b0, b1, im0, im1 = rep.bubble[0], rep.bubble[1], rep.idle_mark[0], rep.idle_mark[1]
    n = (len(groups[0]), len(groups[1]))
    for i in range(m):
        t, g = start[i], i % 2
        b0 += (acc + (t - since)) - im0
        row0 = (idx, 0, t, t + durations[i][0], 0, n[g], n[g], kv_used[i])
        if i == 0 and plan.logged:
            log.add(*row0)
        else:
            b1 += (acc + (t - since)) - im1
            kv1 = pending.kv_used if i == 0 else kv_used[i - 1]  # stage 1 runs micro-batch i - 1
            row1 = (idx, 1, t, s1_end[i], 0, n[1 - g], n[1 - g], kv1)
            # Whichever process resumed first at tick i logs first: the scheduler when stage 0 ended last.
            s0_first = i == 0 or start[i - 1] + durations[i - 1][0] > s1_end[i - 1]
            log.add(*(row0 if s0_first else row1))
            log.add(*(row1 if s0_first else row0))
        im0 = acc + ((t + durations[i][0]) - since)
        im1 = acc + (s1_end[i] - since)
    rep.bubble[0], rep.idle_mark[1] = b0, im1
    if st.dynamic:
        st.kv.allocate(kv_used[-1] - kv_used[0])
    w, bs = rep.work, st.block_size
    for g, dec in enumerate(groups):
        formed = range(g, m, 2)  # micro-batch i is step (i + 1) // 2 of its group and reads c + step + 1
        c = r.computed[dec]
        c_sum, k = int(c.sum()), len(dec)
        w.tokens += k * len(formed)
        w.decode_kv += sum(c_sum + k * (1 + (i + 1) // 2) for i in formed)
        if st.dynamic:  # steps formed after the group's pending one: a block at each boundary crossed
            steps = len(formed) - (1 - g)
            r.blocks[dec] += (c + steps) // bs - c // bs
    w.micro_batches += m
    rep.last_duration = durations[-1][0]
    # NOTE: rep.in_flight stays 1 over the stretch (it is 1 or 2 in between): nothing reads it meanwhile.
    # Stage 1 finishes B's micro-batches at ticks 0, 2, ... and A's at 1, 3, ...; only the last one can
    # finish a request (plan_pipeline).
    b_tokens, a_tokens = [groups[1], np.asarray(s1_end[0::2]), 0], [groups[0], np.asarray(s1_end[1::2]), 0]
    rep.unsettled += [b_tokens, a_tokens]  # a check during the stretch counts what ended before it
    yield rep.env.timeout(end - now)
    rep.unsettled.clear()
    for dec, ends, settled in (b_tokens, a_tokens):
        apply_tokens(rep, dec, ends, settled)
    finished = groups[1 - (m - 1) % 2]  # the group stage 1 finished last
    done = r.generated[finished] >= r.output[finished]
    if done.any():
        for rid in finished[done].tolist():
            st.decoding.remove(rid)
            st.finish(rid, s1_end[-1])
        st._decoding_array = None
    last = groups[(m - 1) % 2]
    r.inflight[groups[m % 2]] = False
    r.inflight[last] = True
    mb = MicroBatch([], last, durations[-1], 0, kv_used[-1])
    if not plan.stage0_last:  # stage 1 just finished and starts mb, before the scheduler forms the next
        rep.bubble[1] = b1 + ((acc + (end - since)) - im1)
        log.add(idx, 1, end, end + durations[-1][1], 0, len(last), len(last), mb.kv_used)
        mb.logged = True
        rep.idle_mark[0] = im0  # the scheduler had been waiting since stage 0 finished
    else:
        rep.bubble[1] = b1
    rep._hand_over(1, mb)
    if plan.stage0_last:
        rep.idle_mark[0] = rep._inflight_time(end)
