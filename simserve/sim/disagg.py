"""Disaggregated serving: a prefill pool and a decode pool, and the KV transfer between them (SimPy
reference).

The path of a request, as vLLM 0.33.0 serves it with a KV connector (NixlConnector) behind its proxy
(vLLM's tests/v1/kv_connector/nixl_integration/toy_proxy_server.py, benchmarks/disagg_benchmarks/
disagg_prefill_proxy_server.py): the proxy sends the request to a prefill instance with max_tokens=1, then the
original request to a decode instance, which streams every output token to the client.

1. Prefill: a prefill replica (picked by the prefill router) runs the prompt under its own policy and token
   budget; with one output token wanted, its batches are prefill-only (chunked under the budget). Its sampled
   token is the proxy's and never reaches the user. The prompt's KV blocks stay allocated on the prefill
   replica until the decode side has read them (NixlConnector frees them on the decoder's notification).
2. Decode admission: the decode router picks a decode replica; the request waits there until its prompt's KV
   blocks fit (the decode side allocates before it pulls: NIXL reads into allocated blocks). Preempted
   requests waiting on that replica go first.
3. Transfer: the prompt's KV (model KV bytes per token × prompt length) crosses the link between the pools
   (kvlink.py), FIFO behind the transfers already on it.
4. Decode: the decode replica recomputes the last prompt token (vLLM's scheduler always computes at least one
   token of a request; the remote KV covers the rest) and samples the first output token, then decodes as an
   aggregated replica would, under its own policy, KV pool and preemption.

So TTFT = arrival → the decode side's first token, and it includes the prefill, the decode admission wait, the
transfer and one decode-side step; TBT is the decode side's gaps. Everything per replica is replica.py and
state.py unchanged: a prefill replica is a replica whose requests want one token, and a decode replica one
whose requests arrive with their prompt computed but the last token. This is the reference model; the compiled
core runs the same (core.DisaggCore, driven by disagg_core.py), and tests/test_sim_core.py holds the two equal
bit for bit.
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from simserve import numerics
from simserve.errors import SimserveError
from simserve.sim import disagg_core, routers
from simserve.sim.cluster import RawRun, request_arrays, route
from simserve.sim.config import ROUTER_NAMES, SimConfig
from simserve.sim.histogram import LogHistogram
from simserve.sim.iterations import IterationLog
from simserve.sim.kvlink import KVLink
from simserve.sim.policies import POLICIES
from simserve.sim.request import DONE, IGNORED, RUNNING, Requests
from simserve.sim.state import ReplicaState
from simserve.sim.watchdog import Watchdog

if TYPE_CHECKING:  # NOTE: SimPy only when the reference runs: a run on the compiled core never imports it
    import simpy

    from simserve.sim.replica import BatchTimer, Replica

# prefill: routers.py's (as an aggregated run's); decode: _pick_decode's, whose kv is the most free KV blocks
ROUTERS = {"prefill": ROUTER_NAMES, "decode": ("rr", "lor", "kv")}


@dataclass(frozen=True)
class Pool:
    """One side of a disaggregated deployment: identical replicas of one deployment."""

    replicas: int
    timer: BatchTimer
    num_blocks: int  # KV blocks per replica
    router: str = "rr"
    cfg: SimConfig | None = None  # the pool's own policy limits (token budget, max batch); None: the run's


class PrefillState(ReplicaState):
    """A prefill replica: a finished request keeps its KV blocks until the decode side has read them."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.held = 0  # requests prefilled whose KV awaits its transfer

    @property
    def num_running(self) -> int:
        # NOTE: held requests count as resident: their blocks are in use, and the replica's loop must not take
        # an empty pool for "nothing can ever fit" (drop_unfittable) while transfers will free blocks.
        return len(self.prefilling) + len(self.decoding) + self.held

    def finish(self, rid: int, now: float) -> None:
        r = self.reqs
        r.completed[rid] = now
        r.status[rid] = DONE
        if self.running is not None:
            self.running.remove(rid)
        self.outstanding -= 1
        self.held += 1
        self.on_done(self.index, rid)

    def release(self, rid: int) -> None:
        """The decode side has the KV: free the blocks."""
        self.kv.release(int(self.reqs.blocks[rid]))
        self.reqs.blocks[rid] = 0
        self.held -= 1


class DecodeState(ReplicaState):
    """A decode replica: requests arrive prefilled, wait for their KV blocks, then for the transfer."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.incoming: deque[int] = deque()  # prefilled, waiting for KV blocks here
        self.transferring = 0  # blocks allocated, KV on the link

    @property
    def num_running(self) -> int:
        return len(self.prefilling) + len(self.decoding) + self.transferring


@dataclass
class Transfers:
    """Per request: when its KV was ready to move, started and arrived, and how many bytes (NaN: never
    moved)."""

    n: int
    prefilled: np.ndarray = field(init=False)  # the prefill side sampled (the KV is complete)
    queued: np.ndarray = field(init=False)  # decode blocks allocated: the transfer joins the link's queue
    start: np.ndarray = field(init=False)
    end: np.ndarray = field(init=False)
    nbytes: np.ndarray = field(init=False)
    prefill_replica: np.ndarray = field(init=False)

    def __post_init__(self):
        nan = np.full(self.n, np.nan)
        self.prefilled, self.queued, self.start, self.end = nan.copy(), nan.copy(), nan.copy(), nan.copy()
        self.nbytes = np.zeros(self.n)
        self.prefill_replica = np.full(self.n, -1, dtype=np.int64)


class DisaggCluster:
    def __init__(
        self,
        env: simpy.Environment,
        pre: Requests,
        dec: Requests,
        cfg: SimConfig,
        prefill: Pool,
        decode: Pool,
        link: KVLink,
        kv_token_bytes: float,
        transfers: Transfers,
    ):
        from simserve.sim.replica import Replica

        self.env, self.cfg, self.link = env, cfg, link
        self.pre, self.dec = pre, dec
        self.n = pre.n
        self.kv_token_bytes = kv_token_bytes
        self.next = 0
        self.num_done = 0
        self.num_ignored = 0
        self.finished = env.event()
        self.overloaded = self.stopped_early = self.capped = False
        self.log = IterationLog()
        self.tbt = LogHistogram()  # the decode side's gaps: the user's TBT
        self.prefill_tbt = LogHistogram()  # stays empty: a prefill replica samples one token per request
        self.transfers = transfers
        self.link_free_at = 0.0
        self.active_transfers = 0
        self.prompt_limit = cfg.prompt_limit()
        pcfg, dcfg = prefill.cfg or cfg, decode.cfg or cfg
        self.prefill_router = routers.make(pcfg, pre, prefill.num_blocks, prefill.router, prefill.replicas)
        self.decode_router = decode.router
        self._rr = 0
        self.prefill: list[Replica] = []
        for i in range(prefill.replicas):
            timer = prefill.timer
            st = PrefillState(
                i, pre, pcfg, prefill.num_blocks, timer.num_stages, self.prefill_tbt, self._prefilled, timer
            )
            self.prefill.append(Replica(env, st, POLICIES[pcfg.policy], timer, self.log, self.route_due))
        self.decode: list[Replica] = []
        for j in range(decode.replicas):  # decode replicas are numbered after the prefill ones in the log
            timer = decode.timer
            st = DecodeState(
                prefill.replicas + j,
                dec,
                dcfg,
                decode.num_blocks,
                timer.num_stages,
                self.tbt,
                self._decoded,
                timer,
            )
            admit = lambda now, j=j: self._admit(self.decode[j], now)  # noqa: E731  (its "route_due")
            self.decode.append(Replica(env, st, POLICIES[dcfg.policy], timer, self.log, admit))
        # The watchdog's overload rules count a request as scheduled once the decode side has admitted it (its
        # blocks allocated): a backlog in front of either pool is a queue that grows. Ignoring is the prefill
        # side's; the TBT stop counts the output wanted overall.
        view = Requests(pre.prompt, dec.output, pre.arrived)
        view.scheduled, view.status = self.transfers.queued, pre.status
        self.rules = Watchdog(view, cfg, self.tbt)
        env.process(self.arrivals())
        env.process(self.watchdog())

    # -- arrivals → prefill ----------------------------------------------------------------------------
    def arrivals(self):
        env, arrived = self.env, self.pre.arrived
        while self.next < self.n:
            t = arrived[self.next]
            while t > env.now:
                yield env.timeout(t - env.now)
            self.route_due(env.now)

    def route_due(self, now: float) -> None:
        r = self.pre
        while self.next < self.n and r.arrived[self.next] <= now:
            rid = self.next
            self.next += 1
            if r.prompt[rid] > self.prompt_limit:
                r.status[rid] = IGNORED
                self._ignored(rid)
                continue
            # routers.py, as an aggregated run
            rep = self.prefill[route(self.prefill_router, self.prefill, rid)]
            r.replica[rid] = rep.index
            rep.state.enqueue(rid)
            rep.notify()

    def _pick_decode(self, reps: list[Replica]) -> Replica:
        """The decode router: its `kv` reads the requests routed to a replica and not yet given blocks there,
        which only a decode pool has, so it stays here (and in core/disagg.py's `_pick_decode`), not in
        routers.py."""
        router = self.decode_router
        if router == "rr":
            rep = reps[self._rr % len(reps)]
            self._rr += 1
            return rep
        if router == "kv":  # the most free KV blocks, less what requests already routed there will take
            # ties: lowest
            return max(reps, key=lambda rep: rep.state.kv.free - self._incoming_blocks(rep.state))
        return min(reps, key=lambda rep: rep.state.outstanding)  # ties: the lowest index

    def _incoming_blocks(self, st: DecodeState) -> int:
        bs = st.block_size
        return sum(-(-int(self.dec.prompt[rid]) // bs) for rid in st.incoming)

    # -- prefill done → decode admission → transfer ------------------------------------------------------
    def _prefilled(self, replica: int, rid: int) -> None:
        if self.pre.status[rid] == IGNORED:  # too long or never fits on the prefill side
            self._ignored(rid)
            return
        now = self.env.now
        self.transfers.prefilled[rid] = now
        self.transfers.prefill_replica[rid] = replica
        rep = self._pick_decode(self.decode)
        self.dec.replica[rid] = rep.index
        rep.state.incoming.append(rid)
        rep.state.outstanding += 1
        rep.notify()

    def _admit(self, rep: Replica, now: float) -> None:
        """Give incoming requests their KV blocks, FIFO, after the replica's own preempted requests."""
        st, r = rep.state, self.dec
        while st.incoming and not st.waiting:
            rid = st.incoming[0]
            blocks = -(-int(r.prompt[rid]) // st.block_size)
            if not st.kv.can_allocate(blocks) or st.num_running >= st.max_batch:
                if not st.num_running and not rep.in_flight and not st.kv.can_allocate(blocks):
                    st.incoming.popleft()  # larger than this decode pool can ever hold
                    st.outstanding -= 1
                    r.status[rid] = IGNORED
                    self.pre.status[rid] = IGNORED  # the watchdog's view: never "waiting to be scheduled"
                    self._release_prefill(rid)
                    self._decoded(rep.index, rid)
                    continue
                return
            st.incoming.popleft()
            st.kv.allocate(blocks)
            r.blocks[rid] = blocks
            st.transferring += 1
            self.env.process(self._transfer(rep, rid, now))

    def _transfer(self, rep: Replica, rid: int, now: float):
        t = self.transfers
        nbytes = float(self.dec.prompt[rid]) * self.kv_token_bytes
        start = max(now, self.link_free_at)  # FIFO behind the transfers already on the link
        self.link_free_at = start + self.link.occupancy_s(nbytes)
        end = self.link_free_at + self.link.latency_s
        t.queued[rid], t.start[rid], t.end[rid], t.nbytes[rid] = now, start, end, nbytes
        self.active_transfers += 1
        yield self.env.timeout(end - now)
        self.active_transfers -= 1
        self._release_prefill(rid)
        st, r = rep.state, self.dec
        st.transferring -= 1
        # The remote KV covers all but the last prompt token, which the decode side computes to sample token
        # 1.
        r.target[rid] = r.prompt[rid]
        r.computed[rid] = r.prompt[rid] - 1
        r.status[rid] = RUNNING
        r.scheduled[rid] = self.env.now
        bisect.insort(st.prefilling, rid)
        if st.running is not None:
            st.running.append(rid)
        rep.notify()

    def _release_prefill(self, rid: int) -> None:
        rep = self.prefill[int(self.transfers.prefill_replica[rid])]
        rep.state.release(rid)
        rep.notify()

    # -- completion and the watchdog ----------------------------------------------------------------------
    def _ignored(self, rid: int) -> None:
        self.num_ignored += 1
        self._count_done()

    def _decoded(self, replica: int, rid: int) -> None:
        if self.dec.status[rid] == IGNORED:
            self.num_ignored += 1
        self._count_done()

    def _count_done(self) -> None:
        self.num_done += 1
        if self.num_done == self.n and not self.finished.triggered:
            self.finished.succeed()

    def watchdog(self):
        env, period, rules = self.env, self.cfg.check_period_s, self.rules
        replicas = self.prefill + self.decode
        while True:
            yield env.timeout(period)
            if not self.overloaded and rules.overloaded(env.now, self.next, self.num_ignored):
                self.overloaded = True
                if self.cfg.stop_when_overloaded:
                    self._end_run()
                    return
            if rules.tbt_missed():
                self.stopped_early = True
                self._end_run()
                return
            if env.now >= rules.cap:
                self.capped = self._end_run()
                return
            rules.check_stall(
                self.next >= self.n,
                self.active_transfers > 0 or any(rep.in_flight for rep in replicas),
                self.num_done,
                sum(rep.work.micro_batches for rep in replicas),
            )

    def _end_run(self) -> bool:
        if self.finished.triggered:
            return False
        self.finished.succeed()
        return True


@dataclass
class DisaggRun:
    """A finished disaggregated run: `raw` is the user's view (one row per request, TTFT and TBT as the client
    sees them, every replica's iterations) for metrics.summarize and the table writers; the rest is per
    pool."""

    raw: RawRun
    transfers: Transfers
    num_prefill: int  # replicas 0..num_prefill-1 in raw.replicas and the iteration log are the prefill pool
    prefill_blocks: int
    decode_blocks: int
    link: KVLink


CHUNKING = ("sarathi", "chunked", "hybrid", "slo-aware", "pressure", "equal-cost", "vllm-v1")


def simulate_disagg(
    prompt_tokens: np.ndarray,
    output_tokens: np.ndarray,
    arrived_at: np.ndarray,
    cfg: SimConfig,
    prefill: Pool,
    decode: Pool,
    link: KVLink,
    kv_token_bytes: float,
) -> DisaggRun:
    """Replay requests through a prefill pool and a decode pool joined by `link` (module docstring), on the
    compiled core when it covers both pools (disagg_core.covers), else on this SimPy model."""
    cfg.validate()
    for side, pool in (("prefill", prefill), ("decode", decode)):
        policy = (pool.cfg or cfg).policy
        if policy not in CHUNKING:  # the decode side's first step is a one-token chunk of an admitted prompt
            raise SimserveError(
                f"disaggregated serving runs a chunked-prefill policy ({', '.join(CHUNKING)}); --policy "
                f"{policy} never schedules the last prompt token of a request whose KV arrived by transfer"
            )
        if pool.replicas < 1:
            raise SimserveError(f"the {side} pool needs at least one replica, got {pool.replicas}")
        if pool.router not in ROUTERS[side]:
            raise SimserveError(
                f"unknown {side} router {pool.router!r}; choose one of {', '.join(ROUTERS[side])}"
            )
    prompt, output, arrived = request_arrays(prompt_tokens, output_tokens, arrived_at)
    core = disagg_core.covers(cfg, prefill, decode)
    order = np.argsort(arrived, kind="stable")
    prompt, output, arrived = prompt[order], output[order], arrived[order]
    output = np.minimum(output, np.maximum(cfg.max_model_len + 1 - prompt, 1))
    pre = Requests(prompt, np.ones_like(output), arrived)
    dec = Requests(prompt, output, arrived)
    transfers = Transfers(len(prompt))
    if core is not None:  # the compiled core: the same results as the SimPy model below (core.DisaggCore)
        log, tbt, replicas, overloaded, end, stopped, capped = disagg_core.run(
            core, pre, dec, cfg, prefill, decode, link, kv_token_bytes, transfers
        )
    else:
        import simpy

        env = simpy.Environment()
        c = DisaggCluster(env, pre, dec, cfg, prefill, decode, link, kv_token_bytes, transfers)
        env.run(until=c.finished)
        log, tbt, replicas, overloaded, end, stopped, capped = (
            c.log,
            c.tbt,
            c.prefill + c.decode,
            c.overloaded,
            env.now,
            c.stopped_early,
            c.capped,
        )
    raw = RawRun(
        cfg,
        _user_view(pre, dec),
        order,
        log,
        tbt,
        replicas,
        decode.num_blocks,
        overloaded,
        end,
        stopped,
        capped,
    )
    return DisaggRun(raw, transfers, prefill.replicas, prefill.num_blocks, decode.num_blocks, link)


def _user_view(pre: Requests, dec: Requests) -> Requests:
    """One row per request as the client sees it: scheduled on the prefill side, tokens from the decode
    side."""
    u = Requests(dec.prompt, dec.output, dec.arrived)
    u.scheduled = pre.scheduled.copy()
    for name in ("first_token", "completed", "last_token", "tbt_max", "generated", "replica"):
        setattr(u, name, getattr(dec, name).copy())
    u.preemptions = pre.preemptions + dec.preemptions
    u.status = dec.status.copy()
    u.status[pre.status == IGNORED] = IGNORED
    return u


def transfer_summary(run: DisaggRun) -> dict:
    """Per-pool utilisation, transfer and wait percentiles (seconds), KV moved."""
    t, s = run.transfers, run.raw
    moved = ~np.isnan(t.end)
    qs = (50, 90, 99)

    def pct(x):
        return dict(zip(("p50", "p90", "p99"), numerics.percentiles(x, qs), strict=True))

    from simserve.sim.metrics import _busy_and_iterations

    busy, _ = _busy_and_iterations(s.log, float(s.end_time))
    duration = max(float(s.end_time) - float(s.reqs.arrived[0]), 1e-12)

    def util(reps):
        per = [min(1.0, busy.get((rep.index, st), 0.0) / duration) for rep in reps for st in range(rep.pp)]
        return float(sum(per) / len(per)) if per else float("nan")

    return {
        "prefill_utilization": util(s.replicas[: run.num_prefill]),
        "decode_utilization": util(s.replicas[run.num_prefill :]),
        "prefill_kv_blocks_per_replica": run.prefill_blocks,
        "decode_kv_blocks_per_replica": run.decode_blocks,
        "link": run.link.describe(),
        "transfers": int(moved.sum()),
        "kv_moved_gib": float(t.nbytes[moved].sum() / 2**30),
        "transfer_s": pct(t.end[moved] - t.start[moved]),
        "link_queue_s": pct(t.start[moved] - t.queued[moved]),
        "decode_admission_wait_s": pct(t.queued[moved] - t.prefilled[moved]),
    }
