"""One replica as SimPy processes: the scheduler loop, which also runs pipeline stage 0, and stages 1..PP-1.

The scheduler forms a micro-batch whenever stage 0 is free and fewer than PP micro-batches are in flight,
runs it on stage 0, and hands it to stage 1; each later stage takes micro-batches in order, and the last
one applies the results (tokens, completions, freed KV) and wakes the scheduler. A stage that waits for
the previous stage while the replica has work in flight is in a pipeline bubble.

The fast path (PP = 1): when a batch holds only decodes, holds every resident request, and nothing can
change until some point (an arrival, the first completion, a KV shortage, an overload check), the k
identical iterations before that point are advanced in one step with the timer's vectorised
`decode_stretch`. It changes no result beyond float rounding; `SimConfig(stretch=False)` turns it off.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator
from typing import Any, Protocol

import numpy as np
import simpy

from simserve.sim.iterations import IterationLog
from simserve.sim.policies import Batch
from simserve.sim.state import ReplicaState

MAX_STRETCH = 4096  # iterations per compressed step: bounds the arrays one step allocates
MIN_GAIN = 3.0  # try a stretch only when the next outside event is this many iterations away


class BatchTimer(Protocol):
    num_stages: int

    def __call__(self, prefills: Any, decode_kv: Any, stage: int = 0) -> float: ...

    def decode_stretch(self, num_decodes: int, kv_sums: np.ndarray, stage: int = 0) -> np.ndarray: ...


class Work:
    """What the batches computed, for the MFU/MBU estimate (counted once per micro-batch)."""

    __slots__ = ("tokens", "prefill_pairs", "prefill_kv", "decode_kv", "micro_batches")

    def __init__(self) -> None:
        self.tokens = 0  # prefill chunk tokens + decode tokens
        self.prefill_pairs = 0  # query-key pairs of causal prefill attention
        self.prefill_kv = 0  # KV tokens prefill attention reads
        self.decode_kv = 0  # KV tokens decode attention reads
        self.micro_batches = 0


class MicroBatch:
    __slots__ = ("prefills", "decodes", "epochs", "durations", "num_prefill", "kv_used")

    def __init__(self, prefills, decodes, epochs, durations, num_prefill, kv_used):
        self.prefills = prefills
        self.decodes = decodes
        self.epochs = epochs
        self.durations = durations
        self.num_prefill = num_prefill
        self.kv_used = kv_used


class Replica:
    def __init__(
        self,
        env: simpy.Environment,
        state: ReplicaState,
        policy: Callable[[ReplicaState, float], Batch],
        timer: BatchTimer,
        log: IterationLog,
        route_due: Callable[[float], None],
        stretch_until: Callable[[float], float],
        stretch: bool,
    ):
        self.env = env
        self.state = state
        self.policy = policy
        self.timer = timer
        self.log = log
        self.route_due = route_due  # route every arrival due by now before scheduling
        self.stretch_until = stretch_until  # the next time anything outside this replica can happen
        self.pp = state.pp
        self.stretch = stretch and self.pp == 1
        self.index = state.index
        self.in_flight = 0
        self.wake: simpy.Event | None = None
        self.queues: list[deque[MicroBatch]] = [deque() for _ in range(self.pp)]
        self.stage_wake: list[simpy.Event | None] = [None] * self.pp
        self.bubble = [0.0] * self.pp
        self.idle_mark = [0.0] * self.pp  # in-flight time when each stage last went idle
        self.busy_since = 0.0
        self.inflight_acc = 0.0
        self.last_duration = 0.0
        self.work = Work()
        env.process(self.schedule())
        for s in range(1, self.pp):
            env.process(self.stage(s))

    def notify(self) -> None:
        """Something changed (an arrival, a completion): wake the scheduler if it is idle."""
        if self.wake is not None:
            self.wake.succeed()
            self.wake = None

    # -- the scheduler loop, which runs stage 0 --------------------------------------------------
    def schedule(self) -> Generator[simpy.Event, Any, None]:
        env, st, r = self.env, self.state, self.state.reqs
        while True:
            now = env.now
            self.route_due(now)
            batch = None
            before = st.preemptions
            if self.in_flight < self.pp:
                batch = self.policy(st, now)
            if not batch:
                if self.in_flight == 0 and not st.num_running and st.waiting:
                    st.drop_unfittable()  # nothing resident and still the head cannot start
                    continue
                self.wake = env.event()
                yield self.wake
                continue
            if self.stretch and self._steady(batch, st.preemptions != before):
                cap = self.stretch_until(now)
                # NOTE: a speed heuristic only (both paths give the same results): planning a stretch
                # costs about three plain iterations, so try only when it can be longer than that.
                if cap - now > MIN_GAIN * self.last_duration:
                    yield from self._stretch(batch.decodes, now, cap)
                    continue
            prefills = [(chunk, int(r.computed[rid])) for rid, chunk in batch.prefills]
            dec = batch.decodes
            kv = r.computed[dec] + 1
            durations = [self.timer(prefills, kv, s) for s in range(self.pp)]
            num_prefill = sum(c for c, _ in prefills)
            self._count_work(prefills, kv, num_prefill)
            self.bubble[0] += self._inflight_time(now) - self.idle_mark[0]
            epochs = None
            if self.pp > 1:
                r.inflight[dec] = True
                for rid, _ in batch.prefills:
                    r.inflight[rid] = True
                epochs = (r.epoch[dec].copy(), [int(r.epoch[rid]) for rid, _ in batch.prefills])
            mb = MicroBatch(batch.prefills, dec, epochs, durations, num_prefill, st.kv.used)
            self._start_flight(now)
            d = self.last_duration = durations[0]
            self.log.add(
                self.index, 0, now, now + d, num_prefill, len(dec), len(prefills) + len(dec), mb.kv_used
            )
            yield env.timeout(d)
            if self.pp == 1:
                self._complete(mb)
            else:
                self._hand_over(1, mb)
            self.idle_mark[0] = self._inflight_time(env.now)

    def stage(self, s: int) -> Generator[simpy.Event, Any, None]:
        env, q = self.env, self.queues[s]
        while True:
            if not q:
                self.stage_wake[s] = env.event()
                yield self.stage_wake[s]
            mb = q.popleft()
            now = env.now
            self.bubble[s] += self._inflight_time(now) - self.idle_mark[s]
            d = mb.durations[s]
            n = len(mb.prefills) + len(mb.decodes)
            self.log.add(self.index, s, now, now + d, mb.num_prefill, len(mb.decodes), n, mb.kv_used)
            yield env.timeout(d)
            if s + 1 < self.pp:
                self._hand_over(s + 1, mb)
            else:
                self._complete(mb)
                self.notify()
            self.idle_mark[s] = self._inflight_time(env.now)

    def _hand_over(self, s: int, mb: MicroBatch) -> None:
        self.queues[s].append(mb)
        ev = self.stage_wake[s]
        if ev is not None:
            self.stage_wake[s] = None
            ev.succeed()

    # -- pipeline bubbles: stage idle time while the replica has a micro-batch in flight ----------------
    def _inflight_time(self, t: float) -> float:
        """Time up to t during which at least one micro-batch was in flight."""
        return self.inflight_acc + (t - self.busy_since if self.in_flight else 0.0)

    def _start_flight(self, now: float) -> None:
        if not self.in_flight:
            self.busy_since = now
        self.in_flight += 1

    def _end_flight(self, now: float) -> None:
        self.in_flight -= 1
        if not self.in_flight:
            self.inflight_acc += now - self.busy_since

    def _complete(self, mb: MicroBatch) -> None:
        st, r, now = self.state, self.state.reqs, self.env.now
        self._end_flight(now)
        dec, prefills = mb.decodes, mb.prefills
        if mb.epochs is not None:  # PP: drop the work of requests preempted while in flight
            r.inflight[dec] = False
            dec = dec[r.epoch[dec] == mb.epochs[0]]
            kept = []
            for (rid, chunk), epoch in zip(prefills, mb.epochs[1], strict=True):
                r.inflight[rid] = False
                if r.epoch[rid] == epoch:
                    kept.append((rid, chunk))
            prefills = kept
        for rid, chunk in prefills:
            st.complete_chunk(rid, chunk, now)
        if len(dec):
            st.complete_decodes(dec, now)

    def _count_work(self, prefills: list[tuple[int, int]], kv: np.ndarray, num_prefill: int) -> None:
        w = self.work
        w.tokens += num_prefill + len(kv)
        w.decode_kv += int(kv.sum())
        for c, p in prefills:
            w.prefill_pairs += c * p + c * (c + 1) // 2
            w.prefill_kv += p + c
        w.micro_batches += 1

    # -- the fast path ----------------------------------------------------------------------------
    def _steady(self, batch: Batch, preempted: bool) -> bool:
        """Would the policy form this same decode-only batch again and again, until something happens?

        With no prefill work and every resident request decoding, a waiting request stays blocked (free
        blocks only shrink, residents stay the same), so only an outside event or a completion changes it.
        """
        st = self.state
        if batch.prefills or preempted or len(batch.decodes) != st.num_running:
            return False
        # SimpleChunking may not have looked at the queue this turn.
        return not (st.waiting and st.cfg.policy == "chunked")

    def _stretch(self, dec: np.ndarray, now: float, cap: float) -> Generator[simpy.Event, Any, None]:
        st, r, bs = self.state, self.state.reqs, self.state.block_size
        n = len(dec)
        c = r.computed[dec]  # step j computes token c + j and reads c + j + 1 KV entries
        s0 = int(c.sum()) + n
        kmax = min(int((r.output[dec] - r.generated[dec]).min()), MAX_STRETCH)
        d0 = float(self.timer.decode_stretch(n, np.array([s0]))[0])
        if d0 > 0 and cap < np.inf:
            kmax = min(kmax, int((cap - now) / d0) + 2)
        if st.dynamic and kmax > 1:  # step 0's blocks are allocated; step j ≥ 1 needs one where c + j ≡ 0
            per_residue = np.bincount((-c) % bs, minlength=bs)
            cum = np.cumsum(per_residue[np.arange(1, kmax) % bs])
            kmax = 1 + int(np.searchsorted(cum, st.kv.free - 1, side="right"))
        durations = self.timer.decode_stretch(n, s0 + n * np.arange(kmax))
        ends = np.cumsum(np.concatenate(([now], durations)))[1:]
        k = 1 + int(np.searchsorted(ends[:-1], cap, side="left"))  # iterations that start before cap
        ends = ends[:k]
        end = float(ends[-1])
        if st.dynamic:
            blocks = -(-(c + k) // bs)
            st.kv.allocate(int((blocks - r.blocks[dec]).sum()))
            r.blocks[dec] = blocks
        w = self.work
        w.tokens += n * k
        w.decode_kv += s0 * k + n * k * (k - 1) // 2
        w.micro_batches += k
        self.bubble[0] += self._inflight_time(now) - self.idle_mark[0]
        self.log.add(self.index, 0, now, end, 0, n * k, n, st.kv.used, k)
        self.last_duration = float(durations[k - 1])
        self._start_flight(now)
        yield self.env.timeout(end - now)
        self._end_flight(self.env.now)
        self.idle_mark[0] = self._inflight_time(self.env.now)
        r.computed[dec] += k
        gen = r.generated[dec] + k
        r.generated[dec] = gen
        first = ends[0] - r.last_token[dec]
        gaps = np.diff(ends)
        r.tbt_max[dec] = np.maximum(np.maximum(r.tbt_max[dec], first), gaps.max() if k > 1 else 0.0)
        r.last_token[dec] = end
        st.tbt.add_many(first)
        st.tbt.add_many(gaps, weight=n)
        done = gen >= r.output[dec]
        if done.any():
            for rid in dec[done].tolist():
                st.decoding.remove(rid)
                st.finish(rid, end)
            st._decoding_array = None
