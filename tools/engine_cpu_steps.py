"""Per-step CPU time of vLLM 0.33.0's engine, measured by running vLLM's own code on this CPU.

    /work/envs/vllm033/bin/python tools/engine_cpu_steps.py MODEL_DIR OUT_DIR [--repeats 5] [--quick]

MODEL_DIR is tools/engine_cpu_model.py's directory (its tokenizer feeds the detokenizer). Writes
OUT_DIR/steps.csv (one row per measured engine step) and OUT_DIR/steps.provenance.json. Nothing of simserve is
imported.

What runs, per step, in the order `EngineCore.step_with_batch_queue` (vllm/v1/engine/core.py) runs it with
async scheduling (batch queue of 2: step k+1 is scheduled before step k's output is processed):

- EngineCore process, busy-loop thread: `AsyncScheduler.schedule()` (the scheduler class 0.33.0 uses when
  async scheduling is on, vllm/config/scheduler.py `get_scheduler_cls`), then `update_from_output()` of the
  previous step with a `ModelRunnerOutput` holding one sampled token per request whose prompt is done (what
  the model runner returns); a new request is made as the input thread makes it
  (`Request.from_engine_core_request` with the prefix-caching block hasher, sha256, prefix caching on as by
  default) and `add_request`ed.
- EngineCore process, output thread: `MsgpackEncoder().encode()` of the step's `EngineCoreOutputs`
  (`EngineCoreProc.process_output_sockets`).
- API-server process, output handler: `MsgpackDecoder(EngineCoreOutputs).decode()` then
  `OutputProcessor.process_outputs()` (stats, incremental detokenization with the fast detokenizer, a DELTA
  `RequestOutput` put in each request's collector), as `AsyncLLM`'s output_handler calls it (chunks of
  VLLM_V1_OUTPUT_PROC_CHUNK_SIZE) with log stats on (the server default).

The model runner (GPU input preparation, sampling) is not run here: in 0.33.0 it is Model Runner V2
(vllm/v1/worker/gpu/model_runner.py), whose input preparation is Triton kernels on the GPU.

Each time is `time.thread_time_ns()` around the call: CPU time of this thread, not wall time (the host is
shared). A configuration is run `--repeats` times as independent blocks of 16 steps (a KV block's worth of
decode steps, so block allocations fall in every block alike); `gc` stays on, with the warm-up's objects
frozen as EngineCore does. Around each block the reference workload of tools/engine_cpu_refbench.py runs
(`ref_us`, in its `python_us` units): on a shared host the speed drifts with the neighbours' load, and every
component of a block drifts with it, so the fit divides it out (simserve/predictor/engine_cpu_fit.py).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import gc
import json
import os
import platform
import sys
import tempfile
import time

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

STEPS_PER_BLOCK = 16
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # engine_cpu_refbench beside this file
FIELDS = [
    "config",
    "kind",
    "rep",
    "step",
    "num_reqs",
    "num_tokens",
    "num_prefill_reqs",
    "num_new_reqs",
    "num_outputs",
    "num_finished",
    "schedule_us",
    "update_us",
    "encode_us",
    "add_engine_us",
    "fe_decode_us",
    "fe_process_us",
    "add_frontend_us",
    "ref_us",
]


def configs(quick: bool) -> list[dict]:
    """(name, decodes, new requests per step, their prompt, budget) to run: decode-only over batch sizes; one
    prefill of C tokens beside D decodes; many short prefills; one long prompt chunked."""
    out = []
    batches = [1, 4, 16, 64, 256, 1024] if quick else [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
    for n in batches:
        out.append(dict(name=f"decode-{n}", kind="decode", decodes=n, new=0, prompt=0))
    chunks = [512, 4096, 16384] if quick else [256, 1024, 2048, 4096, 8192, 16384]
    for d in [0, 64, 1024] if quick else [0, 16, 64, 256, 1024]:
        for c in chunks:
            out.append(dict(name=f"mixed-{d}-{c}", kind="mixed", decodes=d, new=1, prompt=c))
    for k, p in [(4, 128), (16, 128), (64, 128), (16, 512), (64, 256)][: 2 if quick else None]:
        out.append(dict(name=f"newreqs-64-{k}x{p}", kind="newreqs", decodes=64, new=k, prompt=p))
    for d, c in [(64, 2048), (256, 8192)][: 1 if quick else None]:
        out.append(dict(name=f"chunked-{d}-{c}", kind="chunked", decodes=d, new=0, prompt=c))
    return out


class Bench:
    """One scheduler + one output processor, as one EngineCore and one API server hold them."""

    def __init__(self, model_dir: str, cfg: dict, seed: int):
        import numpy as np
        import torch
        from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
        from vllm.tokenizers import get_tokenizer
        from vllm.utils.hashing import get_hash_fn_by_name
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
        from vllm.v1.core.sched.async_scheduler import AsyncScheduler
        from vllm.v1.engine import EngineCoreOutputs
        from vllm.v1.engine.output_processor import OutputProcessor
        from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
        from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder

        self.rng = np.random.default_rng(seed)
        self.cfg = cfg
        d, c = cfg["decodes"], cfg["prompt"]
        # the budget fits the decodes and one chunk (mixed, chunked) or all new prompts (newreqs) exactly
        chunk = 2048 if cfg["kind"] == "chunked" else c * max(cfg["new"], 1)
        budget = max(d + chunk, 256)
        self.warm_budget = max(budget, 8192)
        max_len = max(c, 1024) + 1024
        blocks = d * ((96 + 8 * STEPS_PER_BLOCK * 8) // 16 + 2) + 8 * (max(c, 1) // 16 + 2) * max(
            cfg["new"], 1
        )
        blocks += 256
        model = ModelConfig(model=model_dir, skip_tokenizer_init=True, max_model_len=max_len, dtype="float32")
        cache = CacheConfig(block_size=16, enable_prefix_caching=True)
        cache.num_gpu_blocks = blocks
        sched = SchedulerConfig(
            max_num_batched_tokens=self.warm_budget,
            max_num_seqs=max(d + 2 * max(cfg["new"], 1), 8),
            max_model_len=max_len,
            enable_chunked_prefill=True,
            is_encoder_decoder=False,
            async_scheduling=True,
        )
        config = VllmConfig(model_config=model, cache_config=cache, scheduler_config=sched)
        kv = KVCacheConfig(
            num_blocks=blocks,
            kv_cache_tensors=[],
            kv_cache_groups=[
                KVCacheGroupSpec(
                    ["layer0"],
                    FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=64, dtype=torch.float32),
                )
            ],
        )

        class Structured:  # no structured output requests: the manager is never asked for a grammar
            def accept_tokens(self, *args, **kwargs):
                return True

            def grammar_bitmask(self, *args, **kwargs):
                return None

        self.sched = AsyncScheduler(
            vllm_config=config,
            kv_cache_config=kv,
            log_stats=True,
            structured_output_manager=Structured(),
            block_size=16,
        )
        self.budget = budget
        hash_fn = get_hash_fn_by_name(cache.prefix_caching_hash_algo)
        init_none_hash(hash_fn)
        self.hasher = get_request_block_hasher(16, hash_fn)
        self.enc = MsgpackEncoder()
        self.dec = MsgpackDecoder(EngineCoreOutputs)
        self.op = OutputProcessor(get_tokenizer(model_dir), log_stats=True)
        self.chunk = int(os.environ.get("VLLM_V1_OUTPUT_PROC_CHUNK_SIZE", "128"))
        self.collectors: dict[str, object] = {}
        self.next_id = 0

    def new_request(self, prompt_len: int, max_tokens: int) -> tuple[int, int]:
        """Add one request to both sides; (engine-side CPU ns, front-end-side CPU ns)."""
        from vllm.sampling_params import RequestOutputKind, SamplingParams
        from vllm.v1.engine import EngineCoreRequest
        from vllm.v1.engine.output_processor import RequestOutputCollector
        from vllm.v1.request import Request

        rid = f"r{self.next_id}"
        self.next_id += 1
        ids = self.rng.integers(3, 32000, prompt_len).tolist()
        sp = SamplingParams(max_tokens=max_tokens, ignore_eos=True, output_kind=RequestOutputKind.DELTA)
        ecr = EngineCoreRequest(
            request_id=rid,
            prompt_token_ids=ids,
            mm_features=None,
            sampling_params=sp,
            pooling_params=None,
            arrival_time=time.time(),
            lora_request=None,
            cache_salt=None,
            data_parallel_rank=None,
            external_req_id=rid,
        )
        t0 = time.thread_time_ns()
        q = RequestOutputCollector(RequestOutputKind.DELTA, rid)
        self.op.add_request(ecr, None, queue=q)
        t1 = time.thread_time_ns()
        self.sched.add_request(Request.from_engine_core_request(ecr, self.hasher))
        t2 = time.thread_time_ns()
        self.collectors[rid] = q
        return t2 - t1, t1 - t0

    def runner_output(self, so):
        """What the model runner hands back for `so`: one token per request whose prompt is then done."""
        from vllm.v1.outputs import ModelRunnerOutput

        ids = list(so.num_scheduled_tokens)
        reqs = self.sched.requests
        toks = self.rng.integers(3, 32000, len(ids)).tolist()
        sampled = [
            [toks[i]] if reqs[r].num_computed_tokens >= reqs[r].num_prompt_tokens else []
            for i, r in enumerate(ids)
        ]
        return ModelRunnerOutput(
            req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)}, sampled_token_ids=sampled
        )

    def process(self, so, mro) -> dict:
        """update_from_output, encode, and the front end's decode + process_outputs, each timed."""
        from vllm.v1.metrics.stats import IterationStats

        t0 = time.thread_time_ns()
        outs = self.sched.update_from_output(so, mro)
        t1 = time.thread_time_ns()
        eco = outs.get(0)
        rec = dict(
            update_us=(t1 - t0) / 1e3,
            encode_us=0.0,
            fe_decode_us=0.0,
            fe_process_us=0.0,
            num_outputs=0,
            num_finished=0,
        )
        if eco is None:
            return rec
        t2 = time.thread_time_ns()
        bufs = self.enc.encode(eco)
        t3 = time.thread_time_ns()
        got = self.dec.decode(bufs)
        t4 = time.thread_time_ns()
        stats = IterationStats()
        for start in range(0, len(got.outputs), self.chunk):
            self.op.process_outputs(got.outputs[start : start + self.chunk], got.timestamp, stats)
        t5 = time.thread_time_ns()
        for o in got.outputs:  # what each request's generate() task takes off its collector (not timed)
            q = self.collectors.get(o.request_id)
            if q is not None:
                q.get_nowait()
                if o.finished:
                    del self.collectors[o.request_id]
        rec.update(
            encode_us=(t3 - t2) / 1e3,
            fe_decode_us=(t4 - t3) / 1e3,
            fe_process_us=(t5 - t4) / 1e3,
            num_outputs=len(got.outputs),
            num_finished=sum(bool(o.finished) for o in got.outputs),
        )
        return rec

    def warm_up(self) -> None:
        """The decodes admitted and prefilled (prompts 64-79 tokens, so their KV blocks fill on different
        steps), then run until every one is decoding."""
        d = self.cfg["decodes"]
        for i in range(d):
            self.new_request(64 + i % 16, 100000)
        if self.cfg["kind"] == "chunked":
            self.new_request(self.cfg["prompt"], 1)
        self.sched.max_num_scheduled_tokens = self.warm_budget
        prev = None
        for _ in range(10000):
            so = self.sched.schedule()
            mro = self.runner_output(so)
            if prev is not None:
                self.process(*prev)
            prev = (so, mro)
            reqs = self.sched.requests.values()
            if self.cfg["kind"] != "chunked" and all(
                r.num_computed_tokens >= r.num_prompt_tokens for r in reqs
            ):
                break
            if self.cfg["kind"] == "chunked":
                break
        self.process(*prev)
        self.sched.max_num_scheduled_tokens = self.budget
        self.pending = None
        gc.collect()
        gc.freeze()  # EngineCoreProc freezes its start-up objects (vllm/v1/engine/core.py)

    def block(self, rep: int) -> list[dict]:
        """STEPS_PER_BLOCK steps, pipelined as step_with_batch_queue runs them. The reference workload
        (tools/engine_cpu_refbench.py) runs before and after: how fast this shared host was during the
        block."""
        from engine_cpu_refbench import python_round

        ref0 = python_round()
        rows = []
        cfg = self.cfg
        for step in range(STEPS_PER_BLOCK + 1):
            add_engine = add_fe = 0
            if cfg["kind"] == "chunked" and not any(
                r.num_computed_tokens < r.num_prompt_tokens for r in self.sched.requests.values()
            ):
                add_engine, add_fe = self.new_request(cfg["prompt"], 1)  # the next long prompt
            for _ in range(cfg["new"] if step < STEPS_PER_BLOCK else 0):
                e, f = self.new_request(cfg["prompt"], 1)
                add_engine, add_fe = add_engine + e, add_fe + f
            t0 = time.thread_time_ns()
            so = self.sched.schedule()
            t1 = time.thread_time_ns()
            reqs = self.sched.requests
            row = dict(
                config=cfg["name"],
                kind=cfg["kind"],
                rep=rep,
                step=step,
                num_reqs=len(so.num_scheduled_tokens),
                num_tokens=so.total_num_scheduled_tokens,
                num_prefill_reqs=sum(
                    reqs[r].num_computed_tokens - n < reqs[r].num_prompt_tokens
                    for r, n in so.num_scheduled_tokens.items()
                ),
                num_new_reqs=len(so.scheduled_new_reqs),
                schedule_us=(t1 - t0) / 1e3,
                add_engine_us=add_engine / 1e3,
                add_frontend_us=add_fe / 1e3,
            )
            mro = self.runner_output(so)
            if self.pending is not None:
                prev_row, prev = self.pending
                prev_row.update(self.process(*prev))
                rows.append(prev_row)
            self.pending = (row, (so, mro))
        ref = (ref0 + python_round()) / 2  # in refbench's python_us units
        for r in rows:
            r["ref_us"] = round(ref, 1)
        return rows


def host() -> dict:
    info = {"machine": platform.machine(), "python": platform.python_version(), "cpus": os.cpu_count()}
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
        for key in ("model name", "cpu MHz", "cpu family", "model", "stepping"):
            info[key.replace(" ", "_")] = next(
                line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith(key)
            )
    except (OSError, StopIteration):
        pass
    return info


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="fewer configurations (a smoke run)")
    ap.add_argument("--only", default="", help="run configurations whose name starts with this")
    args = ap.parse_args()
    import vllm

    os.makedirs(args.out_dir, exist_ok=True)
    rows = []
    start = time.process_time()
    for i, cfg in enumerate(c for c in configs(args.quick) if c["name"].startswith(args.only)):
        b = Bench(args.model_dir, cfg, seed=i)
        b.warm_up()
        for rep in range(args.repeats):
            rows += b.block(rep)
        gc.unfreeze()
        del b
        gc.collect()
        print(f"{cfg['name']}: done ({time.process_time() - start:.0f} CPU-s)", file=sys.stderr, flush=True)
    path = os.path.join(args.out_dir, "steps.csv")
    with tempfile.NamedTemporaryFile("w", dir=args.out_dir, delete=False, newline="") as f:
        w = csv.DictWriter(f, FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow({k: (round(v, 2) if isinstance(v, float) else v) for k, v in r.items()})
    os.replace(f.name, path)
    prov = {
        "what": "per-step CPU time (thread_time) of vLLM's scheduler, output serialisation and front-end "
        "output processing, run on CPU (tools/engine_cpu_steps.py docstring)",
        "vllm": vllm.__version__,
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "repeats": args.repeats,
        "steps_per_repeat": STEPS_PER_BLOCK,
        "host": host(),
        "load_average": os.getloadavg(),
        "cpu_seconds": round(time.process_time() - start, 1),
    }
    with open(os.path.join(args.out_dir, "steps.provenance.json"), "w") as f:
        json.dump(prov, f, indent=1)
    print(f"wrote {path}: {len(rows)} steps", file=sys.stderr)


if __name__ == "__main__":
    main()
