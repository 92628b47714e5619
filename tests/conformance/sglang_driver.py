"""Run in SGLang 0.5.23's own environment (tools/sglang_env.sh): its real prefill admission, one step at a
time.

Reads from stdin the steps simserve's `sglang` policy took (sglang_workloads.py): for each prefill decision,
the state it was taken from (the waiting queue in order, the half-prefilled request, the running batch, free
KV tokens, new_token_ratio, the budgets). For each it builds SGLang's own objects — `Req` (prompt ids, the
outputs so far, `SamplingParams(max_new_tokens, ignore_eos)`), `PrefillAdder`, the `PrefillBudget` its
allocator creates — and walks the waiting queue as `Scheduler._get_new_batch_prefill_raw` does (0.5.23,
managers/scheduler.py: the batch-full and allocatable-request checks, `add_chunked_req` first, then
`budget_state` / `init_next_round_input` / `add_one_req` per request until one does not CONTINUE). Writes, per
step, the requests admitted with their extend lengths, the new chunked request, and whether the batch was
marked full. States marked `retract` are decode steps that could not give every running request a token: for
them it runs SGLang's own `ScheduleBatch.retract_decode` (DecodeBatch below) and writes the requests retracted
(in order), aborted, and the new_token_ratio estimate.

What is stubbed (SGLang builds these from its GPU worker): the token-to-KV allocator (its free count, page
size, `create_prefill_budget` → SGLang's own `PrefillBudget`, no request-slot reserve), the tree cache with
the radix cache disabled (`--disable-radix-cache`: nothing cached, nothing evictable, locks no-ops) and the
running batch (a list of `Req`). Modules only a GPU server needs are stubbed at import (sglang_stubs.py).
"""

from __future__ import annotations

import json
import sys
from array import array
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sglang_stubs  # noqa: E402,F401  (before any sglang import)
from sglang.srt.managers.schedule_batch import Req, ScheduleBatch  # noqa: E402
from sglang.srt.managers.schedule_policy import AddReqResult, PrefillAdder  # noqa: E402
from sglang.srt.mem_cache.prefill_budget import PrefillBudget  # noqa: E402
from sglang.srt.runtime_context import _CONTEXT  # noqa: E402
from sglang.srt.sampling.sampling_params import SamplingParams  # noqa: E402
from sglang.srt.server_args import ServerArgs  # noqa: E402


class Allocator:
    """The token-to-KV pool allocator as PrefillAdder sees it: free tokens and the page size."""

    def __init__(self, free_tokens: int, page_size: int):
        self.free, self.page_size = free_tokens, page_size

    def available_size(self) -> int:
        return self.free

    def create_prefill_budget(self, tree_cache, num_mixed_decode_tokens: int = 0):
        return PrefillBudget(self, tree_cache, num_mixed_decode_tokens=num_mixed_decode_tokens)

    def request_slot_reserve(self, **_) -> int:
        return 0


class NoRadixCache:
    """--disable-radix-cache: nothing cached or evictable."""

    disable = True
    buffer_pipeline = None

    def supports_mamba(self) -> bool:
        return False

    def supports_prefix_sharing(self) -> bool:
        return False

    def evictable_size(self) -> int:
        return 0

    def lock(self, node):
        return None

    def unlock(self, lock) -> None:
        pass

    def finish_storage_prefetch_admission(self, *_, **__) -> None:  # no host/storage tiers
        pass

    def discard_storage_prefetch_accounting(self, *_, **__) -> None:
        pass


class RunningBatch:
    def __init__(self, reqs):
        self.reqs = reqs

    def batch_size(self) -> int:
        return len(self.reqs)


def make_req(rid: int, prompt: int, generated: int, output: int, ignore_eos: bool) -> Req:
    req = Req(
        str(rid), "", array("q", [1] * prompt), SamplingParams(max_new_tokens=output, ignore_eos=ignore_eos)
    )
    req.output_ids = array("q", [1] * generated)  # a retracted request is prefilled again with its outputs
    return req


def decide(s: dict) -> dict:
    """One prefill decision, as Scheduler._get_new_batch_prefill_raw takes it."""
    eos = s["ignore_eos"]
    running = RunningBatch([make_req(r, p, g, o, eos) for r, p, g, o in s["running"]])
    chunked = None
    if s["chunked"] is not None:
        rid, p, g, o, computed = s["chunked"]
        chunked = make_req(rid, p, g, o, eos)
    full = s["full"]
    out = {"admitted": [], "chunked": None, "full": full}
    if (full or not s["waiting"]) and chunked is None:
        return out
    allocatable = s["max_running"] - len(running.reqs)  # get_num_allocatable_reqs (rows free + held)
    if allocatable <= 0 and chunked is None:
        out["full"] = True
        return out
    mixed = len(running.reqs) if s["mixed"] else 0
    adder = PrefillAdder(
        s["page_size"],
        NoRadixCache(),
        Allocator(s["free_tokens"], s["page_size"]),
        running,
        s["ratio"],
        s["max_prefill_tokens"],
        s["chunk"],
        mixed,
        max_running_requests=s["max_running"],
    )
    new_chunked = None
    if chunked is not None:
        chunked.init_next_round_input()
        chunked.prefix_len = computed  # what its earlier chunks computed (SGLang's cache_unfinished_req)
        new_chunked = adder.add_chunked_req(chunked)
    for rid, p, g, o in s["waiting"]:
        if adder.budget_state() == AddReqResult.OTHER:
            break
        if len(adder.can_run_list) >= allocatable:
            full = True
            break
        req = make_req(rid, p, g, o, eos)
        req.init_next_round_input(None)
        res = adder.add_one_req(req, has_chunked_req=new_chunked is not None, truncation_align_size=None)
        if res != AddReqResult.CONTINUE:
            if res == AddReqResult.NO_TOKEN:  # the scheduler: the batch is full if anything runs or was added
                full = bool(adder.can_run_list) or bool(running.reqs)
            break
    if adder.new_chunked_req is not None:
        new_chunked = adder.new_chunked_req
    out["admitted"] = [[int(r.rid), int(r.extend_len)] for r in adder.can_run_list]
    out["chunked"] = None if new_chunked is None else int(new_chunked.rid)
    out["full"] = full
    return out


class DecodeBatch:
    """What `ScheduleBatch.retract_decode` reads of its batch, the rest of it SGLang's own: the real
    retraction order (`_get_decode_retraction_order`), loop, pages needed (`new_tokens_required_next_decode`,
    through the real `check_decode_mem`) and new_token_ratio estimate. Stubbed: the allocator's capacity check
    (free tokens, no eviction) and `release_req`, which frees the request's page-ceiled KV."""

    _get_decode_retraction_order = staticmethod(ScheduleBatch._get_decode_retraction_order)
    retract_decode = ScheduleBatch.retract_decode
    check_decode_mem = ScheduleBatch.check_decode_mem
    new_tokens_required_next_decode = ScheduleBatch.new_tokens_required_next_decode

    class _Spec:
        def is_none(self) -> bool:
            return True

    def __init__(self, reqs, free_tokens: int, page_size: int):
        self.reqs, self.tree_cache, self.spec_algorithm = reqs, None, self._Spec()
        self.token_to_kv_pool_allocator = self
        self.page_size, self.free = page_size, free_tokens

    def check_decode_capacity(self, *, num_tokens, **_) -> bool:
        return num_tokens <= self.free

    def release_req(self, idx: int, remaining: int, offload_kv: bool = True) -> bool:
        committed = self.reqs[idx].kv.kv_committed_len
        self.free += -(-committed // self.page_size) * self.page_size
        return True

    def filter_batch(self, keep_indices) -> None:
        self.reqs = [self.reqs[i] for i in keep_indices]


def retract(s: dict) -> dict:
    """One decode step that must retract, as Scheduler.update_running_batch has ScheduleBatch do it."""
    reqs = []
    for rid, p, g, o, computed in s["running"]:
        req = make_req(rid, p, g, o, s["ignore_eos"])
        req.kv.kv_committed_len = req.kv.kv_allocated_len = computed
        reqs.append(req)
    batch = DecodeBatch(reqs, s["free_tokens"], s["page_size"])
    retracted, ratio, aborted = batch.retract_decode()
    return {
        "retracted": [int(r.rid) for r in retracted],
        "aborted": [int(r.rid) for r in aborted],
        "ratio": ratio,
    }


def main() -> None:
    # the server's flags at their defaults, published as the launcher does (the adder reads its schedule and
    # exec namespaces); the flags simserve varies are passed to PrefillAdder per step
    _CONTEXT.set_server_args(ServerArgs(model_path="none"))
    states = json.load(sys.stdin)
    json.dump([retract(s) if "retract" in s else decide(s) for s in states], sys.stdout)


if __name__ == "__main__":
    main()
