"""One replica as SimPy processes: the scheduler loop, which also runs pipeline stage 0, and stages 1..PP-1.

The scheduler forms a micro-batch whenever stage 0 is free and fewer than PP micro-batches are in flight,
runs it on stage 0, and hands it to stage 1; each later stage takes micro-batches in order, and the last
one applies the results (tokens, completions, freed KV) and wakes the scheduler. A stage that waits for
the previous stage while the replica has work in flight is in a pipeline bubble.

The fast paths (fastpath.py, pipeline_stretch.py): when the policy would form the same decode-only batches again and again until
something happens (an arrival, a completion, a KV shortage, an overload check), the iterations before that
point are advanced in one SimPy timeout: at PP = 1 with the timer's vectorised `decode_stretch`, at PP = 2
by emulating the two alternating groups of decodes tick by tick, with the same results (docs/simulator.md);
prefill_stretch.py runs the chunks of one prompt the same way. `SimConfig(stretch=False)` turns them off.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator
from typing import Any, Protocol

import numpy as np
import simpy

from simserve.sim import fastpath, pipeline_stretch, prefill_stretch
from simserve.sim.iterations import IterationLog
from simserve.sim.policies import Batch
from simserve.sim.state import ReplicaState

_add_reduce = np.add.reduce  # a bound ufunc method: less call overhead than ndarray.sum on small arrays

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
    __slots__ = (
        "prefills",
        "decodes",
        "durations",
        "num_prefill",
        "num_requests",
        "kv_used",
        "claimed",
        "logged",
    )

    def __init__(self, prefills, decodes, durations, num_prefill, kv_used):
        self.prefills = prefills
        self.decodes = decodes
        self.durations = durations
        self.num_prefill = num_prefill
        self.num_requests = len(prefills) + len(decodes)
        self.kv_used = kv_used
        # Set by a pipeline stretch (pipeline_stretch.py): it applies this micro-batch's results (claimed),
        # or has already logged its stage-1 row (logged).
        self.claimed = False
        self.logged = False


class Replica:
    def __init__(
        self,
        env: simpy.Environment,
        state: ReplicaState,
        policy: Callable[[ReplicaState, float], Batch],
        timer: BatchTimer,
        log: IterationLog,
        route_due: Callable[[float], None],
        stretch_until: Callable[[float, bool], float],
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
        self.stretch = stretch and self.pp <= 2  # no fast path for PP > 2
        # prefill_stretch.py: a prompt's chunks beside unchanged decodes (PP = 1, one replica: quiet_window)
        self.chunk_runs = stretch and self.pp == 1 and state.cfg.policy in prefill_stretch.POLICIES
        self.index = state.index
        self.in_flight = 0
        self.wake: simpy.Event | None = None
        self.queues: list[deque[MicroBatch]] = [deque() for _ in range(self.pp)]
        self.stage_wake: list[simpy.Event | None] = [None] * self.pp
        self.current: list[MicroBatch | None] = [None] * self.pp  # on each stage s ≥ 1 now, and until when
        self.stage_end = [0.0] * self.pp
        self.bubble = [0.0] * self.pp
        self.idle_mark = [0.0] * self.pp  # in-flight time when each stage last went idle
        self.busy_since = 0.0
        self.inflight_acc = 0.0
        self.last_duration = 0.0
        self.work = Work()
        # [requests, iteration end times, how many of them are in the TBT histogram]: the tokens of the
        # stretch in flight (fastpath.settle)
        self.unsettled: list[list] = []
        # (next arrival, next overload check, check period, first time the run may change from outside)
        # when this replica is alone, so quiet_stretch.py may plan past checks; set by the cluster.
        self.quiet_window: Callable[[float], tuple[float, float, float, float] | None] | None = None
        self.tbt_headroom: Callable[[], tuple[int, float] | None] | None = None  # ... and the TBT stop rule's room
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
            steady = self.stretch and not batch.prefills and st.preemptions == before
            if steady and (yield from self._stretch(batch, now)):
                continue
            if self.chunk_runs and len(batch.prefills) == 1 and st.preemptions == before:
                rid, chunk = batch.prefills[0]
                if (yield from prefill_stretch.chunk_run(self, rid, chunk, batch.decodes, now)):
                    continue
            computed = r.computed
            prefills = [(chunk, int(computed[rid])) for rid, chunk in batch.prefills]
            dec = batch.decodes
            kv = computed[dec] + 1
            timer = self.timer
            durations = [timer(prefills, kv, s) for s in range(self.pp)]
            num_prefill = self._count_work(prefills, kv)
            self.bubble[0] += self._inflight_time(now) - self.idle_mark[0]
            if self.pp > 1:
                r.inflight[dec] = True
                for rid, _ in batch.prefills:
                    r.inflight[rid] = True
            mb = MicroBatch(batch.prefills, dec, durations, num_prefill, st.kv.used)
            self._start_flight(now)
            d = self.last_duration = durations[0]
            self.log.add(self.index, 0, now, now + d, num_prefill, len(dec), mb.num_requests, mb.kv_used)
            yield env.timeout(d)
            if self.pp == 1:
                self._complete(mb)
            else:
                self._hand_over(1, mb)
            self.idle_mark[0] = self._inflight_time(env.now)

    def stage(self, s: int) -> Generator[simpy.Event, Any, None]:
        env, q = self.env, self.queues[s]
        while True:
            while not q:  # NOTE: a pipeline stretch may take the micro-batch it was woken for
                self.stage_wake[s] = env.event()
                yield self.stage_wake[s]
            mb = q.popleft()
            now = env.now
            d = mb.durations[s]
            if not mb.logged:
                self.bubble[s] += self._inflight_time(now) - self.idle_mark[s]
                self.log.add(
                    self.index, s, now, now + d, mb.num_prefill, len(mb.decodes), mb.num_requests, mb.kv_used
                )
            self.current[s], self.stage_end[s] = mb, now + d
            yield env.timeout(d)
            self.current[s] = None
            if mb.claimed:
                continue
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
        if self.pp > 1:
            r.inflight[dec] = False
            for rid, _ in prefills:
                r.inflight[rid] = False
            if st.stale:  # drop the work of requests preempted while this micro-batch was in flight
                stale = st.stale
                ids = dec.tolist() + [rid for rid, _ in prefills]
                dropped = stale.intersection(ids)
                if dropped:
                    stale -= dropped
                    dec = np.array([rid for rid in dec.tolist() if rid not in dropped], dtype=np.int64)
                    prefills = [(rid, chunk) for rid, chunk in prefills if rid not in dropped]
        for rid, chunk in prefills:
            st.complete_chunk(rid, chunk, now)
        if len(dec):
            st.complete_decodes(dec, now)

    def _count_work(self, prefills: list[tuple[int, int]], kv: np.ndarray) -> int:
        """Add one micro-batch's work; returns its prefill tokens."""
        w = self.work
        num_prefill = 0
        for c, p in prefills:
            num_prefill += c
            w.prefill_pairs += c * p + c * (c + 1) // 2
            w.prefill_kv += p + c
        w.tokens += num_prefill + len(kv)
        if len(kv):
            w.decode_kv += int(_add_reduce(kv))
        w.micro_batches += 1
        return num_prefill

    # -- the fast paths (fastpath.py, pipeline_stretch.py) -------------------------------------------
    def _stretch(self, batch: Batch, now: float) -> Generator[simpy.Event, Any, bool]:
        """Advance a steady decode-only stretch in one timeout if there is one; False when there is not."""
        cap = self.stretch_until(now, self.pp == 2)
        # NOTE: a speed heuristic only (both paths give the same results): planning a stretch costs about
        # as much as a few plain iterations, so try only when it can be longer than that.
        if cap - now <= MIN_GAIN * self.last_duration:
            return False
        if self.pp == 1:
            if not self._steady(batch):
                return False
            yield from fastpath.decode_stretch(self, batch.decodes, now, cap)
            return True
        plan = pipeline_stretch.plan_pipeline(self, batch.decodes, now, cap)
        stop = self.tbt_headroom() if plan is not None and self.tbt_headroom is not None else None
        if stop is not None and self.quiet_window is not None:  # only with the TBT stop rule
            check = self.quiet_window(now)[1]
            # A stretch logs its rows in advance, so one the TBT stop rule might end inside (at a check it
            # runs through, once the gaps it adds reach the rule's room) stops at the next check instead.
            if plan.end > check and pipeline_stretch.plan_tokens(plan) >= stop[1]:
                plan = pipeline_stretch.plan_pipeline(self, batch.decodes, now, check)
        if plan is None:
            return False
        yield from pipeline_stretch.pipeline_stretch(self, plan)
        return True

    def _steady(self, batch: Batch) -> bool:
        """PP = 1: would the policy form this same decode-only batch again and again, until something happens?

        With no prefill work and every resident request decoding, a waiting request stays blocked (free
        blocks only shrink, residents stay the same), so only an outside event or a completion changes it.
        """
        st = self.state
        if len(batch.decodes) != st.num_running:
            return False
        # SimpleChunking may not have looked at the queue this turn.
        return not (st.waiting and st.cfg.policy == "chunked")
