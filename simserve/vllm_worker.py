"""vLLM 0.33.0's GPU worker as it runs a model: CUDA-graph capture sizes and padding, and its memory profile.

CUDA graphs (`cudagraph_mode` FULL_AND_PIECEWISE, the V1 default; `--enforce-eager` turns them off). At
start-up `VllmConfig._set_cudagraph_sizes` (vllm/config/vllm.py) picks the batch sizes, in tokens, it
captures: max size = min(max_num_batched_tokens, min(2·max_num_seqs, 512; 1024 on data-centre Blackwell)),
sizes 1, 2, 4, then every 8 below 256, then every 16 up to the max, plus max_num_batched_tokens and
max_num_seqs when they fit. At run time `CudagraphDispatcher.dispatch` (vllm/v1/cudagraph_dispatcher.py) runs
every batch of at most the max size as a graph, padded up to the next captured size: a decode-only batch as
one FULL graph, a batch with prefill tokens as PIECEWISE graphs (attention eager between the pieces). Larger
batches run eagerly, unpadded. So the token-dependent work (GEMMs, elementwise ops, all-reduces, sends) is
charged at the padded size; attention, which reads only the real requests' KV, is not (`padded_timer`).

Memory (`Worker.determine_available_memory`, vllm/v1/worker/gpu_worker.py, with `memory_profiling` of
vllm/utils/mem_utils.py): KV cache = gpu_memory_utilization × total − (weights + the transient peak of a
profiling forward pass + non-torch memory) − the CUDA-graph estimate (`profile_cudagraph_memory`,
vllm/v1/worker/gpu_model_runner.py; applied since VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS became default-on).
The profiling pass (`GPUModelRunner.profile_run`) is one max_num_batched_tokens forward pass, then the sampler
over max_num_seqs dummy requests (`_dummy_sampler_run`); the peak is the larger of the two. Its block count
(`num_gpu_blocks`) includes the null block the BlockPool keeps back, so the simulator's pool is one fewer.
"""

from __future__ import annotations

import bisect
import copy
from dataclasses import dataclass, replace

import numpy as np

from simserve.deployment import Deployment
from simserve.memory import GIB, activation_bytes_per_token, kv_bytes_per_block, weights_bytes_per_gpu

RELEASE = "vLLM 0.33.0"
MIB = 2**20
# Non-torch memory a vLLM instance adds (CUDA/cuBLAS workspaces, NCCL buffers), as vLLM's own profiler logs it
# ("non_torch_memory takes …"): 0.16 GiB on one GPU (vllm-project/vllm#12126 on an H100, Llama-3.2-11B;
# kubernetes-sigs/gateway-api-inference-extension#550 on an H100, Llama-3.1-8B;
# generative-computing/mellea#416 on an 80 GB GPU) and 0.20 GiB per worker with tensor parallelism
# (vllm-project/vllm#14447, four 24 GB GPUs).
NON_TORCH_BYTES = {1: 0.16 * GIB, "tp": 0.20 * GIB}
# profile_cudagraph_memory: the first (largest) capture of each mode holds the graph pool; each further graph
# is charged what the second capture took, at least 1 MiB ("Use at least 1 MiB per graph for driver
# overhead"). NOTE: a floor, so the estimate is likely low: vLLM's own logs show more per graph (6-8 MiB at
# about 100 tokens and 24-28 MiB at about 450 tokens, vllm-project/vllm#22897; 0.13-0.21 GiB for whole capture
# runs of <= 1B models in V0, vllm-project/vllm#11349, generative-computing/mellea#416). Nothing here is
# fitted to those.
PER_GRAPH_BYTES = MIB
# The sampler's working set per dummy request and vocabulary entry: logits in the model's dtype, their float32
# copy, and float32 probabilities for top-p/top-k (what _dummy_sampler_run exercises).
SAMPLER_BYTES_PER_LOGIT_EXTRA = 8


def capture_sizes(max_num_seqs: int, max_num_batched_tokens: int, compute_capability: int) -> tuple[int, ...]:
    """The token counts vLLM 0.33.0 captures graphs for by default (`VllmConfig._set_cudagraph_sizes`, no
    speculative decoding: decode query length 1, performance_mode not "interactivity")."""
    default_max = 1024 if compute_capability // 10 == 10 else 512  # is_device_capability_family(100)
    max_size = min(max_num_seqs * 2, default_max)
    uniform_decode = [max_num_seqs] if max_num_seqs <= max_size else []
    max_size = min(max_num_batched_tokens, max_size)
    sizes = [s for s in (1, 2, 4) if s <= max_size]
    if max_size >= 8:
        sizes += list(range(8, min(max_size + 1, 256), 8))
    if max_size >= 256:
        sizes += list(range(256, max_size + 1, 16))
    if max_num_batched_tokens <= max_size:
        sizes.append(max_num_batched_tokens)
    sizes += [s for s in uniform_decode if s <= max_num_batched_tokens]
    return tuple(sorted(set(sizes)))


def padded(num_tokens: int, sizes: tuple[int, ...]) -> int:
    """The size a batch of num_tokens runs at: the next captured size, or itself past the largest (eager)."""
    if not sizes or num_tokens > sizes[-1] or num_tokens == 0:
        return num_tokens
    return sizes[bisect.bisect_left(sizes, num_tokens)]


def padded_timer(timer, sizes: tuple[int, ...]):
    """A copy of a BatchTimer whose token-dependent time is that of the padded batch (attention unchanged).

    The per-token tables are composed with the padding once (time[T] := time[padded(T)]), so the timer's
    arithmetic, and the compiled core's copy of it, stay as they are."""
    if not sizes:
        return timer
    tok = timer._tokens
    index = np.array([padded(t, sizes) for t in range(tok.end + 1)], dtype=np.int64)
    out = copy.copy(timer)
    out._tokens = replace(
        tok,
        linear=tok.linear[index],
        elementwise=tok.elementwise[index],
        all_reduce=tok.all_reduce[index],
        send_recv=[s[index] for s in tok.send_recv],
        # attention DP: a rank's own layers run padded too; the experts are padded across ranks
        # (sim/lockstep.py)
        own=None if tok.own is None else tok.own[index],
    )
    # the per-stage sums as the compiled core reads them (arrays) and as the SimPy reference does (lists)
    out._tok_np = out._stage_tables()
    out._tok = [row.tolist() for row in out._tok_np]
    out.__dict__.pop("_own", None)  # the lockstep's list copies: rebuilt from the padded table on first use
    out.__dict__.pop("_exp", None)
    out.cudagraph_sizes = sizes
    return out


@dataclass(frozen=True)
class WorkerMemory:
    """vLLM's memory profile of one GPU, term by term (bytes), and the KV blocks it leaves."""

    capacity: float  # gpu_memory_utilization × total
    weights: float
    activation_peak: float  # max(forward pass of max_num_batched_tokens, sampler over max_num_seqs)
    profile_tokens: int
    sampler_peak: float
    cudagraphs: float  # profile_cudagraph_memory's estimate (0 with --enforce-eager)
    num_graphs: int
    non_torch: float
    block_bytes: int
    vllm_blocks: int  # vLLM's num_gpu_blocks (the null block included)

    @property
    def num_blocks(self) -> int:
        """Blocks requests can hold: vLLM's BlockPool keeps block 0 as the null block."""
        return self.vllm_blocks - 1

    def describe(self) -> str:
        g = GIB
        return (
            f"{self.vllm_blocks} KV blocks ({RELEASE}'s worker; {self.num_blocks} usable beside the null "
            f"block) = ({self.capacity / g:.2f} GiB usable − weights {self.weights / g:.2f} − activation "
            f"peak {self.activation_peak / g:.2f} ({self.profile_tokens}-token forward "
            f"pass{' and sampler' if self.sampler_peak >= self.activation_peak else ''}) − CUDA graphs "
            f"{self.cudagraphs / g:.2f} ({self.num_graphs} graphs) − non-torch {self.non_torch / g:.2f}) / "
            f"{self.block_bytes / MIB:.2f} MiB per block"
        )

    def as_dict(self) -> dict:
        return {
            "release": RELEASE,
            "capacity_gib": self.capacity / GIB,
            "weights_gib": self.weights / GIB,
            "activation_peak_gib": self.activation_peak / GIB,
            "profile_tokens": self.profile_tokens,
            "sampler_peak_gib": self.sampler_peak / GIB,
            "cudagraphs_gib": self.cudagraphs / GIB,
            "num_graphs": self.num_graphs,
            "non_torch_gib": self.non_torch / GIB,
            "block_bytes": self.block_bytes,
            "vllm_num_gpu_blocks": self.vllm_blocks,
            "usable_blocks": self.num_blocks,
        }


def worker_memory(
    dep: Deployment, max_num_batched_tokens: int, max_num_seqs: int, sizes: tuple[int, ...]
) -> WorkerMemory:
    """vLLM's KV pool for `dep` (see the module docstring); `sizes` are the captured sizes (empty: eager)."""
    m = dep.model
    capacity = dep.memory_utilization * dep.gpu.memory_bytes
    weights = weights_bytes_per_gpu(dep)
    per_token = activation_bytes_per_token(dep)
    forward = per_token * max_num_batched_tokens
    reqs = min(max_num_seqs, max_num_batched_tokens)  # _dummy_run: one logit row per dummy request
    # NOTE: the logits are gathered whole (every vocabulary entry) before sampling, whatever the TP degree.
    sampler = reqs * m.vocab * (m.dtype_bytes + SAMPLER_BYTES_PER_LOGIT_EXTRA)
    peak = max(forward, sampler)
    graphs = 0.0
    count = 0
    if sizes:
        # FULL graphs: uniform decode batches of ≤ max_num_seqs
        full = [s for s in sizes if s <= max_num_seqs]
        for mode in (full, list(sizes)):  # ... and PIECEWISE graphs for every size
            if mode:
                graphs += per_token * mode[-1] + PER_GRAPH_BYTES * (len(mode) - 1)
                count += len(mode)
    non_torch = NON_TORCH_BYTES[1] if dep.tp == 1 and dep.pp == 1 else NON_TORCH_BYTES["tp"]
    block = kv_bytes_per_block(dep)
    blocks = int((capacity - weights - peak - graphs - non_torch) // block)
    return WorkerMemory(
        capacity, weights, peak, max_num_batched_tokens, sampler, graphs, count, non_torch, block, blocks
    )
