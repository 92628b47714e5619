"""Run in SGLang 0.5.23's own environment (tools/sglang_env.sh): its scheduler, closed loop, over a workload.

    .venv-sglang/bin/python tests/conformance/sglang_loop_driver.py < workload.json > steps.json

Reads a workload (sglang_loop.make) as JSON on stdin, or a list of them, and writes one record per scheduler
step on stdout (a list of such lists for a list). The
scheduler is SGLang's own `Scheduler` class, its state evolving on its own: the instance is made without its
`__init__` (which builds the GPU worker) and given what its scheduling methods read — the waiting queue, the
running and last batches, the chunked request, the `NewTokenRatioTracker`, its `SchedulePolicy`, the flags as
`ServerArgs` publishes them — and each step runs `event_loop_normal`'s body: `get_next_batch_to_run` (the
real merge of the last prefill batch, `_get_new_batch_prefill_raw` with `PrefillAdder`, mixed chunks,
`update_running_batch` with `ScheduleBatch.retract_decode`), then the batch's results, then `on_idle`'s ratio
reset when nothing ran. Batches are SGLang's own `ScheduleBatch` (`init_new`, `prepare_for_extend`,
`prepare_for_decode`, `merge_batch`, `filter_batch`, `mix_with_running` on CPU tensors); the KV pools are its
own `ReqToTokenPool` and token allocator (paged above one token a page) sized as the workload says, and the
tree cache its own `UnifiedRadixCache` (disabled without --prefix-caching, as `--disable-radix-cache`).

What is not SGLang's: the model (each request's next token is the next of its token stream, sglang_streams.py;
no EOS, so requests finish by length, as simserve's do) and the result processor, whose finish handling for a
non-speculative generation batch is transcribed below (`process_results`: commit the token, update the finish
state, release a finished request's KV into the tree, publish a prefilled one's, count a middle chunk); its
streaming, logprobs, grammar and metrics are left out. Modules only a GPU server needs are stubbed at import
(sglang_stubs.py). A workload field this driver cannot express exits 2 with one line naming it.
"""

from __future__ import annotations

import json
import sys
import types
from array import array
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import sglang_streams  # noqa: E402

# the workload's fields and what the driver accepts for each (sglang_loop.make writes them)
PER_REQUEST = ("prompt", "output", "arrive", "ignore_eos", "group", "shared", "accepted")
FLAGS = {
    "name": str,
    "kv_tokens": int,
    "page_size": int,
    "chunk": int,
    "max_running": int,
    "max_prefill_tokens": int,
    "mixed": bool,
    "conservativeness": float,
    "prefix_caching": bool,
    "schedule_policy": str,
    "max_model_len": int,
    "overlap": bool,
    "spec": int,
    "acceptance": list,
}
POLICIES = ("fcfs", "lof", "lpm")


def check(w: dict) -> str | None:
    """The first field this driver cannot express, as one line; None when it can run the workload."""
    for key in w:
        if key not in FLAGS and key not in PER_REQUEST:
            return (
                f"workload field {key!r}: not a field this driver knows (it knows "
                f"{sorted([*FLAGS, *PER_REQUEST])})"
            )
    for key, kind in FLAGS.items():
        if key not in w:
            return f"workload field {key!r}: missing"
        if not isinstance(w[key], kind) or (kind is int and isinstance(w[key], bool)):
            return f"workload field {key!r}: {w[key]!r} is not a {kind.__name__}"
    n = len(w.get("prompt", []))
    for key in PER_REQUEST:
        if key not in w:
            return f"workload field {key!r}: missing (one value per request)"
        if not isinstance(w[key], list) or len(w[key]) != n:
            return f"workload field {key!r}: needs one value per request ({n})"
    if w["schedule_policy"] not in POLICIES:
        return f"workload field 'schedule_policy': {w['schedule_policy']!r} is not one of {POLICIES}"
    if w["page_size"] < 1 or w["chunk"] % w["page_size"]:
        return f"workload field 'chunk': {w['chunk']} is not a multiple of page_size {w['page_size']}"
    if w["kv_tokens"] % w["page_size"]:
        return f"workload field 'kv_tokens': {w['kv_tokens']} is not a multiple of page_size {w['page_size']}"
    if any(not isinstance(e, bool) for e in w["ignore_eos"]):
        return "workload field 'ignore_eos': one true or false per request"
    too_long = [
        i for i, (p, o) in enumerate(zip(w["prompt"], w["output"], strict=True)) if p + o > w["max_model_len"]
    ]
    if too_long:
        return (
            f"workload field 'prompt': request {too_long[0]} is longer than max_model_len "
            f"{w['max_model_len']}"
        )
    if any(o < 1 for o in w["output"]) or any(p < 1 for p in w["prompt"]):
        return "workload field 'output': every request needs a prompt and at least one output token"
    if not w["prefix_caching"] and any(g >= 0 for g in w["group"]):
        return "workload field 'group': shared token streams need prefix_caching"
    if w["spec"] < 0 or (w["spec"] and (w["mixed"] or w["overlap"])):
        return (
            "workload field 'spec': EAGLE with K >= 1 drafts, without mixed chunks or the overlap loop "
            "(simserve models neither with speculation)"
        )
    if w["spec"] and any(
        len(a) < o - 1 or any(not 0 <= x <= w["spec"] for x in a)
        for a, o in zip(w["accepted"], w["output"], strict=True)
    ):
        return (
            "workload field 'accepted': per request, at least output - 1 accepted-draft counts in [0, spec]"
        )
    return None


def build(w: dict):
    """SGLang's Scheduler over CPU pools, with the workload's flags (returns it and the module namespace)."""
    import sglang_stubs  # noqa: F401  (before any sglang import)
    import torch
    from sglang.srt.managers import scheduler as sm
    from sglang.srt.managers.schedule_policy import SchedulePolicy
    from sglang.srt.managers.scheduler_components.new_token_ratio_tracker import NewTokenRatioTracker
    from sglang.srt.mem_cache import allocation
    from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
    from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
    from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
    from sglang.srt.runtime_context import _CONTEXT, get_context
    from sglang.srt.server_args import ServerArgs
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    page = w["page_size"]
    args = ServerArgs(
        model_path="none",
        page_size=page,
        chunked_prefill_size=w["chunk"],
        max_running_requests=w["max_running"],
        max_prefill_tokens=w["max_prefill_tokens"],
        schedule_policy=w["schedule_policy"],
        schedule_conservativeness=w["conservativeness"],
        enable_mixed_chunk=w["mixed"],
        disable_radix_cache=not w["prefix_caching"],
        context_length=w["max_model_len"],
    )
    spec = SpeculativeAlgorithm.NONE
    if w["spec"]:  # --speculative-algorithm EAGLE --speculative-num-steps K --speculative-eagle-topk 1
        # --speculative-num-draft-tokens K+1 --disable-overlap-schedule, as the speculative hook resolves them
        # (arg_groups/speculative_hook.py _handle_eagle_family needs the model's config, which there is none
        # of here: the resolved values are set on the published arguments)
        args.speculative_algorithm, args.speculative_num_steps = "EAGLE", w["spec"]
        args.speculative_eagle_topk, args.speculative_num_draft_tokens = 1, w["spec"] + 1
        args.disable_overlap_schedule = True
        # paged pools: get_last_loc's torch path (mem_cache/allocation.py), as SGLang takes it with the
        # torch_native attention backend; the default backends launch a Triton kernel (a GPU) for the same
        # lookup
        args.attention_backend = "torch_native"
        spec = SpeculativeAlgorithm.from_string("EAGLE")
        allocation.assign_req_to_token_pool_func = assign_req_to_token_pool
    _CONTEXT.set_server_args(args)
    # Scheduler.__init__: the PP micro-batch cap defaults to max_running_requests
    get_context().override(
        "scheduler.pp_max_micro_batch_size_default", pp_max_micro_batch_size=w["max_running"]
    )
    # the rows hold a request's over-allocation past max_model_len (get_req_to_token_extra_context_len)
    rows = ReqToTokenPool(w["max_running"], w["max_model_len"] + 8 + 2 * (w["spec"] + 1) + page, "cpu", False)
    if page == 1:
        alloc = TokenToKVPoolAllocator(w["kv_tokens"], torch.float16, "cpu", None, False)
    else:
        alloc = PagedTokenToKVPoolAllocator(w["kv_tokens"], page, torch.float16, "cpu", None, False)
    tree = UnifiedRadixCache(
        CacheInitParams(
            disable=not w["prefix_caching"],
            req_to_token_pool=rows,
            token_to_kv_pool_allocator=alloc,
            page_size=page,
            tree_components=(ComponentType.FULL,),
            chunked_prefill_size=w["chunk"],
        )
    )
    s = object.__new__(sm.Scheduler)
    s.__dict__.update(
        scheduler_stage_metrics=None,
        waiting_queue=[],
        running_batch=sm.ScheduleBatch(reqs=[], batch_is_full=False),
        last_batch=None,
        chunked_req=None,
        new_token_ratio_tracker=NewTokenRatioTracker.from_config(),
        policy=SchedulePolicy(w["schedule_policy"], tree, False, False, False),
        tree_cache=tree,
        req_to_token_pool=rows,
        token_to_kv_pool_allocator=alloc,
        page_size=page,
        chunked_prefill_size=w["chunk"],
        max_prefill_tokens=w["max_prefill_tokens"],
        max_running_requests=w["max_running"],
        is_mixed_chunk=w["mixed"],
        model_config=types.SimpleNamespace(vocab_size=sglang_streams.VOCAB, is_encoder_decoder=False),
        enable_overlap=False,
        spec_algorithm=spec,
        # features this check leaves off, each at the value Scheduler.__init__ gives it when off
        _pending_chunked_abort_req=None,
        dllm_config=None,
        enable_hisparse=False,
        hisparse_coordinator=None,
        enable_hierarchical_cache=False,
        enable_hicache_storage=False,
        enable_lmcache=False,
        enable_unified_cache_external_linker=False,
        enable_lora=False,
        lora_drainer=None,
        enable_priority_preemption=False,
        enable_priority_scheduling=False,
        priority_scheduling_preemption_threshold=0,
        is_hybrid_swa=False,
        min_free_slots_delayer=None,
        dynamic_chunk_sizer=None,
        prefill_delayer=None,
        truncation_align_size=None,
        max_prefill_bs=0,
        processed_tokens_counter=0,
        require_mlp_sync=False,
        prefill_decode_interval=0,
        _prefill_decode_interval_remaining=0,
        prefill_decode_interval_min_bs=0,
        enable_skip_finishing_decode=False,
        result_queue=[],
        decode_offload_manager=None,
        forward_ct=0,
        disaggregation_mode=sm.DisaggregationMode.NULL,
        _engine_paused=False,
        device="cpu",
        grammar_manager=_NoGrammars(),
        beam_coordinator=_NoBeams(),
        dp_attn_adapter=_NoDpAttention(),
        ngram_embedding_manager=_NoNgrams(),
        dllm_manager=_NoDllm(),
        metrics_reporter=types.SimpleNamespace(enable_metrics=False, num_retracted_reqs=0),
        tp_worker=types.SimpleNamespace(
            model_runner=types.SimpleNamespace(attn_backend=None, prefill_aware_swa=False)
        ),
        load_inquirer=types.SimpleNamespace(_get_num_pending_tokens=lambda **_: 0),
        future_map=None,
    )
    return s, sm


def assign_req_to_token_pool(
    req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, batch_size
):
    """mem_cache/allocation.py `assign_req_to_token_pool_func` on CPU tensors: its Triton kernel
    (`assign_req_to_token_pool`, a GPU launch) writes each request's newly allocated KV slots into its
    req_to_token row, request i's slots [start_i, end_i) from out_cache_loc in batch order; this is that copy
    in torch (the slots must be right: a finished request frees what its row names)."""
    at = 0
    for i in range(batch_size):
        lo, hi = int(start_offset[i]), int(end_offset[i])
        req_to_token[int(req_pool_indices[i]), lo:hi] = out_cache_loc[at : at + hi - lo]
        at += hi - lo


class _NoGrammars:  # no structured output: nothing waits for a grammar
    grammar_queue: list = []

    def has_waiting_grammars(self) -> bool:
        return False


class _NoBeams:  # no beam search: no rows promised to beam members
    def pending_member_rows(self, batch) -> int:
        return 0

    def retire_group(self, req) -> None:
        pass


class _NoDpAttention:  # DP attention off: dp_attn.py leaves the batch as it is
    def maybe_prepare_mlp_sync_batch(self, batch, need_sync=None):
        return batch

    def maybe_convert_decode_to_extend(self, batch):
        return batch

    def drop_sync_wait_carry(self) -> None:
        pass


class _NoNgrams:  # no n-gram embeddings: prepare_for_forward returns the batch
    def prepare_for_forward(self, batch, *, chunked_req=None):
        return batch


class _NoDllm:  # not a diffusion LM
    def any_staging_reqs(self) -> bool:
        return False


def process_results(s, batch, tokens: list[int], overlap: bool) -> None:
    """`process_batch_result_prefill` / `_decode`'s finish handling
    (scheduler_components/batch_result_processor.py, a generation batch without overlap, speculation, logprobs
    or grammar): a request computing its last prompt token (or decoding) commits its token and checks its
    finish state; finished, its KV is released into the tree (release_kv_cache, checkpoint=True); prefilled
    and not a decode of a mixed batch, its KV is published (checkpoint_kv_cache); a middle chunk only counts
    down."""
    from sglang.srt.mem_cache.common import checkpoint_kv_cache, release_kv_cache

    alloc, tree = s.token_to_kv_pool_allocator, s.tree_cache
    alloc.free_group_begin()
    if batch.forward_mode.is_decode():
        for req, tok in zip(batch.reqs, tokens, strict=True):
            if overlap and (req.finished() or req.is_retracted):
                continue  # it finished (or was retracted) while this batch was in flight
            req.output_ids.extend([tok])
            req.update_finish_state(1)
            if req.finished():
                release_kv_cache(req, tree, checkpoint=True)
    else:
        decoding = batch.decoding_reqs or []
        for req, tok in zip(batch.reqs, tokens, strict=True):
            if (req.finished() and req.inflight_middle_chunks <= 0) or req.is_retracted:
                continue
            if req.inflight_middle_chunks <= 0:
                req.output_ids.append(tok)
                req.update_finish_state()
                if req.finished():
                    release_kv_cache(req, tree, checkpoint=True)
                elif req not in decoding:
                    checkpoint_kv_cache(req, tree)
            else:
                req.inflight_middle_chunks -= 1
    alloc.free_group_end()


def process_verify(s, batch, runs: list[list[int]]) -> None:
    """A verification step's results (spec v2 without overlap): `_resolve_spec_v2_tokens` commits each
    request's accepted run (its accepted drafts and the target's bonus token) to kv_committed_len, then
    `process_batch_result_decode` appends the run to output_ids, updates the finish state with its length and
    releases a finished request's KV (its over-allocation included) into the tree. The runs stand in for the
    draft and target models: each request accepts the workload's pre-drawn count (simserve's draw for that
    verification), its tokens the next of its stream."""
    from sglang.srt.mem_cache.common import release_kv_cache

    alloc, tree = s.token_to_kv_pool_allocator, s.tree_cache
    alloc.free_group_begin()
    for req, run in zip(batch.reqs, runs, strict=True):
        if req.is_retracted or req.finished():
            continue
        req.kv.kv_committed_len += len(run)
        req.output_ids.extend(run)
        req.update_finish_state(len(run))
        if req.finished():
            release_kv_cache(req, tree, checkpoint=True)
    alloc.free_group_end()


def run(w: dict) -> list[dict]:
    """`event_loop_normal` over the workload, or with `overlap` `event_loop_overlap` (the next batch is
    scheduled before the last one's results are processed); one record per turn of the loop (sglang_loop.py's
    format)."""
    s, sm = build(w)
    from collections import deque

    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    streams = sglang_streams.token_streams(w)
    if w["spec"]:  # a verification can accept past max_new_tokens (the request then finishes): ids to spare
        streams = [st + [1] * (w["spec"] + 1) for st in streams]
    n, nxt, steps, overlap = len(w["prompt"]), 0, [], w["overlap"]
    done: set[str] = set()
    retracted: list[int] = []
    aborted: list[int] = []
    s.result_queue = deque()  # (batch, result) pairs, as the overlap loop queues them
    s.enable_overlap = s.enable_skip_finishing_decode = overlap

    def requeue(req, is_retracted=False):  # _add_request_to_queue without priorities, limits or prefetch
        if is_retracted:
            retracted.append(int(req.rid))
        s.waiting_queue.append(req)

    def abort_output(_out, req):  # update_running_batch: retract_decode aborts the last request out of memory
        aborted.append(int(req.rid))
        done.add(req.rid)

    verified = [0] * n  # verification steps each request ran (its index into `accepted`)

    def pop_and_process():  # the model's result: each request's next token is the next of its stream
        batch, _ = s.result_queue.popleft()
        if w["spec"] and batch.forward_mode.is_decode():  # a verification: the accepted drafts and the bonus
            runs = []
            for r in batch.reqs:
                i, at = int(r.rid), len(r.origin_input_ids) + len(r.output_ids)
                runs.append(streams[i][at : at + w["accepted"][i][verified[i]] + 1])
                verified[i] += 1
            process_verify(s, batch, runs)
        else:
            tokens = [streams[int(r.rid)][len(r.origin_input_ids) + len(r.output_ids)] for r in batch.reqs]
            process_results(s, batch, tokens, overlap)
        done.update(r.rid for r in batch.reqs if r.finished())

    s._add_request_to_queue, s.send_abort_output = requeue, abort_output
    while len(done) < n:
        while nxt < n and w["arrive"][nxt] <= len(steps):  # ingest_requests
            params = SamplingParams(max_new_tokens=w["output"][nxt], ignore_eos=w["ignore_eos"][nxt])
            params.normalize(None)
            requeue(Req(str(nxt), "", array("q", streams[nxt][: w["prompt"][nxt]]), params))
            nxt += 1
        retracted.clear()
        aborted.clear()
        waiting = set(map(id, s.waiting_queue))
        plan = s.get_next_batch_to_run(running_batch=s.running_batch, last_batch=s.last_batch)
        s.running_batch, batch = plan.running_batch, plan.batch_to_run
        step = record(batch, waiting, w["prefix_caching"])
        disable = overlap and s.is_disable_overlap_for_batch(batch, last_batch=s.last_batch)
        if disable:
            pop_and_process()
        if batch is not None:  # run_batch
            s.result_queue.append((batch.copy() if overlap else batch, None))
        if overlap and s.last_batch is not None:  # the last batch's results, after this one is launched
            if not disable:
                pop_and_process()
        elif not overlap and batch is not None:
            pop_and_process()
        elif batch is None and s.is_fully_idle():
            s.new_token_ratio_tracker.reset()  # Scheduler.on_idle
        s.last_batch = batch
        step.update(
            retracted=list(retracted),
            aborted=sorted(aborted),
            chunked=None if s.chunked_req is None else int(s.chunked_req.rid),
            full=bool(s.running_batch.batch_is_full),
            ratio=s.new_token_ratio_tracker.current,
            # the KV pool after the step: free tokens, and tokens cached but unlocked (evictable)
            pool=[int(s.token_to_kv_pool_allocator.available_size()), int(s.tree_cache.evictable_size())],
        )
        steps.append(step)
        if len(steps) > 1_000_000:
            raise RuntimeError("SGLang did not drain the workload in a million steps")
    return steps


def record(batch, waiting: set[int], prefix_caching: bool) -> dict:
    """The batch a step runs: its prefills (in batch order) and decodes, and with the radix cache what each
    newly admitted request found cached."""
    if batch is None:
        return {}
    if batch.forward_mode.is_decode():
        return {"decodes": sorted(int(r.rid) for r in batch.reqs)}
    decoding = set(map(id, batch.decoding_reqs or []))
    step = {
        "prefills": [[int(r.rid), int(r.extend_len)] for r in batch.reqs if id(r) not in decoding],
        "decodes": sorted(int(r.rid) for r in batch.reqs if id(r) in decoding),
    }
    if prefix_caching:
        step["cached"] = {int(r.rid): int(r.prefix_len) for r in batch.reqs if id(r) in waiting}
    return step


def main() -> None:
    """One workload (a JSON object) or several (a list, run one after another in this process: SGLang's import
    is paid once); every workload is checked before any runs."""
    given = json.load(sys.stdin)
    workloads = given if isinstance(given, list) else [given]
    for w in workloads:
        problem = check(w) if isinstance(w, dict) else "a workload is a JSON object"
        if problem:
            sys.stderr.write(
                f"sglang_loop_driver: {w.get('name', '?') if isinstance(w, dict) else '?'}: {problem}\n"
            )
            sys.exit(2)
    runs = [run(w) for w in workloads]
    json.dump(runs if isinstance(given, list) else runs[0], sys.stdout)


if __name__ == "__main__":
    main()
