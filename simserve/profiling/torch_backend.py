"""The torch profiling backend: the real kernels of one layer, timed on the GPU the profile is labelled with.

Each op of `simserve/ops.py` runs at its per-GPU shard shape for every TP degree: bf16 GEMMs (`F.linear`, as
vLLM calls them), RMSNorm/LayerNorm, neox rotary, SiLU·mul or GELU, the residual add, and attention through
flash-attn when it is importable (what vLLM runs) or `scaled_dot_product_attention` otherwise. Times are
CUDA-event medians of `repeats` calls after `warmup` calls. The GPU is first given a `torch.cuda._sleep` spin
so that all timed calls are queued before it reaches them: the events then bracket kernel time only, not CPU
launch gaps (the convention of the reference measurements), and each call starts with L2 flushed, as weights
are in a real forward pass.

Without a GPU it runs the same code on the CPU with `time.perf_counter`, only in quick mode and labelled as
the CPU: its numbers exercise the code path and never stand in for the GPU asked for. Collectives are measured
over NCCL when several GPUs are visible; what cannot be measured here comes from the NCCL model of
`collectives.py`, marked `method=analytic` row by row and in the provenance.
"""

from __future__ import annotations

import pandas as pd

from simserve.catalog import GPUSpec, ModelSpec, NetworkSpec, NodeSpec
from simserve.profiling import grid
from simserve.profiling.schema import profiled_deployments
from simserve.profiling.torch_collectives import collective_rows, measure_collectives
from simserve.profiling.torch_device import (
    check_device,
    device_matches,
    free_cache,
    import_torch,
    select_device,
)
from simserve.profiling.torch_kernels import (
    Attention,
    attention_rows,
    elementwise_rows,
    kv_capacity,
    linear_rows,
)
from simserve.profiling.torch_timing import QUICK_REPEATS, QUICK_WARMUP, REPEATS, WARMUP, Timer, summarize

# The names callers and tests import from here; the code lives in the torch_* modules.
__all__ = [
    "QUICK_GRID",
    "Attention",
    "Timer",
    "check_device",
    "device_matches",
    "import_torch",
    "measure_collectives",
    "profile",
    "summarize",
]

QUICK_GRID = {
    "tokens": [1, 16, 64, 65],
    "batches": [1, 4],
    "kv": [16, 64],
    "chunks": [16, 64],
    "prefixes": [0, 64],
}


def _grid(max_model_len: int, max_tokens: int, quick: bool) -> dict[str, list[int]]:
    """The shared sampling grid (`grid.py`), or a few small points in quick mode, within the requested
    limits."""
    max_chunk = min(max_tokens, max_model_len)
    if not quick:
        return {
            "tokens": grid.token_counts(max_tokens),
            "batches": grid.decode_batch_sizes(),
            "kv": grid.kv_lengths(max_model_len),
            "chunks": grid.prefill_chunks(max_chunk),
            "prefixes": grid.prefill_prefixes(max_model_len),
        }
    limits = {
        "tokens": max_tokens,
        "batches": 256,
        "kv": max_model_len,
        "chunks": max_chunk,
        "prefixes": max_model_len - 1,
    }
    return {k: [v for v in QUICK_GRID[k] if v <= limit] or [limit] for k, limit in limits.items()}


def profile(
    model: ModelSpec,
    gpu: GPUSpec,
    tps: list[int],
    node: NodeSpec | None,
    network: NetworkSpec | None,
    max_model_len: int = 16384,
    max_tokens: int = 16384,
    quick: bool = False,
) -> tuple[dict[str, pd.DataFrame], dict]:
    """Return the four tables of simserve/profiling/schema.py (ms per layer per GPU) and provenance fields."""
    torch = import_torch()
    deps = profiled_deployments(model, gpu, tps, node, network, max_model_len)
    tps = [d.tp for d in deps]
    node = deps[0].node
    device, dtype, label = select_device(torch, gpu, quick)
    warmup, repeats = (QUICK_WARMUP, QUICK_REPEATS) if quick else (WARMUP, REPEATS)
    threads = torch.get_num_threads()
    if device.type == "cpu":
        # One thread: on a shared CPU, a multi-threaded op waits for descheduled workers in whole scheduler
        # ticks (4 ms steps seen on a 2-core CI box), which would bury the op's own time.
        torch.set_num_threads(1)
    try:
        timer, g = Timer(torch, device, warmup, repeats), _grid(max_model_len, max_tokens, quick)
        linear, elementwise, attention, skipped, backend = [], [], [], 0, ""
        with torch.inference_mode():
            for dep in deps:
                linear += linear_rows(torch, dep, g["tokens"], timer, dtype)
                elementwise += elementwise_rows(torch, dep, g["tokens"], timer, dtype)
                free_cache(torch, device)
                attn = Attention(torch, dep, dtype, device, kv_capacity(torch, device, dep, g, dtype))
                rows, n_skipped = attention_rows(attn, dep.tp, g, timer, max_model_len)
                attention, skipped, backend = attention + rows, skipped + n_skipped, attn.backend
                del attn
                free_cache(torch, device)
    finally:
        torch.set_num_threads(threads)
    collectives, coll_note = collective_rows(torch, device, gpu, node, network, tps, quick, warmup, repeats)
    tables = {
        "linear": pd.DataFrame(linear),
        "elementwise": pd.DataFrame(elementwise),
        "attention": pd.DataFrame(attention),
        "collectives": collectives,
    }
    cuda = device.type == "cuda"
    provenance = {
        "backend": "torch",
        "model": model.name,
        "gpu": gpu.name,
        "node": node.name,
        "network": network.name if network else None,
        "device": label,
        "device_is_requested_gpu": cuda,
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "cudnn_version": torch.backends.cudnn.version() if cuda else None,
        "dtype": str(dtype).removeprefix("torch."),
        "cpu_threads": None if cuda else 1,
        "attention_backend": backend,
        "timer": "CUDA events around calls queued behind a GPU spin (kernel time, no launch gaps), L2 "
        "flushed before each call"
        if cuda
        else "time.perf_counter around each call (CPU wall clock)",
        "warmup": warmup,
        "repeats": repeats,
        "statistic": "median of repeats (min/max/mean/std in time_<stat>_ms)",
        "quick": quick,
        "max_model_len": max_model_len,
        "max_tokens": max_tokens,
        "grid_sizes": {k: len(v) for k, v in g.items()},
        "attention_points_skipped_for_memory": skipped,
        "collectives": coll_note,
        "notes": "rotary runs as eager torch ops (several kernels; vLLM fuses it into one), so it reads "
        "slower than a serving engine's; SwiGLU is silu + mul (two kernels, vLLM fuses them)",
    }
    return tables, provenance
