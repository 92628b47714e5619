"""The scheduling state of one replica and the bookkeeping every policy shares (no SimPy in here).

`waiting` is FIFO (preempted requests go back to the front); `prefilling` and `decoding` together are
Sarathi-Serve's `running`, each kept in FCFS order (request ids are in arrival order). A request moves
waiting → prefilling (admitted: KV allocated) → decoding (prompt computed) → done, and back to the front of
waiting when preempted (recompute: its KV is dropped and prompt plus outputs so far are prefilled again;
it still emits exactly its output tokens in total).
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from simserve.sim.config import SimConfig
from simserve.sim.histogram import LogHistogram
from simserve.sim.kv_offload import attach as attach_tier
from simserve.sim.kvcache import BlockManager
from simserve.sim.prefix_cache import PrefixCache
from simserve.sim.request import DONE, IGNORED, RUNNING, Requests

_count = np.count_nonzero  # NOTE: much cheaper than ndarray.any() on the small masks of one batch


class ReplicaState:
    def __init__(
        self,
        index: int,
        reqs: Requests,
        cfg: SimConfig,
        num_blocks: int,
        pp: int,
        tbt: LogHistogram,
        on_done: Callable[[int, int], None],
        timer: Any = None,
    ):
        self.index = index
        self.reqs = reqs
        self.cfg = cfg
        self.pp = pp
        self.tbt = tbt
        self.on_done = on_done  # (replica, request) when a request finishes or is ignored
        self.timer = timer  # the BatchTimer: adaptive policies predict an iteration's time with it
        self.dynamic = not cfg.reserves_max_len
        if cfg.spec_k:
            assert pp == 1, (
                "speculative decoding is modelled at PP 1 (scenario.check_scenario refuses PP > 1)"
            )
            reqs.draw_speculation(cfg.spec_acceptance, cfg.spec_seed)
        # vllm-v1 with prefix caching: vLLM's block pool (hashed blocks, LRU free queue); else a count
        self.prefix: PrefixCache | None = None
        if cfg.prefix_caching:
            self.prefix = PrefixCache(num_blocks, cfg.block_size, reqs)
            attach_tier(self.prefix, cfg, reqs)  # --kv-offload-gb (sim/kv_offload.py)
        self.kv = self.prefix if self.prefix is not None else BlockManager(num_blocks, cfg.kv_watermark())
        # prefix caching: finished requests whose blocks go back at the next step, in `running` order (vLLM
        # frees them in the order it scheduled them, and that order is the free queue's LRU order)
        self.finished: list[int] = []
        self.admitted = 0  # admissions so far: running is in admission order
        self.admit_seq: dict[int, int] = {}
        self.block_size = cfg.block_size
        self.reserve = -(-cfg.max_model_len // cfg.block_size)  # orca/fcfs: max length up front
        self.budget = cfg.token_budget()
        self.max_batch = cfg.batch_limit(pp)
        self.prompt_limit = cfg.prompt_limit()
        self.waiting: deque[int] = deque()
        self.prefilling: list[int] = []
        self.decoding: list[int] = []
        # vllm-v1 only: vLLM's `running` list, in admission order (a readmitted request goes to the end, so
        # this is not id order once something was preempted); None for the other policies.
        self.running: list[int] | None = [] if cfg.policy == "vllm-v1" else None
        self._decoding_array: np.ndarray | None = None
        self.turn_prefill = True  # chunked: whose turn it is (SimpleChunking alternates)
        self.preemptions = 0  # total, on this replica
        self.stale: set[int] = set()  # preempted while in a micro-batch in flight: its work there is dropped
        self.outstanding = 0  # routed here and not yet finished (the lor router's load)
        self.sglang = None  # sglang only: its scheduler's own state (simserve/sim/sglang.py)
        self.radix = None  # sglang with prefix caching: SGLang's radix cache, also the pool (radix_cache.py)
        if cfg.policy == "sglang":
            from simserve.sim import sglang

            sglang.setup(self)

    # -- queries -----------------------------------------------------------------------------------
    @property
    def num_running(self) -> int:
        return len(self.prefilling) + len(self.decoding)

    def num_tokens(self, rid: int) -> int:
        return int(self.reqs.prompt[rid] + self.reqs.generated[rid])

    def admission_blocks(self, rid: int) -> int:
        if not self.dynamic:
            return self.reserve
        return -(-self.num_tokens(rid) // self.block_size)

    def head_admissible(self, rid: int) -> bool:
        """The waiting request `rid` can join the running set now: its admission blocks fit, the batch has
        room, and it is not in a micro-batch still in flight (preempted there: readmitted once it has
        left)."""
        if not self.kv.can_allocate(self.admission_blocks(rid)) or self.num_running >= self.max_batch:
            return False
        return not (self.pp > 1 and self.reqs.inflight[rid])

    def paused_decodes(self) -> np.ndarray:
        """Decoding requests not in a micro-batch in flight, in FCFS order."""
        if self._decoding_array is None:
            self._decoding_array = np.array(self.decoding, dtype=np.int64)
        dec = self._decoding_array
        if self.pp > 1 and len(dec):
            dec = dec[~self.reqs.inflight[dec]]
        return dec

    # -- transitions -------------------------------------------------------------------------------
    def enqueue(self, rid: int) -> None:
        self.waiting.append(rid)
        self.outstanding += 1

    def drop_too_long(self) -> None:
        """Ignore head requests longer than the prompt limit (Sarathi-Serve's FINISHED_IGNORED)."""
        while self.waiting and self.num_tokens(self.waiting[0]) > self.prompt_limit:
            rid = self.waiting.popleft()
            self.reqs.status[rid] = IGNORED
            self.outstanding -= 1
            self.on_done(self.index, rid)

    def drop_unfittable(self) -> None:
        """Nothing is resident and the head still cannot be admitted: it never will be (its KV exceeds
        the pool less the watermark). Ignore it rather than stall the replica forever."""
        rid = self.waiting.popleft()
        self.reqs.status[rid] = IGNORED
        self.outstanding -= 1
        self.on_done(self.index, rid)

    def admit_head(self, now: float, blocks: int | None = None, computed: int = 0) -> int:
        """Move the head of waiting into the running set with its KV blocks (default: the admission blocks;
        vllm-v1 passes its first chunk's; with prefix caching it has allocated them, and `computed` tokens
        were found cached); returns its id."""
        r = self.reqs
        rid = self.waiting.popleft()
        if blocks is None:
            blocks = self.admission_blocks(rid)
        if self.radix is not None:
            pass  # sglang locks its prefix and allocates once its whole prefill batch is chosen (sglang.py)
        elif self.prefix is None:
            self.kv.allocate(blocks)
        else:
            self.admit_seq[rid] = self.admitted
            self.admitted += 1
        r.blocks[rid] = blocks
        r.computed[rid] = computed
        r.target[rid] = self.num_tokens(rid)
        r.status[rid] = RUNNING
        if r.scheduled[rid] != r.scheduled[rid]:  # NaN: first admission
            r.scheduled[rid] = now
        bisect.insort(self.prefilling, rid)
        if self.running is not None:
            self.running.append(rid)
        return rid

    def preempt(self, rid: int, to_back: bool = False) -> None:
        """Recompute preemption: drop the KV, go to the front of waiting (SGLang's retraction: the back)."""
        r = self.reqs
        if self.radix is not None:
            self.radix.retract(rid)
        elif self.prefix is None:
            self.kv.release(int(r.blocks[rid]))
        else:
            self.prefix.free_request(rid)
        r.blocks[rid] = 0
        r.computed[rid] = 0
        r.spec[rid] = 0  # vLLM's _preempt_request drops the request's drafts
        r.preemptions[rid] += 1
        # A micro-batch in flight that holds it will not count its work; until that micro-batch leaves the
        # pipeline the request stays marked in flight and cannot be admitted again (see policies.py).
        if r.inflight[rid]:
            self.stale.add(rid)
        self._remove(rid)
        if to_back:
            self.waiting.append(rid)
        else:
            self.waiting.appendleft(rid)
        self.preemptions += 1

    def abort(self, rid: int) -> None:
        """A running request the engine gives up on (SGLang: out of KV even alone): freed, counted ignored."""
        r = self.reqs
        if self.radix is not None:
            self.radix.retract(rid)
        else:
            self.kv.release(int(r.blocks[rid]))
        r.blocks[rid] = 0
        r.status[rid] = IGNORED
        self._remove(rid)
        self.outstanding -= 1
        self.on_done(self.index, rid)

    def _remove(self, rid: int) -> None:
        if self.running is not None:
            self.running.remove(rid)
        i = bisect.bisect_left(self.decoding, rid)
        if i < len(self.decoding) and self.decoding[i] == rid:
            del self.decoding[i]
            self._decoding_array = None
        else:
            self.prefilling.remove(rid)

    def finish(self, rid: int, now: float) -> None:
        r = self.reqs
        r.completed[rid] = now
        r.status[rid] = DONE
        if self.radix is not None:
            self.radix.finish(rid)
        elif self.prefix is None:
            self.kv.release(int(r.blocks[rid]))
        else:
            self.finished.append(rid)
        r.blocks[rid] = 0
        if self.running is not None:
            self.running.remove(rid)
        self.outstanding -= 1
        self.on_done(self.index, rid)

    def release_finished(self) -> None:
        """Prefix caching: give the blocks of the requests finished since the last step back, in the order
        they were scheduled (`running` order, which is admission order)."""
        if len(self.finished) > 1:
            self.finished.sort(key=self.admit_seq.__getitem__)
        for rid in self.finished:
            if self.prefix.tier is not None:  # the connector's request_finished
                self.prefix.tier.finished(rid)
            self.prefix.free_request(rid)
            del self.admit_seq[rid]
        self.finished.clear()

    # -- the decode part of a batch: KV growth and preemption ----------------------------------------
    def schedule_decodes(self) -> np.ndarray:
        """All paused decodes, each with room for one more token; preempts the youngest when out of blocks."""
        dec = self.paused_decodes()
        if not self.dynamic or not len(dec):
            return dec
        r = self.reqs
        need = r.computed[dec] % self.block_size == 0  # the next token starts a new block
        n_need = int(np.count_nonzero(need))
        if self.kv.free - n_need >= 1:  # every can_append_slot check in the loop below would pass
            self.kv.allocate(n_need)
            r.blocks[dec[need]] += 1
            return dec
        return self._schedule_decodes_preempting()

    def _schedule_decodes_preempting(self) -> np.ndarray:
        """Sarathi-Serve's loop: visit running in FCFS order; while no free block, preempt the youngest
        request not yet visited (in flight or not), or the request itself when none is left."""
        r = self.reqs
        todo = deque(sorted(self.prefilling + self.decoding))
        out: list[int] = []
        while todo:
            rid = todo.popleft()
            if r.inflight[rid] or r.computed[rid] < r.target[rid]:
                continue  # in flight: carried over; partial prefill: deferred to the prefill phase
            while not self.kv.can_append_slot():
                victim = todo.pop() if todo else rid
                self.preempt(victim)
                if victim == rid:
                    break
            else:
                if r.computed[rid] % self.block_size == 0:
                    self.kv.allocate(1)
                    r.blocks[rid] += 1
                out.append(rid)
        return np.array(out, dtype=np.int64)

    # -- results of a finished micro-batch ----------------------------------------------------------
    def complete_chunk(self, rid: int, chunk: int, now: float) -> bool:
        """A prefill chunk left the last stage; the last one samples a token (then True)."""
        r = self.reqs
        if r.spec_sched[rid]:
            self.complete_verify(rid, chunk, now)
            return True
        r.computed[rid] += chunk
        if r.computed[rid] < r.target[rid]:
            return False
        r.generated[rid] += 1
        last = r.last_token[rid]
        if last == last:  # a re-prefill after preemption: the whole wait is one gap
            gap = now - last
            r.tbt_max[rid] = max(r.tbt_max[rid], gap)
            self.tbt.add(gap)
        else:
            r.first_token[rid] = now
        r.last_token[rid] = now
        self.prefilling.remove(rid)
        if r.generated[rid] >= r.output[rid]:
            self.finish(rid, now)
        else:
            if self.radix is not None:  # SGLang's checkpoint_kv_cache: a prefilled prompt joins the tree
                self.radix.checkpoint(rid, int(r.computed[rid]))
            r.spec[rid] = self.cfg.spec_k  # drafts proposed after its prefill (0: no speculation)
            bisect.insort(self.decoding, rid)
            self._decoding_array = None
        return True

    def complete_verify(self, rid: int, chunk: int, now: float) -> None:
        """A verification step left the last stage (speculative decoding): of its `spec_sched` drafts the
        pre-drawn number were accepted (none of padding drafts), the rejected ones roll `computed` back
        (vLLM's update_from_output), and the accepted ones plus the target's own next token are appended, up
        to the request's output length. The tokens arrive together: one TBT gap, as vLLM streams them in
        one chunk."""
        r = self.reqs
        s = int(r.spec_sched[rid])
        padded = s < 0  # a one-token admission padded with placeholder drafts: still in prefilling
        r.spec_sched[rid] = 0
        if s < 0:  # vLLM's padding drafts (placeholders): all rejected, no draw
            s, a = -s, 0
        else:
            a = min(int(r.spec_draws[r.spec_off[rid] + r.spec_steps[rid]]), s)
            r.spec_steps[rid] += 1
        r.computed[rid] += chunk - (s - a)
        r.generated[rid] = min(r.generated[rid] + 1 + a, r.output[rid])
        last = r.last_token[rid]
        if last == last:
            gap = now - last
            r.tbt_max[rid] = max(r.tbt_max[rid], gap)
            self.tbt.add(gap)
        else:
            r.first_token[rid] = now
        r.last_token[rid] = now
        if r.generated[rid] >= r.output[rid]:
            if padded:
                self.prefilling.remove(rid)
            else:
                self.decoding.remove(rid)
                self._decoding_array = None
            self.finish(rid, now)
            return
        r.spec[rid] = self.cfg.spec_k
        if padded:  # a padded one-token admission: its prompt is computed now
            self.prefilling.remove(rid)
            bisect.insort(self.decoding, rid)
            self._decoding_array = None

    def complete_decodes(self, dec: np.ndarray, now: float) -> None:
        """Each request in `dec` computed one token and sampled the next."""
        r = self.reqs
        r.computed[dec] += 1
        gen = r.generated[dec] + 1
        r.generated[dec] = gen
        last = r.last_token[dec]
        r.last_token[dec] = now
        worst = r.tbt_max[dec]
        t0 = last[0]
        if _count(last != t0):
            gaps = now - last
            if _count(gaps > worst):
                r.tbt_max[dec] = np.maximum(worst, gaps)
            self.tbt.add_many(gaps)
        else:  # the common case: all got their last token at once, so they waited the same gap
            gap = now - t0
            if _count(worst < gap):
                r.tbt_max[dec] = np.maximum(worst, gap)
            self.tbt.add(float(gap), float(len(dec)))
        if self.cfg.spec_k:
            r.spec[dec] = self.cfg.spec_k  # each proposed drafts for its next step
        done = gen >= r.output[dec]
        if _count(done):
            for rid in dec[done].tolist():
                self.decoding.remove(rid)
                self.finish(rid, now)
            self._decoding_array = None
