"""A vLLM 0.33.0 worker that runs no model: it answers each step as a GPU would, after a set time, with no
CPU.

Used by tools/engine_cpu_server.py (`vllm serve ... --worker-cls engine_cpu_fake_worker.TimedWorker`, with
this folder on PYTHONPATH) so that vLLM's real API server and real EngineCore (AsyncScheduler, batch queue,
output thread, ZMQ, msgpack) run on this CPU machine under `vllm bench serve` while the model costs nothing
here: what is measured is the front end and the engine's own CPU, not a CPU forward pass of a model (which
would take the two shared cores and stretch every step).

Behaviour as Model Runner V2 under async scheduling (vllm/v1/worker/gpu/model_runner.py): `execute_model`
returns None at once, `sample_tokens` returns an `AsyncModelRunnerOutput` at once, and its `get_output()`
(called by the executor's future, `future.result()` in `EngineCore.step_with_batch_queue`) blocks without CPU
until the step's simulated GPU time has passed since the previous step ended. One token is sampled for each
request whose prompt is then fully computed. Step time: ENGINE_CPU_GPU_STEP_MS (default 8) +
ENGINE_CPU_GPU_MS_PER_TOKEN (default 0.03) x scheduled tokens: roughly an 8B model's decode and prefill on one
H100; only its order of magnitude matters here (it keeps the engine from spinning and the front end from being
flooded).
"""

from __future__ import annotations

import os
import time

import numpy as np
import torch
from vllm.v1.kv_cache_interface import FullAttentionSpec
from vllm.v1.outputs import EMPTY_MODEL_RUNNER_OUTPUT, AsyncModelRunnerOutput, ModelRunnerOutput
from vllm.v1.worker.worker_base import WorkerBase

STEP_MS = float(os.environ.get("ENGINE_CPU_GPU_STEP_MS", "8"))
MS_PER_TOKEN = float(os.environ.get("ENGINE_CPU_GPU_MS_PER_TOKEN", "0.03"))


class _Timed(AsyncModelRunnerOutput):
    def __init__(self, output: ModelRunnerOutput, ready: float):
        self.output, self.ready = output, ready

    def get_output(self) -> ModelRunnerOutput:
        delay = self.ready - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        return self.output

    def get_kv_connector_output(self):
        return None


class TimedWorker(WorkerBase):
    def init_device(self) -> None:
        self.device = torch.device("cpu")
        self.prompt_len: dict[str, int] = {}
        self.computed: dict[str, int] = {}
        self.gpu_free = 0.0  # when the simulated GPU finishes the last step handed to it
        self.pending = None
        self.rng = np.random.default_rng(0)
        self.vocab = self.model_config.get_vocab_size()
        # steps, scheduled requests, scheduled tokens: summed in a file the measuring script reads (no CPU to
        # speak of)
        path = os.environ.get("ENGINE_CPU_COUNTERS")
        self.counters = (
            np.memmap(path, dtype=np.int64, mode="r+", shape=(3,)) if path else np.zeros(3, np.int64)
        )

    def load_model(self, *, load_dummy_weights: bool = False) -> None:
        return None

    def get_kv_cache_spec(self):
        m = self.model_config
        spec = FullAttentionSpec(
            block_size=self.cache_config.block_size,
            num_kv_heads=m.get_num_kv_heads(self.parallel_config),
            head_size=m.get_head_size(),
            dtype=torch.float16,
        )
        return {
            f"model.layers.{i}.self_attn.attn": spec for i in range(m.get_num_layers(self.parallel_config))
        }

    def get_supported_kv_cache_layouts(self) -> list[str]:
        return ["NHD"]

    def determine_available_memory(self) -> int:
        return int(float(os.environ.get("ENGINE_CPU_KV_GIB", "4")) * 2**30)

    def initialize_from_config(self, kv_cache_config) -> None:
        return None

    def compile_or_warm_up_model(self):
        from vllm.v1.worker.worker_base import CompilationTimes

        return CompilationTimes(language_model=0.0, encoder=0.0)

    def get_supported_tasks(self):
        return ("generate",)

    def update_max_model_len(self, max_model_len: int) -> None:
        return None

    def execute_model(self, scheduler_output):
        so = scheduler_output
        for r in so.scheduled_new_reqs:
            self.prompt_len[r.req_id] = len(r.prompt_token_ids or ())
            self.computed[r.req_id] = r.num_computed_tokens
        for rid in so.finished_req_ids:
            self.prompt_len.pop(rid, None)
            self.computed.pop(rid, None)
        if so.total_num_scheduled_tokens == 0:  # a step that only frees or preempts: nothing runs
            return EMPTY_MODEL_RUNNER_OUTPUT
        ids = list(so.num_scheduled_tokens)
        self.counters += (1, len(ids), so.total_num_scheduled_tokens)
        toks = self.rng.integers(3, self.vocab, len(ids)).tolist()
        sampled = []
        for i, rid in enumerate(ids):
            done = self.computed.get(rid, 0) + so.num_scheduled_tokens[rid]
            self.computed[rid] = done
            sampled.append([toks[i]] if done >= self.prompt_len.get(rid, 0) else [])
        out = ModelRunnerOutput(
            req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)}, sampled_token_ids=sampled
        )
        start = max(time.monotonic(), self.gpu_free)
        self.gpu_free = start + (STEP_MS + MS_PER_TOKEN * so.total_num_scheduled_tokens) / 1e3
        self.pending = _Timed(out, self.gpu_free)
        return None

    def sample_tokens(self, grammar_output):
        out, self.pending = self.pending, None
        return out

    def check_health(self) -> None:
        return None

    def shutdown(self) -> None:
        return None
