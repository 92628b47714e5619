"""A replica's state transitions (state.ReplicaState): admission of the head, preemption, abort, completion.

The pieces every policy family shares: `_admit_head`, `_preempt`, `_abort`, the decode part of a batch with
its KV growth (`_schedule_decodes`, `_schedule_decodes_preempting`), and the results of a finished micro-batch
(`_complete_chunk`, `_complete_decodes`, `_finish`).
"""

from __future__ import annotations

from collections import deque

import cython

if cython.compiled:
    from cython.cimports.simserve.sim.core.blockstart import block_start
    from cython.cimports.simserve.sim.core.rep import Rep, _insort, _remove_sorted
    from cython.cimports.simserve.sim.core.routing import CoreRouting
else:
    from .blockstart import block_start
    from .rep import Rep, _insort, _remove_sorted
    from .routing import CoreRouting

from .consts import DONE, IGNORED, P_V1, ROLE_PREFILL, RUNNING

# NOTE: returned for "no prefills / no chunks" on the hot path instead of a fresh list; never mutated
_NONE: list = []


@cython.cclass
class CoreTransitions(CoreRouting):
    """state.ReplicaState's transitions and a finished micro-batch's results."""

    # -- results of a finished micro-batch (state.ReplicaState) ---------------------------------------------
    @cython.cfunc
    def _complete_chunk(
        self, rep: Rep, rid: cython.longlong, chunk: cython.longlong, now: cython.double
    ) -> cython.bint:
        """ReplicaState.complete_chunk: True when the chunk was the last and sampled a token."""
        last: cython.double
        gap: cython.double
        if self.spec_sched[rid]:
            self._complete_verify(rep, rid, chunk, now)
            return True
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
            self.spec[rid] = self.spec_k
            _insort(rep.decoding, rid)
        return True

    @cython.cfunc
    def _complete_verify(
        self, rep: Rep, rid: cython.longlong, chunk: cython.longlong, now: cython.double
    ) -> cython.void:
        """ReplicaState.complete_verify: the pre-drawn accepted drafts, the rejected ones rolled back."""
        s: cython.longlong = self.spec_sched[rid]
        padded: cython.bint = s < 0  # padding drafts: a one-token admission, still in prefilling
        a: cython.longlong
        last: cython.double
        gap: cython.double
        self.spec_sched[rid] = 0
        if s < 0:
            s = -s
            a = 0
        else:
            a = self.spec_draws[self.spec_off[rid] + self.spec_steps[rid]]
            if a > s:
                a = s
            self.spec_steps[rid] += 1
        self.computed[rid] += chunk - (s - a)
        self.generated[rid] = min(self.generated[rid] + 1 + a, self.output[rid])
        last = self.last_token[rid]
        if last == last:
            gap = now - last
            if gap > self.tbt_max[rid]:
                self.tbt_max[rid] = gap
            self._hist_add(gap, 1.0)
        else:
            self.first_token[rid] = now
        self.last_token[rid] = now
        if self.generated[rid] >= self.output[rid]:
            if padded:
                rep.prefilling.remove(rid)
            else:
                _remove_sorted(rep.decoding, rid)
            self._finish(rep, rid, now)
            return
        self.spec[rid] = self.spec_k
        if padded:
            rep.prefilling.remove(rid)
            _insort(rep.decoding, rid)

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
            self.spec[rid] = self.spec_k
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

    # -- transitions (state.ReplicaState) ------------------------------------------------------------------
    @cython.cfunc
    def _num_running(self, rep: Rep) -> cython.longlong:
        return len(rep.prefilling) + len(rep.decoding) + rep.held

    @cython.cfunc
    def _head_admissible(self, rep: Rep, rid: cython.longlong) -> cython.bint:
        """ReplicaState.head_admissible: blocks fit, the batch has room, not in a micro-batch in flight."""
        if (
            not self._can_allocate(rep, self._admission_blocks(rid))
            or self._num_running(rep) >= self.max_batch
        ):
            return False
        return not (self.pp > 1 and self.inflight[rid])

    @cython.cfunc
    def _paused_decodes(self, rep: Rep) -> list:
        if self.pp > 1:
            return [rid for rid in rep.decoding if not self.inflight[rid]]
        # NOTE: PP = 1: the list itself, not a copy (an allocation per iteration): nothing changes it while
        # the batch is in flight, and _complete takes the batch's decodes before its prefills' last chunks
        # join it
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
        """blocks < 0: the admission blocks (ReplicaState.admit_head's default); vllm-v1 passes its
        chunk's."""
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
        self.spec[rid] = 0
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
            if block_start(self.computed[rid], self.block_mask, self.block_size):
                n_need += 1
                self.blocks[rid] += 1
        if rep.free - n_need >= 1:  # every can_append_slot check of the loop below would pass
            self._allocate(rep, n_need)
            return dec
        for rid in dec:
            if block_start(self.computed[rid], self.block_mask, self.block_size):
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
                if block_start(self.computed[rid], self.block_mask, self.block_size):
                    self._allocate(rep, 1)
                    self.blocks[rid] += 1
                out.append(rid)
        return out
