"""One replica as SimPy processes: the scheduler loop, which also runs pipeline stage 0, and stages 1..PP-1.

The scheduler forms a micro-batch whenever stage 0 is free and fewer than PP micro-batches are in flight,
runs it on stage 0, and hands it to stage 1; each later stage takes micro-batches in order, and the last
one applies the results (tokens, completions, freed KV) and wakes the scheduler. A stage that waits for
the previous stage while the replica has work in flight is in a pipeline bubble.

This is the reference model: one event per micro-batch per stage, no shortcuts. Speed lives in the compiled
core (sim/core/), which tests hold equal to this loop bit for bit; a new mechanism lands here first.
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

_add_reduce = np.add.reduce  # a bound ufunc method: less call overhead than ndarray.sum on small arrays


class BatchTimer(Protocol):
    num_stages: int

    def __call__(self, prefills: Any, decode_kv: Any, stage: int = 0, drafts: int = 0) -> float: ...


class Work:
    """What the batches computed, for the MFU/MBU estimate (counted once per micro-batch)."""

    __slots__ = ("tokens", "prefill_pairs", "prefill_kv", "decode_kv", "micro_batches")

    def __init__(self) -> None:
        self.tokens = 0  # prefill chunk tokens + decode tokens
        self.prefill_pairs = 0  # query-key pairs of causal prefill attention
        self.prefill_kv = 0  # KV tokens prefill attention reads
        # KV tokens decode attention reads; a verification's n queries count n·c + n(n+1)/2 (the keys each one
        # sees: its attention FLOPs), although the kernel reads the c + n once (docs/speculative.md, Costs)
        self.decode_kv = 0
        self.micro_batches = 0


class MicroBatch:
    __slots__ = (
        "prefills",
        "decodes",
        "durations",
        "num_prefill",
        "num_requests",
        "kv_used",
    )

    def __init__(self, prefills, decodes, durations, num_prefill, kv_used):
        self.prefills = prefills
        self.decodes = decodes
        self.durations = durations
        self.num_prefill = num_prefill
        self.num_requests = len(prefills) + len(decodes)
        self.kv_used = kv_used


class Replica:
    runs_own_loop = True

    def __init__(
        self,
        env: simpy.Environment,
        state: ReplicaState,
        policy: Callable[[ReplicaState, float], Batch],
        timer: BatchTimer,
        log: IterationLog,
        route_due: Callable[[float], None],
    ):
        self.env = env
        self.state = state
        self.policy = policy
        self.timer = timer
        self.log = log
        self.route_due = route_due  # route every arrival due by now before scheduling
        self.pp = state.pp
        self.index = state.index
        self.in_flight = 0
        self.wake: simpy.Event | None = None
        self.queues: list[deque[MicroBatch]] = [deque() for _ in range(self.pp)]
        self.stage_wake: list[simpy.Event | None] = [None] * self.pp
        self.bubble = [0.0] * self.pp
        self.idle_mark = [0.0] * self.pp  # in-flight time when each stage last went idle
        self.busy_since = 0.0
        self.inflight_acc = 0.0
        self.work = Work()
        # (now, ids of the requests that got a token): the API servers' output work (cluster.py sets it)
        self.on_output: Callable[[float, Any], None] | None = None
        if self.runs_own_loop:  # an attention-DP rank is stepped by its group instead (sim/lockstep.py)
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
            if self.in_flight < self.pp:
                batch = self.policy(st, now)
            if not batch:
                if self.in_flight == 0 and not st.num_running and st.waiting:
                    st.drop_unfittable()  # nothing resident and still the head cannot start
                    continue
                self.wake = env.event()
                yield self.wake
                continue
            computed = r.computed
            dec = batch.decodes
            verifies = drafts = draft_keys = 0
            timer = self.timer
            # verifications run as decodes of query length 1 + s (docs/speculative.md, Costs)
            if st.cfg.spec_k:
                prefills, kv, verifies, drafts, draft_keys = self._split_verifies(batch.prefills, dec)
                durations = [timer(prefills, kv, s, drafts) for s in range(self.pp)]
            else:
                prefills = [(chunk, int(computed[rid])) for rid, chunk in batch.prefills]
                kv = computed[dec] + 1
                durations = [timer(prefills, kv, s) for s in range(self.pp)]
            # awaiting a CPU-tier load (kv_offload.py)
            if st.prefix is not None and st.prefix.tier is not None:
                durations[0] += st.prefix.tier.take_stall(now)
            if st.cfg.spec_k:  # PP 1 (check_scenario): the draft runs after the target on the same GPU
                durations[0] = self._with_draft(durations[0], batch.prefills, dec)
            # Invariants (the core checks the same and stops with one line naming the one that broke).
            ids = [rid for rid, _ in batch.prefills] + dec.tolist()
            assert len(set(ids)) == len(ids) and not r.inflight[ids].any(), "a request was scheduled twice"
            assert min(durations) >= 0, "simulated time went backwards (a negative iteration time)"
            num_prefill = self._count_work(prefills, kv, drafts, draft_keys)
            self.bubble[0] += self._inflight_time(now) - self.idle_mark[0]
            if self.pp > 1:
                r.inflight[dec] = True
                for rid, _ in batch.prefills:
                    r.inflight[rid] = True
            mb = MicroBatch(batch.prefills, dec, durations, num_prefill, st.kv.used)
            self._start_flight(now)
            d = durations[0]
            self.log.add(
                self.index, 0, now, now + d, num_prefill, len(dec) + verifies, mb.num_requests, mb.kv_used
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
            while not q:
                self.stage_wake[s] = env.event()
                yield self.stage_wake[s]
            mb = q.popleft()
            now = env.now
            d = mb.durations[s]
            self.bubble[s] += self._inflight_time(now) - self.idle_mark[s]
            self.log.add(
                self.index, s, now, now + d, mb.num_prefill, len(mb.decodes), mb.num_requests, mb.kv_used
            )
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
        sampled = [rid for rid, chunk in prefills if st.complete_chunk(rid, chunk, now)]
        if len(dec):
            st.complete_decodes(dec, now)
        if self.on_output is not None and (sampled or len(dec)):
            self.on_output(now, sampled + dec.tolist())

    def _split_verifies(
        self, chunks: list[tuple[int, int]], dec: np.ndarray
    ) -> tuple[list, np.ndarray, int, int, int]:
        """(prefill chunks, decode reads, verifications, drafts, the drafts' keys): a verification of n tokens
        (a decoding request's chunk) over c computed goes to the timer as one decode read of its c + n keys
        and n − 1 drafts beside it, as vLLM runs it through its decode attention (a uniform batch of query
        length 1 + K that reads each request's KV once for all its queries), not as a prefill chunk. The
        drafts' queries see (n − 1)·c + n(n − 1)/2 keys of that read (the work's count:
        Replica._count_work)."""
        r = self.state.reqs
        prefills, reads, verifies, drafts, draft_keys = [], [], 0, 0, 0
        for rid, n in chunks:
            c = int(r.computed[rid])
            if c >= r.target[rid]:
                reads.append(c + n)
                verifies += 1
                drafts += n - 1
                draft_keys += (n - 1) * c + n * (n - 1) // 2
            else:
                prefills.append((n, c))
        kv = np.concatenate([r.computed[dec] + 1, np.array(reads, dtype=np.int64)])
        return prefills, kv, verifies, drafts, draft_keys

    def _with_draft(self, d: float, chunks: list[tuple[int, int]], dec: np.ndarray) -> float:
        """The step `d` plus its drafter (speculative decoding; docs/speculative.md): for the requests that
        sample this step, a first draft pass over the whole batch and spec_passes − 1 more at one token each,
        every pass costing spec_fraction of the target's over the same tokens; plus the drafter's CPU per
        request (n-gram)."""
        cfg, r = self.state.cfg, self.state.reqs
        ctx = [int(r.computed[rid]) + c for rid, c in chunks if r.computed[rid] + c >= r.target[rid]]
        b = len(ctx) + len(dec)
        if not b:
            return d  # vLLM proposes nothing when no scheduled request samples
        if cfg.spec_fraction:
            kv = np.concatenate([r.computed[dec] + 1, np.array(ctx, dtype=np.int64)])
            d = d + cfg.spec_fraction * (d + (cfg.spec_passes - 1) * self.timer([], kv, 0))
        return d + cfg.spec_cpu_s * b

    def _count_work(
        self, prefills: list[tuple[int, int]], kv: np.ndarray, drafts: int = 0, draft_keys: int = 0
    ) -> int:
        """Add one micro-batch's work; returns its prefill tokens. A verification's drafts (_split_verifies)
        are tokens, and their queries' keys count in decode_kv beside their request's read."""
        w = self.work
        num_prefill = 0
        for c, p in prefills:
            num_prefill += c
            w.prefill_pairs += c * p + c * (c + 1) // 2
            w.prefill_kv += p + c
        w.tokens += num_prefill + len(kv) + drafts
        if len(kv):
            w.decode_kv += int(_add_reduce(kv)) + draft_keys
        w.micro_batches += 1
        return num_prefill
