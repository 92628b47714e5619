"""The cluster: arrivals → router → replicas, plus the overload watchdog. `simulate` runs one experiment.

Processes: `arrivals` routes each request when it arrives (with a closed-loop client, `cfg.max_concurrency`,
only once a finished request has freed its slot: see `_on_done`) (replicas also route whatever is due before
they schedule, so a batch formed at time t sees every arrival at or before t, whatever SimPy's event order);
`watchdog` evaluates the overload, TBT-stop and trial-cap rules (watchdog.py) every `check_period_s`; each
replica runs its scheduler loop and pipeline stages (replica.py). With answer-driven conversations
(`conversation.py`) a follow-up round is released when the round before it completes and arrives a think time
later; routing then goes by a heap of released arrival times instead of id order. With the API-server model
(`cfg.api_servers`, api_server.py) requests reach the engine when their input work is done, by the same heap;
each micro-batch's tokens go through the API server on their way to the client, and the arrivals process
sleeps until the next send or engine entry (woken early by an interrupt when an answer frees a slot before
it). `simulate` runs this SimPy model, the reference, or the compiled core (sim/core/, chosen by core_run.py),
which gives the same results faster.
"""

from __future__ import annotations

import contextlib
import heapq
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from simserve.errors import SimserveError
from simserve.sim import core_run, routers
from simserve.sim.api_server import ApiServers
from simserve.sim.autoscale import AutoscaleConfig, Autoscaler, last_completion, replica_load
from simserve.sim.config import SimConfig
from simserve.sim.conversation import think_times
from simserve.sim.histogram import LogHistogram
from simserve.sim.iterations import IterationLog
from simserve.sim.policies import POLICIES
from simserve.sim.request import IGNORED, Requests
from simserve.sim.state import ReplicaState
from simserve.sim.watchdog import Watchdog

if TYPE_CHECKING:  # NOTE: SimPy only when the reference runs: a run on the compiled core never imports it
    import simpy

    from simserve.sim.replica import BatchTimer, Replica


@dataclass
class RawRun:
    """Everything a finished simulation leaves behind; metrics.build_result turns it into tables."""

    cfg: SimConfig
    reqs: Requests
    request_ids: np.ndarray  # original trace positions, in the order of `reqs`
    log: IterationLog
    tbt: LogHistogram
    replicas: list[Replica]
    num_blocks: int
    overloaded: bool
    end_time: float
    stopped_early: bool = False  # cfg.stop_tbt: the TBT quantile had surely missed its limit
    capped: bool = False  # cfg.time_limit_s ended the run with requests unfinished
    api: ApiServers | None = None  # the API-server model (cfg.api_servers): what the clients saw
    scaler: Autoscaler | None = None  # the autoscaler (--autoscale): its decisions and the GPUs it held


class Cluster:
    def __init__(
        self,
        env: simpy.Environment,
        reqs: Requests,
        cfg: SimConfig,
        timer: BatchTimer,
        num_blocks: int,
        follow: tuple[np.ndarray, np.ndarray] | None = None,
        scaler: Autoscaler | None = None,
    ):
        self.env, self.reqs, self.cfg = env, reqs, cfg
        self.n = reqs.n
        self.next = 0  # next request to arrive
        # Requests the client may have sent: all of them (open loop), or N plus one per finished request
        # (`vllm bench serve --max-concurrency N`: an asyncio.Semaphore(N), whose waiters go in FIFO order).
        self.released = reqs.n if cfg.max_concurrency is None else min(cfg.max_concurrency, reqs.n)
        self.slot_freed: simpy.Event | None = None  # the arrivals process waits on it for a free slot
        # Answer-driven conversations: (next round's id or -1, its think time) per request; the rounds
        # released so far wait in a heap of (arrival, id) until they arrive, and `routed` lists ids in arrival
        # order.
        self.follow = follow
        self.due: list[tuple[float, int]] = []
        self.routed: list[int] | None = None
        # The API servers (api_server.py): they send the requests and push engine entries on `due`.
        self.api = ApiServers(reqs, cfg, follow) if cfg.api_servers else None
        if self.api is not None:
            self.routed = []
        elif follow is not None:
            self.routed = []
            first = np.ones(self.n, dtype=bool)
            first[follow[0][follow[0] >= 0]] = False
            self.due = [(float(reqs.arrived[i]), int(i)) for i in np.flatnonzero(first)]
            heapq.heapify(self.due)
        self.num_done = 0  # finished or ignored
        self.num_ignored = 0
        self.finished = env.event()
        self.progress: Callable[[int, int], None] | None = None
        self.overloaded = False
        self.tbt = LogHistogram()
        self.stopped_early = False
        self.capped = False
        self.rules = Watchdog(reqs, cfg, self.tbt, self.routed)
        self.log = IterationLog()
        self.prompt_limit = cfg.prompt_limit()
        from simserve.sim.replica import Replica

        policy = POLICIES[cfg.policy]
        pp = timer.num_stages
        self.groups: list = []  # attention DP: each deployment's ranks, stepping in lockstep (lockstep.py)
        if cfg.dp_attention > 1:
            from simserve.sim import lockstep

            self.replicas, self.groups = lockstep.build(
                env, reqs, cfg, timer, num_blocks, self.tbt, self._on_done, self.log, self.route_due
            )
        else:
            self.replicas = [
                Replica(
                    env,
                    ReplicaState(i, reqs, cfg, num_blocks, pp, self.tbt, self._on_done, timer),
                    policy,
                    timer,
                    self.log,
                    self.route_due,
                )
                for i in range(cfg.num_replicas)
            ]
        if self.api is not None:  # every micro-batch's tokens go to the clients through the API server
            for rep in self.replicas:
                rep.on_output = self._on_output
        self.router = routers.make(cfg, reqs, num_blocks)
        self.scaler = scaler  # the autoscaler (autoscale.py): it tells the router which replicas serve
        self.arrivals_process = env.process(self.arrivals())
        env.process(self.watchdog())
        if scaler is not None:
            self.router.set_serving(scaler.serving())
            env.process(self.autoscaler())

    # -- arrivals and routing ----------------------------------------------------------------------
    def arrivals(self):
        env, arrived = self.env, self.reqs.arrived
        if self.api is not None:
            yield from self._api_arrivals()
            return
        if self.follow is not None:
            yield from self._conversation_arrivals()
            return
        while self.next < self.n:
            if self.next >= self.released:  # closed loop: every slot is taken until a request finishes
                self.slot_freed = env.event()
                yield self.slot_freed
                continue
            t = arrived[self.next]
            while t > env.now:
                yield env.timeout(t - env.now)
            self.route_due(env.now)

    def _conversation_arrivals(self):
        env = self.env
        while self.next < self.n:
            if not self.due:  # every released round has arrived: wait for an answer to release the next
                self.slot_freed = env.event()
                yield self.slot_freed
                continue
            t = self.due[0][0]
            if t > env.now:
                yield env.timeout(t - env.now)
            self.route_due(env.now)

    def _api_arrivals(self):
        """With the API servers: route what is due, then sleep until the next send or engine entry."""
        import simpy

        env, api = self.env, self.api
        while True:
            self.route_due(env.now)
            if self.next >= self.n:
                return
            w = api.sleep(self.due)
            # an answer freed a slot (or released a round) before w
            with contextlib.suppress(simpy.Interrupt):
                yield env.event() if w == float("inf") else env.timeout(w - env.now)
            api.awake()

    def _wake_arrivals(self) -> None:
        self.arrivals_process.interrupt()

    def _on_output(self, now: float, ids) -> None:
        if self.api.output(now, ids, self.due):
            self._wake_arrivals()

    def route_due(self, now: float) -> None:
        r = self.reqs
        if self.api is not None:
            self.api.advance(now, self.due)
        if self.routed is not None:
            while self.due and self.due[0][0] <= now:
                rid = heapq.heappop(self.due)[1]
                self.routed.append(rid)
                self.next += 1
                self._route(rid)
            return
        while self.next < self.released and r.arrived[self.next] <= now:
            rid = self.next
            self.next += 1
            self._route(rid)

    def _route(self, rid: int) -> None:
        r = self.reqs
        if r.prompt[rid] > self.prompt_limit:
            r.status[rid] = IGNORED  # longer than the deployment accepts (Sarathi-Serve ignores it)
            self._on_done(-1, rid)
            return
        rep = self._pick(rid)
        r.replica[rid] = rep.index
        rep.state.enqueue(rid)
        rep.notify()

    def _pick(self, rid: int) -> Replica:
        """The router (routers.py, which the compiled core calls too) picks a replica; with attention DP it
        picks a deployment, and the engine's DP load balancer its rank (lockstep.DpGroup.pick)."""
        if self.groups:
            if self.router.needs_view:
                for g, group in enumerate(self.groups):
                    self.router.observe(g, *_load([rank.state for rank in group.ranks]))
            return self.groups[self.router.pick(rid)].pick()
        return self.replicas[route(self.router, self.replicas, rid)]

    def _on_done(self, replica: int, rid: int) -> None:
        self.num_done += 1
        if self.reqs.status[rid] == IGNORED:
            self.num_ignored += 1
            if self.api is not None and self.api.failed(rid, self.env.now):
                self._wake_arrivals()
        # (With the API servers the clients' side, slots and next rounds, is theirs: api_server.py.)
        # closed loop: the finished request's slot goes to the next one
        if self.api is None and self.released < self.n:
            nxt = self.released
            self.released += 1
            # NOTE: vLLM's client sends it at once if it is due (latency is measured from then, after the
            # semaphore), else at its own time; arrival times stay non-decreasing, so ids stay in FCFS order.
            # The front end delays the client's receipt of the last token and the next request's way in.
            self.reqs.arrived[nxt] = max(self.reqs.arrived[nxt], self.env.now + self.cfg.frontend_s)
            if self.slot_freed is not None:
                ev, self.slot_freed = self.slot_freed, None
                ev.succeed()
        if self.api is None and self.follow is not None and self.follow[0][rid] >= 0:
            # the client has the answer once the front end delivered its last token; the user thinks, then
            # sends
            nxt = int(self.follow[0][rid])
            self.reqs.arrived[nxt] = self.env.now + self.cfg.frontend_s + self.follow[1][nxt]
            heapq.heappush(self.due, (float(self.reqs.arrived[nxt]), nxt))
            if self.slot_freed is not None:
                ev, self.slot_freed = self.slot_freed, None
                ev.succeed()
        if self.num_done == self.n and not self.finished.triggered:
            self.finished.succeed()

    # -- overload ------------------------------------------------------------------------------------
    def watchdog(self):
        """The overload checks, every `check_period_s` (watchdog.py holds the rules)."""
        env, period, rules = self.env, self.cfg.check_period_s, self.rules
        while True:
            yield env.timeout(period)
            if self.progress is not None:
                self.progress(self.num_done, self.n)
            if not self.overloaded and rules.overloaded(env.now, self.next, self.num_ignored):
                self.overloaded = True
                if self.cfg.stop_when_overloaded:
                    self._end_run()
                    return
            if rules.tbt_missed():
                self.stopped_early = True
                self._end_run()
                return
            if env.now >= rules.cap:  # the trial cap
                self.capped = self._end_run()
                return
            rules.check_stall(
                self.next >= self.n,
                any(rep.in_flight for rep in self.replicas),
                self.num_done,
                sum(rep.work.micro_batches for rep in self.replicas),
            )

    # -- the autoscaler (autoscale.py) -------------------------------------------------------------------
    def autoscaler(self):
        """The autoscaler's process: wake when it asks (its interval, or a cold start's end), let it scale."""
        env, scaler = self.env, self.scaler
        while True:
            version = scaler.version
            t = scaler.wake(
                env.now,
                [replica_load(rep.state) for rep in self.replicas],
                self.next,
                lambda i: last_completion(self.reqs, i),
            )
            if scaler.version != version:
                self.router.set_serving(scaler.serving())
            yield env.timeout(t - env.now)

    def _end_run(self) -> bool:
        """End the run at this check; False when the run had already finished."""
        if self.finished.triggered:
            return False
        self.finished.succeed()
        return True


def _load(states) -> tuple[int, int, int, int]:
    """What a router sees of one replica, or of a deployment's ranks summed: requests outstanding and waiting,
    KV blocks in use and in all (the compiled core reads the same from its Rep, core/routing.py `_pick`)."""
    return (
        sum(st.outstanding for st in states),
        sum(len(st.waiting) for st in states),
        sum(st.kv.used for st in states),
        sum(st.kv.num_blocks for st in states),
    )


def route(router: routers.Router, replicas: list[Replica], rid: int) -> int:
    """The index of the replica `router` sends request `rid` to, after showing it each replica's load."""
    if router.needs_view:
        for i, rep in enumerate(replicas):
            router.observe(i, *_load((rep.state,)))
    return router.pick(rid)


def request_arrays(prompt_tokens, output_tokens, arrived_at) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The workload as typed arrays, checked: at least one request, equal lengths, ≥ 1 prompt and output token
    each, finite non-negative arrival times (the aggregated and the disaggregated model take the same
    input)."""
    prompt = np.asarray(prompt_tokens, dtype=np.int64)
    output = np.asarray(output_tokens, dtype=np.int64)
    arrived = np.asarray(arrived_at, dtype=np.float64)
    if len(prompt) == 0:
        raise SimserveError("the trace has no requests; pick a trace with at least one request")
    if not len(prompt) == len(output) == len(arrived):
        raise SimserveError("prompt, output and arrival arrays differ in length")
    if (prompt < 1).any() or (output < 1).any():
        raise SimserveError("every request needs at least one prompt and one output token")
    if not np.isfinite(arrived).all() or (arrived < 0).any():
        raise SimserveError("arrival times must be finite and non-negative")
    return prompt, output, arrived


def simulate(
    prompt_tokens: np.ndarray,
    output_tokens: np.ndarray,
    arrived_at: np.ndarray,
    timer: BatchTimer,
    num_blocks: int,
    cfg: SimConfig,
    progress: Callable[[int, int], None] | None = None,
    prefix: tuple | None = None,
    conversation: np.ndarray | None = None,
    ignore_eos: np.ndarray | None = None,
    autoscale: AutoscaleConfig | None = None,
) -> RawRun:
    """Replay requests through a cluster of identical replicas; `num_blocks` is the KV pool per replica.

    `prefix`: (prefix group, tokens on it) per request, optionally followed by (offsets, ids), the CSR rows of
    the requests' chained prefix-block ids (Requests.set_prefix; prefix_cache.shared_runs says what they
    mean).

    `ignore_eos` (sglang): per request, whether it is sent with ignore_eos (default: `cfg.ignore_eos` for
    all).

    `conversation` (answer-driven conversations, conversation.py): per request, the position of the round it
    follows (-1: a first round); a follow-up then arrives its recorded gap after that round completes.

    `progress(done, total)` is called once per overload check (each simulated second), for a progress bar.

    `autoscale` (autoscale.py): the cluster's `cfg.num_replicas` replicas are the autoscaler's maximum; it
    starts with `autoscale.initial` of them active and adds and removes replicas as its policy decides.
    """
    cfg.validate()
    prompt, output, arrived = request_arrays(prompt_tokens, output_tokens, arrived_at)
    scaler = None if autoscale is None else new_autoscaler(autoscale, cfg, float(arrived.max()))
    follow = None
    if conversation is not None:
        if cfg.max_concurrency is not None:
            raise SimserveError(
                "--arrival conversation paces each conversation by its answers already; drop "
                "--max-concurrency"
            )
        parent = np.asarray(conversation, dtype=np.int64)
        gaps = think_times(arrived, parent)
    order = np.argsort(arrived, kind="stable")  # ids in arrival order: FCFS is id order
    if conversation is not None:  # in ids: the next round of each request, and the think time before each
        ids = np.empty(len(order), dtype=np.int64)
        ids[order] = np.arange(len(order))
        child = np.full(len(order), -1, dtype=np.int64)
        has = parent >= 0
        child[ids[parent[has]]] = ids[np.flatnonzero(has)]
        follow = (child, gaps[order])
    prompt, output, arrived = prompt[order], output[order], arrived[order]
    # A request stops once its length passes max_model_len (Sarathi-Serve: FINISHED_LENGTH_CAPPED).
    output = np.minimum(output, np.maximum(cfg.max_model_len + 1 - prompt, 1))
    reqs = Requests(prompt, output, arrived)
    reqs.set_prefix(prefix, order)  # which blocks prefix caching can share (Requests.set_prefix)
    if ignore_eos is not None:
        reqs.ignore_eos = np.asarray(ignore_eos, dtype=bool)[order]
    core = core_run.choose(cfg, timer)
    if core is not None:  # the compiled core: the same results as the SimPy model below (sim/core/)
        log, tbt, replicas, overloaded, end, stopped, capped, api = core_run.run(
            core, reqs, cfg, timer, num_blocks, progress, follow, scaler
        )
        return RawRun(
            cfg, reqs, order, log, tbt, replicas, num_blocks, overloaded, end, stopped, capped, api, scaler
        )
    import simpy

    env = simpy.Environment()
    cluster = Cluster(env, reqs, cfg, timer, num_blocks, follow, scaler)
    cluster.progress = progress
    env.run(until=cluster.finished)
    return RawRun(
        cfg,
        reqs,
        order,
        cluster.log,
        cluster.tbt,
        cluster.replicas,
        num_blocks,
        cluster.overloaded,
        env.now,
        cluster.stopped_early,
        cluster.capped,
        cluster.api,
        scaler,
    )


def new_autoscaler(autoscale: AutoscaleConfig, cfg: SimConfig, span_s: float) -> Autoscaler:
    """The run's autoscaler, once its configuration fits the cluster and the trace's `span_s` seconds of
    arrivals (SimserveError otherwise)."""
    autoscale.validate()
    if autoscale.cold_start_s >= span_s:
        raise SimserveError(
            f"the cold start, {autoscale.cold_start_s:g} s, is as long as the run's arrivals "
            f"({span_s:.4g} s): no replica the autoscaler adds would serve; lower --cold-start-s "
            f"or run a longer trace (more --requests, or a lower --qps)"
        )
    if cfg.dp_attention > 1:
        raise SimserveError(
            "--autoscale scales whole replicas; attention data parallelism (--dp-attention) is not "
            "modelled with it: drop one of them"
        )
    if cfg.num_replicas != autoscale.max_replicas:
        raise ValueError(
            f"an autoscaled cluster has its maximum of replicas, {autoscale.max_replicas}, not "
            f"{cfg.num_replicas}"
        )
    return Autoscaler(autoscale, cfg.max_model_len)


def run_cluster(timer, prompt, output, arrived, cfg, num_blocks: int = 4000):
    """Run the SimPy reference's Cluster on these requests to the end; returns (cluster, requests), whose
    per-rank and per-request state a test can inspect (simulate returns only the summary)."""
    import simpy

    env = simpy.Environment()
    reqs = Requests(np.asarray(prompt), np.asarray(output), np.asarray(arrived, dtype=float))
    cluster = Cluster(env, reqs, cfg.validate(), timer, num_blocks)
    env.run(until=cluster.finished)
    return cluster, reqs
