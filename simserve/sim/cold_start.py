"""What a replica added by the autoscaler pays before it serves: vLLM 0.33.0's start-up, part by part.

    cold start = weights (the replica's bytes / the store's measured rate, catalog/storage.py)
               + torch.compile (vLLM compiles the model's graph at start-up unless --enforce-eager)
               + CUDA-graph capture (one capture per size vLLM captures)
               + the rest of engine start-up (memory profiling run, KV cache allocation, warm-up)

The engine is vLLM 0.33.0 whatever policy schedules (an autoscaled deployment starts the serving engine
people run); its capture sizes are the run's own with `--engine vllm`, else the release's defaults
(vllm_worker.capture_sizes at max-num-seqs 256, max-num-batched-tokens 2048). Each constant is one published
measurement or the release's own words; an approximation, and said to be one:

- COMPILE_S: "torch.compile takes 28.77 s in total", vLLM serving Llama-3.1-8B-Instruct on an H100 80GB
  (kubernetes-sigs/gateway-api-inference-extension pull request 550, its start-up log). One model on one GPU:
  compilation works on one layer's graph, so other dense models take about as long (not measured here).
- CAPTURE_S: vLLM 0.33.0's own estimate for its default list, "This usually takes 5~20 seconds."
  (vllm/v1/worker/gpu_model_runner.py line 6515, beside "Graph capturing finished in %.0f secs"): the
  midpoint, 12.5 s, spread evenly over the default sizes, so a run capturing fewer sizes pays less.
- ENGINE_S: "init engine (profile, create kv cache, warmup model) took 90.84 seconds", of which
  "torch.compile takes 45.81 s" and "Graph capturing finished in 37 secs" (run-ai/runai-model-streamer
  issue 67, a vLLM V1 start-up log): the remaining 8.03 s.
Not counted: pulling the container image, scheduling the pod, Python start-up before the engine (not in
those logs); `--cold-start-s` replaces the whole sum when they matter.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1024**3
COMPILE_S = 28.77
CAPTURE_S = (5.0 + 20.0) / 2
ENGINE_S = 90.84 - 45.81 - 37.0
VLLM_DEFAULT_SEQS, VLLM_DEFAULT_TOKENS = 256, 2048  # vLLM 0.33.0's --max-num-seqs, --max-num-batched-tokens


@dataclass(frozen=True)
class ColdStart:
    weights_s: float
    compile_s: float
    capture_s: float
    engine_s: float
    storage: str

    @property
    def total_s(self) -> float:
        return self.weights_s + self.compile_s + self.capture_s + self.engine_s

    def as_dict(self) -> dict:
        return {
            "weights_s": self.weights_s,
            "compile_s": self.compile_s,
            "capture_s": self.capture_s,
            "engine_s": self.engine_s,
            "total_s": self.total_s,
            "storage": self.storage,
        }


def cold_start(scenario, storage: str) -> ColdStart:
    """A new replica's start-up for `scenario` (sim/scenario.Scenario), its weights read from `storage`."""
    from simserve.catalog import GPUSpec
    from simserve.catalog.storage import STORAGE
    from simserve.memory import weights_bytes_per_gpu
    from simserve.vllm_worker import capture_sizes

    store = STORAGE.get(storage)
    dep = scenario.deployment()
    weights = weights_bytes_per_gpu(dep) * dep.num_gpus / (store.gib_per_s * GIB)
    eager = scenario.enforce_eager
    cc = GPUSpec.from_name(scenario.gpu).compute_capability
    default = capture_sizes(VLLM_DEFAULT_SEQS, VLLM_DEFAULT_TOKENS, cc)
    sizes = scenario.cudagraph_sizes() if scenario.vllm_worker else default
    capture = 0.0 if eager else CAPTURE_S * len(sizes) / len(default)
    return ColdStart(weights, 0.0 if eager else COMPILE_S, capture, ENGINE_S, store.name)
