"""What SGLang 0.5.23 needs to run its scheduler, detokenizer and tokenizer manager on a CPU-only machine,
with the GPU's part stubbed, so that their own CPU work can be timed (tools/sglang_cpu_steps.py in one
process, tools/sglang_cpu_server.py as the real server under SGLang's bench_serving). Imported, never run;
nothing of simserve is imported.

Three things, each a stand-in for what a GPU does, none altering a line of SGLang's scheduling, batching,
output or front-end code:

1. Import stubs for modules only a GPU server uses (CUDA kernels, flashinfer, ...): the conformance test's
   inert modules (tests/conformance/sglang_stubs.py), minus the packages the HTTP server really needs and this
   environment holds (tools/sglang_cpu_env.sh). `vllm` joins them: SGLang's RotaryEmbedding imports vLLM's
   fused rope off CUDA (layers/rotary_embedding/base.py l. 138); it is built with the model but never called
   here.
2. The model's forward and sampling (`TpModelWorker.forward_batch_generation`, managers/tp_worker.py l. 622):
   one sampled token per request of the batch, no model runner (`ForwardBatch.init_new`, attention metadata,
   kernel launches or CUDA-graph replay, sampling — the GPU worker's work, not measured here). With
   SGLANG_CPU_GPU_STEP_MS set (the server), each step's result becomes ready as a GPU's would: its `copy_done`
   event (set by `Scheduler.run_batch`, l. 4730, and waited on by result processing) blocks without CPU until
   STEP_MS + MS_PER_TOKEN x tokens after the previous step finished.
3. The one scheduler-side branch that picks a CPU fallback over the GPU's path: `write_cache_indices`
   (mem_cache/allocation.py l. 56) writes the request-to-token table with one Triton kernel when the attention
   backend supports Triton (every GPU backend) and with a per-request Python loop otherwise (`torch_native`,
   the CPU's). Here it takes the GPU branch; the kernel's work is done by torch on the CPU and its CPU time is
   tallied in EMULATED_NS, which the timing subtracts (the GPU would do it; the launch is a few µs).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the packages the conformance stubs replace that this environment installs for real (the HTTP server's)
REAL = {
    "aiohttp",
    "uvloop",
    "fastapi",
    "setproctitle",
    "prometheus_client",
    "einops",
    "interegular",
    "partial_json_parser",
}
EMULATED_NS = [0]  # CPU ns spent doing a GPU kernel's work on the CPU (subtracted from the timed blocks)


def install_stubs() -> None:
    """Before any sglang import: GPU-only modules become inert (idempotent)."""
    sys.path.insert(0, os.path.join(REPO, "tests", "conformance"))
    import sglang_stubs

    sglang_stubs.STUBBED.difference_update(REAL)
    sglang_stubs.STUBBED.add("vllm")


class _Ready:
    """A result's device-to-host copy event: ready at `at` (monotonic seconds), waited for without CPU."""

    def __init__(self, at: float):
        self.at = at

    def record(self, *args, **kwargs) -> None:
        pass

    def query(self) -> bool:
        return time.monotonic() >= self.at

    def synchronize(self) -> None:
        delay = self.at - time.monotonic()
        if delay > 0:
            time.sleep(delay)

    def wait(self, *args, **kwargs) -> None:
        pass


def patch_gpu_worker() -> None:
    """Items 2 and 3 of the module docstring. Call after install_stubs()."""
    import torch
    from sglang.srt.managers import tp_worker
    from sglang.srt.managers.utils import GenerationBatchResult
    from sglang.srt.mem_cache import allocation

    step_ms = os.environ.get("SGLANG_CPU_GPU_STEP_MS")
    # decode steps, their requests, extend steps, their requests, their tokens: summed in a file the measuring
    # script reads (tools/sglang_cpu_server.py), as the vLLM measurement's fake worker does
    path = os.environ.get("SGLANG_CPU_COUNTERS")
    import numpy as np

    counters = np.memmap(path, dtype=np.int64, mode="r+", shape=(5,)) if path else np.zeros(5, np.int64)
    ms_per_token = float(os.environ.get("SGLANG_CPU_GPU_MS_PER_TOKEN", "0.03"))
    gpu = {"free": 0.0, "rng": torch.Generator().manual_seed(0)}

    class TimedResult(GenerationBatchResult):
        """`run_batch` assigns `copy_done = Event()` after the forward: the event becomes ready when the
        simulated GPU step ends (immediately when no step time is set)."""

        def __setattr__(self, name, value):
            if name == "copy_done" and value is not None and not isinstance(value, _Ready):
                value = _Ready(object.__getattribute__(self, "_ready_at"))
            object.__setattr__(self, name, value)

    def forward_batch_generation(self, batch=None, forward_batch=None, *args, **kwargs):
        t0 = time.thread_time_ns()  # this stand-in's own CPU is not SGLang's: tallied with the emulated work
        vocab = self.model_runner.model_config.vocab_size
        ids = torch.randint(3, vocab, (len(batch.reqs),), generator=gpu["rng"])
        result = TimedResult(next_token_ids=ids, can_run_cuda_graph=False)
        ready = time.monotonic()
        extend = batch.forward_mode.is_extend()
        tokens = batch.extend_num_tokens if extend else len(batch.reqs)
        counters[:] += (0, 0, 1, len(batch.reqs), tokens) if extend else (1, len(batch.reqs), 0, 0, 0)
        if step_ms is not None:
            ready = max(ready, gpu["free"]) + (float(step_ms) + ms_per_token * tokens) / 1e3
            gpu["free"] = ready
        object.__setattr__(result, "_ready_at", ready)
        EMULATED_NS[0] += time.thread_time_ns() - t0
        return result

    tp_worker.TpModelWorker.forward_batch_generation = forward_batch_generation

    class WriteReqToTokenKernel:
        """write_req_to_token_pool_triton's work (kernels/ops/memory/common.py) done by torch: for each
        request, its prefix's KV indices then its new tokens' slots into its row of req_to_token."""

        def __getitem__(self, grid):
            return self.run

        @staticmethod
        def run(
            req_to_token,
            req_pool_indices,
            prefix_pointers,
            prefix_lens,
            seq_lens,
            extend_lens,
            out_cache_loc,
            row_len,
        ):
            t0 = time.thread_time_ns()
            pre = prefix_lens.tolist()
            ext = extend_lens.tolist()
            rows = req_pool_indices.tolist()
            pt = 0
            for i, row in enumerate(rows):
                if pre[i]:
                    # the prefix tensors are the ones whose pointers were passed; the emulator gets them by
                    # address
                    src = _PREFIXES[0][i]
                    req_to_token[row, : pre[i]] = src[: pre[i]].to(req_to_token.dtype)
                req_to_token[row, pre[i] : pre[i] + ext[i]] = out_cache_loc[pt : pt + ext[i]].to(
                    req_to_token.dtype
                )
                pt += ext[i]
            EMULATED_NS[0] += time.thread_time_ns() - t0

    _PREFIXES: list = [None]
    original = allocation.write_cache_indices

    def write_cache_indices(*args, **kwargs):
        _PREFIXES[0] = kwargs["prefix_tensors"] if "prefix_tensors" in kwargs else args[9]
        return original(*args, **kwargs)

    allocation.support_triton = lambda backend: True  # the GPU backends' answer (fa3, flashinfer, triton)
    allocation.write_req_to_token_pool_triton = WriteReqToTokenKernel()
    allocation.write_cache_indices = write_cache_indices


class _PatchAfterImport(importlib.abc.MetaPathFinder):
    """Applies patch_gpu_worker() right after `sglang.srt.managers.scheduler` is imported: in the server's
    scheduler process (started by multiprocessing's spawn, so nothing done in the launching process carries
    over) that is when its entry point, `run_scheduler_process`, is unpickled."""

    TARGET = "sglang.srt.managers.scheduler"

    def find_spec(self, name, path, target=None):
        if name != self.TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            patch_gpu_worker()

        spec.loader.exec_module = exec_module
        return spec


def install_for_server() -> None:
    """What tools/sglang_cpu_site/sitecustomize.py does in every process of the measured server."""
    install_stubs()
    sys.meta_path.insert(0, _PatchAfterImport())
