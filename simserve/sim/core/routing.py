"""Arrivals, the API servers' output side and routing (cluster.Cluster; api_server.ApiServers;
lockstep.pick_rank).

The arrivals process (open loop, closed loop, conversations, the API servers' engine entries), routing (the
replicas' load handed to the reference's own router, sim/routers.py; attention DP's rank choice,
`_lockstep_pick`) and what a finished request releases (`_on_done`).
"""

from __future__ import annotations

import heapq

import cython

if cython.compiled:
    from cython.cimports.libc.math import INFINITY as INF
    from cython.cimports.libc.math import ceil, log
    from cython.cimports.simserve.sim.core.blocks import CoreBlocks
    from cython.cimports.simserve.sim.core.rep import Rep
    from cython.cimports.simserve.sim.routers import Router
else:
    from math import ceil, log
    from math import inf as INF

    from simserve.sim.routers import Router

    from .blocks import CoreBlocks
    from .rep import Rep

from .consts import DONE, IGNORED, NORMAL, ROLE_AGGREGATED, SLOT_ARRIVALS, SLOT_FINISHED, URGENT


@cython.cclass
class CoreRouting(CoreBlocks):
    """Arrivals, routing and the API servers' streaming of tokens (cluster.Cluster, api_server.py)."""

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
        if not self.api_open:  # the open loop never wakes it early (ApiServers.woken): no wake time to keep
            self.api.awake()
        self._route_due(self.now)
        if self.next >= self.n:
            return
        if self.api_open:  # ApiServers.sleep
            w = self.api_next
            if self.due and self.due[0][0] < w:
                w = self.due[0][0]
        else:
            w = self.api.sleep(self.due)
        if w != INF:  # inf: only an interrupt wakes it (_wake_arrivals)
            self._schedule(self.now + (w - self.now), NORMAL, self.slot0 + SLOT_ARRIVALS)

    @cython.cfunc
    @cython.locals(
        rid=cython.longlong, k=cython.longlong, s=cython.double, start=cython.double, end=cython.double
    )
    def _api_advance(self, t: cython.double) -> cython.void:
        """ApiServers.advance(t, self.due), and api_next its pending() after; the open loop's here, float for
        float: each send due by t in id order, its input work queued on process id % count, its engine entry
        on `due`."""
        if not self.api_open:
            self.api.advance(t, self.due)
            self.api_next = self.api.pending()
            return
        while self.api_send < self.n and self.api_sent[self.api_send] <= t:
            rid = self.api_send
            self.api_send += 1
            k = rid % self.api_count
            s = self.api_sent[rid]
            start = self.api_free[k] if self.api_free[k] > s else s
            end = start + (self.api_request_s + self.api_prompt_token_s * self.prompt[rid])
            self.api_free[k] = end
            self.api_requests[k] += 1
            self.api_prompt_tokens[k] += self.prompt[rid]
            self.api_wait[rid] = start - s
            self.arrived[rid] = end
            heapq.heappush(self.due, (end, rid))
        self.api_next = self.api_sent[self.api_send] if self.api_send < self.n else INF

    @cython.cfunc
    def _wake_arrivals(self) -> cython.void:
        """Process.interrupt() on the sleeping arrivals process: SimPy's Interruption, URGENT, now (its
        pending timeout is dropped: SimPy keeps it in the queue, where it wakes nothing)."""
        self._schedule(self.now, URGENT, self.slot0 + SLOT_ARRIVALS)

    @cython.cfunc
    def _api_output(self, ids: list) -> cython.void:
        """Cluster._on_output: the step's tokens go to the API servers (ApiServers.output: first the sends
        due)."""
        k: cython.Py_ssize_t
        rid: cython.longlong
        if self.api_next <= self.now:
            self._api_advance(self.now)
        for k, rid in enumerate(ids):
            self.api_ids[k] = rid
        self._api_step(self.api_ids, len(ids), self.now)

    @cython.cfunc
    @cython.locals(
        i=cython.Py_ssize_t,
        s=cython.longlong,
        m=cython.longlong,
        rid=cython.longlong,
        start=cython.double,
        end=cython.double,
        t=cython.double,
        last=cython.double,
        gap=cython.double,
    )
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
                if not self.api_open:  # the open loop's answers free no slot and release no round
                    self.api.answered(rid, t + self.api_residual)
                    done = True
        if done:  # answers free slots or release rounds: the next send may come sooner
            self.api_next = self.api.pending()
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

    def api_finish(self) -> None:
        """Hands the API servers what was kept here while the core ran: the client gap histogram's zeros (its
        counts are shared) and, in the open loop, the sends processed and each process's input work."""
        k: cython.Py_ssize_t
        self.api.itl.zeros = self.itl_zeros
        if self.api_open:
            self.api.next_send = self.api_send
            for k in range(self.api_count):
                self.api.requests[k] += self.api_requests[k]
                self.api.prompt_tokens[k] += self.api_prompt_tokens[k]

    @cython.cfunc
    def _route_due(self, now: cython.double) -> cython.void:
        rid: cython.longlong
        rep: Rep
        if self.api is not None and self.api_next <= now:
            self._api_advance(now)
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
            rep = self._pick(rid)
            self.replica[rid] = rep.index
            rep.waiting.append(rid)
            rep.outstanding += 1
            self._notify(rep)

    @cython.cfunc
    def _pick(self, rid: cython.longlong) -> Rep:
        """Cluster._pick: the router (sim/routers.py, the reference's own code) sees each replica's load."""
        rep: Rep
        i: cython.Py_ssize_t
        router: Router = self.router
        if self.dp > 1:
            return self._lockstep_pick(rid)
        if router.needs_view:
            for i in range(len(self.reps)):
                rep = self.reps[i]
                router.observe(
                    i, rep.outstanding, len(rep.waiting), rep.num_blocks - rep.free, rep.num_blocks
                )
        return self.reps[router.pick(rid)]

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
            if self.api is not None and not self.api_open:  # the open loop: an error frees nothing
                woken = self.api.failed(rid, self.now)  # answered at once: a slot frees, a round is released
                self.api_next = self.api.pending()
                if woken:
                    self._wake_arrivals()
        if self.released < self.n:  # closed loop: the finished request's slot goes to the next one (_on_done)
            nxt = self.released
            self.released += 1
            # Cluster._on_done: sent now if due (plus the front end's delay), else at its own time
            self.arrived[nxt] = max(self.arrived[nxt], self.now + self.frontend)
            if self.slot_waits:  # the arrivals process waited on `slot_freed`: its succeed() event
                self.slot_waits = False
                self._schedule(self.now, NORMAL, self.slot0 + SLOT_ARRIVALS)
        # the answer is in: the next round after its think time
        if self.conversation and self.child[rid] >= 0:
            nxt = self.child[rid]
            self.arrived[nxt] = self.now + self.frontend + self.think[nxt]
            heapq.heappush(self.due, (self.arrived[nxt], nxt))
            if self.slot_waits:
                self.slot_waits = False
                self._schedule(self.now, NORMAL, self.slot0 + SLOT_ARRIVALS)
        if self.num_done == self.n and not self.finished:
            self.finished = True
            self._schedule(self.now, NORMAL, self.slot0 + SLOT_FINISHED)

    # -- attention DP: waking a group, choosing a rank (sim/lockstep.py: DpGroup.notify, pick_rank) ----------
    @cython.cfunc
    def _lockstep_notify(self, rep: Rep) -> cython.void:
        """Rank.notify -> DpGroup.notify: wake the rank's group if its process waits (`wake.succeed()`)."""
        g: cython.int = rep.index // self.dp
        if self.g_waits[g]:
            self.g_waits[g] = 0
            self._schedule(self.now, NORMAL, g)

    @cython.cfunc
    def _lockstep_pick(self, rid: cython.longlong) -> Rep:
        """Cluster._pick with groups: the router picks a deployment, seeing each one's load summed over its
        ranks, then DpGroup.pick its rank: in turn (SGLang), or vLLM's least-loaded rank (lockstep.pick_rank:
        strictly lower score, ties to the lowest rank)."""
        g: cython.Py_ssize_t
        i: cython.Py_ssize_t
        d: cython.Py_ssize_t = self.dp
        best_g: cython.Py_ssize_t
        out: cython.longlong
        waiting: cython.longlong
        used: cython.longlong
        total: cython.longlong
        score: cython.double
        best_score: cython.double
        rep: Rep
        best: Rep
        router: Router = self.router
        if router.needs_view:
            for g in range(self.num_groups):
                out = waiting = used = total = 0
                for i in range(g * d, g * d + d):
                    rep = self.reps[i]
                    out += rep.outstanding
                    waiting += len(rep.waiting)
                    used += rep.num_blocks - rep.free
                    total += rep.num_blocks
                router.observe(g, out, waiting, used, total)
        best_g = router.pick(rid)
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
                cython.cast(cython.double, rep.num_blocks - rep.free)
                if cython.compiled
                else float(rep.num_blocks - rep.free)
            ) / rep.num_blocks - 0.5
            score += len(rep.waiting) * 6.0 * (usage if usage > 0.0 else 0.0)
        return score
