"""Attention data parallelism's ranks stepping together, as vLLM 0.33.0's DP engine cores do.

With `--data-parallel-size D --enable-expert-parallel` each DP rank is an engine core of its own (requests,
scheduler, KV cache), but the MoE layers all-gather every rank's tokens before the experts and reduce-scatter
them after, so every rank must run a forward pass in every step. vLLM's `DPEngineCoreProc.run_busy_loop`
(vllm/v1/engine/core.py) does exactly that: a rank whose scheduler has nothing to run calls
`execute_dummy_batch` (a one-token `_dummy_run`, vllm/v1/worker/gpu_worker.py) while any rank has work, and
the ranks agree every `dp_sync_interval` steps whether any still has unfinished requests.

So one step of a deployment here is

    max over ranks (that rank's own time: attention, dense and shared-expert layers, TP all-reduces, CPU)
    + the routed experts and the ranks' exchange for the tokens of all ranks together

(BatchTimer.own_time / experts_time; an idle rank counts one dummy token). Every rank waits for the slowest;
with equal loads this is the per-rank approximation `--dp-attention` used before (experts read at D × a rank's
tokens). With vLLM's CUDA graphs (`--engine vllm`, vllm_worker.py) every rank runs padded to the largest
rank's captured size when all ranks are under the largest one (`padded_tokens`). Left out: the ≤
dp_sync_interval
(16) dummy steps after the last request of a wave finishes, which delay nothing that is simulated here.

Requests reach a rank as vLLM's front end sends them (`DPLBAsyncMPClient.get_core_engine_for_request`,
vllm/v1/engine/core_client.py): the least loaded rank by in-flight requests, plus a penalty of 6 × waiting ×
(KV usage − 0.5) when the rank's KV cache is more than half full; ties to the lowest rank. vLLM reads waiting
and KV usage from the coordinator's 100 ms snapshots; here they are read at the moment of routing.

SGLang 0.5.23's DP attention (`--attn-dp-size D`, or the deprecated `--dp-size D --enable-dp-attention`; the
`sglang` policy) steps the same way: before every forward each rank all-gathers its token count and, while any
rank has tokens, a rank with none runs an idle batch (`prepare_mlp_sync_batch_raw`: `need_idle_batch =
max(global_num_tokens) > 0`, managers/scheduler_components/dp_attn.py). SGLang's idle batch has no tokens;
here it is the same one-token dummy as vLLM's. Its requests reach ranks in turn (`DataParallelController.
round_robin_scheduler`, managers/data_parallel_controller.py: `--load-balance-method auto` is round_robin
outside prefill-decode disaggregation, arg_groups/serving_hook.py), one counter per deployment.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import numpy as np
import simpy

from simserve.sim.replica import MicroBatch, Replica

DUMMY_KV = np.ones(1, dtype=np.int64)  # an idle rank's dummy batch: one decode token over one KV slot


def padded_tokens(counts: list[int], sizes: tuple[int, ...]) -> int:
    """The token count every rank runs at when vLLM pads the ranks to the largest (0: no padding, each its
    own).

    Under CUDA graphs the ranks agree on one size (`coordinate_batch_across_dp`, `_post_process_dp_padding` in
    vllm/v1/worker/dp_utils.py): the largest rank's, itself padded to a captured size. A rank past the largest
    captured size runs eagerly, which makes the synced mode NONE for all: no padding then."""
    if not sizes or max(counts) > sizes[-1]:
        return 0
    from simserve.vllm_worker import padded

    return padded(max(counts), sizes)


class Rank(Replica):
    """One DP rank: a replica whose scheduler is driven by its DpGroup, not by a loop of its own."""

    runs_own_loop = False
    group: DpGroup

    def notify(self) -> None:
        self.group.notify()


def rank_load(rank: Replica) -> float:
    """vLLM's DP load-balancing score of a rank (lower is picked): in-flight requests, plus 6 × waiting ×
    (KV usage − 0.5) once the KV cache is over half full (a queue on a KV-bound rank drains slowly)."""
    st = rank.state
    score = float(st.outstanding)
    if st.waiting:
        kv = st.kv
        score += len(st.waiting) * 6.0 * max(0.0, kv.used / kv.num_blocks - 0.5) if kv.num_blocks else 0.0
    return score


def pick_rank(ranks: list[Replica]) -> Replica:
    best, best_score = ranks[0], rank_load(ranks[0])
    for rank in ranks[1:]:
        score = rank_load(rank)
        if score < best_score:  # strict: ties go to the lowest rank, where vLLM's client starts
            best, best_score = rank, score
    return best


class DpGroup:
    """The D ranks of one deployment; one SimPy process steps them all."""

    def __init__(self, env: simpy.Environment, ranks: list[Rank], timer, route_due: Callable[[float], None]):
        self.env, self.ranks, self.timer, self.route_due = env, ranks, timer, route_due
        for rank in ranks:
            rank.group = self
        self.wake: simpy.Event | None = None
        # vLLM's CUDA graphs (vllm_worker.py)
        self.sizes: tuple[int, ...] = getattr(timer, "cudagraph_sizes", ())
        self.steps = 0
        self.padded_steps = 0  # steps every rank ran padded to the largest rank's captured size
        self.dummy_steps = [0] * len(ranks)  # steps a rank ran a dummy batch for the others
        self.lockstep_wait = [0.0] * len(ranks)  # seconds a rank with work waited for a slower rank
        self.round_robin = ranks[0].state.cfg.policy == "sglang"  # SGLang's DP controller: ranks in turn
        self.next_rank = 0
        env.process(self.step_loop())

    def pick(self) -> Rank:
        """The rank a new request goes to: in turn for SGLang, vLLM's least-loaded rank otherwise."""
        if not self.round_robin:
            return pick_rank(self.ranks)
        rank = self.ranks[self.next_rank]
        self.next_rank = (self.next_rank + 1) % len(self.ranks)
        return rank

    def notify(self) -> None:
        if self.wake is not None:
            ev, self.wake = self.wake, None
            ev.succeed()

    def _batch(self, rank: Rank, now: float):
        """The rank's scheduler decision, dropping requests that can never start as Replica.schedule does."""
        st = rank.state
        while True:
            batch = rank.policy(st, now)
            if batch or st.num_running or not st.waiting:
                return batch
            st.drop_unfittable()  # nothing resident and still the head cannot start

    def step_loop(self) -> Generator[simpy.Event, Any, None]:
        env, timer, ranks = self.env, self.timer, self.ranks
        while True:
            now = env.now
            self.route_due(now)
            batches = [self._batch(rank, now) for rank in ranks]
            if not any(batches):
                self.wake = env.event()
                yield self.wake
                continue
            # each rank's batch as the timer reads it: (prefills, decode KV lengths, tokens); None for a dummy
            inputs: list[tuple | None] = []
            for rank, batch in zip(ranks, batches, strict=True):
                if not batch:
                    inputs.append(None)
                    continue
                computed = rank.state.reqs.computed
                prefills = [(chunk, int(computed[rid])) for rid, chunk in batch.prefills]
                kv = computed[batch.decodes] + 1
                inputs.append((prefills, kv, len(kv) + sum(c for c, _ in prefills)))
            counts = [1 if x is None else x[2] for x in inputs]
            pad = padded_tokens(counts, self.sizes)
            owns: list[float] = []
            flights: list[tuple[Rank, MicroBatch] | None] = []
            for i, (rank, batch, x) in enumerate(zip(ranks, batches, inputs, strict=True)):
                if x is None:
                    own, _ = timer.own_time((), DUMMY_KV, pad)
                    self.dummy_steps[i] += 1
                    flights.append(None)
                else:
                    prefills, kv, _ = x
                    own, _ = timer.own_time(prefills, kv, pad)
                    ids = [rid for rid, _ in batch.prefills] + batch.decodes.tolist()
                    assert len(set(ids)) == len(ids), "a request was scheduled twice"
                    num_prefill = rank._count_work(prefills, kv)
                    mb = MicroBatch(batch.prefills, batch.decodes, [own], num_prefill, rank.state.kv.used)
                    flights.append((rank, mb))
                owns.append(own)
            tokens = pad * len(ranks) if pad else sum(counts)
            self.padded_steps += pad > 0
            slowest = max(owns)
            step = slowest + timer.experts_time(tokens)
            assert step >= 0, "simulated time went backwards (a negative iteration time)"
            self.steps += 1
            for i, flight in enumerate(flights):
                if flight is None:
                    continue
                rank, mb = flight
                self.lockstep_wait[i] += slowest - owns[i]
                rank._start_flight(now)
                rank.log.add(
                    rank.index,
                    0,
                    now,
                    now + step,
                    mb.num_prefill,
                    len(mb.decodes),
                    mb.num_requests,
                    mb.kv_used,
                )
            yield env.timeout(step)
            for flight in flights:
                if flight is not None:
                    flight[0]._complete(flight[1])


def build(
    env, reqs, cfg, timer, num_blocks, tbt, on_done, log, route_due
) -> tuple[list[Rank], list[DpGroup]]:
    """The ranks of cfg.num_replicas // cfg.dp_attention deployments, each group stepping in lockstep."""
    from simserve.sim.policies import POLICIES
    from simserve.sim.state import ReplicaState

    policy, d = POLICIES[cfg.policy], cfg.dp_attention
    ranks = [
        Rank(
            env, ReplicaState(i, reqs, cfg, num_blocks, 1, tbt, on_done, timer), policy, timer, log, route_due
        )
        for i in range(cfg.num_replicas)
    ]
    groups = [DpGroup(env, ranks[g : g + d], timer, route_due) for g in range(0, len(ranks), d)]
    return ranks, groups
