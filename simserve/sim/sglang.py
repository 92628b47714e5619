"""The `sglang` policy: SGLang 0.5.23's scheduler (`python -m sglang.launch_server`), one step at a time.

Design note. SGLang keeps a waiting queue and a running (decode) batch, and each step
(`Scheduler.get_next_batch_to_run`, sglang/srt/managers/scheduler.py) either runs a prefill batch, when one
can be formed, or else decodes the whole running batch: `prefill.schedule(budget) or decode.schedule()`.
Ongoing decodes stall while prompts are prefilled, unless `--enable-mixed-chunk` lets them ride along.

  between  (`event_loop_normal`, `get_next_batch_to_run`) The last step's prefill batch, less the request left
  steps    half-prefilled and the finished ones, joins the running batch at the start of the next step: after
           its requests, or, when the running batch is empty, as the running batch itself. The running batch
           carries `batch_is_full`; an empty one is replaced, so the flag it carried is lost — after any
           prefill into an idle replica, and after every mixed step (which leaves an empty running batch
           behind). A batch that shrinks (a request finished or left as the chunked one) clears it. The
           running batch's own order (merges, and the retraction order after a retraction) breaks retraction
           ties, orders the ignore_eos look ahead and the running offset's float sum, and is the order its
           finished requests release their KV into the radix cache.

  prefill  (`Scheduler._get_new_batch_prefill_raw` + `PrefillAdder`, managers/schedule_policy.py)
           Nothing when the waiting queue is empty and no request is half-prefilled, or when the running
           batch is full (max_running_requests). Otherwise the half-prefilled ("chunked") request first, then
           waiting requests in queue order, while three budgets last:
             chunk   --chunked-prefill-size tokens of prompt per step (only the last admitted request can be
                     cut short; it becomes the chunked request and continues first next step);
             input   --max-prefill-tokens (16384);
             memory  free KV tokens minus what admitted and running requests are expected to still need: a
                     running request holds back min(max_new_tokens − output so far, 4096) × new_token_ratio (×
                     1 if it was sent with ignore_eos: per request), an admitted one its page-ceiled chunk +
                     one page + (when it is not cut short) min(max_new_tokens, 4096). A request is admitted
                     only if its prompt + remaining output + a page is strictly below what is left
                     (`PrefillBudget.check_prefill`). ignore_eos requests without the radix cache take another
                     path (`PrefillAdder.add_one_req_ignore_eos`): their page-ceiled prompt + a page must fit
                     what is left now, and the pool must outlast every request's outputs as requests finish
                     (`_outlasts`); a request longer than the chunk is cut to what is left of it, unfloored —
                     so after a request without ignore_eos was cut to the page, one with it can be cut too:
                     SGLang then keeps only the last as the chunked request, and the first runs on as if
                     prefilled (a bug of the release, followed).
           With --enable-mixed-chunk each decode takes one token of the chunk and input budgets, and the
           decodes join the prefill batch when their next tokens fit in the KV pool.
  decode   (`Scheduler.update_running_batch`) Every running request, one token each. When the pool cannot
           give each a new token, `ScheduleBatch.retract_decode` retracts requests, fewest output tokens first
           (among equals the longest prompt), always at least one and never the last: their KV is freed,
           they go to the END of the waiting queue and are prefilled again with their outputs so far. Then
           new_token_ratio = min(1, (Σ outputs so far + 20·remaining) / (Σ max_new_tokens + 1)) over the
           requests that stayed; a decode step with no retraction lowers it by (init − min) / 600 down to
           min = 0.14·init, init = min(0.7 × --schedule-conservativeness, 1); an idle step resets it.

The KV pool counts tokens in pages of --page-size (1 by default on CUDA): a request holds its computed tokens,
page-ceiled. Requests carry max_new_tokens = their output length, as `sglang.bench_serving` sends them. With
--prefix-caching the pool is SGLang's radix cache (radix_cache.py): a waiting request starts with its longest
cached prefix computed, the chunked request publishes its computed pages each step, a finished one its KV, and
admission counts unlocked cached pages as free; `lpm` then orders the waiting queue by longest cached prefix
(at most 128 waiting; more fall back to fcfs), putting after the others a request that shares 32 or more
tokens with an earlier waiting one while its own cached prefix is 32 or less (in-batch prefix caching); the
other orders refresh the first 128 waiting requests' prefixes every 32nd pass. Cached pages are evicted where
SGLang evicts (`evict_from_tree_cache`): before a prefill's allocation (its tokens, and a page more per
request on paged pools), before a decode step's check and allocation (a page per request), and for the others'
next 20 steps after each retraction. Without it (`--disable-radix-cache`) `lpm` is `fcfs`, as in SGLang (said
once on stderr). With `--dp-attention D` (SGLang's `--attn-dp-size`) each rank is a replica of its own with
--chunked-prefill-size // D, --max-running-requests // D and the conservativeness × 0.3; the ranks step
together (lockstep.py). Not modelled (docs/engines.md): pipeline parallelism, priority scheduling.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import numpy as np

from simserve.errors import SimserveError
from simserve.sim.kvcache import BlockManager
from simserve.sim.radix_cache import RadixCache
from simserve.sim.request import RUNNING
from simserve.sim.sglang_admission import choose_prefill

if TYPE_CHECKING:  # the state calls sglang.setup when it is built: annotations only here
    from simserve.sim.state import ReplicaState

# srt/environ.py defaults: SGLANG_INIT_NEW_TOKEN_RATIO, SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR,
# SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS, SGLANG_RETRACT_DECODE_STEPS
INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO_FACTOR = 0.14
NEW_TOKEN_RATIO_DECAY_STEPS = 600
RETRACT_DECODE_STEPS = 20
# arg_groups/parallel_hook.py: `schedule_conservativeness * 0.3` when DP attention is on
DP_ATTENTION_CONSERVATIVENESS = 0.3
# arg_groups/speculative_hook.py _handle_eagle_family: "Max running requests is reset to 48 for speculative
# decoding" when --max-running-requests is not given
SPEC_MAX_RUNNING_REQUESTS = 48
_NONE = np.zeros(0, dtype=np.int64)


def default_max_running_requests(pool_tokens: int, context_len: int) -> int:
    """SGLang's max_running_requests when the flag is not given, from the KV pool's size in tokens
    (mem_cache/kv_cache_configurator.py, `resolve_max_num_reqs`): pool / context length × 512, clamped to
    [2048, 4096], and never above half the pool."""
    estimated = max(min(int(pool_tokens / context_len * 512), 4096), 2048)
    return max(min(estimated, pool_tokens // 2), 1)


class SGLangScheduler:
    """What SGLang's scheduler keeps between steps beyond the waiting queue: new_token_ratio
    (NewTokenRatioTracker), its running batch (`running`: the requests in the batch's own order, which merges
    and retractions set; `full`: the batch's batch_is_full flag) and the last step's batch when it was a
    prefill (`last`: its requests, merged into the running batch at the next step; None after a decode
    step)."""

    __slots__ = (
        "init",
        "min",
        "decay",
        "ratio",
        "full",
        "running",
        "last",
        "eos",
        "refresh_calls",
        "reserve",
    )

    def __init__(self, conservativeness: float, spec_k: int = 0):
        self.init = min(INIT_NEW_TOKEN_RATIO * conservativeness, 1.0)
        self.min = min(self.init * MIN_NEW_TOKEN_RATIO_FACTOR, 1.0)
        self.decay = (self.init - self.min) / NEW_TOKEN_RATIO_DECAY_STEPS
        self.ratio = self.init
        self.full = False  # ScheduleBatch.batch_is_full of the running batch
        self.running: list[int] = []
        self.last: list[int] | None = None
        self.eos: np.ndarray = np.zeros(0, dtype=bool)  # per request: SamplingParams.ignore_eos
        self.refresh_calls = 0  # SchedulePolicy._waiting_prefix_refresh_calls (the radix cache's LRU refresh)
        # EAGLE: KV tokens each verification keeps allocated past the committed
        self.reserve = spec_reserve(spec_k)


def spec_reserve(k: int) -> int:
    """EAGLE with K draft steps and topk 1 (spec v2): the KV a request keeps allocated past its committed
    tokens before each verification step, `get_alloc_reserve_per_decode` (mem_cache/allocation_sizing.py):
    twice `get_alloc_len_per_decode` = max(num_steps × topk, num_draft_tokens) = K + 1 tokens (topk 1: the
    draft-token count is K + 1); 0 without speculation."""
    return 2 * (k + 1) if k else 0


def pool(cfg, num_blocks: int, pp: int) -> tuple[int, int]:
    """(KV pages, max_running_requests) of a replica whose pool was sized as `num_blocks` of simserve's
    blocks; the compiled core (core_run.py) reads the same."""
    if pp > 1:
        raise SimserveError(
            "--policy sglang models SGLang without pipeline parallelism (its PP micro-batching is not "
            "modelled): use --pp 1"
        )
    if cfg.schedule_policy == "lpm" and not cfg.prefix_caching:
        say_lpm_is_fcfs_once()
    # The pool was sized in simserve's 16-token blocks (memory.plan_memory); SGLang counts it in pages.
    tokens = num_blocks * cfg.block_size
    # kv_cache_configurator.resolve_max_num_reqs: a --max-running-requests above half the pool is lowered to
    # it; under DP attention it is the server's, split evenly over the ranks (the default is each rank's own)
    given = cfg.max_batch or (SPEC_MAX_RUNNING_REQUESTS if cfg.spec_k else 0)  # EAGLE's 48 counts as given
    max_running = (
        max(min(max(given // cfg.dp_attention, 1), tokens // 2), 1)
        if given
        else default_max_running_requests(tokens, cfg.max_model_len)
    )
    return tokens // cfg.page_size, max_running


_SAID_ENV = "SIMSERVE_SAID_LPM_FCFS"  # inherited by worker processes: a sweep says it once, not per worker


def say_lpm_is_fcfs_once() -> None:
    """`--schedule-policy lpm` without the radix cache: SGLang 0.5.23 quietly runs fcfs
    (`SchedulePolicy._validate_and_adjust_policy`, managers/schedule_policy.py: a cache-aware policy with the
    tree cache disabled becomes CacheAgnosticPolicy.FCFS). simserve does the same, and says so once."""
    if os.environ.get(_SAID_ENV):
        return
    os.environ[_SAID_ENV] = "1"
    sys.stderr.write(
        "simserve: --schedule-policy lpm runs as fcfs without the radix cache (SGLang 0.5.23 does the same: "
        "schedule_policy.py _validate_and_adjust_policy); add --prefix-caching for lpm's order\n"
    )


def setup(rep: ReplicaState) -> None:
    """Give a replica SGLang's token pool, its max_running_requests default and its scheduler state."""
    cfg = rep.cfg
    pages, rep.max_batch = pool(cfg, rep.kv.num_blocks, rep.pp)
    if cfg.prefix_caching:  # SGLang's radix cache is the pool (vLLM's block pool is not used)
        rep.kv = rep.radix = RadixCache(pages, cfg.page_size, rep.reqs)
        rep.prefix = None
    else:
        rep.kv = BlockManager(pages, 0.0)
    rep.block_size = cfg.page_size
    conservativeness = cfg.schedule_conservativeness
    if cfg.dp_attention > 1:
        # arg_groups/parallel_hook.py (_handle_data_parallelism): with DP attention each rank's chunk is
        # --chunked-prefill-size // D, and the conservativeness is scaled by 0.3 (admission trusts more)
        rep.budget = cfg.token_budget() // cfg.dp_attention
        conservativeness *= DP_ATTENTION_CONSERVATIVENESS
    rep.sglang = SGLangScheduler(conservativeness, cfg.spec_k)
    eos = rep.reqs.ignore_eos  # a workload's per-request ignore_eos, else --ignore-eos for all
    rep.sglang.eos = eos if eos is not None else np.full(rep.reqs.n, cfg.ignore_eos)


def sglang_batch(rep: ReplicaState, now: float) -> tuple[list[tuple[int, int]], np.ndarray]:
    """One turn of `Scheduler.event_loop_normal`: `get_next_batch_to_run`, a prefill batch if one can be
    formed, else the running batch's decode step."""
    s = rep.sglang
    merge_last_batch(rep)
    prefills = _prefill(rep, now)
    if prefills:
        s.last = [rid for rid, _ in prefills]  # ScheduleBatch.init_new(can_run_list): the chunked one first
        return prefills, _mixed_decodes(rep) if rep.cfg.enable_mixed_chunk else _NONE
    s.last = None  # a decode batch (or none) is not merged next step
    decodes = _decode(rep)
    if not len(decodes) and not rep.waiting and not rep.prefilling:
        s.ratio = s.init  # Scheduler.on_idle (is_fully_idle): NewTokenRatioTracker.reset
    if s.reserve and len(decodes):
        return _verifications(rep, decodes), _NONE
    return [], decodes


def _verifications(rep: ReplicaState, dec: np.ndarray) -> list[tuple[int, int]]:
    """EAGLE's decode step is a verification of every running request (spec v2, eagle_worker_v2.py): its last
    sampled token and its K drafts through the target, a (request, 1 + K) pair as vLLM's verifications are
    (state.complete_verify appends the accepted drafts and the bonus token; Replica prices it as a decode read
    of query length 1 + K)."""
    k = rep.cfg.spec_k
    rep.reqs.spec_sched[dec] = k
    return [(rid, k + 1) for rid in dec.tolist()]


def merge_last_batch(rep: ReplicaState) -> None:
    """`get_next_batch_to_run`'s start: the last prefill batch, less the half-prefilled request and the
    finished ones, joins the running batch — appended to it, or, when the running batch is empty, BECOMING it,
    with the prefill batch's own batch_is_full (False): the flag an empty running batch carried is lost (after
    a mixed step the running batch is an empty one, and so is it before any prefill into an idle replica).
    Either batch shrinking (a request finished, or left as the chunked one) clears the flag."""
    s, status = rep.sglang, rep.reqs.status
    if s.last is not None:
        chunked = rep.prefilling[0] if rep.prefilling else -1
        last = [rid for rid in s.last if rid != chunked and status[rid] == RUNNING]
        if len(last) < len(s.last):
            s.full = False
        if last and s.running:
            s.running += last  # ScheduleBatch.merge_batch: the running batch's requests, then the new ones
        elif last:
            s.running, s.full = last, False
        s.last = None
    kept = [rid for rid in s.running if status[rid] == RUNNING]  # running_batch.filter_batch()
    if len(kept) < len(s.running):
        s.running, s.full = kept, False


def _prefill(rep: ReplicaState, now: float) -> list[tuple[int, int]]:
    radix = rep.radix
    if radix is None:
        return choose_prefill(rep, now, None)
    if rep.prefilling:  # Scheduler.stash_chunked_request: the chunked request publishes what it computed
        rid = rep.prefilling[0]
        radix.checkpoint(rid, int(rep.reqs.computed[rid]))
    # SGLang chooses the whole prefill batch first, locking each admitted request's prefix as it commits it,
    # and allocates after (prepare_for_extend): one admission's allocation cannot evict what a later one
    # matched
    pending: list[int] = []  # pages to allocate
    out = choose_prefill(rep, now, pending)
    if out:  # mem_cache/allocation.py alloc_for_extend: evict for the extend, paged: a page more per request
        page = rep.block_size
        radix.evict_for(sum(n for _, n in out) + (len(out) * page if page > 1 else 0))
    radix.allocate(sum(pending))
    return out


def _room(rep: ReplicaState, tokens: int) -> None:
    """`evict_from_tree_cache` (mem_cache/common.py) before SGLang checks or allocates `tokens`: with the
    radix cache, unlocked cached pages are evicted, least recently used first, until that many tokens are
    free."""
    if rep.radix is not None:
        rep.radix.evict_for(tokens)


def _fits(rep: ReplicaState, ids) -> bool:
    """ScheduleBatch.check_decode_mem: the next decode step's pages fit (after evicting for them)."""
    need = _decode_pages(rep, ids)
    _room(rep, need * rep.block_size)
    return need <= rep.kv.free


def _decode_pages(rep: ReplicaState, ids) -> int:
    """Pages the next decode step of `ids` needs (ScheduleBatch.new_tokens_required_next_decode): one for each
    whose computed tokens fill their pages; with EAGLE, what takes each to its committed tokens plus the
    reserve (`_new_tokens_required_next_decode_spec_v2`)."""
    page, computed = rep.block_size, rep.reqs.computed
    reserve = rep.sglang.reserve
    if reserve:
        blocks = rep.reqs.blocks
        return sum(max(0, -(-(int(computed[rid]) + reserve) // page) - int(blocks[rid])) for rid in ids)
    return sum(1 for rid in ids if computed[rid] % page == 0)


def _mixed_decodes(rep: ReplicaState) -> np.ndarray:
    """--enable-mixed-chunk: the running batch joins the prefill batch if its next tokens fit (otherwise it
    sits this step out; a mixed step never retracts). Joined, its requests are the prefill batch's, after the
    prefill's own (`mix_with_running`), and the running batch is replaced by an empty one that keeps the
    flag."""
    s = rep.sglang
    if not s.running or not _fits(rep, s.running):
        return _NONE
    dec = _grow(rep, s.running)
    s.last += s.running
    s.running = []
    return dec


def _decode(rep: ReplicaState) -> np.ndarray:
    """Scheduler.update_running_batch: decode every running request, retracting when the pool is short."""
    s, r = rep.sglang, rep.reqs
    if not s.running:
        return _NONE
    if _fits(rep, s.running):
        s.ratio = max(s.ratio - s.decay, s.min)  # NewTokenRatioTracker.decay_step
        return _grow(rep, s.running)
    # ScheduleBatch._get_decode_retraction_order: keep most (output so far, −prompt) first — a stable sort of
    # the batch in its own order — and retract from the end; the batch keeps that order after
    # (filter_batch(keep_indices=sorted_indices)).
    keep = sorted(s.running, key=lambda i: (int(r.generated[i]), -int(r.prompt[i])), reverse=True)
    first = True
    while first or not _fits(rep, keep):
        if len(keep) == 1:
            break  # always keep one
        first = False
        rep.preempt(keep.pop(), to_back=True)
        _room(rep, len(keep) * RETRACT_DECODE_STEPS)  # release_req: room for the others' next steps
    s.full = False  # the batch shrank
    if not _fits(rep, keep):
        # Even one request cannot grow: SGLang aborts it ("Out of memory even after retracting ...").
        rep.abort(keep.pop())
    s.running = keep
    # NewTokenRatioTracker.estimate_new_token_ratio_after_retract over the requests that stayed
    decoded = sum(int(r.generated[i]) for i in keep)
    wanted = sum(int(r.output[i]) for i in keep)
    s.ratio = min(1.0, (decoded + RETRACT_DECODE_STEPS * len(keep)) / (wanted + 1))
    return _grow(rep, keep)


def _grow(rep: ReplicaState, ids: list[int]) -> np.ndarray:
    """ScheduleBatch.prepare_for_decode: evict for a page per request (alloc_for_decode's estimate), allocate
    the step's new pages; returns the ids as the batch's decodes, in the batch's order (the order its finished
    requests release their KV into the radix cache: it decides the LRU order of what they leave there)."""
    dec = np.array(ids, dtype=np.int64)
    if not len(dec):
        return dec
    _room(rep, len(dec) * rep.block_size)
    need = _decode_pages(rep, dec)
    if need and rep.sglang.reserve:  # eagle_prepare_for_decode: each up to its committed tokens + the reserve
        r, page = rep.reqs, rep.block_size
        want = -(-(r.computed[dec] + rep.sglang.reserve) // page)
        rep.kv.allocate(need)
        r.blocks[dec] = np.maximum(r.blocks[dec], want)
    elif need:
        full = rep.reqs.computed[dec] % rep.block_size == 0
        rep.kv.allocate(need)
        rep.reqs.blocks[dec[full]] += 1
    return dec
