"""SGLang's scheduler (sglang.py, sglang_admission.py: their design notes; the same steps in the same order):
the running batch merged with the last prefill batch, PrefillAdder's admission (`_sg_choose`), lpm ordering,
retraction and the new-token ratio, the radix cache's pages.
"""

from __future__ import annotations

from collections import deque

import cython

if cython.compiled:
    from cython.cimports.simserve.sim.core.blockstart import block_start
    from cython.cimports.simserve.sim.core.rep import Rep
    from cython.cimports.simserve.sim.core.vllm_v1 import CoreVllmV1
else:
    from .blockstart import block_start
    from .rep import Rep
    from .vllm_v1 import CoreVllmV1

from .consts import RUNNING

# NOTE: returned for "no prefills / no chunks" on the hot path instead of a fresh list; never mutated
_NONE: list = []


@cython.cclass
class CoreSGLang(CoreVllmV1):
    """SGLang's scheduler (sglang.SGLangScheduler and PrefillAdder)."""

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
        if self.sg_reserve and decodes:
            return self._sg_verifications(decodes), _NONE
        return _NONE, decodes

    @cython.cfunc
    def _sg_verifications(self, ids: list) -> list:
        """sglang._verifications: EAGLE's decode step verifies each running request's K drafts, a (request,
        1 + K) pair."""
        rid: cython.longlong
        out: list = []
        for rid in ids:
            self.spec_sched[rid] = self.spec_k
            out.append((rid, self.spec_k + 1))
        return out

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
        k: cython.Py_ssize_t
        queued: dict = {}
        keyed: list = []
        key: object
        for k, rid in enumerate(rep.waiting):
            n = self._num_tokens(rid)
            hit = rep.radix.match(rid, n)[0] * self.block_size
            key = -hit
            if hit <= self.sg_in_batch_check and rep.radix.waiting_deprioritized(
                rid, n, queued, self.sg_in_batch_dep
            ):
                key = float("inf")
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
            room = min(
                rem_chunk,
                cython.cast(cython.longlong, free - total_offset)
                if cython.compiled
                else int(free - total_offset),
            )
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
        left: cython.double = (
            cython.cast(cython.double, self.output[rid]) * (1.0 if self.sg_eos[rid] else rep.sg_ratio)
            - self.generated[rid]
        )
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
        """Pages the next decode step of `ids` needs: one for each whose computed tokens fill their pages;
        with EAGLE, those taking each to its committed tokens plus the reserve (sglang._decode_pages)."""
        rid: cython.longlong
        need: cython.longlong = 0
        want: cython.longlong
        if self.sg_reserve:
            for rid in ids:
                want = (self.computed[rid] + self.sg_reserve + self.block_size - 1) // self.block_size
                if want > self.blocks[rid]:
                    need += want - self.blocks[rid]
            return need
        for rid in ids:
            if block_start(self.computed[rid], self.block_mask, self.block_size):
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
        want: cython.longlong
        if not ids:
            return ids
        self._sg_room(rep, len(ids) * self.block_size)
        need = self._sg_decode_pages(ids)
        # eagle_prepare_for_decode: each up to its committed tokens + the reserve
        if need and self.sg_reserve:
            for rid in ids:
                want = (self.computed[rid] + self.sg_reserve + self.block_size - 1) // self.block_size
                if want > self.blocks[rid]:
                    self.blocks[rid] = want
            self._allocate(rep, need)
        elif need:
            for rid in ids:
                if block_start(self.computed[rid], self.block_mask, self.block_size):
                    self.blocks[rid] += 1
            if rep.radix is not None:
                rep.radix.allocate(need)
                self._sync_radix(rep)
            else:
                self._allocate(rep, need)
        return ids
