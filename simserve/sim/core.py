"""The compiled simulation core: the replica loop of replica.py/state.py/policies.py/budgets.py outside SimPy.

This module is plain Python that Cython compiles (pure-Python mode: the `cython.*` annotations are ignored
when it runs uncompiled, which is how the property test can also exercise it). It is the fast twin of the
SimPy model, never its replacement: the SimPy model is the reference, and tests/test_sim_core.py holds the
two equal bit for bit (docs/architecture.md, "Reference and core").

What it reproduces, and how:
  - SimPy's event order. SimPy pops events by (time, priority, id), the id counting every scheduled event;
    processes start with an URGENT event at time 0, timeouts and `succeed` are NORMAL. The core keeps the
    same keys, assigned at the same moments, so ties (an iteration ending exactly at an overload check, two
    replicas finishing at once, the run's end) resolve as in the reference. Each process waits for one
    event at a time, so the pending events are one slot per process (a replica's scheduler and stages, the
    arrivals, the watchdog, the run's end), and the next event is the smallest key among a few slots.
  - Every float operation in the same order (iteration times, TBT gaps, bubbles), and the TBT histogram's
    buckets through libm's log, as `LogHistogram.add` does.
  - Attention DP's ranks in lockstep (lockstep.py): each group of ranks is one process with one event slot, as the
    reference's DpGroup is (section "attention-DP lockstep"); a rank's scheduling is the replica's own code.
  - The watchdog stays in Python: `run` returns at an overload check, with the shared request arrays and
    histogram up to date, and the caller (core_run.py) applies the rules of watchdog.py as cluster.Cluster does.
    It returns only at the checks where a rule could act (`_check_due`); at the others (most of them, at light
    load) it schedules the next check itself, as the caller would have.

State is shared, not copied: the request arrays and the histogram counts are the numpy arrays of the
reference's `Requests`/`LogHistogram`, seen through typed memoryviews. An internal inconsistency sets
`error` (an INV_* code) and stops the run at the end of the event; core_run.py turns it into one line.

After editing this file, rebuild the extension (`pip install -e .`): an old build would keep running the old
code (tests/test_sim_core.py compares both the build and this source with the reference, so it shows).
"""

from __future__ import annotations

import heapq
from collections import deque

import cython
import numpy as np

COMPILED = cython.compiled  # False when this file runs as plain Python

if cython.compiled:
    from cython.cimports.libc.math import INFINITY as INF
    from cython.cimports.libc.math import ceil, exp, log
else:
    from math import ceil, exp, log
    from math import inf as INF

# request status (request.py)
WAITING = 0
RUNNING = 1
DONE = 2
IGNORED = 3

# what `run` returns
CHECK = 1  # a watchdog check where a rule may act: evaluate the rules, then watch() + next_check_at() or end_run()
FINISHED = 2  # the run's `finished` event was processed: the simulation is over
FAILED = 3  # an invariant broke: `error` names it

# invariants (the reference asserts the same: kvcache.py, replica.py)
INV_KV_NEGATIVE = 1
INV_KV_OVERFULL = 2
INV_SCHEDULED_TWICE = 3
INV_TIME_BACKWARDS = 4
INVARIANTS = {
    INV_KV_NEGATIVE: "free KV blocks went negative (more blocks allocated than were free)",
    INV_KV_OVERFULL: "more KV blocks were released than the pool holds",
    INV_SCHEDULED_TWICE: "a request was scheduled twice (twice in one batch, or while in flight)",
    INV_TIME_BACKWARDS: "simulated time went backwards",
}

# SimPy's priorities
URGENT = 0
NORMAL = 1
# event slots after the replicas' (replica r's stage s is slot r * pp + s; stage 0 is its scheduler loop)
SLOT_ARRIVALS = 0
SLOT_WATCHDOG = 1
SLOT_FINISHED = 2

# what a Core runs (Core.role)
ROLE_AGGREGATED = 0
ROLE_PREFILL = 1
ROLE_DECODE = 2

# timer kinds
T_TABLES = 0  # predictor.timer.BatchTimer
T_LINEAR = 1  # testing.LinearTimer
T_CONSTANT = 2  # testing.ConstantTimer

# policies
P_FCFS = 0
P_ORCA = 1
P_VLLM = 2
P_SARATHI = 3
P_CHUNKED = 4
P_SLO = 5
P_PRESSURE = 6
P_EQUAL = 7
P_V1 = 8
P_SGLANG = 9
POLICY_CODES = {
    "fcfs": P_FCFS, "orca": P_ORCA, "vllm": P_VLLM, "sarathi": P_SARATHI, "hybrid": P_SARATHI,
    "chunked": P_CHUNKED, "slo-aware": P_SLO, "pressure": P_PRESSURE, "equal-cost": P_EQUAL,
    "vllm-v1": P_V1, "sglang": P_SGLANG,
}  # fmt: skip

PROGRESS_FLOOR = 16  # budgets.PROGRESS_FLOOR
# NOTE: returned for "no prefills / no chunks" on the hot path instead of a fresh list; never mutated (callers
# only read it, or build a new list when there is something to add).
_NONE: list = []
# iteration rows kept here before they go to the IterationLog (in bulk: appending a few rows at a time to its
# arrays would reallocate and copy them again and again)
ROW_BUFFER = 65536


@cython.cclass
class Timer:
    """The BatchTimer's arithmetic (predictor/timer.py, sim/testing.py), operation for operation."""

    kind: cython.int
    num_stages: cython.int
    # T_TABLES
    tok: cython.double[:, :]
    tend: cython.longlong
    tslope: cython.double[:]
    dec: cython.double[:, :]
    dl: cython.double
    bmax: cython.longlong
    bhalf: cython.longlong
    jlast: cython.longlong
    pre: cython.double[:, :]
    dc: cython.double
    dp: cython.double
    ilast: cython.longlong
    klast: cython.longlong
    # the step's composition (predictor/step.py): per stage, (a, b, c) of each CPU role and per-mode launch costs
    cpu_gpu: cython.double[:, :]
    cpu_ovl: cython.double[:, :]
    cpu_ser: cython.double[:, :]
    cpu_pre: cython.double[:, :]  # per prefill chunk: (gpu, overlap, serial) seconds
    launch_gpu: cython.double[:, :]
    launch_cpu: cython.double[:, :]
    launch_cap: cython.longlong
    plain: cython.bint  # no overlapping, GPU-stream or per-token CPU work and no launch costs: kernels + a + b·n
    # T_LINEAR / T_CONSTANT
    a: cython.double
    b: cython.double
    c: cython.double
    # attention-DP lockstep (BatchTimer.own_time / experts_time): a rank's own per-token table and the experts'
    # table over all ranks' tokens (T_TABLES); the experts' seconds per token (T_LINEAR: LinearTimer.e)
    own: cython.double[:]
    own_slope: cython.double
    experts: cython.double[:]
    experts_last: cython.longlong
    experts_slope: cython.double
    e: cython.double
    dummy_base: cython.double  # own_base of an idle rank's dummy batch (lockstep.DUMMY_KV)

    def __init__(self, kind: cython.int, num_stages: cython.int, p: dict):
        self.kind = kind
        self.num_stages = num_stages
        self.e = p.get("e", 0.0)
        if p.get("own") is not None:
            self.own, self.own_slope = p["own"], p["own_slope"]
            self.experts, self.experts_slope = p["experts"], p["experts_slope"]
            self.experts_last = len(p["experts"]) - 1
        if kind == T_TABLES:
            self.tok, self.tend, self.tslope = p["tok"], p["tend"], p["tslope"]
            self.dec, self.dl, self.bmax, self.bhalf, self.jlast = (
                p["dec"],
                p["dl"],
                p["bmax"],
                p["bhalf"],
                p["jlast"],
            )
            self.pre, self.dc, self.dp, self.ilast, self.klast = (
                p["pre"],
                p["dc"],
                p["dp"],
                p["ilast"],
                p["klast"],
            )
            self.cpu_gpu, self.cpu_ovl, self.cpu_ser = p["cpu_gpu"], p["cpu_ovl"], p["cpu_ser"]
            self.cpu_pre = p["cpu_pre"]
            self.launch_gpu, self.launch_cpu, self.launch_cap = p["launch_gpu"], p["launch_cpu"], p["launch_cap"]
            self.plain = p["plain"]
        else:
            self.a, self.b, self.c = p["a"], p["b"], p["c"]
        self.dummy_base = self.own_base(_NONE, _NONE, 1, 1)

    @cython.cfunc
    @cython.exceptval(check=False)  # NOTE: arithmetic only; no Python error to check for
    @cython.locals(x=cython.double, j=cython.longlong)
    def _decode_row(self, b: cython.longlong, mean_kv: cython.double) -> cython.double:
        x = mean_kv / self.dl
        j = cython.cast(cython.longlong, x) if cython.compiled else int(x)
        if j > self.jlast:
            j = self.jlast
        return self.dec[b, j] + (x - j) * (self.dec[b, j + 1] - self.dec[b, j])

    @cython.cfunc
    @cython.exceptval(check=False)  # NOTE: arithmetic only; no Python error to check for
    @cython.locals(mean_kv=cython.double, hi=cython.double, lo=cython.double)
    def _decode(self, nd: cython.longlong, kv_sum: cython.double) -> cython.double:
        mean_kv = kv_sum / nd
        if nd <= self.bmax:
            return self._decode_row(nd, mean_kv)
        hi = self._decode_row(self.bmax, mean_kv)
        lo = self._decode_row(self.bhalf, mean_kv)
        return hi + (nd - self.bmax) * (hi - lo) / (self.bmax - self.bhalf)

    @cython.cfunc
    @cython.exceptval(check=False)  # NOTE: arithmetic only; no Python error to check for
    @cython.locals(x=cython.double, y=cython.double, i=cython.longlong, k=cython.longlong, fy=cython.double,
                   a=cython.double, b=cython.double)  # fmt: skip
    def _prefill(self, chunk: cython.longlong, prefix: cython.longlong) -> cython.double:
        x = chunk / self.dc
        y = prefix / self.dp
        i = cython.cast(cython.longlong, x) if cython.compiled else int(x)
        k = cython.cast(cython.longlong, y) if cython.compiled else int(y)
        if i > self.ilast:
            i = self.ilast
        if k > self.klast:
            k = self.klast
        fy = y - k
        a = self.pre[i, k] + fy * (self.pre[i, k + 1] - self.pre[i, k])
        b = self.pre[i + 1, k] + fy * (self.pre[i + 1, k + 1] - self.pre[i + 1, k])
        return a + (x - i) * (b - a)

    @cython.cfunc
    @cython.locals(t=cython.longlong, attn=cython.double, tok=cython.double, chunk=cython.longlong,
                   prefix=cython.longlong, kv=cython.longlong, n=cython.Py_ssize_t, q=cython.Py_ssize_t)  # fmt: skip
    def time(self, chunks: list, prefixes: list, nd: cython.longlong, kv_sum: cython.longlong,
             stage: cython.int) -> cython.double:  # fmt: skip
        """Seconds of one iteration on `stage`: prefill chunks over their prefixes, nd decodes reading
        kv_sum KV entries in all (the BatchTimer's __call__)."""
        n = len(chunks)
        if self.kind == T_CONSTANT:
            return self.a
        if self.kind == T_LINEAR:
            t = nd
            kv = kv_sum
            for q in range(n):
                chunk = chunks[q]
                t += chunk
                kv += prefixes[q] + chunk
            return self.a + self.b * t + self.c * kv
        t = nd
        attn = 0.0
        for q in range(n):
            chunk = chunks[q]
            prefix = prefixes[q]
            t += chunk
            attn += self._prefill(chunk, prefix)
        return self._tables_time(t, attn, n, nd, kv_sum, stage)

    @cython.cfunc
    @cython.exceptval(check=False)  # NOTE: arithmetic only; no Python error to check for
    @cython.locals(tok=cython.double)
    def _tables_time(self, t: cython.longlong, attn: cython.double, n: cython.longlong, nd: cython.longlong,
                     kv_sum: cython.longlong, stage: cython.int) -> cython.double:  # fmt: skip
        """time()'s T_TABLES part after the prefill chunks: t tokens, attn their attention so far. The step's
        composition is BatchTimer._compose's, operation for operation."""
        if nd:
            attn += self._decode(nd, cython.cast(cython.double, kv_sum) if cython.compiled else float(kv_sum))
        elif t == 0:
            return 0.0
        if t <= self.tend:
            tok = self.tok[stage, t]
        else:
            tok = self.tok[stage, self.tend] + (t - self.tend) * self.tslope[stage]
        return self._compose(tok + attn, n, n + nd, t, stage)

    @cython.cfunc
    @cython.exceptval(check=False)  # NOTE: arithmetic only; no Python error to check for
    @cython.locals(mode=cython.int, gpu=cython.double, cpu=cython.double, r=cython.double, tt=cython.double,
                   pp=cython.double)  # fmt: skip
    def _compose(self, kernels: cython.double, num_prefills: cython.longlong, n: cython.longlong,
                 t: cython.longlong, stage: cython.int) -> cython.double:  # fmt: skip
        """BatchTimer._compose, operation for operation: max(GPU side, overlapping CPU side) + serial CPU for a
        step of `kernels` seconds, n requests (num_prefills of them prefill chunks) and t tokens."""
        r = cython.cast(cython.double, n) if cython.compiled else float(n)
        if self.plain:  # NOTE: the general expression below with its zero terms dropped: the same bits, fewer loads
            return kernels + self.cpu_ser[stage, 0] + self.cpu_ser[stage, 1] * r
        if t > self.launch_cap:
            mode = 2
        elif num_prefills:
            mode = 1
        else:
            mode = 0
        tt = cython.cast(cython.double, t) if cython.compiled else float(t)
        pp = cython.cast(cython.double, num_prefills) if cython.compiled else float(num_prefills)
        gpu = (kernels + self.cpu_gpu[stage, 0] + self.cpu_gpu[stage, 1] * r + self.cpu_gpu[stage, 2] * tt
               + self.cpu_pre[stage, 0] * pp + self.launch_gpu[stage, mode])  # fmt: skip
        cpu = (self.cpu_ovl[stage, 0] + self.cpu_ovl[stage, 1] * r + self.cpu_ovl[stage, 2] * tt
               + self.cpu_pre[stage, 1] * pp + self.launch_cpu[stage, mode])  # fmt: skip
        if cpu > gpu:
            gpu = cpu
        return (gpu + self.cpu_ser[stage, 0] + self.cpu_ser[stage, 1] * r + self.cpu_ser[stage, 2] * tt
                + self.cpu_pre[stage, 2] * pp)  # fmt: skip

    @cython.cfunc
    @cython.exceptval(check=False)  # NOTE: arithmetic only; no Python error to check for
    @cython.locals(t=cython.longlong, kv=cython.longlong)
    def decode_time(self, nd: cython.longlong, kv_sum: cython.longlong, stage: cython.int) -> cython.double:
        """time() of a batch without prefill chunks (the same operations, without its Python lists)."""
        if self.kind == T_CONSTANT:
            return self.a
        if self.kind == T_LINEAR:
            t = nd
            kv = kv_sum
            return self.a + self.b * t + self.c * kv
        return self._tables_time(nd, 0.0, 0, nd, kv_sum, stage)

    @cython.cfunc
    @cython.locals(total=cython.double, s=cython.int)
    def through(
        self, chunks: list, prefixes: list, nd: cython.longlong, kv_sum: cython.longlong
    ) -> cython.double:
        """Summed over every stage (budgets.predicted_time: Python's sum, from 0, in stage order)."""
        total = 0.0
        for s in range(self.num_stages):
            total += self.time(chunks, prefixes, nd, kv_sum, s)
        return total

    # -- attention-DP lockstep (sim/lockstep.py): BatchTimer.own_time split at the padding, and experts_time ---
    @cython.cfunc
    @cython.locals(q=cython.Py_ssize_t, kv=cython.longlong, attn=cython.double)
    def own_base(
        self, chunks: list, prefixes: list, nd: cython.longlong, kv_sum: cython.longlong
    ) -> cython.double:
        """The part of a rank's own time that the padding leaves alone: the batch's attention seconds
        (T_TABLES: BatchTimer._batch_attention, the same sum in the same order), or the KV tokens it reads
        (T_LINEAR: LinearTimer.own_time's kv)."""
        if self.kind == T_CONSTANT:
            return 0.0
        if self.kind == T_LINEAR:
            kv = kv_sum
            for q in range(len(chunks)):
                kv += prefixes[q] + chunks[q]
            return cython.cast(cython.double, kv) if cython.compiled else float(kv)
        attn = 0.0
        for q in range(len(chunks)):
            attn += self._prefill(chunks[q], prefixes[q])
        if nd:
            attn += self._decode(nd, cython.cast(cython.double, kv_sum) if cython.compiled else float(kv_sum))
        return attn

    @cython.cfunc
    @cython.exceptval(check=False)  # NOTE: arithmetic only; no Python error to check for
    @cython.locals(x=cython.longlong, tok=cython.double)
    def own_time(
        self, t: cython.longlong, base: cython.double, num_prefills: cython.longlong, n: cython.longlong,
        pad: cython.longlong,
    ) -> cython.double:
        """BatchTimer.own_time: a rank's own seconds for t tokens of n requests (num_prefills prefill chunks, the
        rest decodes) whose own_base is `base`, its layers run at `pad` tokens when that is more (vLLM's CUDA
        graphs across ranks)."""
        if self.kind == T_CONSTANT:
            return self.a
        x = t if t > pad else pad
        if self.kind == T_LINEAR:
            return self.a + self.b * x + self.c * base
        if t == 0:
            return 0.0
        tok = self.own[x] if x <= self.tend else self.own[self.tend] + (x - self.tend) * self.own_slope
        return self._compose(tok + base, num_prefills, n, x, 0)

    @cython.cfunc
    @cython.exceptval(check=False)  # NOTE: arithmetic only; no Python error to check for
    def dummy_time(self, pad: cython.longlong) -> cython.double:
        """own_time of an idle rank's dummy batch: one decode token over one KV slot (lockstep.DUMMY_KV)."""
        return self.own_time(1, self.dummy_base, 0, 1, pad)

    @cython.cfunc
    @cython.exceptval(check=False)  # NOTE: arithmetic only; no Python error to check for
    def experts_time(self, tokens: cython.longlong) -> cython.double:
        """BatchTimer.experts_time: the routed experts and the ranks' exchange for `tokens` of all ranks."""
        if self.kind == T_CONSTANT:
            return 0.0
        if self.kind == T_LINEAR:
            return self.e * tokens
        if tokens <= self.experts_last:
            return self.experts[tokens]
        return self.experts[self.experts_last] + (tokens - self.experts_last) * self.experts_slope


@cython.cclass
class Rep:
    """One replica's scheduling state (state.py's ReplicaState) and its loop's bookkeeping (replica.py)."""

    index: cython.int
    waiting: object  # deque of ids
    prefilling: list  # sorted ids
    decoding: list  # sorted ids
    running: list  # vllm-v1: ids in admission order (ReplicaState.running); unused otherwise
    # vllm-v1 with prefix caching: the same PrefixCache object the reference uses (sim/prefix_cache.py); `free`
    # mirrors its free queue after every change. finished / admit_seq / admitted: ReplicaState's.
    cache: object
    # sglang with --prefix-caching: the reference's own RadixCache (sim/radix_cache.py), which is also the
    # pool; `free` mirrors its free pages (available + evictable) after every change (_sync_radix)
    radix: object
    finished: list
    admit_seq: dict
    admitted: cython.longlong
    free: cython.longlong
    num_blocks: cython.longlong
    watermark: cython.longlong
    turn_prefill: cython.bint
    preemptions: cython.longlong
    # sglang: its scheduler's state (sglang.SGLangScheduler): new_token_ratio, the running batch (its requests in
    # its own order, its batch_is_full) and the last step's prefill batch (a list, or None)
    sg_ratio: cython.double
    sg_full: cython.bint
    sg_running: list
    sg_last: object
    sg_refresh_calls: cython.longlong  # SchedulePolicy._waiting_prefix_refresh_calls (radix cache)
    stale: set
    outstanding: cython.longlong
    # disaggregation (DisaggCore): requests resident here because of a KV transfer, counted as running — on a
    # prefill replica, prefilled requests whose blocks wait for the decode side to read them; on a decode
    # replica, admitted requests whose KV is on the link (disagg.PrefillState.held / DecodeState.transferring)
    held: cython.longlong
    # the scheduler loop
    in_flight: cython.int
    sched_waits: cython.bint  # `yield self.wake` (notify schedules its resumption)
    busy0: cython.bint  # a micro-batch is on stage 0 (its timeout pending):
    stage0: object  # ... PP > 1: (prefills, decodes, durations per stage, prefill tokens, KV used)
    prefills0: list  # ... PP = 1: its prefills and decodes (no tuple: the hot path at PP = 1)
    decodes0: list
    busy_since: cython.double
    inflight_acc: cython.double
    bubble: cython.double[:]
    idle_mark: cython.double[:]
    queues: list  # per stage ≥ 1: deque of micro-batches
    stage_waits: list  # per stage: waiting for a hand-over
    current: list  # per stage ≥ 1: the micro-batch on it (its timeout pending), or None
    # Work (replica.Work)
    w_tokens: cython.longlong
    w_prefill_pairs: cython.longlong
    w_prefill_kv: cython.longlong
    w_decode_kv: cython.longlong
    w_micro_batches: cython.longlong
    # attention-DP lockstep: this rank's part of the step being formed (Core._lockstep_start); its batch is
    # prefills0/decodes0, busy0 while it is in the step (False: a dummy batch)
    ls_tokens: cython.longlong  # prefill chunk tokens + decodes
    ls_base: cython.double  # Timer.own_base of the batch
    ls_prefill: cython.longlong  # prefill chunk tokens

    def __init__(
        self, index: cython.int, num_blocks: cython.longlong, watermark: cython.longlong, pp: cython.int,
        cache: object = None,
    ):  # fmt: skip
        self.index = index
        self.waiting = deque()
        self.prefilling = []
        self.decoding = []
        self.running = []
        self.cache = cache
        self.radix = None
        self.finished = []
        self.admit_seq = {}
        self.admitted = 0
        self.free = num_blocks
        self.num_blocks = num_blocks
        self.watermark = watermark
        self.turn_prefill = True
        self.preemptions = 0
        self.sg_ratio = 0.0
        self.sg_full = False
        self.sg_running = []
        self.sg_last = None
        self.sg_refresh_calls = 0
        self.stale = set()
        self.outstanding = 0
        self.held = 0
        self.in_flight = 0
        self.sched_waits = False
        self.busy0 = False
        self.stage0 = None
        self.prefills0 = []
        self.decodes0 = []
        self.busy_since = 0.0
        self.inflight_acc = 0.0
        self.bubble = np.zeros(pp)
        self.idle_mark = np.zeros(pp)
        self.queues = [deque() for _ in range(pp)]
        self.stage_waits = [False] * pp
        self.current = [None] * pp
        self.w_tokens = 0
        self.w_prefill_pairs = 0
        self.w_prefill_kv = 0
        self.w_decode_kv = 0
        self.w_micro_batches = 0
        self.ls_tokens = 0
        self.ls_base = 0.0
        self.ls_prefill = 0


@cython.cclass
class Core:
    """One simulation's event loop and every replica's scheduler (cluster.py + replica.py + the policies)."""

    # the shared request arrays (request.Requests)
    prompt: cython.longlong[:]
    output: cython.longlong[:]
    arrived: cython.double[:]
    scheduled: cython.double[:]
    first_token: cython.double[:]
    completed: cython.double[:]
    last_token: cython.double[:]
    tbt_max: cython.double[:]
    computed: cython.longlong[:]
    target: cython.longlong[:]
    generated: cython.longlong[:]
    blocks: cython.longlong[:]
    req_preemptions: cython.longlong[:]
    inflight: cython.uchar[:]
    status: cython.schar[:]
    replica: cython.longlong[:]
    stamp: cython.longlong[:]  # the batch each request was last put in (the scheduled-twice check)
    cached_tokens: cython.longlong[:]
    prefix_group: cython.longlong[:]  # the prefix-sharing identity (sglang's lpm reads it)
    prefix_tokens: cython.longlong[:]
    # the TBT histogram (histogram.LogHistogram: counts shared, zeros mirrored)
    counts: cython.double[:]
    zeros: cython.double
    gaps: cython.double[:]  # one decode batch's TBT gaps (_complete_decodes)
    log_gamma: cython.double
    offset: cython.longlong
    num_buckets: cython.longlong
    # config
    n: cython.longlong
    pp: cython.int
    policy: cython.int
    dynamic: cython.bint
    block_size: cython.longlong
    block_mask: cython.longlong  # block_size - 1 when it is a power of two (16), else -1
    reserve: cython.longlong
    budget: cython.longlong  # orca/fcfs have no token limit: a number no batch reaches
    unlimited: cython.bint
    max_batch: cython.longlong
    prompt_limit: cython.longlong
    max_model_len: cython.longlong
    router_rr: cython.bint
    rr: cython.longlong
    check_period: cython.double
    sched_delay_slo: cython.double
    tbt_target: cython.double
    overload_wait: cython.double
    pressure_floor: cython.longlong
    long_threshold: cython.longlong
    long_adaptive: cython.bint
    full_isl: cython.bint  # SimConfig.reserve_full_isl
    equal_limit: cython.double
    # sglang (sglang.py; block_size is its page size there)
    sg_mixed: cython.bint  # --enable-mixed-chunk
    sg_lof: cython.bint  # --schedule-policy lof
    sg_eos: cython.uchar[:]  # per request: SamplingParams.ignore_eos
    sg_max_prefill: cython.longlong  # --max-prefill-tokens
    sg_init: cython.double  # new_token_ratio's start, floor and decay per decode step
    sg_min: cython.double
    sg_decay: cython.double
    sg_clip: cython.longlong  # sglang.CLIP_MAX_NEW_TOKENS
    sg_retract_steps: cython.longlong  # sglang.RETRACT_DECODE_STEPS
    sg_lpm: cython.bint  # --schedule-policy lpm (with the radix cache; fcfs without)
    sg_lpm_max: cython.longlong  # sglang.LPM_MAX_WAITING, IN_BATCH_CHECK, IN_BATCH_DEPRIORITIZE
    sg_refresh_every: cython.longlong  # sglang_admission.WAITING_REFRESH_INTERVAL
    sg_in_batch_check: cython.longlong
    sg_in_batch_dep: cython.longlong
    sg_eos_reserve: cython.longlong  # sglang.IGNORE_EOS_RESERVE_TOKENS
    timer: Timer
    # attention-DP lockstep (sim/lockstep.py): each run of `dp` consecutive replicas is one deployment's ranks,
    # stepped together by one process per group (its event slot is the group's number); dp 1: no lockstep
    dp: cython.int
    num_groups: cython.int
    ls_sizes: cython.longlong[:]  # vLLM's captured CUDA-graph sizes, ascending (none: no padding)
    ls_num_sizes: cython.Py_ssize_t
    ls_in_turn: cython.bint  # SGLang's DP controller: a group's ranks in turn; else vLLM's least-loaded rank
    g_waits: cython.uchar[:]  # per group: its process waits for a notify (DpGroup.wake)
    g_busy: cython.uchar[:]  # per group: a step is in flight (its timeout pending)
    g_next: cython.longlong[:]  # per group: SGLang's next rank (DpGroup.next_rank)
    # disaggregation: this core runs one pool of a DisaggCore (`owner`), which counts the run's requests,
    # routes between the pools and moves the KV (ROLE_PREFILL / ROLE_DECODE); ROLE_AGGREGATED: a whole run
    role: cython.int
    owner: object
    # the event loop
    now: cython.double
    eid: cython.longlong
    ev_time: cython.double[:]  # per slot: the pending event's key (time, priority, id), or none
    ev_prio: cython.int[:]
    ev_eid: cython.longlong[:]
    ev_on: cython.uchar[:]
    num_slots: cython.int
    slot0: cython.int  # the first slot after the replicas'
    watchdog_started: cython.bint
    reps: list
    next: cython.longlong  # next request to arrive
    # the closed-loop client (cluster.Cluster, cfg.max_concurrency): requests it may have sent (n: open loop),
    # whether the arrivals process waits for a slot to free, the front end's delay on the next one's way in
    released: cython.longlong
    slot_waits: cython.bint
    frontend: cython.double
    # answer-driven conversations (cluster.Cluster's `follow`, conversation.py): per request its next round's id
    # (-1: none) and think time; the released rounds not yet arrived, a heap of (arrival, id) as the
    # reference's `due`; and the ids in routing order (the overload scan's order; ids themselves otherwise)
    conversation: cython.bint
    heap_route: cython.bint  # routing by the heap `due`: conversations, or the API servers' engine entries
    # the API servers (api_server.ApiServers, the reference's own object): sends, engine entries, what the
    # clients see; None: no API-server model
    api: object
    child: cython.longlong[:]
    think: cython.double[:]
    due: list
    routed: cython.longlong[:]
    num_done: cython.longlong
    num_ignored: cython.longlong
    finished: cython.bint  # the `finished` event was triggered (scheduled)
    next_check: cython.double
    # what the watchdog's rules look at (_check_due): set by configure_watch() and, after each check the
    # caller evaluated, watch()
    watch_always: cython.bint  # a progress callback: every check returns
    watch_overload: cython.bint  # the overload rule is still evaluated (the run is not yet overloaded)
    cap: cython.double  # the trial cap (inf: none)
    tbt_bucket: cython.longlong  # the TBT stop rule: its first bucket above the limit (-1: no rule) ...
    tbt_need: cython.double  # ... and how many gaps there settle it
    tbt_above: cython.double  # gaps counted from tbt_bucket up (the rule's count_from, kept as they arrive)
    w_late: cython.longlong  # the overload rule's scan (Watchdog.positions()) at the last evaluated check
    w_ptr: cython.longlong
    w_oldest: cython.longlong
    # the TBT histogram's last bucket, and the values surely inside it (_hist_add skips the log for them)
    h_index: cython.longlong
    h_lo: cython.double
    h_hi: cython.double
    batch_no: cython.longlong
    b_prefills: list  # the batch the policy formed (_policy)
    b_decodes: list
    b_tokens: cython.longlong  # _partial_prefills: the tokens so far
    # decode stretches (_decode_stretch): whether this run's policy and PP allow them, whether its decodes grow
    # their KV a block at a time, and the ids of the stretch's batch as a C array
    stretch_ok: cython.bint
    stretch_grow: cython.bint
    ids: cython.longlong[:]
    _ids_obj: object
    # their output side, twinned here for speed (_api_step; ApiServers.output is the reference's): the
    # ApiServers' own arrays, a histogram of the client's gaps, and scratch per process and per request
    api_count: cython.longlong
    api_token_s: cython.double
    api_residual: cython.double
    api_free: cython.double[:]
    api_tokens: cython.longlong[:]
    api_out: cython.double[:]
    api_first: cython.double[:]
    api_last: cython.double[:]
    api_done: cython.double[:]
    api_itl_max: cython.double[:]
    itl_counts: cython.double[:]
    itl_zeros: cython.double
    api_share: cython.longlong[:]
    api_ends: cython.double[:]
    api_ids: cython.longlong[:]
    error: cython.int
    # iteration rows not yet handed to the IterationLog
    row_ints: cython.longlong[:, :]
    row_floats: cython.double[:, :]
    num_rows: cython.Py_ssize_t
    log: object
    _row_ints_obj: object
    _row_floats_obj: object

    def __init__(self, arrays: dict, hist, params: dict, timer: Timer, log, row_ints, row_floats):
        self.prompt, self.output, self.arrived = arrays["prompt"], arrays["output"], arrays["arrived"]
        self.scheduled, self.first_token = arrays["scheduled"], arrays["first_token"]
        self.completed, self.last_token, self.tbt_max = (
            arrays["completed"],
            arrays["last_token"],
            arrays["tbt_max"],
        )
        self.computed, self.target, self.generated = arrays["computed"], arrays["target"], arrays["generated"]
        self.blocks, self.req_preemptions = arrays["blocks"], arrays["preemptions"]
        self.inflight, self.status, self.replica = arrays["inflight"], arrays["status"], arrays["replica"]
        self.stamp = arrays["stamp"]
        self.cached_tokens = arrays["cached_tokens"]
        self.prefix_group, self.prefix_tokens = arrays["prefix_group"], arrays["prefix_tokens"]
        self.gaps = np.zeros(max(len(arrays["prompt"]), 1))
        self.counts = hist["counts"]
        self.zeros = hist["zeros"]
        self.log_gamma, self.offset, self.num_buckets = hist["log_gamma"], hist["offset"], hist["num"]
        p = params
        self.n = p["n"]
        self.pp = p["pp"]
        self.policy = POLICY_CODES[p["policy"]]
        self.dynamic = p["dynamic"]
        self.block_size = p["block_size"]
        bs = p["block_size"]
        self.block_mask = bs - 1 if bs & (bs - 1) == 0 else -1
        self.reserve = p["reserve"]
        self.unlimited = p["budget"] is None
        self.budget = 0 if self.unlimited else p["budget"]
        self.max_batch = p["max_batch"]
        self.prompt_limit = p["prompt_limit"]
        self.max_model_len = p["max_model_len"]
        self.router_rr = p["router"] == "rr"
        self.rr = 0
        self.check_period = p["check_period"]
        self.sched_delay_slo = p["sched_delay_slo"]
        self.tbt_target = p["tbt_target"]
        self.overload_wait = p["overload_wait"]
        self.pressure_floor = p["pressure_floor"]
        self.long_threshold = p["long_threshold"]
        self.long_adaptive = p["long_adaptive"]
        self.full_isl = p.get("reserve_full_isl", True)
        self.timer = timer
        self.role = p.get("role", ROLE_AGGREGATED)
        self.owner = None
        sg = p.get("sglang") or {}
        self.sg_mixed = sg.get("mixed", False)
        self.sg_lof = sg.get("lof", False)
        eos = arrays.get("ignore_eos")  # a workload's per-request ignore_eos, else the run's for all
        self.sg_eos = eos if eos is not None else np.full(self.n, sg.get("ignore_eos", True), dtype=np.uint8)
        self.sg_max_prefill = sg.get("max_prefill", 0)
        self.sg_init = sg.get("init", 0.0)
        self.sg_min = sg.get("min", 0.0)
        self.sg_decay = sg.get("decay", 0.0)
        self.sg_clip = sg.get("clip", 0)
        self.sg_retract_steps = sg.get("retract_steps", 0)
        self.sg_lpm = sg.get("lpm", False)
        self.sg_lpm_max = sg.get("lpm_max", 0)
        self.sg_refresh_every = sg.get("refresh_every", 1)
        self.sg_in_batch_check = sg.get("in_batch_check", 0)
        self.sg_in_batch_dep = sg.get("in_batch_dep", 0)
        self.sg_eos_reserve = sg.get("eos_reserve", 0)
        self.equal_limit = 0.0
        if self.policy == P_EQUAL:  # budgets.equal_cost_size: a budget-sized chunk at prefix 0, stage 0
            self.equal_limit = timer.time([self.budget], [0], 0, 0, 0)
        self.now = 0.0
        self.eid = 0
        caches = p["caches"] or [None] * p["num_replicas"]
        base = p.get("first_replica", 0)  # a decode pool's replicas are numbered after the prefill pool's
        self.reps = [
            Rep(base + i, p["num_blocks"], p["watermark_blocks"], self.pp, caches[i])
            for i in range(p["num_replicas"])
        ]
        rep: Rep
        radixes = p.get("radixes") or [None] * p["num_replicas"]
        for i, rep in enumerate(self.reps):  # NOTE: position, not rep.index (a decode pool's starts past 0)
            rep.sg_ratio = self.sg_init
            rep.radix = radixes[i]
            self._sync_radix(rep)
        self.next = 0
        self.released = p["released"]
        self.slot_waits = False
        self.frontend = p["frontend_s"]
        self.api = p.get("api")
        self.heap_route = p.get("due") is not None
        self.conversation = self.heap_route and self.api is None
        self.routed = arrays["routed"]
        if self.heap_route:
            self.due = p["due"]
        if self.conversation:
            self.child, self.think = arrays["child"], arrays["think"]
        self.num_done = 0
        self.num_ignored = 0
        self.finished = False
        self.next_check = 0.0
        self.watch_always = True  # until configure_watch(): every check returns, as before it existed
        self.watch_overload = True
        self.cap = float("inf")
        self.tbt_bucket = -1
        self.tbt_need = 0.0
        self.tbt_above = 0.0
        self.w_late = self.w_ptr = self.w_oldest = 0
        self.h_index = 0
        self.h_lo = self.h_hi = 0.0  # an empty interval: the first value takes the log
        self.batch_no = 0
        # NOTE: the policies whose batch, at PP = 1 with nothing waiting and nothing prefilling, is the
        # replica's decoding list itself and changes no other state (chunked sets its turn flag to prefills,
        # which a decode-only batch already left set)
        self.stretch_ok = self.pp == 1 and self.policy in (
            P_FCFS, P_ORCA, P_VLLM, P_SARATHI, P_CHUNKED, P_SLO, P_PRESSURE, P_EQUAL, P_V1, P_SGLANG
        )  # fmt: skip
        # the stretch's growth of the other policies' decoding list (vllm-v1 and sglang have their own steps);
        # fcfs and orca take _paused_decodes, which does not grow
        self.stretch_grow = self.dynamic and self.policy not in (P_FCFS, P_ORCA, P_V1, P_SGLANG)
        self._lockstep_init(p)
        self._ids_obj = np.zeros(max(len(arrays["prompt"]), 1), dtype=np.int64)
        self.ids = self._ids_obj
        if self.api is not None:
            api = self.api
            self.api_count, self.api_token_s, self.api_residual = api.count, api.token_s, api.residual
            self.api_free, self.api_tokens, self.api_out = api.free_at, api.tokens, api.out
            self.api_first, self.api_last, self.api_done, self.api_itl_max = api.first, api.last, api.done, api.itl_max
            self.itl_counts, self.itl_zeros = api.itl.counts, api.itl.zeros
            self.api_share = np.zeros(api.count, dtype=np.int64)
            self.api_ends = np.zeros(api.count)
            self.api_ids = np.zeros(max(len(arrays["prompt"]), 1), dtype=np.int64)
        self.error = 0
        self.log = log
        self._row_ints_obj, self._row_floats_obj = row_ints, row_floats
        self.row_ints, self.row_floats = row_ints, row_floats
        self.num_rows = 0
        # SimPy starts the processes in the order Cluster.__init__ creates them, each with an URGENT event
        # at time 0: every replica's scheduler and its stages, then arrivals, then the watchdog.
        i: cython.int
        self.slot0 = (base + len(self.reps)) * self.pp  # slot of rep.index r's stage s: r * pp + s
        if self.dp > 1:  # the groups' processes instead (Cluster.__init__: lockstep.build's DpGroups)
            self.slot0 = self.num_groups
        self.num_slots = self.slot0 + 3
        self.ev_time = np.zeros(self.num_slots)
        self.ev_prio = np.zeros(self.num_slots, dtype=np.intc)
        self.ev_eid = np.zeros(self.num_slots, dtype=np.int64)
        self.ev_on = np.zeros(self.num_slots, dtype=np.uint8)
        self.watchdog_started = False
        for i in range(self.slot0 + 2):  # every replica process, the arrivals, the watchdog: in that order
            self._schedule(0.0, URGENT, i)

    # -- the event loop -----------------------------------------------------------------------------------
    @cython.cfunc
    @cython.exceptval(check=False)  # NOTE: arithmetic only; no Python error to check for
    def _schedule(self, t: cython.double, priority: cython.int, slot: cython.int) -> cython.void:
        self.ev_time[slot] = t
        self.ev_prio[slot] = priority
        self.ev_eid[slot] = self.eid
        self.ev_on[slot] = 1
        self.eid += 1

    @cython.ccall
    @cython.locals(i=cython.int, best=cython.int, t=cython.double, slot=cython.int)
    def run(self) -> cython.int:
        """Process events until the watchdog's check (CHECK), the end of the run (FINISHED) or a broken
        invariant (FAILED)."""
        while True:
            best = -1
            for i in range(self.num_slots):  # the smallest (time, priority, id) among the pending events
                if self.ev_on[i] and (
                    best < 0
                    or self.ev_time[i] < self.ev_time[best]
                    or (
                        self.ev_time[i] == self.ev_time[best]
                        and (
                            self.ev_prio[i] < self.ev_prio[best]
                            or (self.ev_prio[i] == self.ev_prio[best] and self.ev_eid[i] < self.ev_eid[best])
                        )
                    )
                ):
                    best = i
            if best < 0:
                self.flush_rows()
                return FINISHED
            t = self.ev_time[best]
            self.ev_on[best] = 0
            if t < self.now:
                self.error = INV_TIME_BACKWARDS
                return FAILED
            self.now = t
            if best < self.slot0:
                if self.dp > 1:
                    self._lockstep_resume(best)
                elif best % self.pp == 0:
                    self._sched_resume(self.reps[best // self.pp])
                    if self.stretch_ok and not self.error:
                        self._decode_stretch(self.reps[best // self.pp])
                else:
                    self._stage_resume(self.reps[best // self.pp], best % self.pp)
            else:
                slot = best - self.slot0
                if slot == SLOT_ARRIVALS:
                    self._arrivals()
                elif slot == SLOT_WATCHDOG:
                    if not self.watchdog_started:  # the process's start: its first timeout
                        self.watchdog_started = True
                        self.next_check_at()
                    elif self._check_due():
                        return CHECK  # NOTE: the rows stay here: nothing reads the log before the end
                    else:  # no rule can act at this check: loop, as the caller would (same time, same id)
                        self.next_check_at()
                else:
                    self.flush_rows()
                    return FINISHED
            if self.error:
                self.flush_rows()
                return FAILED

    @cython.ccall
    def next_check_at(self) -> cython.void:
        """The watchdog loops: its next check one period from now."""
        self.next_check = self.now + self.check_period
        self._schedule(self.now + self.check_period, NORMAL, self.slot0 + SLOT_WATCHDOG)

    def configure_watch(self, always: cython.bint, cap: cython.double, tbt_bucket: cython.longlong,
                        tbt_need: cython.double) -> None:  # fmt: skip
        """What the caller's rules need: `always` (a progress callback: return at every check), the trial cap,
        the TBT stop rule's bucket and count (bucket -1: no such rule)."""
        self.watch_always = always
        self.cap = cap
        self.tbt_bucket = tbt_bucket
        self.tbt_need = tbt_need

    def watch(self, overload: cython.bint, late: cython.longlong, ptr: cython.longlong,
              oldest: cython.longlong) -> None:  # fmt: skip
        """After a check the caller evaluated: is the overload rule still evaluated, and where its scan stands."""
        self.watch_overload = overload
        self.w_late, self.w_ptr, self.w_oldest = late, ptr, oldest

    @cython.cfunc
    def _check_due(self) -> cython.bint:
        """Could any rule of watchdog.py act at this check (Cluster.watchdog's order)? False only when each
        surely would not, and evaluating it would leave the rules' state as skipping it does.

        The overload rule's scan counts the requests that arrived more than the SLO ago and were not
        scheduled within it (unless ignored). A request scheduled in time, or ignored, is so for good: the
        scan passes it without counting whenever it runs. So the scan is skipped only while it would meet
        nothing else; the request it would count is left for the caller's scan (which the caller's
        watch() then reports). The oldest-waiter half reads a pointer over ids that are final the same way.
        The stall check only matters when every request has arrived and no replica has a micro-batch in
        flight; between two such checks, any micro-batch in flight changes its progress mark."""
        rid: cython.longlong
        s: cython.double
        rep: Rep
        if self.watch_always or self.now >= self.cap:
            return True
        if self.tbt_bucket >= 0 and self.tbt_above >= self.tbt_need:
            return True
        if self.next >= self.n:
            for rep in self.reps:
                if rep.in_flight:
                    break
            else:
                return True
        if not self.watch_overload:
            return False
        if 2 * self.w_late > self.n - self.num_ignored:
            return True
        # NOTE: positions in routing order (Watchdog scans `routed` the same way; ids themselves in an open or
        # closed loop, where routed[k] == k)
        while self.w_ptr < self.next and self.arrived[self.routed[self.w_ptr]] < self.now - self.sched_delay_slo:
            rid = self.routed[self.w_ptr]
            s = self.scheduled[rid]
            if self.status[rid] != IGNORED and (s != s or s - self.arrived[rid] > self.sched_delay_slo):
                return True
            self.w_ptr += 1
        while self.w_oldest < self.next:
            rid = self.routed[self.w_oldest]
            if not (self.status[rid] == IGNORED or self.scheduled[rid] == self.scheduled[rid]):
                break
            self.w_oldest += 1
        return (
            self.w_oldest < self.next
            and self.now - self.arrived[self.routed[self.w_oldest]] > self.overload_wait
        )

    @cython.ccall
    def end_run(self) -> cython.bint:
        """Cluster._end_run: trigger `finished` now; False when the run had already finished."""
        if self.finished:
            return False
        self.finished = True
        self._schedule(self.now, NORMAL, self.slot0 + SLOT_FINISHED)
        return True

    @cython.ccall
    def flush_rows(self) -> cython.void:
        if self.num_rows:
            self.log.add_rows(self._row_ints_obj[: self.num_rows], self._row_floats_obj[: self.num_rows])
            self.num_rows = 0

    @cython.cfunc
    def _row(self, rep: Rep, stage: cython.int, start: cython.double, end: cython.double, prefill: cython.longlong,
             decode: cython.longlong, requests: cython.longlong, kv_used: cython.longlong) -> cython.void:  # fmt: skip
        k: cython.Py_ssize_t = self.num_rows
        self.row_ints[k, 0] = rep.index
        self.row_ints[k, 1] = stage
        self.row_ints[k, 2] = prefill
        self.row_ints[k, 3] = decode
        self.row_ints[k, 4] = requests
        self.row_ints[k, 5] = kv_used
        self.row_ints[k, 6] = 1
        self.row_floats[k, 0] = start
        self.row_floats[k, 1] = end
        self.num_rows = k + 1
        if self.num_rows == ROW_BUFFER:
            self.flush_rows()

    # -- arrivals and routing (cluster.Cluster) -------------------------------------------------------
    @cython.cfunc
    def _arrivals(self) -> cython.void:
        t: cython.double
        if self.api is not None:
            self._api_arrivals()
            return
        while self.next < self.n:
            if self.conversation:  # Cluster._conversation_arrivals: the earliest released round, or wait
                if not self.due:
                    self.slot_waits = True
                    return
                t = self.due[0][0]
                if t > self.now:
                    self._schedule(self.now + (t - self.now), NORMAL, self.slot0 + SLOT_ARRIVALS)
                    return
                self._route_due(self.now)
                continue
            if self.next >= self.released:  # closed loop: every slot is taken until a request finishes
                self.slot_waits = True
                return
            t = self.arrived[self.next]
            if t > self.now:
                self._schedule(self.now + (t - self.now), NORMAL, self.slot0 + SLOT_ARRIVALS)
                return
            self._route_due(self.now)

    @cython.cfunc
    def _api_arrivals(self) -> cython.void:
        """Cluster._api_arrivals: route what is due, then sleep until the next send or engine entry."""
        w: cython.double
        self.api.awake()
        self._route_due(self.now)
        if self.next >= self.n:
            return
        w = self.api.sleep(self.due)
        if w != INF:  # inf: only an interrupt wakes it (_wake_arrivals)
            self._schedule(self.now + (w - self.now), NORMAL, self.slot0 + SLOT_ARRIVALS)

    @cython.cfunc
    def _wake_arrivals(self) -> cython.void:
        """Process.interrupt() on the sleeping arrivals process: SimPy's Interruption, URGENT, now (its pending
        timeout is dropped: SimPy keeps it in the queue, where it wakes nothing)."""
        self._schedule(self.now, URGENT, self.slot0 + SLOT_ARRIVALS)

    @cython.cfunc
    def _api_output(self, ids: list) -> cython.void:
        """Cluster._on_output: the step's tokens go to the API servers (ApiServers.output: first the sends due)."""
        k: cython.Py_ssize_t
        rid: cython.longlong
        self.api.advance(self.now, self.due)
        for k, rid in enumerate(ids):
            self.api_ids[k] = rid
        self._api_step(self.api_ids, len(ids), self.now)

    @cython.cfunc
    @cython.locals(i=cython.Py_ssize_t, s=cython.longlong, m=cython.longlong, rid=cython.longlong,
                   start=cython.double, end=cython.double, t=cython.double, last=cython.double, gap=cython.double)  # fmt: skip
    def _api_step(self, ids: cython.longlong[:], n: cython.Py_ssize_t, now: cython.double) -> cython.void:
        """ApiServers.output after its advance, for ids[:n], float for float: each process's job for its share
        of the step's tokens (in process order), then each client's times; an answer the client now has
        frees its slot or releases its next round (ApiServers.answered), maybe waking the arrivals process."""
        done: cython.bint = False
        for s in range(self.api_count):
            self.api_share[s] = 0
        for i in range(n):
            self.api_share[ids[i] % self.api_count] += 1
        for s in range(self.api_count):  # ApiServers._job
            m = self.api_share[s]
            if not m:
                continue
            start = self.api_free[s]
            if start > now:
                self.api_out[0] += (start - now) * m
                if start - now > self.api_out[1]:
                    self.api_out[1] = start - now
            else:
                start = now
            end = start + self.api_token_s * m
            self.api_free[s] = end
            self.api_tokens[s] += m
            self.api_out[2] += 1
            self.api_ends[s] = end
        for i in range(n):
            rid = ids[i]
            t = self.api_ends[rid % self.api_count]
            last = self.api_last[rid]
            if last != last:
                self.api_first[rid] = t
            else:
                gap = t - last
                self._itl_add(gap)
                if gap > self.api_itl_max[rid]:
                    self.api_itl_max[rid] = gap
            self.api_last[rid] = t
            if self.status[rid] == DONE:
                self.api_done[rid] = t
                self.api.answered(rid, t + self.api_residual)
                done = True
        if done and self.api.woken():
            self._wake_arrivals()

    @cython.cfunc
    @cython.exceptval(check=False)  # NOTE: arithmetic only; no Python error to check for
    def _itl_add(self, value: cython.double) -> cython.void:
        """LogHistogram.add(value) on the client's gap histogram (the bucket as _hist_add takes it)."""
        i: cython.longlong
        if value <= 0.0:
            self.itl_zeros += 1.0
            return
        i = cython.cast(cython.longlong, ceil(log(value) / self.log_gamma)) - self.offset
        if i < 0:
            i = 0
        if i > self.num_buckets - 1:
            i = self.num_buckets - 1
        self.itl_counts[i] += 1.0

    def api_itl_zeros(self) -> float:
        """The client gap histogram's zeros (kept here while the core runs: core_run writes them back)."""
        return self.itl_zeros

    @cython.cfunc
    def _route_due(self, now: cython.double) -> cython.void:
        rid: cython.longlong
        rep: Rep
        if self.api is not None:
            self.api.advance(now, self.due)
        while True:
            if self.heap_route:
                if not (self.due and self.due[0][0] <= now):
                    return
                rid = heapq.heappop(self.due)[1]
            elif self.next < self.released and self.arrived[self.next] <= now:
                rid = self.next
            else:
                return
            self.routed[self.next] = rid
            self.next += 1
            if self.prompt[rid] > self.prompt_limit:
                self.status[rid] = IGNORED
                self._on_done(rid)
                continue
            rep = self._pick()
            self.replica[rid] = rep.index
            rep.waiting.append(rid)
            rep.outstanding += 1
            self._notify(rep)

    @cython.cfunc
    def _pick(self) -> Rep:
        rep: Rep
        best: Rep
        i: cython.Py_ssize_t
        nrep: cython.Py_ssize_t = len(self.reps)
        if self.dp > 1:
            return self._lockstep_pick()
        if self.router_rr:
            rep = self.reps[self.rr % nrep]
            self.rr += 1
            return rep
        best = self.reps[0]
        for i in range(1, nrep):
            rep = self.reps[i]
            if rep.outstanding < best.outstanding:
                best = rep
        return best

    @cython.cfunc
    def _notify(self, rep: Rep) -> cython.void:
        if self.dp > 1:
            self._lockstep_notify(rep)
            return
        if rep.sched_waits:
            rep.sched_waits = False
            self._schedule(self.now, NORMAL, rep.index * self.pp)

    @cython.cfunc
    def _on_done(self, rid: cython.longlong) -> cython.void:
        nxt: cython.longlong
        if self.role != ROLE_AGGREGATED:  # a pool of a disaggregated run: the run counts its requests
            self.owner.pool_done(self, rid)
            return
        self.num_done += 1
        if self.status[rid] == IGNORED:
            self.num_ignored += 1
            if self.api is not None and self.api.failed(rid, self.now):
                self._wake_arrivals()
        if self.released < self.n:  # closed loop: the finished request's slot goes to the next one (_on_done)
            nxt = self.released
            self.released += 1
            # Cluster._on_done: sent now if due (plus the front end's delay), else at its own time
            self.arrived[nxt] = max(self.arrived[nxt], self.now + self.frontend)
            if self.slot_waits:  # the arrivals process waited on `slot_freed`: its succeed() event
                self.slot_waits = False
                self._schedule(self.now, NORMAL, self.slot0 + SLOT_ARRIVALS)
        if self.conversation and self.child[rid] >= 0:  # the answer is in: the next round after its think time
            nxt = self.child[rid]
            self.arrived[nxt] = self.now + self.frontend + self.think[nxt]
            heapq.heappush(self.due, (self.arrived[nxt], nxt))
            if self.slot_waits:
                self.slot_waits = False
                self._schedule(self.now, NORMAL, self.slot0 + SLOT_ARRIVALS)
        if self.num_done == self.n and not self.finished:
            self.finished = True
            self._schedule(self.now, NORMAL, self.slot0 + SLOT_FINISHED)

    # -- the scheduler loop, which runs stage 0 (replica.Replica.schedule) ------------------------------
    @cython.cfunc
    def _sched_resume(self, rep: Rep) -> cython.void:
        if rep.busy0:  # its stage-0 timeout ended
            rep.busy0 = False
            if self.pp == 1:
                self._complete(rep, rep.prefills0, rep.decodes0)
            else:
                self._hand_over(rep, 1, rep.stage0)
            rep.idle_mark[0] = self._inflight_time(rep, self.now)
        self._sched_loop(rep)

    @cython.cfunc
    def _sched_loop(self, rep: Rep) -> cython.void:
        """The scheduler loop's body after a micro-batch's completion: route, form the next batch, start it."""
        now: cython.double
        formed: cython.bint
        while True:
            now = self.now
            if self.role == ROLE_DECODE:  # its "arrivals": prefilled requests given KV blocks, then the link
                self.owner.admit_incoming(self, rep, now)
            else:
                self._route_due(now)
            formed = False
            if rep.in_flight < self.pp:
                formed = self._policy(rep, now)
            if not formed:
                if rep.in_flight == 0 and not (len(rep.prefilling) + len(rep.decoding) + rep.held) and rep.waiting:
                    self._drop_unfittable(rep)
                    continue
                rep.sched_waits = True
                return
            self._start_micro_batch(rep, self.b_prefills, self.b_decodes, now)
            return

    @cython.cfunc
    def _start_micro_batch(self, rep: Rep, prefills: list, dec: list, now: cython.double) -> cython.void:
        rid: cython.longlong
        chunk: cython.longlong
        c: cython.longlong
        p: cython.longlong
        kv_sum: cython.longlong = 0
        num_prefill: cython.longlong = 0
        s: cython.int
        d: cython.double
        nd: cython.longlong = len(dec)
        chunks: list = _NONE
        prefixes: list = _NONE
        if prefills:
            chunks = []
            prefixes = []
        self.batch_no += 1
        for rid, chunk in prefills:
            if self.stamp[rid] == self.batch_no or self.inflight[rid]:
                self.error = INV_SCHEDULED_TWICE
            self.stamp[rid] = self.batch_no
            chunks.append(chunk)
            prefixes.append(self.computed[rid])
        for rid in dec:
            if self.stamp[rid] == self.batch_no or self.inflight[rid]:
                self.error = INV_SCHEDULED_TWICE
            self.stamp[rid] = self.batch_no
            kv_sum += self.computed[rid] + 1
        # Replica._count_work
        for s in range(len(chunks)):
            c = chunks[s]
            p = prefixes[s]
            num_prefill += c
            rep.w_prefill_pairs += c * p + c * (c + 1) // 2
            rep.w_prefill_kv += p + c
        rep.w_tokens += num_prefill + nd
        rep.w_decode_kv += kv_sum
        rep.w_micro_batches += 1
        rep.bubble[0] += self._inflight_time(rep, now) - rep.idle_mark[0]
        if self.pp > 1:
            for rid in dec:
                self.inflight[rid] = 1
            for rid, _chunk in prefills:
                self.inflight[rid] = 1
        kv_used: cython.longlong = rep.num_blocks - rep.free
        if self.pp == 1:
            d = self.timer.time(chunks, prefixes, nd, kv_sum, 0)
            rep.prefills0 = prefills
            rep.decodes0 = dec
        else:
            durations: list = [self.timer.time(chunks, prefixes, nd, kv_sum, s) for s in range(self.pp)]
            d = durations[0]
            rep.stage0 = (prefills, dec, durations, num_prefill, kv_used)
        rep.busy0 = True
        if not rep.in_flight:
            rep.busy_since = now
        rep.in_flight += 1
        self._row(rep, 0, now, now + d, num_prefill, nd, len(prefills) + nd, kv_used)
        self._schedule(now + d, NORMAL, rep.index * self.pp)

    # -- decode stretches: consecutive decode-only iterations of one replica, nothing else due ------------
    @cython.cfunc
    @cython.locals(slot=cython.int, i=cython.int, k=cython.Py_ssize_t, nd=cython.Py_ssize_t, rid=cython.longlong,
                   left=cython.longlong, limit=cython.double, t=cython.double, now=cython.double,
                   n_need=cython.longlong, kv_sum=cython.longlong, kv_used=cython.longlong, d=cython.double)  # fmt: skip
    def _decode_stretch(self, rep: Rep) -> cython.void:
        """Run the replica's next decode-only iterations here, one after the other, while each is surely the
        next event of the whole simulation and changes nothing but its own requests: the same steps as
        run() -> _sched_resume -> _complete -> _policy -> _start_micro_batch, in the same order and with
        the same float operations, over the batch's ids in a C array instead of a Python list.

        It starts after _sched_resume started a decode-only batch (PP = 1, nothing waiting or prefilling,
        the batch is rep.decoding itself) and stops, leaving that replica's event pending for run(), before
        an iteration that ends at or after another pending event or the next arrival (ties go to the other
        event: it was scheduled earlier), before the completion of a batch in which a request finishes, or
        when the next batch's KV growth would not fit (the scheduler loop then forms it: preemption)."""
        ids: cython.longlong[:] = self.ids
        slot = rep.index  # PP = 1: the replica's scheduler loop is its only slot
        pol: cython.int = self.policy
        if not rep.busy0 or rep.prefills0 or rep.prefilling or rep.waiting:
            return
        dec: list = rep.decodes0
        if not dec:
            return
        if pol == P_V1:  # its batch is a new list: every running request must be in it, as a decode
            if not self._v1_stretchable(rep, dec):
                return
        elif pol == P_SGLANG:  # a copy of rep.decoding (Scheduler.update_running_batch); the radix cache's
            # pages are its own allocator's: not stretched
            if rep.radix is not None or dec != rep.sg_running:
                return
        elif dec is not rep.decoding or rep.cache is not None:
            return
        # every other pending event and the next arrival: an iteration must end strictly before them all
        limit = float("inf")
        for i in range(self.num_slots):
            if i != slot and self.ev_on[i] and self.ev_time[i] < limit:
                limit = self.ev_time[i]
        if self.heap_route:
            if self.due and self.due[0][0] < limit:
                limit = self.due[0][0]
            if self.api is not None and self.api.pending() < limit:
                limit = self.api.pending()
        elif self.next < self.released and self.arrived[self.next] < limit:
            limit = self.arrived[self.next]
        # completions before the first one that finishes a request (its bookkeeping is the loop's)
        nd = len(dec)
        left = self.output[dec[0]] - self.generated[dec[0]]
        for k in range(nd):
            rid = dec[k]
            ids[k] = rid
            if self.output[rid] - self.generated[rid] < left:
                left = self.output[rid] - self.generated[rid]
        left -= 1
        while left > 0:
            t = self.ev_time[slot]
            if not t < limit or t < self.now:  # another event first, or time going backwards (run() says so)
                return
            # run(): this event is the smallest key
            self.ev_on[slot] = 0
            self.now = t
            now = t
            left -= 1
            # _sched_resume: the batch ended; _complete at PP = 1 with decodes only
            rep.busy0 = False
            rep.in_flight -= 1
            if not rep.in_flight:
                rep.inflight_acc += now - rep.busy_since
            self._complete_ids(nd, now)
            if self.api is not None:  # nothing else is due (the limit): ApiServers.output's advance has no work
                self._api_step(ids, nd, now)
            rep.idle_mark[0] = self._inflight_time(rep, now)
            # _sched_loop: nothing to route (the next arrival is after now); the policy's batch is rep.decoding
            # with its KV growth (_schedule_decodes), when that fits without preemption
            n_need = 0
            if self.stretch_grow:  # NOTE: first: the sarathi-like policies' hot path pays no extra test
                for k in range(nd):
                    rid = ids[k]
                    if self._block_start(self.computed[rid]):
                        n_need += 1
                        self.blocks[rid] += 1
                if not rep.free - n_need >= 1:
                    for k in range(nd):
                        rid = ids[k]
                        if self._block_start(self.computed[rid]):
                            self.blocks[rid] -= 1
                    self._sched_loop(rep)
                    return
                self._allocate(rep, n_need)
            elif pol == P_V1:
                if not self._v1_grow(rep, nd):
                    self._sched_loop(rep)  # a preemption (or anything unusual): the policy's own step
                    return
            elif pol == P_SGLANG and not self._sg_stretch_step(rep, nd):
                self._sched_loop(rep)  # a retraction: the policy's own step
                return
            # _start_micro_batch with no prefills
            self.batch_no += 1
            kv_sum = 0
            for k in range(nd):
                rid = ids[k]
                if self.stamp[rid] == self.batch_no or self.inflight[rid]:
                    self.error = INV_SCHEDULED_TWICE
                self.stamp[rid] = self.batch_no
                kv_sum += self.computed[rid] + 1
            rep.w_tokens += nd
            rep.w_decode_kv += kv_sum
            rep.w_micro_batches += 1
            rep.bubble[0] += self._inflight_time(rep, now) - rep.idle_mark[0]
            kv_used = rep.num_blocks - rep.free
            d = self.timer.decode_time(nd, kv_sum, 0)
            rep.prefills0 = _NONE
            rep.busy0 = True
            if not rep.in_flight:
                rep.busy_since = now
            rep.in_flight += 1
            self._row(rep, 0, now, now + d, 0, nd, nd, kv_used)
            self._schedule(now + d, NORMAL, slot)
            if self.error:
                return

    @cython.cfunc
    @cython.locals(k=cython.Py_ssize_t, rid=cython.longlong, c=cython.longlong, bs=cython.longlong)
    def _v1_stretchable(self, rep: Rep, dec: list) -> cython.bint:
        """Is _vllm_v1's next step, after this decode-only batch, surely the same batch with only its blocks
        grown? Every running request is in it as a decode (so none was left out by the token budget), in
        decode state (computed + 1 == its tokens: the step schedules one token each), and, with prefix
        caching, its blocks and cached-block count are those of its last allocate_slots (which _v1_grow's
        skipping of no-op calls relies on)."""
        bs = self.block_size
        if len(dec) != len(rep.running) or len(dec) > self.budget or rep.finished:
            return False
        for k in range(len(dec)):
            rid = dec[k]
            if rid != rep.running[k]:
                return False
            c = self.computed[rid]
            if c < self.target[rid] or c + 1 != self._num_tokens(rid):
                return False
            if rep.cache is not None and (
                self.blocks[rid] != -(-(c + 1) // bs) or rep.cache.num_cached.get(rid, -1) != (c + 1) // bs
            ):
                return False
        return True

    @cython.cfunc
    @cython.locals(k=cython.Py_ssize_t, rid=cython.longlong, c=cython.longlong, need=cython.longlong,
                   n_need=cython.longlong, bs=cython.longlong)  # fmt: skip
    def _v1_grow(self, rep: Rep, nd: cython.Py_ssize_t) -> cython.bint:
        """_vllm_v1's running loop for a batch of decodes only (one token each, admission order): each
        request's blocks for computed + 1 tokens, and with prefix caching the blocks that became full are
        cached (PrefixCache.allocate_slots). False, changing nothing, when the growth would preempt (the
        step's `while rep.free < need`: with needs of 0 or 1 that is their sum exceeding the free blocks)."""
        bs = self.block_size
        n_need = 0
        for k in range(nd):
            rid = self.ids[k]
            need = -(-(self.computed[rid] + 1) // bs) - self.blocks[rid]
            if need < 0 or need > 1:
                return False
            n_need += need
        if n_need > rep.free:
            return False
        if rep.cache is None:
            if n_need:
                for k in range(nd):
                    rid = self.ids[k]
                    self.blocks[rid] = -(-(self.computed[rid] + 1) // bs)
                self._allocate(rep, n_need)
            return True
        for k in range(nd):  # in admission order: the order the free queue hands out and caches blocks
            rid = self.ids[k]
            c = self.computed[rid]
            # NOTE: a call that would take no block and cache none (the request's blocks hold c + 1 tokens
            # already and no block became full) changes nothing: skipped (_v1_stretchable checked the counts)
            if -(-(c + 1) // bs) != self.blocks[rid] or (c + 1) % bs == 0:
                self.blocks[rid] = rep.cache.allocate_slots(rid, (), c + 1, min(c + 1, self._num_tokens(rid)))
        rep.free = rep.cache.free
        return True

    @cython.cfunc
    @cython.locals(k=cython.Py_ssize_t, rid=cython.longlong, need=cython.longlong)
    def _sg_stretch_step(self, rep: Rep, nd: cython.Py_ssize_t) -> cython.bint:
        """_sglang's step for a running batch of decodes only, nothing waiting or prefilling: the last batch
        was this decode batch (nothing to merge) and none of its requests finished (nothing to filter), so
        _sg_choose chooses nothing and changes nothing; then _sg_decode: when the pages fit,
        new_token_ratio decays one step and the pages grow. False, changing nothing, when they do not fit
        (retraction is the policy's own step) or when the running batch is not that batch."""
        if rep.sg_last is not None or len(rep.sg_running) != nd:
            return False
        need = 0
        for k in range(nd):
            if self._block_start(self.computed[self.ids[k]]):
                need += 1
        if need > rep.free:
            return False
        rep.sg_ratio = max(rep.sg_ratio - self.sg_decay, self.sg_min)  # NewTokenRatioTracker.decay_step
        if need:  # _sg_grow
            for k in range(nd):
                rid = self.ids[k]
                if self._block_start(self.computed[rid]):
                    self.blocks[rid] += 1
            self._allocate(rep, need)
        return True

    @cython.cfunc
    @cython.exceptval(check=False)  # NOTE: arithmetic only; no Python error to check for
    @cython.locals(k=cython.Py_ssize_t, rid=cython.longlong, t0=cython.double, last=cython.double,
                   gap=cython.double, same=cython.bint)  # fmt: skip
    def _complete_ids(self, nd: cython.Py_ssize_t, now: cython.double) -> cython.void:
        """_complete_decodes over self.ids[:nd], none of which finishes (_decode_stretch made sure)."""
        same = True
        t0 = self.last_token[self.ids[0]]
        for k in range(nd):
            rid = self.ids[k]
            last = self.last_token[rid]
            if last != t0:
                same = False
            gap = now - last
            self.gaps[k] = gap
            self.computed[rid] += 1
            self.generated[rid] += 1
            self.last_token[rid] = now
            if gap > self.tbt_max[rid]:
                self.tbt_max[rid] = gap
        if same:
            self._hist_add(now - t0, nd)
        else:
            for k in range(nd):
                self._hist_add(self.gaps[k], 1.0)

    # -- stages 1..PP-1 (Replica.stage) -------------------------------------------------------------------
    @cython.cfunc
    def _stage_resume(self, rep: Rep, s: cython.int) -> cython.void:
        mb: tuple
        now: cython.double
        d: cython.double
        mb = rep.current[s]
        if mb is not None:  # its timeout ended
            rep.current[s] = None
            if s + 1 < self.pp:
                self._hand_over(rep, s + 1, mb)
            else:
                self._complete(rep, mb[0], mb[1])
                self._notify(rep)
            rep.idle_mark[s] = self._inflight_time(rep, self.now)
        q = rep.queues[s]
        if not q:
            rep.stage_waits[s] = True
            return
        mb = q.popleft()
        now = self.now
        d = mb[2][s]
        rep.bubble[s] += self._inflight_time(rep, now) - rep.idle_mark[s]
        nd: cython.longlong = len(mb[1])
        self._row(rep, s, now, now + d, mb[3], nd, len(mb[0]) + nd, mb[4])
        rep.current[s] = mb
        self._schedule(now + d, NORMAL, rep.index * self.pp + s)

    @cython.cfunc
    def _hand_over(self, rep: Rep, s: cython.int, mb: tuple) -> cython.void:
        rep.queues[s].append(mb)
        if rep.stage_waits[s]:
            rep.stage_waits[s] = False
            self._schedule(self.now, NORMAL, rep.index * self.pp + s)

    @cython.cfunc
    @cython.exceptval(check=False)  # NOTE: arithmetic only; no Python error to check for
    def _inflight_time(self, rep: Rep, t: cython.double) -> cython.double:
        if rep.in_flight:
            return rep.inflight_acc + (t - rep.busy_since)
        return rep.inflight_acc + 0.0

    @cython.cfunc
    def _complete(self, rep: Rep, prefills: list, dec: list) -> cython.void:
        rid: cython.longlong
        chunk: cython.longlong
        now: cython.double = self.now
        rep.in_flight -= 1
        if not rep.in_flight:
            rep.inflight_acc += now - rep.busy_since
        if self.pp > 1:
            for rid in dec:
                self.inflight[rid] = 0
            for rid, _chunk in prefills:
                self.inflight[rid] = 0
            if rep.stale:  # drop the work of requests preempted while this micro-batch was in flight
                dropped = rep.stale.intersection(dec + [rid for rid, chunk in prefills])
                if dropped:
                    rep.stale -= dropped
                    dec = [rid for rid in dec if rid not in dropped]
                    prefills = [(rid, chunk) for rid, chunk in prefills if rid not in dropped]
        sampled: list = _NONE
        if self.api is not None:  # what goes to the API servers: every decode, and the prefills that sampled
            sampled = list(dec)
        if self.pp == 1:  # `dec` may be rep.decoding itself (_paused_decodes): the decodes first, then the
            # prefills whose last chunk moves them into it (the reference's order the other way round gives the
            # same state: the two sets of requests are disjoint and the histogram's counts are integers)
            if dec:
                self._complete_decodes(rep, dec, now)
            for rid, chunk in prefills:
                if self._complete_chunk(rep, rid, chunk, now) and self.api is not None:
                    sampled.append(rid)
        else:
            for rid, chunk in prefills:
                if self._complete_chunk(rep, rid, chunk, now) and self.api is not None:
                    sampled.append(rid)
            if dec:
                self._complete_decodes(rep, dec, now)
        if self.api is not None and sampled:
            self._api_output(sampled)

    # -- the TBT histogram (LogHistogram.add) ---------------------------------------------------------------
    @cython.cfunc
    @cython.exceptval(check=False)  # NOTE: arithmetic only; no Python error to check for
    def _hist_add(self, value: cython.double, weight: cython.double) -> cython.void:
        i: cython.longlong
        j: cython.double
        if value <= 0.0:
            self.zeros += weight
            return
        if self.h_lo < value < self.h_hi:  # NOTE: most gaps fall in the last one's bucket: no log for them
            i = self.h_index
        else:
            i = cython.cast(cython.longlong, ceil(log(value) / self.log_gamma)) - self.offset
            if i < 0:
                i = 0
            if i > self.num_buckets - 1:
                i = self.num_buckets - 1
            # bucket i holds (gamma^(j-1), gamma^j], j = i + offset; the interval kept is narrower by a
            # relative 1e-9, which moves log(v) / log_gamma by ~5e-7, far above the ~1e-12 rounding of that
            # expression: a value inside it takes bucket i through the log too. Clamped buckets: never kept.
            self.h_index = i
            self.h_lo = self.h_hi = 0.0
            if 0 < i < self.num_buckets - 1:
                j = i + self.offset
                self.h_lo = exp((j - 1) * self.log_gamma) * (1.0 + 1e-9)
                self.h_hi = exp(j * self.log_gamma) * (1.0 - 1e-9)
        self.counts[i] += weight
        if self.tbt_bucket >= 0 and i >= self.tbt_bucket:
            self.tbt_above += weight

    # -- results of a finished micro-batch (state.ReplicaState) ---------------------------------------------
    @cython.cfunc
    def _complete_chunk(
        self, rep: Rep, rid: cython.longlong, chunk: cython.longlong, now: cython.double
    ) -> cython.bint:
        """ReplicaState.complete_chunk: True when the chunk was the last and sampled a token."""
        last: cython.double
        gap: cython.double
        self.computed[rid] += chunk
        if self.computed[rid] < self.target[rid]:
            return False
        self.generated[rid] += 1
        last = self.last_token[rid]
        if last == last:  # a re-prefill after preemption: the whole wait is one gap
            gap = now - last
            if gap > self.tbt_max[rid]:
                self.tbt_max[rid] = gap
            self._hist_add(gap, 1.0)
        else:
            self.first_token[rid] = now
        self.last_token[rid] = now
        rep.prefilling.remove(rid)
        if self.generated[rid] >= self.output[rid]:
            self._finish(rep, rid, now)
        else:
            if rep.radix is not None:  # SGLang's checkpoint_kv_cache: a prefilled prompt joins the tree
                rep.radix.checkpoint(rid, self.computed[rid])
                self._sync_radix(rep)
            _insort(rep.decoding, rid)
        return True

    @cython.cfunc
    def _complete_decodes(self, rep: Rep, dec: list, now: cython.double) -> cython.void:
        """Each request in `dec` computed one token and sampled the next (ReplicaState.complete_decodes)."""
        rid: cython.longlong
        t0: cython.double
        last: cython.double
        gap: cython.double
        k: cython.Py_ssize_t = 0
        j: cython.Py_ssize_t
        same: cython.bint = True
        done: list = _NONE
        t0 = self.last_token[dec[0]]
        for rid in dec:  # NOTE: one pass; the gaps are kept in case they differ (then each is a sample)
            last = self.last_token[rid]
            if last != t0:
                same = False
            gap = now - last
            self.gaps[k] = gap
            k += 1
            self.computed[rid] += 1
            self.generated[rid] += 1
            self.last_token[rid] = now
            if gap > self.tbt_max[rid]:
                self.tbt_max[rid] = gap
            if self.generated[rid] >= self.output[rid]:
                if done is _NONE:
                    done = []
                done.append(rid)
        if same:  # the common case: all got their last token at once, so they waited the same gap
            self._hist_add(now - t0, k)
        else:
            for j in range(k):
                self._hist_add(self.gaps[j], 1.0)
        for rid in done:
            rep.decoding.remove(rid)
            self._finish(rep, rid, now)

    @cython.cfunc
    def _finish(self, rep: Rep, rid: cython.longlong, now: cython.double) -> cython.void:
        if self.role == ROLE_PREFILL:  # the KV stays until the decode side has read it
            self.owner.prefilled(self, rep, rid, now)
            return
        self.completed[rid] = now
        self.status[rid] = DONE
        if rep.radix is not None:
            rep.radix.finish(rid)
            self._sync_radix(rep)
        elif rep.cache is None:
            self._release(rep, self.blocks[rid])
        else:
            rep.finished.append(rid)
        self.blocks[rid] = 0
        if self.policy == P_V1:
            rep.running.remove(rid)
        rep.outstanding -= 1
        self._on_done(rid)

    # -- KV blocks (kvcache.BlockManager) -------------------------------------------------------------------
    @cython.cfunc
    @cython.exceptval(check=False)  # NOTE: arithmetic only; no Python error to check for
    def _allocate(self, rep: Rep, n: cython.longlong) -> cython.void:
        if n < 0 or n > rep.free:
            self.error = INV_KV_NEGATIVE
        rep.free -= n

    @cython.cfunc
    @cython.exceptval(check=False)  # NOTE: arithmetic only; no Python error to check for
    def _release(self, rep: Rep, n: cython.longlong) -> cython.void:
        if n < 0 or rep.free + n > rep.num_blocks:
            self.error = INV_KV_OVERFULL
        rep.free += n

    @cython.cfunc
    @cython.exceptval(check=False)  # NOTE: arithmetic only; no Python error to check for
    def _can_allocate(self, rep: Rep, n: cython.longlong) -> cython.bint:
        return rep.free - n >= rep.watermark

    @cython.cfunc
    @cython.inline
    @cython.exceptval(check=False)
    def _block_start(self, computed: cython.longlong) -> cython.bint:
        """Does the next token start a new KV block (computed % block_size == 0)?"""
        if self.block_mask >= 0:  # NOTE: a mask, not a division: this runs for every decode of every batch
            return (computed & self.block_mask) == 0
        return computed % self.block_size == 0

    # -- transitions (state.ReplicaState) ------------------------------------------------------------------
    @cython.cfunc
    @cython.exceptval(check=False)  # NOTE: arithmetic only; no Python error to check for
    def _num_tokens(self, rid: cython.longlong) -> cython.longlong:
        return self.prompt[rid] + self.generated[rid]

    @cython.cfunc
    @cython.exceptval(check=False)  # NOTE: arithmetic only; no Python error to check for
    def _admission_blocks(self, rid: cython.longlong) -> cython.longlong:
        if not self.dynamic:
            return self.reserve
        return -(-self._num_tokens(rid) // self.block_size)

    @cython.cfunc
    def _num_running(self, rep: Rep) -> cython.longlong:
        return len(rep.prefilling) + len(rep.decoding) + rep.held

    @cython.cfunc
    def _head_admissible(self, rep: Rep, rid: cython.longlong) -> cython.bint:
        """ReplicaState.head_admissible: blocks fit, the batch has room, not in a micro-batch in flight."""
        if not self._can_allocate(rep, self._admission_blocks(rid)) or self._num_running(rep) >= self.max_batch:
            return False
        return not (self.pp > 1 and self.inflight[rid])

    @cython.cfunc
    def _paused_decodes(self, rep: Rep) -> list:
        if self.pp > 1:
            return [rid for rid in rep.decoding if not self.inflight[rid]]
        # NOTE: PP = 1: the list itself, not a copy (an allocation per iteration): nothing changes it while the
        # batch is in flight, and _complete takes the batch's decodes before its prefills' last chunks join it
        return rep.decoding

    @cython.cfunc
    def _drop_too_long(self, rep: Rep) -> cython.void:
        rid: cython.longlong
        while rep.waiting and self._num_tokens(rep.waiting[0]) > self.prompt_limit:
            rid = rep.waiting.popleft()
            self.status[rid] = IGNORED
            rep.outstanding -= 1
            self._on_done(rid)

    @cython.cfunc
    def _drop_unfittable(self, rep: Rep) -> cython.void:
        rid: cython.longlong = rep.waiting.popleft()
        self.status[rid] = IGNORED
        rep.outstanding -= 1
        self._on_done(rid)

    @cython.cfunc
    def _admit_head(self, rep: Rep, now: cython.double, blocks: cython.longlong) -> cython.longlong:
        """blocks < 0: the admission blocks (ReplicaState.admit_head's default); vllm-v1 passes its chunk's."""
        rid: cython.longlong = rep.waiting.popleft()
        if blocks < 0:
            blocks = self._admission_blocks(rid)
        if rep.radix is not None:
            pass  # sglang locks its prefix and allocates once its whole prefill batch is chosen (_sg_prefill)
        elif rep.cache is None:
            self._allocate(rep, blocks)
        else:
            rep.admit_seq[rid] = rep.admitted
            rep.admitted += 1
        self.blocks[rid] = blocks
        self.computed[rid] = 0
        self.target[rid] = self._num_tokens(rid)
        self.status[rid] = RUNNING
        if self.scheduled[rid] != self.scheduled[rid]:  # NaN: first admission
            self.scheduled[rid] = now
        _insort(rep.prefilling, rid)
        if self.policy == P_V1:
            rep.running.append(rid)
        return rid

    @cython.cfunc
    def _preempt(self, rep: Rep, rid: cython.longlong, to_back: cython.bint = False) -> cython.void:
        """Recompute preemption: KV dropped, to the front of waiting (sglang's retraction: the back)."""
        if rep.radix is not None:
            rep.radix.retract(rid)
            self._sync_radix(rep)
        elif rep.cache is None:
            self._release(rep, self.blocks[rid])
        else:
            rep.cache.free_request(rid)
            rep.free = rep.cache.free
        self.blocks[rid] = 0
        self.computed[rid] = 0
        self.req_preemptions[rid] += 1
        if self.inflight[rid]:
            rep.stale.add(rid)
        if self.policy == P_V1:
            rep.running.remove(rid)
        if not _remove_sorted(rep.decoding, rid):
            rep.prefilling.remove(rid)
        if to_back:
            rep.waiting.append(rid)
        else:
            rep.waiting.appendleft(rid)
        rep.preemptions += 1

    @cython.cfunc
    def _abort(self, rep: Rep, rid: cython.longlong) -> cython.void:
        """ReplicaState.abort: a running request the engine gives up on, freed and counted ignored."""
        if rep.radix is not None:
            rep.radix.retract(rid)
            self._sync_radix(rep)
        else:
            self._release(rep, self.blocks[rid])
        self.blocks[rid] = 0
        self.status[rid] = IGNORED
        if not _remove_sorted(rep.decoding, rid):
            rep.prefilling.remove(rid)
        rep.outstanding -= 1
        self._on_done(rid)

    # -- the decode part of a batch: KV growth and preemption ---------------------------------------------
    @cython.cfunc
    @cython.cdivision(True)  # NOTE: only `%` of token counts (never negative): C's % is Python's
    def _schedule_decodes(self, rep: Rep) -> list:
        rid: cython.longlong
        n_need: cython.longlong = 0
        dec: list = self._paused_decodes(rep)
        if not self.dynamic or not dec:
            return dec
        for rid in dec:  # NOTE: one pass, undone below in the rare case that blocks run short
            if self._block_start(self.computed[rid]):
                n_need += 1
                self.blocks[rid] += 1
        if rep.free - n_need >= 1:  # every can_append_slot check of the loop below would pass
            self._allocate(rep, n_need)
            return dec
        for rid in dec:
            if self._block_start(self.computed[rid]):
                self.blocks[rid] -= 1
        return self._schedule_decodes_preempting(rep)

    @cython.cfunc
    @cython.cdivision(True)  # NOTE: only `%` of token counts (never negative): C's % is Python's
    def _schedule_decodes_preempting(self, rep: Rep) -> list:
        rid: cython.longlong
        victim: cython.longlong
        todo = deque(sorted(rep.prefilling + rep.decoding))
        out: list = []
        preempted_self: cython.bint
        while todo:
            rid = todo.popleft()
            if self.inflight[rid] or self.computed[rid] < self.target[rid]:
                continue
            preempted_self = False
            while not rep.free > 0:
                victim = todo.pop() if todo else rid
                self._preempt(rep, victim)
                if victim == rid:
                    preempted_self = True
                    break
            if not preempted_self:
                if self._block_start(self.computed[rid]):
                    self._allocate(rep, 1)
                    self.blocks[rid] += 1
                out.append(rid)
        return out

    # -- policies (policies.py, budgets.py) --------------------------------------------------------------
    @cython.cfunc
    def _policy(self, rep: Rep, now: cython.double) -> cython.bint:
        """Form the batch into b_prefills [(id, chunk)] and b_decodes [id]; False when it would be empty."""
        pol: cython.int = self.policy
        prefills: list
        decodes: list
        more: list
        if pol == P_SARATHI:
            decodes = self._schedule_decodes(rep)
            prefills = self._partial_prefills(rep, len(decodes))
            more = self._admit_chunked(rep, now, self.b_tokens)
            if more:
                prefills = prefills + more if prefills else more
        elif pol == P_FCFS:
            if self._num_running(rep):
                prefills, decodes = _NONE, self._paused_decodes(rep)
            else:
                prefills, decodes = self._admit_whole(rep, now, False), _NONE
        elif pol == P_ORCA:
            decodes = self._paused_decodes(rep)
            prefills = self._admit_whole(rep, now, False)
        elif pol == P_VLLM:
            prefills = self._admit_whole(rep, now, True)
            decodes = _NONE if prefills else self._schedule_decodes(rep)
        elif pol == P_CHUNKED:
            prefills, decodes = self._chunked(rep, now)
        elif pol == P_V1:
            prefills, decodes = self._vllm_v1(rep, now)
        elif pol == P_SGLANG:
            prefills, decodes = self._sglang(rep, now)
        else:
            decodes = self._schedule_decodes(rep)
            prefills = self._fill_chunks(rep, now, len(decodes), decodes)
        self.b_prefills = prefills
        self.b_decodes = decodes
        return len(prefills) > 0 or len(decodes) > 0

    @cython.cfunc
    def _chunked(self, rep: Rep, now: cython.double) -> tuple:
        tried: cython.bint = rep.turn_prefill
        prefills: list
        if tried:
            prefills = self._prefills_only(rep, now)
            if prefills:
                rep.turn_prefill = False
                return prefills, _NONE
        decodes: list = self._schedule_decodes(rep)
        rep.turn_prefill = True
        if decodes or tried:
            return _NONE, decodes
        prefills = self._prefills_only(rep, now)
        rep.turn_prefill = not prefills
        return prefills, _NONE

    @cython.cfunc
    def _prefills_only(self, rep: Rep, now: cython.double) -> list:
        prefills: list = self._partial_prefills(rep, 0)
        return prefills or self._admit_chunked(rep, now, self.b_tokens)

    @cython.cfunc
    def _partial_prefills(self, rep: Rep, tokens: cython.longlong) -> list:
        """Next chunks of admitted prompts, FCFS, while the budget lasts; b_tokens: the tokens after them."""
        rid: cython.longlong
        n: cython.longlong
        out: list = _NONE
        for rid in rep.prefilling:
            if self.pp > 1 and self.inflight[rid]:
                continue
            n = min(self.target[rid] - self.computed[rid], self.budget - tokens)
            if n <= 0:
                continue
            if out is _NONE:
                out = []
            out.append((rid, n))
            tokens += n
        self.b_tokens = tokens
        return out

    @cython.cfunc
    def _admit_chunked(self, rep: Rep, now: cython.double, tokens: cython.longlong) -> list:
        rid: cython.longlong
        n: cython.longlong
        self._drop_too_long(rep)
        if not rep.waiting:
            return _NONE
        out: list = []
        while rep.waiting:
            rid = rep.waiting[0]
            if not self._head_admissible(rep, rid):
                break
            n = min(self._num_tokens(rid), self.budget - tokens)
            if n <= 0:
                break
            self._admit_head(rep, now, -1)
            out.append((rid, n))
            tokens += n
            self._drop_too_long(rep)
        return out

    @cython.cfunc
    def _admit_whole(self, rep: Rep, now: cython.double, limited: cython.bint) -> list:
        rid: cython.longlong
        n: cython.longlong
        tokens: cython.longlong = 0
        self._drop_too_long(rep)
        if not rep.waiting:
            return _NONE
        out: list = []
        while rep.waiting:
            rid = rep.waiting[0]
            n = self._num_tokens(rid)
            if not self._head_admissible(rep, rid) or (limited and tokens + n > self.budget):
                break
            self._admit_head(rep, now, -1)
            out.append((rid, n))
            tokens += n
            self._drop_too_long(rep)
        return out

    # -- the adaptive policies (budgets.fill_chunks and the three sizes) ----------------------------------
    @cython.cfunc
    def _fill_chunks(self, rep: Rep, now: cython.double, tokens: cython.longlong, decodes: list) -> list:
        rid: cython.longlong
        prefix: cython.longlong
        n: cython.longlong
        nd: cython.longlong = len(decodes)
        kv_sum: cython.longlong = 0
        budget: cython.longlong = self.budget
        out: list = []
        chunks: list = []  # the timer's view of the prefills so far
        prefixes: list = []
        for rid in decodes:
            kv_sum += self.computed[rid] + 1
        if self.policy == P_PRESSURE:
            budget = self._pressure_budget(rep, now)
        for rid in rep.prefilling:
            if self.pp > 1 and self.inflight[rid]:
                continue
            prefix = self.computed[rid]
            n = self._size(chunks, prefixes, tokens, prefix, self.target[rid] - prefix, nd, kv_sum, budget)
            if n > 0:
                out.append((rid, n))
                chunks.append(n)
                prefixes.append(prefix)
                tokens += n
        self._drop_too_long(rep)
        while rep.waiting:
            rid = rep.waiting[0]
            if not self._head_admissible(rep, rid):
                break
            n = self._size(chunks, prefixes, tokens, 0, self._num_tokens(rid), nd, kv_sum, budget)
            if n <= 0:
                break
            self._admit_head(rep, now, -1)
            out.append((rid, n))
            chunks.append(n)
            prefixes.append(0)
            tokens += n
            self._drop_too_long(rep)
        return out

    @cython.cfunc
    def _fits(self, chunks: list, prefixes: list, c: cython.longlong, prefix: cython.longlong,
              nd: cython.longlong, kv_sum: cython.longlong) -> cython.bint:  # fmt: skip
        """The size functions' `fits(c)`: slo-aware over every stage, equal-cost on stage 0 alone."""
        if self.policy == P_EQUAL:
            return self.timer.time([c], [prefix], 0, 0, 0) <= self.equal_limit
        return self.timer.through(chunks + [c], prefixes + [prefix], nd, kv_sum) <= self.tbt_target

    @cython.cfunc
    def _largest_fitting(self, chunks: list, prefixes: list, hi: cython.longlong, prefix: cython.longlong,
                         nd: cython.longlong, kv_sum: cython.longlong) -> cython.longlong:  # fmt: skip
        lo: cython.longlong
        mid: cython.longlong
        if hi <= 0 or self._fits(chunks, prefixes, hi, prefix, nd, kv_sum):
            return max(hi, 0)
        lo = 0
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self._fits(chunks, prefixes, mid, prefix, nd, kv_sum):
                lo = mid
            else:
                hi = mid
        return lo

    @cython.cfunc
    def _size(self, chunks: list, prefixes: list, tokens: cython.longlong, prefix: cython.longlong,
              want: cython.longlong, nd: cython.longlong, kv_sum: cython.longlong,
              budget: cython.longlong) -> cython.longlong:  # fmt: skip
        n: cython.longlong
        hi: cython.longlong
        floor: cython.longlong
        if self.policy == P_PRESSURE:
            floor = self.pressure_floor
            n = min(want, budget - tokens)
            while (
                n > 0
                and tokens + n > floor
                and self.timer.through(chunks + [n], prefixes + [prefix], nd, kv_sum) > self.tbt_target
            ):
                n = max(n // 2, floor - tokens)
            return n
        hi = min(want, self.budget - tokens)
        n = self._largest_fitting(chunks, prefixes, hi, prefix, nd, kv_sum)
        if self.policy == P_SLO:
            if n == 0 and not chunks and not nd:
                n = min(want, PROGRESS_FLOOR)
        elif n == 0 and not chunks and not tokens:  # equal-cost
            n = min(hi, 1)
        return n

    @cython.cfunc
    def _pressure_budget(self, rep: Rep, now: cython.double) -> cython.longlong:
        if not rep.waiting:
            return self.pressure_floor
        if now - self.arrived[rep.waiting[0]] > self.sched_delay_slo / 2:
            return self.budget
        return min(self.budget, self.pressure_floor * (1 + len(rep.waiting)))

    # -- vllm-v1 (budgets.vllm_v1_batch: its design note) ------------------------------------------------
    @cython.cfunc
    def _vllm_v1(self, rep: Rep, now: cython.double) -> tuple:
        rid: cython.longlong
        victim: cython.longlong
        n: cython.longlong
        want: cython.longlong
        whole: cython.longlong
        need: cython.longlong
        computed: cython.longlong
        target: cython.longlong
        is_prefill: cython.bint
        preempted: cython.bint = False
        budget: cython.longlong = self.budget
        eligible: cython.longlong = len(rep.running) + len(rep.waiting)
        thr: cython.longlong = self.long_threshold if eligible > 1 else 0
        bs: cython.longlong = self.block_size
        i: cython.Py_ssize_t = 0
        running: list = rep.running
        prefills: list = []
        decodes: list = []
        cache: object = rep.cache
        if cache is not None and rep.finished:
            self._release_finished(rep)
        if thr and self.long_adaptive:
            thr = max(thr, self.budget // eligible)
        while i < len(running) and budget > 0:
            rid = running[i]
            if self.pp > 1 and self.inflight[rid]:
                i += 1
                continue
            computed = self.computed[rid]
            target = self.target[rid]
            is_prefill = computed < target
            n = target - computed if is_prefill else 1
            n = min(n, thr if thr else budget, budget)
            need = -(-(computed + n) // bs) - self.blocks[rid]
            while rep.free < need:
                victim = running[len(running) - 1]
                self._preempt(rep, victim)
                preempted = True
                if victim == rid:
                    break
            if i >= len(running):
                break
            if cache is None:
                self._allocate(rep, need)
                self.blocks[rid] += need
            else:
                want = min(computed + n, self._num_tokens(rid))
                # NOTE: a call that takes no block (its blocks hold computed + n tokens: need <= 0, as blocks is
                # its block count) and caches none (the full blocks of its first `want` tokens are cached) changes
                # nothing: skipped, as _v1_grow skips it (most decodes of a step; attention DP runs every step here)
                if need > 0 or want // bs > cache.num_cached[rid]:
                    self.blocks[rid] = cache.allocate_slots(rid, (), computed + n, want)
                    rep.free = cache.free
            if is_prefill:
                prefills.append((rid, n))
            else:
                decodes.append(rid)
            budget -= n
            i += 1
        if preempted:
            if not prefills and not decodes and not running:
                return self._vllm_v1(rep, now)
            return prefills, decodes
        self._drop_too_long(rep)
        while rep.waiting and budget > 0 and len(running) < self.max_batch:
            rid = rep.waiting[0]
            if self.pp > 1 and self.inflight[rid]:
                break
            want = self._num_tokens(rid)
            if cache is not None:
                n = self._admit_cached(rep, rid, want, thr, budget, now)
                if not n:
                    break
            else:
                n = min(want, thr if thr else budget, budget)
                whole = -(-want // bs)
                if not self._can_allocate(rep, whole if self.full_isl else -(-n // bs)):
                    break
                if whole > rep.num_blocks - rep.watermark:
                    break  # never fits even alone (budgets._NEVER_FITS)
                self._admit_head(rep, now, -(-n // bs))
            prefills.append((rid, n))
            budget -= n
            self._drop_too_long(rep)
        return prefills, decodes

    @cython.cfunc
    def _admit_cached(self, rep: Rep, rid: cython.longlong, want: cython.longlong, thr: cython.longlong,
                      budget: cython.longlong, now: cython.double) -> cython.longlong:  # fmt: skip
        """budgets._admit_cached: the waiting head with its longest cached prefix, or 0 when it does not fit."""
        cache: object = rep.cache
        hits: list = cache.lookup(rid, want)
        hit: cython.longlong = len(hits) * self.block_size
        n: cython.longlong = min(want - hit, thr if thr else budget, budget)
        free: cython.longlong = cache.free
        if self.full_isl and cache.blocks_to_allocate(rid, min(want, self.max_model_len), hits) > free:
            return 0
        if not self.full_isl and -(-min(want, self.max_model_len) // self.block_size) > cache.num_blocks:
            return 0  # never fits even alone (budgets._NEVER_FITS)
        if cache.blocks_to_allocate(rid, hit + n, hits) > free:
            return 0
        cache.record(self.req_preemptions[rid] > 0, want, hit)
        blocks: cython.longlong = cache.allocate_slots(rid, hits, hit + n, min(hit + n, want))
        rep.free = cache.free
        self._admit_head(rep, now, blocks)
        self.computed[rid] = hit
        self.cached_tokens[rid] = hit
        return n

    @cython.cfunc
    def _release_finished(self, rep: Rep) -> cython.void:
        """ReplicaState.release_finished: finished requests' blocks back, in admission order."""
        rid: cython.longlong
        if len(rep.finished) > 1:
            rep.finished.sort(key=rep.admit_seq.__getitem__)
        for rid in rep.finished:
            rep.cache.free_request(rid)
            del rep.admit_seq[rid]
        rep.finished.clear()
        rep.free = rep.cache.free

    # -- sglang (sglang.py: its design note; the same steps in the same order) ------------------------------
    @cython.cfunc
    def _sglang(self, rep: Rep, now: cython.double) -> tuple:
        self._sg_merge(rep)
        prefills: list = self._sg_prefill(rep, now)
        if prefills:
            rep.sg_last = [item[0] for item in prefills]
            return prefills, (self._sg_mixed_decodes(rep) if self.sg_mixed else _NONE)
        rep.sg_last = None
        decodes: list = self._sg_decode(rep)
        if not decodes and not rep.waiting and not rep.prefilling:
            rep.sg_ratio = self.sg_init  # Scheduler.on_idle: NewTokenRatioTracker.reset
        return _NONE, decodes

    @cython.cfunc
    def _sg_merge(self, rep: Rep) -> cython.void:
        """sglang.merge_last_batch: the last prefill batch (less the chunked and finished requests) joins the
        running batch, or becomes it (flag False) when it is empty; a batch that shrank clears the flag."""
        rid: cython.longlong
        chunked: cython.longlong
        last: list
        kept: list
        if rep.sg_last is not None:
            chunked = rep.prefilling[0] if rep.prefilling else -1
            last = []
            for rid in rep.sg_last:
                if rid != chunked and self.status[rid] == RUNNING:
                    last.append(rid)
            if len(last) < len(rep.sg_last):
                rep.sg_full = False
            if last and rep.sg_running:
                rep.sg_running += last
            elif last:
                rep.sg_running = last
                rep.sg_full = False
            rep.sg_last = None
        kept = []
        for rid in rep.sg_running:
            if self.status[rid] == RUNNING:
                kept.append(rid)
        if len(kept) < len(rep.sg_running):
            rep.sg_running = kept
            rep.sg_full = False

    @cython.cfunc
    @cython.exceptval(check=False)
    def _pages(self, tokens: cython.longlong) -> cython.longlong:
        return -(-tokens // self.block_size)

    @cython.cfunc
    def _sync_radix(self, rep: Rep) -> cython.void:
        if rep.radix is not None:
            rep.free = rep.radix.free

    @cython.cfunc
    def _sg_prefill(self, rep: Rep, now: cython.double) -> list:
        """sglang._prefill: with the radix cache, the chunked request publishes what it computed, the batch is
        chosen (each admission locking its prefix), and its pages are allocated after."""
        rid: cython.longlong
        out: list
        pending: list
        if rep.radix is None:
            return self._sg_choose(rep, now, None)
        if rep.prefilling:
            rid = rep.prefilling[0]
            rep.radix.checkpoint(rid, self.computed[rid])
            self._sync_radix(rep)
        pending = []
        out = self._sg_choose(rep, now, pending)
        if out:  # alloc_for_extend: evict for the extend, paged: a page more per request
            extend = 0
            for item in out:
                extend += item[1]
            rep.radix.evict_for(extend + (len(out) * self.block_size if self.block_size > 1 else 0))
        rep.radix.allocate(sum(pending))
        self._sync_radix(rep)
        return out

    @cython.cfunc
    def _sg_sort_lpm(self, rep: Rep) -> cython.void:
        """sglang._sort_by_longest_prefix: match every waiting request, sort by cached prefix, longest first
        (stably), the in-batch deprioritized ones last."""
        rid: cython.longlong
        n: cython.longlong
        hit: cython.longlong
        g: cython.longlong
        mine: cython.longlong
        k: cython.Py_ssize_t
        queued: dict = {}
        keyed: list = []
        key: object
        for k, rid in enumerate(rep.waiting):
            n = self._num_tokens(rid)
            hit = rep.radix.match(rid, n)[0] * self.block_size
            key = -hit
            if hit <= self.sg_in_batch_check:
                g = self.prefix_group[rid]
                mine = min(self.prefix_tokens[rid], n) if g >= 0 else 0
                if g >= 0 and min(mine, queued.get(g, 0)) >= self.sg_in_batch_dep:
                    key = float("inf")
                elif g >= 0:
                    queued[g] = max(queued.get(g, 0), mine)
            keyed.append((key, k, rid))
        keyed.sort()
        rep.waiting = deque([item[2] for item in keyed])

    @cython.cfunc
    def _sg_choose(self, rep: Rep, now: cython.double, pending: object) -> list:
        """sglang._choose_prefill; `pending` (the radix cache): the pages to allocate after, else None."""
        rid: cython.longlong
        chunked: cython.longlong = rep.prefilling[0] if rep.prefilling else -1
        page: cython.longlong = self.block_size
        mixed: cython.longlong
        rem_chunk: cython.longlong
        rem_input: cython.longlong
        free: cython.longlong
        want: cython.longlong
        room: cython.longlong
        n: cython.longlong
        need: cython.longlong
        ext: cython.longlong
        rest: cython.longlong
        extend: cython.longlong
        held: cython.double
        total_offset: cython.double
        current_offset: cython.double
        no_token: cython.bint
        keyed: list
        k: cython.Py_ssize_t = 0
        hit: cython.longlong = 0
        pinned: cython.longlong = 0
        node: object = None
        matched: tuple
        paged: cython.longlong
        fits: cython.bint
        # PrefillAdder.add_one_req: ignore_eos requests with the radix cache off go to add_one_req_ignore_eos,
        # whose req_states (`states`) are built at its first call of the step
        states: object = None  # a list once built
        cut_rid: cython.longlong
        cut_n: cython.longlong
        running: list = rep.sg_running
        if not running:
            rep.sg_full = False
        if chunked < 0 and (rep.sg_full or not rep.waiting):
            return _NONE
        if chunked < 0 and len(running) >= self.max_batch:
            rep.sg_full = True
            return _NONE
        if self.sg_lof:  # max_new_tokens descending; equals keep their queue order (a stable sort)
            keyed = []
            for rid in rep.waiting:
                keyed.append((-self.output[rid], k, rid))
                k += 1
            keyed.sort()
            rep.waiting = deque([item[2] for item in keyed])
        if self.sg_lpm and rep.radix is not None and len(rep.waiting) <= self.sg_lpm_max:
            self._sg_sort_lpm(rep)
        elif rep.radix is not None and rep.waiting:  # sglang_admission.refresh_waiting_prefixes
            rep.sg_refresh_calls += 1
            if (rep.sg_refresh_calls - 1) % self.sg_refresh_every == 0:
                head = list(rep.waiting)[: self.sg_lpm_max]
                for rid in reversed(head):
                    rep.radix.touch(rid, self._num_tokens(rid))
                self._sync_radix(rep)
        mixed = len(running) if self.sg_mixed else 0
        rem_chunk = self.budget - mixed
        rem_input = self.sg_max_prefill - mixed
        held = 0.0
        for rid in running:  # in the batch's order (the float sum's last bits)
            held += min(self.output[rid] - self.generated[rid], self.sg_clip) * (
                1.0 if self.sg_eos[rid] else rep.sg_ratio
            )
        free = rep.free * page
        total_offset = mixed + held
        current_offset = mixed
        out: list = []
        if chunked >= 0:  # PrefillAdder.add_chunked_req
            want = self.target[chunked] - self.computed[chunked]
            room = min(rem_chunk, cython.cast(cython.longlong, free - total_offset) if cython.compiled
                       else int(free - total_offset))  # fmt: skip
            if room <= 0:
                room = rem_chunk
            n = min(want, room)
            need = self._pages(self.computed[chunked] + n) - self.blocks[chunked]
            if need > rep.free:
                n = (self.blocks[chunked] + rep.free) * page - self.computed[chunked]
                if n <= 0:
                    return _NONE
                need = rep.free
            if pending is None:
                self._allocate(rep, need)
            else:
                pending.append(need)
            self.blocks[chunked] += need
            out.append((chunked, n))
            ext = self._pages(n) * page
            rest = 0 if n < want else min(self.output[chunked], self.sg_clip)
            total_offset += ext + page + rest
            current_offset += ext + page
            rem_chunk -= ext
            rem_input -= ext
        self._drop_too_long(rep)
        cut_rid = -1  # the request this loop cut short (sglang_admission: `cut`), and its tokens this step
        cut_n = 0
        while rep.waiting:
            no_token = free - total_offset <= 0 or free - current_offset <= 0
            if not no_token and (rem_input <= 0 or rem_chunk <= 0):
                break
            if len(out) + len(running) >= self.max_batch:
                rep.sg_full = True
                break
            rid = rep.waiting[0]
            extend = self._num_tokens(rid)
            if rep.radix is not None:  # Req.init_next_round_input: its longest cached prefix
                matched = rep.radix.match(rid, extend)
                hit = matched[0]
                node = matched[1]
                pinned = rep.radix.unlocked_pages(node) * page  # the check pins it: not evictable for it
                extend -= hit * page
            n = extend
            if self.sg_eos[rid] and rep.radix is None:  # PrefillAdder.add_one_req_ignore_eos
                paged = self._pages(extend) * page + page
                fits = paged <= min(free - current_offset, free - total_offset)
                if fits:
                    states = self._sg_eos_states(rep, states, rid, out)
                if not fits or not self._sg_outlasts(states, free - current_offset - paged):
                    rep.sg_full = len(out) > 0 or len(running) > 0
                    break
                rest = min(self.output[rid], self.sg_clip)
                if extend > rem_chunk:  # cut to what is left of the chunk, not floored to a page
                    n = rem_chunk
                    if n <= 0:
                        break
                    rest = 0
            else:
                rest = min(self.output[rid] - self.generated[rid], self.sg_clip)
                if not extend + rest + page < free - pinned - total_offset:  # check_prefill: NO_TOKEN
                    rep.sg_full = len(out) > 0 or len(running) > 0
                    break
                rest = min(self.output[rid], self.sg_clip)
                if self._pages(extend) * page > rem_chunk:  # cut it short
                    n = rem_chunk // page * page
                    if n <= 0:
                        break
                    rest = 0
            if rep.radix is None:
                self._admit_head(rep, now, self._pages(n))
            else:  # _commit_prefill_admission: the prefix is locked now, so it is no longer free for the next
                rep.radix.admit(rid, hit, node, extend + hit * page, self.req_preemptions[rid] != 0)
                self._admit_head(rep, now, hit + self._pages(n))
                self.computed[rid] = hit * page  # its cached tokens
                pending.append(self._pages(n))
                self._sync_radix(rep)
                free = rep.free * page  # available + evictable: only the lock changed it (nothing allocated)
            if n < extend:  # cut short; an earlier one cut this step runs on as if prefilled (SGLang's bug)
                if cut_rid >= 0:
                    self.target[cut_rid] = self.computed[cut_rid] + cut_n
                cut_rid = rid
                cut_n = n
            out.append((rid, n))
            ext = self._pages(n) * page
            total_offset += ext + page + rest
            current_offset += ext + page
            rem_chunk -= ext
            rem_input -= ext
            if free - total_offset <= 0 or free - current_offset <= 0:
                rep.sg_full = True
                break
            self._drop_too_long(rep)
        return out

    @cython.cfunc
    def _sg_eos_state(self, rep: Rep, rid: cython.longlong) -> object:
        """sglang._eos_state: (outputs to come, prompt + outputs so far), or None when nothing is left."""
        left: cython.double = cython.cast(cython.double, self.output[rid]) * (
            1.0 if self.sg_eos[rid] else rep.sg_ratio
        ) - self.generated[rid]
        if left <= 0:
            return None
        return (left, self.prompt[rid] + self.generated[rid])

    @cython.cfunc
    def _sg_eos_states(self, rep: Rep, states: object, rid: cython.longlong, out: list) -> list:
        """sglang._eos_states: the first call sorts the candidate, running and admitted requests stably by
        outputs to come; later calls insert the candidate where SGLang's loop leaves its index."""
        x: cython.longlong
        k: cython.Py_ssize_t = 0
        i: cython.Py_ssize_t = 0
        keyed: list
        state: object
        ids: list
        if states is None:
            ids = [rid] + rep.sg_running + [item[0] for item in out]
            keyed = []
            for x in ids:
                state = self._sg_eos_state(rep, x)
                if state is not None:
                    keyed.append((state[0], k, state))
                    k += 1
            keyed.sort()  # by outputs to come, then the order above: a stable sort
            return [item[2] for item in keyed]
        state = self._sg_eos_state(rep, rid)
        if state is not None:
            for i in range(len(states)):  # NOTE: i stays at the last index when none is >= (as in SGLang)
                if state[0] <= states[i][0]:
                    break
            states.insert(i, state)
        return states  # NOTE: `object` above: None is allowed in (the step's first call), a `list` is not

    @cython.cfunc
    def _sg_outlasts(self, states: list, left_now: cython.double) -> cython.bint:
        """sglang._outlasts: in finishing order, the pool keeps more than the reserve per request running."""
        freed: cython.longlong = 0
        left: cython.double
        alive: cython.longlong
        i: cython.Py_ssize_t
        m: cython.Py_ssize_t = len(states)
        for i in range(m):
            left = states[i][0]
            alive = m - i
            if left_now + freed - left * alive <= self.sg_eos_reserve * alive:
                return False
            freed += states[i][1]
        return True

    @cython.cfunc
    def _sg_decode_pages(self, ids: list) -> cython.longlong:
        """Pages the next decode step of `ids` needs: one for each whose computed tokens fill their pages."""
        rid: cython.longlong
        need: cython.longlong = 0
        for rid in ids:
            if self._block_start(self.computed[rid]):
                need += 1
        return need

    @cython.cfunc
    def _sg_room(self, rep: Rep, tokens: cython.longlong) -> cython.void:
        """sglang._room: with the radix cache, evict until `tokens` are free."""
        if rep.radix is not None:
            rep.radix.evict_for(tokens)
            self._sync_radix(rep)

    @cython.cfunc
    def _sg_fits(self, rep: Rep, ids: list) -> cython.bint:
        """sglang._fits: ScheduleBatch.check_decode_mem (evicting for the pages first)."""
        need: cython.longlong = self._sg_decode_pages(ids)
        self._sg_room(rep, need * self.block_size)
        return need <= rep.free

    @cython.cfunc
    def _sg_mixed_decodes(self, rep: Rep) -> list:
        """sglang._mixed_decodes: joined, the running batch's requests follow the prefill's in the batch and
        the running batch is replaced by an empty one that keeps the flag."""
        dec: list
        if not rep.sg_running or not self._sg_fits(rep, rep.sg_running):
            return _NONE
        dec = self._sg_grow(rep, list(rep.sg_running))
        rep.sg_last += rep.sg_running
        rep.sg_running = []
        return dec

    @cython.cfunc
    def _sg_decode(self, rep: Rep) -> list:
        """Scheduler.update_running_batch: decode every running request, retracting when the pool is short."""
        rid: cython.longlong
        decoded: cython.longlong = 0
        wanted: cython.longlong = 0
        first: cython.bint = True
        keep: list
        keyed: list
        if not rep.sg_running:
            return _NONE
        if self._sg_fits(rep, rep.sg_running):
            rep.sg_ratio = max(rep.sg_ratio - self.sg_decay, self.sg_min)  # NewTokenRatioTracker.decay_step
            return self._sg_grow(rep, list(rep.sg_running))
        # the retraction order: most output so far first, then the shortest prompt, then the batch's own order
        # (the reference's stable reverse sort); retract from the end; the batch keeps that order after
        keyed = [(-self.generated[rid], self.prompt[rid], k, rid) for k, rid in enumerate(rep.sg_running)]
        keyed.sort()
        keep = [item[3] for item in keyed]
        while first or not self._sg_fits(rep, keep):
            if len(keep) == 1:
                break
            first = False
            self._preempt(rep, keep.pop(), True)
            self._sg_room(rep, len(keep) * self.sg_retract_steps)  # release_req
        rep.sg_full = False
        if not self._sg_fits(rep, keep):
            self._abort(rep, keep.pop())
        rep.sg_running = keep
        for rid in keep:
            decoded += self.generated[rid]
            wanted += self.output[rid]
        rep.sg_ratio = min(
            1.0,
            cython.cast(cython.double, decoded + self.sg_retract_steps * len(keep))
            / cython.cast(cython.double, wanted + 1),
        )
        return self._sg_grow(rep, list(keep))

    @cython.cfunc
    def _sg_grow(self, rep: Rep, ids: list) -> list:
        """sglang._grow: evict for a page per request, allocate the step's new pages; returns the ids (the
        batch's order) as the batch's decodes."""
        rid: cython.longlong
        need: cython.longlong
        if not ids:
            return ids
        self._sg_room(rep, len(ids) * self.block_size)
        need = self._sg_decode_pages(ids)
        if need:
            for rid in ids:
                if self._block_start(self.computed[rid]):
                    self.blocks[rid] += 1
            if rep.radix is not None:
                rep.radix.allocate(need)
                self._sync_radix(rep)
            else:
                self._allocate(rep, need)
        return ids

    # -- attention-DP lockstep (sim/lockstep.py: DpGroup, pick_rank, padded_tokens) -----------------------------
    # Each run of `dp` consecutive replicas is one deployment's ranks; one process per group steps them together:
    # a step is the slowest rank's own time plus the experts over all ranks' tokens, an idle rank runs a dummy
    # batch, and the ranks with work finish the step together. Everything here runs only when dp > 1; the rest
    # of the core (policies, completions, routing up to the rank, the watchdog) is the same code as without.
    def _lockstep_init(self, p: dict) -> None:
        """The groups of lockstep.build, their router's rule and vLLM's CUDA-graph sizes (DpGroup.__init__)."""
        sizes = tuple(p.get("cudagraph_sizes") or ())
        self.dp = p.get("dp", 1)
        self.num_groups = len(self.reps) // self.dp
        self.ls_sizes = np.array(sizes or (0,), dtype=np.int64)
        self.ls_num_sizes = len(sizes)
        self.ls_in_turn = self.policy == P_SGLANG  # SGLang's DataParallelController.round_robin_scheduler
        self.g_waits = np.zeros(max(self.num_groups, 1), dtype=np.uint8)
        self.g_busy = np.zeros(max(self.num_groups, 1), dtype=np.uint8)
        self.g_next = np.zeros(max(self.num_groups, 1), dtype=np.int64)
        if self.dp > 1:
            self.stretch_ok = False  # a rank's iterations are its group's steps: no single-replica stretch

    @cython.cfunc
    def _lockstep_notify(self, rep: Rep) -> cython.void:
        """Rank.notify -> DpGroup.notify: wake the rank's group if its process waits (`wake.succeed()`)."""
        g: cython.int = rep.index // self.dp
        if self.g_waits[g]:
            self.g_waits[g] = 0
            self._schedule(self.now, NORMAL, g)

    @cython.cfunc
    def _lockstep_pick(self) -> Rep:
        """Cluster._pick with groups: the router picks a deployment (round robin, or the fewest outstanding
        requests over its ranks, ties to the lowest), then DpGroup.pick its rank: in turn (SGLang), or vLLM's
        least-loaded rank (lockstep.pick_rank: strictly lower score, ties to the lowest rank)."""
        g: cython.Py_ssize_t
        i: cython.Py_ssize_t
        d: cython.Py_ssize_t = self.dp
        best_g: cython.Py_ssize_t = 0
        load: cython.longlong
        best_load: cython.longlong = 0
        score: cython.double
        best_score: cython.double
        rep: Rep
        best: Rep
        if self.router_rr:
            best_g = self.rr % self.num_groups
            self.rr += 1
        else:
            for g in range(self.num_groups):
                load = 0
                for i in range(g * d, g * d + d):
                    rep = self.reps[i]
                    load += rep.outstanding
                if g == 0 or load < best_load:
                    best_g, best_load = g, load
        if self.ls_in_turn:
            i = self.g_next[best_g]
            self.g_next[best_g] = (i + 1) % d
            return self.reps[best_g * d + i]
        best = self.reps[best_g * d]
        best_score = self._rank_load(best)
        for i in range(best_g * d + 1, best_g * d + d):
            rep = self.reps[i]
            score = self._rank_load(rep)
            if score < best_score:
                best, best_score = rep, score
        return best

    @cython.cfunc
    @cython.locals(usage=cython.double, score=cython.double)
    def _rank_load(self, rep: Rep) -> cython.double:
        """lockstep.rank_load: in-flight requests, plus 6 × waiting × (KV usage − 0.5) over half full."""
        score = cython.cast(cython.double, rep.outstanding) if cython.compiled else float(rep.outstanding)
        if rep.waiting and rep.num_blocks:
            usage = (
                cython.cast(cython.double, rep.num_blocks - rep.free) if cython.compiled
                else float(rep.num_blocks - rep.free)
            ) / rep.num_blocks - 0.5  # fmt: skip
            score += len(rep.waiting) * 6.0 * (usage if usage > 0.0 else 0.0)
        return score

    @cython.cfunc
    def _lockstep_resume(self, g: cython.int) -> cython.void:
        """DpGroup.step_loop resumes: after its step's timeout every rank in the step completes its batch, in
        rank order (Replica._complete); then (or after a notify) it routes what is due and forms the next."""
        i: cython.Py_ssize_t
        rep: Rep
        if self.g_busy[g]:
            self.g_busy[g] = 0
            for i in range(g * self.dp, g * self.dp + self.dp):
                rep = self.reps[i]
                if rep.busy0:
                    rep.busy0 = False
                    self._complete(rep, rep.prefills0, rep.decodes0)
        self._lockstep_loop(g)

    @cython.cfunc
    def _lockstep_loop(self, g: cython.int) -> cython.void:
        """The top of DpGroup.step_loop: route, each rank's scheduler decision (DpGroup._batch), then the step
        (_lockstep_start), or wait for a notify when no rank has anything to run."""
        i: cython.Py_ssize_t
        rep: Rep
        now: cython.double = self.now
        formed: cython.bint = False
        self._route_due(now)
        for i in range(g * self.dp, g * self.dp + self.dp):
            rep = self.reps[i]
            rep.busy0 = self._lockstep_batch(rep, now)
            if rep.busy0:
                rep.prefills0 = self.b_prefills
                rep.decodes0 = self.b_decodes
                formed = True
        if not formed:
            self.g_waits[g] = 1
            return
        self._lockstep_start(g, now)

    @cython.cfunc
    def _lockstep_batch(self, rep: Rep, now: cython.double) -> cython.bint:
        """DpGroup._batch: the rank's policy, dropping a head request that can never start (nothing resident
        and still not admitted), as Replica.schedule does, but without routing again in between."""
        while True:
            if self._policy(rep, now):
                return True
            if self._num_running(rep) or not rep.waiting:
                return False
            self._drop_unfittable(rep)

    @cython.cfunc
    @cython.locals(i=cython.Py_ssize_t, k=cython.Py_ssize_t, most=cython.longlong, total=cython.longlong,
                   pad=cython.longlong, nd=cython.longlong, kv_used=cython.longlong, own=cython.double,
                   slowest=cython.double, step=cython.double, end=cython.double)  # fmt: skip
    def _lockstep_start(self, g: cython.int, now: cython.double) -> cython.void:
        """The step of DpGroup.step_loop: each rank's own time (an idle rank's dummy batch: one token), all at
        the padded size when vLLM pads the ranks to the largest (lockstep.padded_tokens), the step = the
        slowest rank + the experts over all ranks' tokens; the ranks with work start it and end it together."""
        rep: Rep
        timer: Timer = self.timer
        first: cython.Py_ssize_t = g * self.dp
        most = 0
        total = 0
        for i in range(first, first + self.dp):
            rep = self.reps[i]
            if rep.busy0:
                self._lockstep_rank(rep)
            else:
                rep.ls_tokens = 1
            total += rep.ls_tokens
            if rep.ls_tokens > most:
                most = rep.ls_tokens
        pad = 0  # padded_tokens: the largest rank's count padded to a captured size, unless past the largest
        if self.ls_num_sizes and most <= self.ls_sizes[self.ls_num_sizes - 1]:
            k = 0
            while self.ls_sizes[k] < most:  # vllm_worker.padded's bisect_left
                k += 1
            pad = self.ls_sizes[k]
        slowest = 0.0
        for i in range(first, first + self.dp):
            rep = self.reps[i]
            if rep.busy0:
                own = timer.own_time(rep.ls_tokens, rep.ls_base, len(rep.prefills0),
                                     len(rep.prefills0) + len(rep.decodes0), pad)
            else:
                own = timer.dummy_time(pad)
            if i == first or own > slowest:  # max(owns): the first of equal ones
                slowest = own
        step = slowest + timer.experts_time(pad * self.dp if pad else total)
        if not step >= 0:
            self.error = INV_TIME_BACKWARDS
        end = now + step
        for i in range(first, first + self.dp):
            rep = self.reps[i]
            if rep.busy0:  # Replica._start_flight, then the iteration row
                if not rep.in_flight:
                    rep.busy_since = now
                rep.in_flight += 1
                nd = len(rep.decodes0)
                kv_used = rep.num_blocks - rep.free
                self._row(rep, 0, now, end, rep.ls_prefill, nd, len(rep.prefills0) + nd, kv_used)
        self.g_busy[g] = 1
        self._schedule(end, NORMAL, g)

    @cython.cfunc
    def _lockstep_rank(self, rep: Rep) -> cython.void:
        """A rank's batch in the step: the scheduled-twice check, Replica._count_work, and its token count and
        Timer.own_base (ls_*): _start_micro_batch's first half, at PP 1 and without the bubble (a rank has none)."""
        rid: cython.longlong
        chunk: cython.longlong
        c: cython.longlong
        pre: cython.longlong
        q: cython.Py_ssize_t
        kv_sum: cython.longlong = 0
        num_prefill: cython.longlong = 0
        prefills: list = rep.prefills0
        dec: list = rep.decodes0
        nd: cython.longlong = len(dec)
        chunks: list = _NONE
        prefixes: list = _NONE
        if prefills:
            chunks = []
            prefixes = []
        self.batch_no += 1
        for rid, chunk in prefills:
            if self.stamp[rid] == self.batch_no or self.inflight[rid]:
                self.error = INV_SCHEDULED_TWICE
            self.stamp[rid] = self.batch_no
            chunks.append(chunk)
            prefixes.append(self.computed[rid])
        for rid in dec:
            if self.stamp[rid] == self.batch_no or self.inflight[rid]:
                self.error = INV_SCHEDULED_TWICE
            self.stamp[rid] = self.batch_no
            kv_sum += self.computed[rid] + 1
        for q in range(len(chunks)):
            c = chunks[q]
            pre = prefixes[q]
            num_prefill += c
            rep.w_prefill_pairs += c * pre + c * (c + 1) // 2
            rep.w_prefill_kv += pre + c
        rep.w_tokens += num_prefill + nd
        rep.w_decode_kv += kv_sum
        rep.w_micro_batches += 1
        rep.ls_tokens = num_prefill + nd
        rep.ls_prefill = num_prefill
        rep.ls_base = self.timer.own_base(chunks, prefixes, nd, kv_sum)

    # -- what the caller reads at each check ----------------------------------------------------------
    def busy(self) -> tuple:
        """(0: an aggregated run has no link, micro-batches in flight, micro-batches so far): DisaggCore.busy's
        view, so core_run.drive checks a stall the same way for both."""
        rep: Rep
        in_flight: cython.longlong = 0
        mbs: cython.longlong = 0
        for rep in self.reps:
            in_flight += rep.in_flight
            mbs += rep.w_micro_batches
        return 0, in_flight, mbs

    def replica_totals(self) -> list:
        """Per replica: (in_flight, micro_batches, outstanding, free, preemptions, bubble, work tuple)."""
        rep: Rep
        out: list = []
        for rep in self.reps:
            work = (rep.w_tokens, rep.w_prefill_pairs, rep.w_prefill_kv, rep.w_decode_kv, rep.w_micro_batches)
            out.append((rep.in_flight, rep.w_micro_batches, rep.outstanding, rep.free, rep.preemptions,
                        [rep.bubble[k] for k in range(self.pp)], work))  # fmt: skip
        return out

    def counters(self) -> tuple:
        """(now, next, num_done, num_ignored, finished triggered, TBT zeros)."""
        return self.now, self.next, self.num_done, self.num_ignored, self.finished, self.zeros


# the DisaggCore's own event slots, after both pools' (each pool's arrivals, watchdog and finished slots are there
# too; only the prefill pool's arrivals is used)
D_WATCHDOG = 0
D_FINISHED = 1
D_INIT = 2  # the oldest transfer process not yet started (SimPy's Initialize event: URGENT, now)
D_TRANSFER = 3  # the transfer that ends first

# decode routers (disagg.ROUTERS["decode"])
DR_RR = 0
DR_LOR = 1
DR_KV = 2
DECODE_ROUTERS = {"rr": DR_RR, "lor": DR_LOR, "kv": DR_KV}


@cython.cclass
class DisaggCore:
    """A disaggregated run (disagg.DisaggCluster): a prefill pool and a decode pool, each a Core of its own (its
    replicas, timer, policy and request arrays), and the KV transfers between them over one link.

    One event loop for all of it, in SimPy's order: both pools' event slots are slices of one set of arrays
    (so one scan finds the next event), and one event counter serves everything. A pool's Core schedules with
    its own `eid` and writes iteration rows with its own `num_rows`, so whichever object runs holds the true
    counter and row count: `_lend` hands them to a pool before running its code, `_take` takes them back after
    (and a pool's hook into this class takes them first and lends them back last). The rows of both pools go to
    one buffer, so the iteration log keeps the reference's order.

    A transfer is one SimPy process in the reference: its start (an URGENT event), its timeout, its end (an event
    nobody waits on, which still takes an id). Starts wait in a FIFO queue, timeouts in a heap; the head of each
    is one event slot."""

    pre: Core
    dec: Core
    n: cython.longlong
    num_prefill: cython.longlong
    now: cython.double
    eid: cython.longlong
    num_rows: cython.Py_ssize_t
    error: cython.int
    ev_time: cython.double[:]
    ev_prio: cython.int[:]
    ev_eid: cython.longlong[:]
    ev_on: cython.uchar[:]
    num_slots: cython.int
    dec_off: cython.int  # the decode pool's slot 0 in the shared arrays
    own: cython.int  # D_WATCHDOG's slot
    num_done: cython.longlong
    num_ignored: cython.longlong
    finished: cython.bint
    watchdog_started: cython.bint
    check_period: cython.double
    # the watchdog's rules (Core's fields of the same names; the TBT stop count is the decode pool's tbt_above)
    watch_always: cython.bint
    watch_overload: cython.bint
    cap: cython.double
    sched_delay_slo: cython.double
    overload_wait: cython.double
    w_late: cython.longlong
    w_ptr: cython.longlong
    w_oldest: cython.longlong
    # the link (kvlink.KVLink): bytes per second, one-way latency; what is on it
    bytes_per_s: cython.double
    latency: cython.double
    kv_token_bytes: cython.double
    link_free_at: cython.double
    active_transfers: cython.longlong
    inits: object  # deque of (eid, decode replica, request, queued at)
    ends: list  # heap of (end time, eid, decode replica, request)
    # per request (disagg.Transfers)
    t_prefilled: cython.double[:]
    t_queued: cython.double[:]
    t_start: cython.double[:]
    t_end: cython.double[:]
    t_nbytes: cython.double[:]
    t_prefill_replica: cython.longlong[:]
    # the decode router and each decode replica's prefilled requests waiting for KV blocks
    router: cython.int
    rr: cython.longlong
    incoming: list

    def __init__(self, pre: Core, dec: Core, transfers: dict, link: dict, decode_router: str):
        pre_slots: cython.int = pre.num_slots
        dec_slots: cython.int = dec.num_slots
        i: cython.int
        self.pre, self.dec = pre, dec
        pre.owner = self
        dec.owner = self
        self.n = pre.n
        self.num_prefill = len(pre.reps)
        self.dec_off = pre_slots
        self.own = pre_slots + dec_slots
        self.num_slots = self.own + 4
        times = np.zeros(self.num_slots)
        prios = np.zeros(self.num_slots, dtype=np.intc)
        eids = np.zeros(self.num_slots, dtype=np.int64)
        on = np.zeros(self.num_slots, dtype=np.uint8)
        self.ev_time, self.ev_prio, self.ev_eid, self.ev_on = times, prios, eids, on
        pre.ev_time, pre.ev_prio, pre.ev_eid, pre.ev_on = (
            times[:pre_slots], prios[:pre_slots], eids[:pre_slots], on[:pre_slots],
        )  # fmt: skip
        dec.ev_time, dec.ev_prio, dec.ev_eid, dec.ev_on = (
            times[pre_slots : self.own], prios[pre_slots : self.own], eids[pre_slots : self.own], on[pre_slots : self.own],
        )  # fmt: skip
        # one iteration-row buffer for both pools (the count travels with the event counter)
        dec._row_ints_obj, dec._row_floats_obj = pre._row_ints_obj, pre._row_floats_obj
        dec.row_ints, dec.row_floats = pre.row_ints, pre.row_floats
        dec.log = pre.log
        self.now = 0.0
        self.num_rows = 0
        self.error = 0
        self.num_done = 0
        self.num_ignored = 0
        self.finished = False
        self.watchdog_started = False
        self.check_period = pre.check_period
        self.watch_always = True  # until configure_watch()
        self.watch_overload = True
        self.cap = float("inf")
        self.sched_delay_slo = pre.sched_delay_slo
        self.overload_wait = pre.overload_wait
        self.w_late = self.w_ptr = self.w_oldest = 0
        self.bytes_per_s = link["gbps"] * 1e9
        self.latency = link["latency_s"]
        self.kv_token_bytes = link["kv_token_bytes"]
        self.link_free_at = 0.0
        self.active_transfers = 0
        self.inits = deque()
        self.ends = []
        self.t_prefilled, self.t_queued = transfers["prefilled"], transfers["queued"]
        self.t_start, self.t_end = transfers["start"], transfers["end"]
        self.t_nbytes, self.t_prefill_replica = transfers["nbytes"], transfers["prefill_replica"]
        self.router = DECODE_ROUTERS[decode_router]
        self.rr = 0
        self.incoming = [deque() for _ in dec.reps]
        # SimPy starts the processes as DisaggCluster creates them, each with an URGENT event at time 0: every
        # prefill replica's scheduler and stages, every decode replica's, the arrivals, the watchdog.
        on[:] = 0
        self.eid = 0
        for i in range(self.num_prefill * pre.pp):
            self._at(0.0, URGENT, i)
        for i in range(self.num_prefill * dec.pp, dec.slot0):
            self._at(0.0, URGENT, self.dec_off + i)
        self._at(0.0, URGENT, pre.slot0 + SLOT_ARRIVALS)
        self._at(0.0, URGENT, self.own + D_WATCHDOG)

    @cython.cfunc
    @cython.exceptval(check=False)
    def _at(self, t: cython.double, priority: cython.int, slot: cython.int) -> cython.void:
        self.ev_time[slot] = t
        self.ev_prio[slot] = priority
        self.ev_eid[slot] = self.eid
        self.ev_on[slot] = 1
        self.eid += 1

    @cython.cfunc
    @cython.exceptval(check=False)
    def _lend(self, core: Core) -> cython.void:
        """`core` runs next: it holds the event counter and the row count."""
        core.eid = self.eid
        core.num_rows = self.num_rows

    @cython.cfunc
    @cython.exceptval(check=False)
    def _take(self, core: Core) -> cython.void:
        self.eid = core.eid
        self.num_rows = core.num_rows

    # -- the event loop -----------------------------------------------------------------------------------
    @cython.ccall
    @cython.locals(i=cython.int, best=cython.int, t=cython.double, k=cython.int, rep=Rep, pre=Core, dec=Core)
    def run(self) -> cython.int:
        """Core.run for the whole disaggregated run: CHECK at every watchdog check, FINISHED, or FAILED."""
        pre = self.pre
        dec = self.dec
        while True:
            best = -1
            for i in range(self.num_slots):
                if self.ev_on[i] and (
                    best < 0
                    or self.ev_time[i] < self.ev_time[best]
                    or (
                        self.ev_time[i] == self.ev_time[best]
                        and (
                            self.ev_prio[i] < self.ev_prio[best]
                            or (self.ev_prio[i] == self.ev_prio[best] and self.ev_eid[i] < self.ev_eid[best])
                        )
                    )
                ):
                    best = i
            if best < 0:
                self.flush_rows()
                return FINISHED
            t = self.ev_time[best]
            self.ev_on[best] = 0
            if t < self.now:
                self.error = INV_TIME_BACKWARDS
                self.flush_rows()
                return FAILED
            self.now = t
            pre.now = t
            dec.now = t
            if best < self.dec_off:
                self._lend(pre)
                if best < pre.slot0:
                    rep = pre.reps[best // pre.pp]
                    if best % pre.pp == 0:
                        pre._sched_resume(rep)
                    else:
                        pre._stage_resume(rep, best % pre.pp)
                else:  # the prefill pool's arrivals are the run's
                    pre._arrivals()
                self._take(pre)
            elif best < self.own:
                k = best - self.dec_off
                rep = dec.reps[k // dec.pp - self.num_prefill]
                self._lend(dec)
                if k % dec.pp == 0:
                    dec._sched_resume(rep)
                else:
                    dec._stage_resume(rep, k % dec.pp)
                self._take(dec)
            elif best == self.own + D_INIT:
                self._start_transfer()
            elif best == self.own + D_TRANSFER:
                self._end_transfer()
            elif best == self.own + D_WATCHDOG:
                if not self.watchdog_started:
                    self.watchdog_started = True
                    self.next_check_at()
                elif self._check_due():
                    return CHECK
                else:  # no rule can act at this check: loop, as the caller would
                    self.next_check_at()
            else:
                self.flush_rows()
                return FINISHED
            if pre.error or dec.error:
                self.error = pre.error or dec.error
            if self.error:
                self.flush_rows()
                return FAILED

    @cython.ccall
    def next_check_at(self) -> cython.void:
        self._at(self.now + self.check_period, NORMAL, self.own + D_WATCHDOG)

    def configure_watch(self, always: cython.bint, cap: cython.double, tbt_bucket: cython.longlong,
                        tbt_need: cython.double) -> None:  # fmt: skip
        """Core.configure_watch; the TBT stop rule counts the decode pool's gaps (the user's TBT)."""
        self.watch_always = always
        self.cap = cap
        self.dec.configure_watch(always, cap, tbt_bucket, tbt_need)

    def watch(self, overload: cython.bint, late: cython.longlong, ptr: cython.longlong,
              oldest: cython.longlong) -> None:  # fmt: skip
        self.watch_overload = overload
        self.w_late, self.w_ptr, self.w_oldest = late, ptr, oldest

    @cython.cfunc
    def _check_due(self) -> cython.bint:
        """Core._check_due over the watchdog's view of a disaggregated run (DisaggCluster.__init__): arrivals are
        the prefill pool's, "scheduled" is the decode admission (t_queued), "ignored" the prefill side's status;
        both final once set, so the same skips hold. Idle for the stall check: no micro-batch in flight in
        either pool and no transfer on the link."""
        rid: cython.longlong
        s: cython.double
        rep: Rep
        pre: Core = self.pre
        dec: Core = self.dec
        if self.watch_always or self.now >= self.cap:
            return True
        if dec.tbt_bucket >= 0 and dec.tbt_above >= dec.tbt_need:
            return True
        if pre.next >= self.n and self.active_transfers == 0:
            for rep in pre.reps + dec.reps:
                if rep.in_flight:
                    break
            else:
                return True
        if not self.watch_overload:
            return False
        if 2 * self.w_late > self.n - self.num_ignored:
            return True
        while self.w_ptr < pre.next and pre.arrived[self.w_ptr] < self.now - self.sched_delay_slo:
            rid = self.w_ptr
            s = self.t_queued[rid]
            if pre.status[rid] != IGNORED and (s != s or s - pre.arrived[rid] > self.sched_delay_slo):
                return True
            self.w_ptr += 1
        while self.w_oldest < pre.next and (
            pre.status[self.w_oldest] == IGNORED or self.t_queued[self.w_oldest] == self.t_queued[self.w_oldest]
        ):
            self.w_oldest += 1
        return self.w_oldest < pre.next and self.now - pre.arrived[self.w_oldest] > self.overload_wait

    @cython.ccall
    def end_run(self) -> cython.bint:
        if self.finished:
            return False
        self.finished = True
        self._at(self.now, NORMAL, self.own + D_FINISHED)
        return True

    @cython.ccall
    def flush_rows(self) -> cython.void:
        self.pre.num_rows = self.num_rows
        self.pre.flush_rows()
        self.num_rows = 0

    # -- hooks the pools call (Core._finish, _on_done, _sched_resume) --------------------------------------
    @cython.ccall
    def pool_done(self, core: Core, rid: cython.longlong) -> cython.void:
        """A request finished on the decode side, or was ignored on either (DisaggCluster._ignored/_decoded)."""
        self._take(core)
        self.num_done += 1
        if core.status[rid] == IGNORED:
            self.num_ignored += 1
        self._count_done()
        self._lend(core)

    @cython.cfunc
    def _count_done(self) -> cython.void:
        if self.num_done == self.n and not self.finished:
            self.finished = True
            self._at(self.now, NORMAL, self.own + D_FINISHED)

    @cython.ccall
    def prefilled(self, pre: Core, rep: Rep, rid: cython.longlong, now: cython.double) -> cython.void:
        """PrefillState.finish, then DisaggCluster._prefilled: the prompt's KV is complete and stays here; the
        decode router picks the replica whose blocks it will wait for."""
        j: cython.Py_ssize_t
        drep: Rep
        dec: Core = self.dec
        self._take(pre)
        pre.completed[rid] = now
        pre.status[rid] = DONE
        if pre.policy == P_V1:
            rep.running.remove(rid)
        rep.outstanding -= 1
        rep.held += 1
        self.t_prefilled[rid] = now
        self.t_prefill_replica[rid] = rep.index
        j = self._pick_decode()
        drep = dec.reps[j]
        dec.replica[rid] = drep.index
        self.incoming[j].append(rid)
        drep.outstanding += 1
        self._lend(dec)
        dec._notify(drep)
        self._take(dec)
        self._lend(pre)

    @cython.cfunc
    def _pick_decode(self) -> cython.Py_ssize_t:
        """DisaggCluster._pick on the decode side: ties go to the lowest index."""
        dec: Core = self.dec
        nrep: cython.Py_ssize_t = len(dec.reps)
        j: cython.Py_ssize_t
        best: cython.Py_ssize_t = 0
        rep: Rep
        score: cython.longlong
        top: cython.longlong = 0
        if self.router == DR_RR:
            best = self.rr % nrep
            self.rr += 1
            return best
        for j in range(nrep):
            rep = dec.reps[j]
            # lor: the fewest outstanding; kv: the most free KV blocks, less what requests routed there will take
            score = -rep.outstanding if self.router == DR_LOR else rep.free - self._incoming_blocks(j)
            if j == 0 or score > top:
                best, top = j, score
        return best

    @cython.cfunc
    def _incoming_blocks(self, j: cython.Py_ssize_t) -> cython.longlong:
        rid: cython.longlong
        total: cython.longlong = 0
        bs: cython.longlong = self.dec.block_size
        for rid in self.incoming[j]:
            total += -(-self.dec.prompt[rid] // bs)
        return total

    @cython.ccall
    def admit_incoming(self, dec: Core, rep: Rep, now: cython.double) -> cython.void:
        """DisaggCluster._admit: give incoming requests their KV blocks, FIFO, after the replica's own preempted
        requests; each admitted one starts its transfer."""
        rid: cython.longlong
        blocks: cython.longlong
        j: cython.Py_ssize_t = rep.index - self.num_prefill
        q = self.incoming[j]
        if not q:
            return
        self._take(dec)
        while q and not rep.waiting:
            rid = q[0]
            blocks = -(-dec.prompt[rid] // dec.block_size)
            if not dec._can_allocate(rep, blocks) or dec._num_running(rep) >= dec.max_batch:
                if not dec._num_running(rep) and not rep.in_flight and not dec._can_allocate(rep, blocks):
                    q.popleft()  # larger than this decode pool can ever hold
                    rep.outstanding -= 1
                    dec.status[rid] = IGNORED
                    self.pre.status[rid] = IGNORED  # the watchdog's view: never "waiting to be scheduled"
                    self._release_prefill(rid)
                    self.num_done += 1
                    self.num_ignored += 1
                    self._count_done()
                    continue
                break
            q.popleft()
            dec._allocate(rep, blocks)
            dec.blocks[rid] = blocks
            rep.held += 1
            if not self.inits:
                self._at(now, URGENT, self.own + D_INIT)
            else:
                self.eid += 1
            self.inits.append((self.eid - 1, j, rid, now))
        self._lend(dec)

    @cython.cfunc
    def _release_prefill(self, rid: cython.longlong) -> cython.void:
        """The decode side has the KV (or gave up on it): the prefill replica frees the blocks."""
        pre: Core = self.pre
        rep: Rep = pre.reps[self.t_prefill_replica[rid]]
        pre._release(rep, pre.blocks[rid])
        pre.blocks[rid] = 0
        rep.held -= 1
        self._lend(pre)
        pre._notify(rep)
        self._take(pre)

    # -- the transfer process (DisaggCluster._transfer) -----------------------------------------------------
    @cython.cfunc
    def _start_transfer(self) -> cython.void:
        """Its start: FIFO behind the transfers already on the link; it holds the link for bytes / bandwidth
        and arrives a latency later."""
        rid: cython.longlong
        j: cython.longlong
        queued: cython.double
        start: cython.double
        end: cython.double
        nbytes: cython.double
        _, j, rid, queued = self.inits.popleft()
        if self.inits:
            nxt = self.inits[0]
            self.ev_time[self.own + D_INIT] = nxt[3]
            self.ev_prio[self.own + D_INIT] = URGENT
            self.ev_eid[self.own + D_INIT] = nxt[0]
            self.ev_on[self.own + D_INIT] = 1
        nbytes = cython.cast(cython.double, self.dec.prompt[rid]) * self.kv_token_bytes
        start = max(queued, self.link_free_at)
        self.link_free_at = start + nbytes / self.bytes_per_s
        end = self.link_free_at + self.latency
        self.t_queued[rid], self.t_start[rid], self.t_end[rid], self.t_nbytes[rid] = queued, start, end, nbytes
        self.active_transfers += 1
        heapq.heappush(self.ends, (self.now + (end - queued), self.eid, j, rid))
        self.eid += 1
        self._head_end()

    @cython.cfunc
    def _head_end(self) -> cython.void:
        slot: cython.int = self.own + D_TRANSFER
        if not self.ends:
            self.ev_on[slot] = 0
            return
        head = self.ends[0]
        self.ev_time[slot] = head[0]
        self.ev_prio[slot] = NORMAL
        self.ev_eid[slot] = head[1]
        self.ev_on[slot] = 1

    @cython.cfunc
    def _end_transfer(self) -> cython.void:
        """Its end: the prefill side frees the blocks; the decode side computes the last prompt token next."""
        rid: cython.longlong
        j: cython.longlong
        dec: Core = self.dec
        rep: Rep
        _, _, j, rid = heapq.heappop(self.ends)
        self._head_end()
        self.active_transfers -= 1
        self._release_prefill(rid)
        rep = dec.reps[j]
        rep.held -= 1
        # The remote KV covers all but the last prompt token, which the decode side computes to sample token 1.
        dec.target[rid] = dec.prompt[rid]
        dec.computed[rid] = dec.prompt[rid] - 1
        dec.status[rid] = RUNNING
        dec.scheduled[rid] = self.now
        _insort(rep.prefilling, rid)
        if dec.policy == P_V1:
            rep.running.append(rid)
        self._lend(dec)
        dec._notify(rep)
        self._take(dec)
        self.eid += 1  # the process ends: SimPy schedules its event, which nobody waits on

    # -- what the caller reads at each check ----------------------------------------------------------
    def counters(self) -> tuple:
        """(now, arrived, num_done, num_ignored, finished triggered, the decode side's TBT zeros)."""
        return self.now, self.pre.next, self.num_done, self.num_ignored, self.finished, self.dec.zeros

    def busy(self) -> tuple:
        """(transfers on the link, micro-batches in flight anywhere, micro-batches so far)."""
        rep: Rep
        in_flight: cython.longlong = 0
        mbs: cython.longlong = 0
        for rep in self.pre.reps + self.dec.reps:
            in_flight += rep.in_flight
            mbs += rep.w_micro_batches
        return self.active_transfers, in_flight, mbs


@cython.cfunc
def _insort(a: list, x: cython.longlong) -> cython.void:
    """bisect.insort on a sorted list of ids."""
    lo: cython.Py_ssize_t = 0
    hi: cython.Py_ssize_t = len(a)
    mid: cython.Py_ssize_t
    while lo < hi:
        mid = (lo + hi) // 2
        if x < a[mid]:
            hi = mid
        else:
            lo = mid + 1
    a.insert(lo, x)


@cython.cfunc
def _remove_sorted(a: list, x: cython.longlong) -> cython.bint:
    """Remove x from a sorted list of ids if it is there (ReplicaState._remove's bisect)."""
    lo: cython.Py_ssize_t = 0
    hi: cython.Py_ssize_t = len(a)
    mid: cython.Py_ssize_t
    while lo < hi:
        mid = (lo + hi) // 2
        if a[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    if lo < len(a) and a[lo] == x:
        del a[lo]
        return True
    return False
