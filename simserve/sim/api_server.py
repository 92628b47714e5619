"""The API server as a server: each process a FIFO queue of CPU work in front of the engine.

vLLM 0.33.0's OpenAI-compatible server is one asyncio process per `--api-server-count` (vllm/entrypoints/cli/
serve.py: default 1, or the data-parallel size). In it, a request's coroutine renders and tokenizes the prompt
and hands an EngineCoreRequest to the engine over ZMQ (vllm/renderers/base.py `render_cmpl_async`,
vllm/v1/engine/async_llm.py `add_request`); one background task, `output_handler` (async_llm.py
`_run_output_handler`), takes each engine step's EngineCoreOutputs, detokenizes them in chunks of
VLLM_V1_OUTPUT_PROC_CHUNK_SIZE = 128 requests (`await asyncio.sleep(0)` between chunks) and puts them in the
requests' queues, whose coroutines turn them into SSE chunks (`generate`, `q.get_nowait() or await q.get()`).
All of that shares one CPU thread.

The model, per process: one FIFO server with deterministic service times (an approximation of asyncio's FIFO
ready queue, with every piece of work run to completion in arrival order):
  - input work, when the client sends a request: `request_s + prompt_token_s * prompt`; the request enters the
    engine (its `arrived` time, what the engine-side metrics start from) when it is done;
  - output work, when an engine step ends: `token_s` per token that step produced for this process's requests,
    one job per step; the client sees every one of those tokens when the job is done (the 128-request chunks'
    interleaving with other work, and tokens within a job reaching clients at different moments, are not
    modelled: a step's tokens arrive together, up to `token_s x tokens` later than the first would).
Equal times: input work first. The engine never waits for the API server; the API server only delays what the
engine receives and what clients see. Requests go to the processes in turn (request id modulo the count: the
kernel spreads connections over processes that share the listening socket; round robin is the deterministic
stand-in). A closed-loop client (`--max-concurrency`) or a conversation's next round waits for the answer as
the client sees it: the job that carries the last token, plus `cfg.frontend_s` (frontend.py: network and
client).

Work is added in time order, lazily: `advance(t)` processes the sends (and closed-loop slots freed) due by t
before any later work; whoever touches the servers first at a time does it, so the result does not depend on
the order in which a simulator processes events at equal times. The one thing that needs an event is a request
entering the engine: the SimPy reference (cluster.py) and the compiled core (sim/core/) share this object and
only schedule their arrivals process at `sleep()`'s time, waking it early (`output`/`failed` return True) when
an answer frees a slot before that time.
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from simserve.sim.histogram import LogHistogram
from simserve.sim.request import DONE, Requests

INF = math.inf


class ApiServers:
    """The API-server processes of a run, and what the clients saw (client-side times per request)."""

    def __init__(self, reqs: Requests, cfg, follow: tuple[np.ndarray, np.ndarray] | None = None):
        n = reqs.n
        self.reqs = reqs
        self.count = cfg.api_servers
        self.request_s, self.prompt_token_s, self.token_s = (
            cfg.api_request_s,
            cfg.api_prompt_token_s,
            cfg.api_token_s,
        )
        self.residual = cfg.frontend_s  # network and client, both ways (frontend.py)
        # NOTE: the output side's state is in arrays the compiled core shares (core.Core._api_step twins
        # `output`, the per-step hot path); the rest is only ever touched here.
        self.free_at = np.zeros(self.count)  # when each process finishes the work it has
        # the work done, per process, as counts (busy seconds: `busy`): requests, prompt tokens, output tokens
        self.requests = [0] * self.count
        self.prompt_tokens = [0] * self.count
        self.tokens = np.zeros(self.count, dtype=np.int64)
        self.sent = reqs.arrived.copy()  # when the client sent each request (closed loop: set as slots free)
        nan = np.full(n, np.nan)
        self.first, self.last, self.done = nan.copy(), nan.copy(), nan.copy()  # what the client saw, when
        self.itl_max = np.zeros(n)
        self.itl = LogHistogram()  # the client's gaps between consecutive tokens
        self.input_wait = nan.copy()  # queueing before a request's input work started
        # the output jobs: their token-weighted sum of waits, the longest wait, how many
        self.out = np.zeros(3)
        # Sends not yet processed: ids in send order up to `released` (open and closed loop), or a heap of
        # (send time, id) for conversations, whose rounds are sent as their answers come back.
        self.released = n if cfg.max_concurrency is None else min(cfg.max_concurrency, n)
        self.next_send = 0
        self.frees: list[tuple[float, int]] = []  # closed loop: (when the client saw an answer, its id)
        self.child = self.think = None
        self.sends: list[tuple[float, int]] = []
        if follow is not None:
            self.child, self.think = follow
            first = np.ones(n, dtype=bool)
            first[follow[0][follow[0] >= 0]] = False
            self.sends = [(float(self.sent[i]), int(i)) for i in np.flatnonzero(first)]
            heapq.heapify(self.sends)
            self.released = n
            self.next_send = n
        self.sleep_until = -INF  # the arrivals process sleeps until then (-inf: it is running, or has ended)
        self._new = INF  # the earliest send or slot freed by the current call

    # -- the input side --------------------------------------------------------------------------------
    def _next_send(self) -> float:
        if self.next_send < self.released:
            return float(self.sent[self.next_send])
        return self.sends[0][0] if self.sends else INF

    def pending(self) -> float:
        """The earliest send or freed slot not yet processed (inf: none)."""
        f = self.frees[0][0] if self.frees else INF
        return min(f, self._next_send())

    def advance(self, t: float, due: list) -> None:
        """Process every send and freed slot due by `t` in time order (a slot first at equal times: it may
        send); each send's input work gives the time its request enters the engine, pushed on `due` as (time,
        id). NOTE: core.Core._api_advance does the open loop's in C, float for float
        (tests/test_sim_core.py)."""
        r = self.reqs
        while True:
            f = self.frees[0][0] if self.frees else INF
            s = self._next_send()
            if f <= s and f <= t:  # the semaphore's slot: the next request is sent now, or at its own time
                heapq.heappop(self.frees)
                nxt = self.released
                self.released += 1
                self.sent[nxt] = max(self.sent[nxt], f)
                continue
            if not s <= t:
                return
            if self.next_send < self.released:
                rid = self.next_send
                self.next_send += 1
            else:
                rid = heapq.heappop(self.sends)[1]
            k = rid % self.count
            start = max(s, float(self.free_at[k]))
            prompt = int(r.prompt[rid])
            end = start + (self.request_s + self.prompt_token_s * prompt)
            self.free_at[k] = end
            self.requests[k] += 1
            self.prompt_tokens[k] += prompt
            self.input_wait[rid] = start - s
            r.arrived[rid] = end
            heapq.heappush(due, (end, rid))

    def sleep(self, due: list) -> float:
        """The arrivals process goes to sleep: until the next send, freed slot or engine entry (inf: until
        woken)."""
        w = min(self.pending(), due[0][0] if due else INF)
        self.sleep_until = w
        return w

    def awake(self) -> None:
        self.sleep_until = -INF

    def woken(self) -> bool:
        """Whether the call that just ended must wake the arrivals process (it sleeps past what it
        created)."""
        new, self._new = self._new, INF
        if new < self.sleep_until:
            self.sleep_until = -INF
            return True
        return False

    # -- the output side -------------------------------------------------------------------------------
    def output(self, now: float, ids, due: list) -> bool:
        """An engine step ended at `now` and each request in `ids` got a token: each process's job for its
        share (in process order), then each client's times; returns whether the arrivals process must be woken
        (an answer freed a slot before its wake). Nothing here depends on the order of `ids`. NOTE:
        core.Core._api_step does the same in C, float for float (tests/test_sim_core.py holds them equal)."""
        self.advance(now, due)
        ids = np.asarray(ids, dtype=np.int64)
        if not len(ids):
            return self.woken()
        k = ids % self.count
        ends = np.zeros(self.count)
        for s, m in enumerate(np.bincount(k, minlength=self.count).tolist()):
            if m:
                ends[s] = self._job(s, now, m)
        t = ends[k]
        last = self.last[ids]
        fresh = last != last  # NaN: a first token (a re-prefill after preemption is a gap, as engine-side)
        if fresh.any():
            self.first[ids[fresh]] = t[fresh]
        if not fresh.all():
            old = ~fresh
            gaps = t[old] - last[old]
            self.itl.add_many(gaps)
            self.itl_max[ids[old]] = np.maximum(self.itl_max[ids[old]], gaps)
        self.last[ids] = t
        fin = self.reqs.status[ids] == DONE
        if fin.any():
            self.done[ids[fin]] = t[fin]
            for rid, seen in zip(ids[fin].tolist(), t[fin].tolist(), strict=True):
                self.answered(rid, seen + self.residual)
        return self.woken()

    def _job(self, k: int, now: float, tokens: int) -> float:
        """Process k's output job of `tokens` tokens from a step that ended at `now`: when it is done."""
        out = self.out
        start = float(self.free_at[k])
        if start > now:  # queued behind earlier work
            out[0] += (start - now) * tokens
            out[1] = max(float(out[1]), start - now)
        else:
            start = now
        end = start + self.token_s * tokens
        self.free_at[k] = end
        self.tokens[k] += tokens
        out[2] += 1
        return end

    @property
    def busy(self) -> list[float]:
        """Seconds of CPU work each process did (from counts: the same however the work was added up)."""
        return [
            n * self.request_s + p * self.prompt_token_s + t * self.token_s
            for n, p, t in zip(self.requests, self.prompt_tokens, self.tokens.tolist(), strict=True)
        ]

    def failed(self, rid: int, now: float) -> bool:
        """The engine refused `rid` (too long, or aborted): the client has its error at `now` (+ network)."""
        self.answered(rid, now + self.residual)
        return self.woken()

    def answered(self, rid: int, seen: float) -> None:
        """The client has the whole answer at `seen`: its closed-loop slot frees, or its conversation goes
        on."""
        if self.child is None and self.released + len(self.frees) < self.reqs.n:  # a request is left to send
            heapq.heappush(self.frees, (seen, rid))
            self._new = min(self._new, seen)
        if self.child is not None and self.child[rid] >= 0:
            nxt = int(self.child[rid])
            t = seen + self.think[nxt]
            self.sent[nxt] = t
            heapq.heappush(self.sends, (t, nxt))
            self._new = min(self._new, t)

    # -- what a run reports ----------------------------------------------------------------------------
    def report(self, duration: float) -> dict:
        """Utilisation and queueing of the processes over `duration` seconds, for summary.json."""
        waits = self.input_wait[self.input_wait == self.input_wait]
        from simserve import numerics

        p50, p99 = numerics.percentiles(waits, (50, 99)) if len(waits) else (math.nan, math.nan)
        return {
            "processes": self.count,
            "request_cpu_ms": self.request_s * 1e3,
            "prompt_token_cpu_ms": self.prompt_token_s * 1e3,
            "output_token_cpu_ms": self.token_s * 1e3,
            "network_ms": self.residual * 1e3,
            "utilization": [min(1.0, b / duration) for b in self.busy],
            "input_wait_mean_s": math.fsum(waits.tolist()) / len(waits) if len(waits) else math.nan,
            "input_wait_p50_s": p50,
            "input_wait_p99_s": p99,
            "output_wait_mean_s": float(self.out[0]) / int(self.tokens.sum())
            if self.tokens.sum()
            else math.nan,
            "output_wait_max_s": float(self.out[1]),
            "output_jobs": int(self.out[2]),
        }
