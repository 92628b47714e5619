"""vLLM 0.33.0's own V1 Scheduler over a conformance workload: run with the vLLM virtual environment's python.

    .venv-vllm/bin/python tests/conformance/vllm_driver.py < workload.json > steps.json

Reads a workload (workloads.make) as JSON on stdin, writes the list of step records on stdout. Nothing of
simserve is imported: this runs beside vLLM's torch, not simserve's. Construction follows
notes/vllm-scheduler-on-cpu.md: a model directory holding only a config.json, KV cache sized in blocks, no
GPU. One more block than simserve's pool is given to vLLM: its BlockPool keeps block 0 as the null block.
An empty step (it only preempted) is folded into the next one: simserve forms that next step at once.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")  # no GPU here: vLLM then picks its CPU platform

# a small Llama: only the scheduler reads the config, and only its shape (heads, layers) matters to nothing
MODEL_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "num_hidden_layers": 2,
    "vocab_size": 32000,
    "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-5,
    "torch_dtype": "float16",
}


def token_streams(w: dict) -> list[list[int]]:
    """Each request's tokens, prompt then outputs: the first `shared[i]` from its group's stream, the rest
    its own. Without prefix caching ids do not matter to the scheduler."""
    import numpy as np

    prompt, output = w["prompt"], w["output"]
    if not w["prefix_caching"]:
        return [
            [1 + (i + k) % 1000 for k in range(p + o)]
            for i, (p, o) in enumerate(zip(prompt, output, strict=True))
        ]
    streams: dict[int, np.ndarray] = {}
    out = []
    for i, (p, o) in enumerate(zip(prompt, output, strict=True)):
        g, k = w["group"][i], w["shared"][i] if w["group"][i] >= 0 else 0
        own = np.random.default_rng([2, i]).integers(1, 32000, p + o)
        if k:
            if g not in streams or len(streams[g]) < k:
                streams[g] = np.random.default_rng([1, g]).integers(1, 32000, max(k, w["max_model_len"]))
            own[:k] = streams[g][:k]
        out.append(own.tolist())
    return out


def speculative_config(w: dict, model, model_dir: str):
    """vLLM's SpeculativeConfig for the workload's method: EAGLE-3 with a one-layer head's config.json beside
    the target's (the scheduler reads only its method and K), or n-gram; None without speculation."""
    spec = w.get("spec")
    if spec is None:
        return None
    from vllm.config import ParallelConfig, SpeculativeConfig

    draft = None
    if spec["method"] != "ngram":
        draft = os.path.join(model_dir, "eagle3")
        os.makedirs(draft)
        with open(os.path.join(draft, "config.json"), "w") as f:
            json.dump(
                {**MODEL_CONFIG, "architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1}, f
            )
    return SpeculativeConfig(
        method=spec["method"],
        model=draft,
        num_speculative_tokens=spec["k"],
        target_model_config=model,
        target_parallel_config=ParallelConfig(),
    )


def spec_sampled(spec: dict, so, r, rid: int, verified: list, seq: list, drafts: dict) -> list:
    """What the model runner samples for request `rid` this step: nothing for a prefill chunk that does not
    end its prompt; else the accepted drafts plus the target's own token. The accepted count is simserve's
    draw for this request's next verification step (placeholder drafts, vLLM's padding: none accepted). Every
    request that samples proposes K drafts for its next step (`drafts`)."""
    if r.num_computed_tokens < r.num_tokens:
        return []
    ids = so.scheduled_spec_decode_tokens.get(str(rid), [])
    a = 0
    if ids and ids[0] >= 0:
        a = min(spec["draws"][spec["offsets"][rid] + verified[rid]], len(ids))
        verified[rid] += 1
    tail = seq[r.num_tokens :] + [1] * (len(ids) + 1)
    drafts[str(rid)] = [1] * spec["k"]
    return tail[: a + 1]


def main() -> None:
    w = json.load(sys.stdin)
    import torch
    from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.sampling_params import SamplingParams
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.outputs import DraftTokenIds, ModelRunnerOutput
    from vllm.v1.request import Request, RequestStatus

    bs = w["block_size"]
    with tempfile.TemporaryDirectory() as model_dir:
        with open(os.path.join(model_dir, "config.json"), "w") as f:
            json.dump(MODEL_CONFIG, f)
        model = ModelConfig(
            model=model_dir, skip_tokenizer_init=True, max_model_len=w["max_model_len"], dtype="float16"
        )
        cache = CacheConfig(block_size=bs, enable_prefix_caching=w["prefix_caching"])
        cache.num_gpu_blocks = w["num_blocks"] + 1
        sched = SchedulerConfig(
            max_num_batched_tokens=w["max_num_batched_tokens"],
            max_num_seqs=w["max_num_seqs"],
            max_model_len=w["max_model_len"],
            enable_chunked_prefill=True,
            is_encoder_decoder=False,
            long_prefill_token_threshold=w["long_prefill_token_threshold"],
            long_prefill_token_threshold_adaptive=w["long_prefill_token_threshold_adaptive"],
        )
        config = VllmConfig(
            model_config=model,
            cache_config=cache,
            scheduler_config=sched,
            speculative_config=speculative_config(w, model, model_dir),
        )
        kv = KVCacheConfig(
            num_blocks=w["num_blocks"] + 1,
            kv_cache_tensors=[],
            kv_cache_groups=[
                KVCacheGroupSpec(
                    ["layer0"],
                    FullAttentionSpec(block_size=bs, num_kv_heads=4, head_size=64, dtype=torch.float16),
                )
            ],
        )

        class Structured:
            def accept_tokens(self, *args, **kwargs):
                return True

            def validate_tokens(self, request, spec_tokens):  # no structured output: every draft stands
                return spec_tokens

        s = Scheduler(
            vllm_config=config,
            kv_cache_config=kv,
            log_stats=False,
            structured_output_manager=Structured(),
            block_size=bs,
        )
        hasher = None
        if w["prefix_caching"]:  # as EngineCore sets it up: without a hasher a request has no block hashes
            from vllm.utils.hashing import get_hash_fn_by_name
            from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash

            hash_fn = get_hash_fn_by_name(cache.prefix_caching_hash_algo)
            init_none_hash(hash_fn)
            hasher = get_request_block_hasher(bs, hash_fn)
        prompt, output, arrive = w["prompt"], w["output"], w["arrive"]
        n, nxt, steps, carried = len(prompt), 0, [], []
        spec = w.get("spec")
        verified = [0] * len(prompt)  # verification steps so far, per request (which draw the next one reads)
        seqs = token_streams(w)
        finished = 0
        while finished < n:
            while nxt < n and arrive[nxt] <= len(steps):
                req = Request(
                    str(nxt),
                    seqs[nxt][: prompt[nxt]],
                    SamplingParams(max_tokens=output[nxt], ignore_eos=True),
                    pooling_params=None,
                    arrival_time=float(nxt),
                    block_hasher=hasher,
                )
                s.add_request(req)
                nxt += 1
            if not s.requests and nxt < n:
                steps.append({"tokens": {}, "preempted": []})  # idle until the next arrival
                continue
            waiting = {
                rid
                for rid, r in s.requests.items()
                if r.status in (RequestStatus.WAITING, RequestStatus.PREEMPTED)
            }
            so = s.schedule()
            preempted = carried + sorted(int(r) for r in (so.preempted_req_ids or ()))
            if not so.num_scheduled_tokens:
                if not preempted:
                    raise AssertionError(f"vLLM scheduled nothing at step {len(steps)} with work left")
                carried = preempted
                continue
            carried = []
            ids = list(so.num_scheduled_tokens)
            sampled = []
            drafts = {}
            for rid in ids:
                r = s.requests[rid]
                if spec is not None:  # the same accepted counts as simserve's: its pre-drawn numbers
                    sampled.append(spec_sampled(spec, so, r, int(rid), verified, seqs[int(rid)], drafts))
                    continue
                # the next token of its stream: a later turn of the conversation carries it in its prompt
                sampled.append(
                    [seqs[int(rid)][r.num_tokens]] if r.num_computed_tokens >= r.num_tokens else []
                )
            out = ModelRunnerOutput(
                req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)}, sampled_token_ids=sampled
            )
            before = len(s.requests)
            if w["prefix_caching"]:
                step_cached = {
                    int(rid): s.requests[rid].num_computed_tokens - so.num_scheduled_tokens[rid]
                    for rid in ids
                    if rid in waiting
                }
            # KV blocks each scheduled request holds, and the pool's free blocks, as scheduled
            if spec is not None:
                pool = s.kv_cache_manager.coordinator.single_type_managers[0]
                held = {int(rid): len(pool.req_to_blocks[rid]) for rid in ids}
                free = s.kv_cache_manager.block_pool.get_num_free_blocks()
            s.update_from_output(so, out)
            finished += before - len(s.requests)
            step = {
                "tokens": {int(k): int(v) for k, v in so.num_scheduled_tokens.items()},
                "preempted": preempted,
            }
            if spec is not None:
                step["spec"] = {int(k): len(v) for k, v in so.scheduled_spec_decode_tokens.items()}
                step["blocks"], step["free"] = held, free
                # the drafter's proposals, as the model runner hands them to the engine after the step
                live = [rid for rid in drafts if rid in s.requests]
                s.update_draft_token_ids(DraftTokenIds(live, [drafts[rid] for rid in live]))
            if w["prefix_caching"]:  # schedule() advanced computed tokens by the chunk: the rest came cached
                step["cached"] = step_cached
            steps.append(step)
    json.dump(steps, sys.stdout)


if __name__ == "__main__":
    main()
