"""A serving step as the GPU runs it: kernel launch gaps by launch mode, and GEMMs at the sustained clock.

A step's time (BatchTimer.__call__, and core.Timer in the compiled core) is

    max(kernels + GPU-side launch gaps + GPU-stream CPU work,
        CPU work that overlaps the GPU + CPU launch time)
    + CPU work that cannot overlap

with the CPU work's roles from predictor/overhead.py (async scheduling decides them) and the two parts here:

Launch gaps (vLLM's worker only: `--engine vllm`). vLLM 0.33.0 dispatches each step (vllm_worker.py) as one
FULL CUDA graph (decode-only batches up to the largest captured size), as PIECEWISE graphs with attention run
eagerly between them (batches with prefill tokens up to that size: one graph per layer boundary, layers + 1
pieces), or eagerly (larger batches, or every batch with `--enforce-eager`). NVIDIA's kernel tables time six
layers replayed in one CUDA graph (docs/kernel-validation.md), so the gaps between kernels inside a graph are
already in the kernel times; what a serving step adds is
  - on the GPU, the gap each graph launch leaves: 4.7 µs, from vLLM PR #51167 (H200, batch 1: piecewise graphs
    ran 181.7 tok/s with 12,272 graph launches for 209 tokens, one FULL graph per step 191.1 tok/s with 208:
    (1/181.7 − 1/191.1) s / (12,272 − 208)/209 launches = 4.6 µs, rounded up to cover the launch itself).
    Charged per graph: 1 for FULL, layers + 1 for PIECEWISE, none when eager (the CPU is then the limit);
  - on the CPU, the time to launch: 6 µs per eagerly launched kernel (pie-project/pie PR #348: an eager
    Qwen2.5-72B decode step on an A100 issues ~1,200 kernels and a CUDA graph saved 7.29 ms of it, 6.1 µs
    each), and the same per graph replay. FULL: 1 launch; PIECEWISE: layers + 1 graphs + 2 eager attention
    kernels per layer (the KV-cache write and the attention kernel); eager: every kernel of every layer
    (GEMMs, elementwise ops, attention, all-reduces: simserve.ops). The CPU launches while the GPU runs, so
    this time sits on the CPU side of the max: only what the GPU cannot hide is charged.

Sustained clock (any engine; the GPUs whose catalog entry has `sustained_tflops`). A GEMM-heavy step held for
seconds draws the GPU's power limit and the clock comes down to what that limit allows. NVIDIA's own GEMM
tables show it: bf16 GEMMs timed for ≥ 32 ms reach at most 884 TFLOP/s on an H100 SXM and 833 on an H200,
while shapes timed for < 1 ms reach 956 and 940 (benchmarks/sustained_gemm.py; B200 1,729 against 2,102; on
the A100 the long ones are the fastest, 298: no throttling). So a step's GEMMs run no faster than the GPU's
sustained rate: time = max(table time, GEMM FLOPs / sustained_tflops). Power follows the step's average tensor
activity (the power controller reacts within milliseconds, a step lasts milliseconds), hence the cap applies
to the step's GEMMs together, not per kernel: a GEMM below the sustained rate is not slowed, memory-bound
steps not at all (an H200's decode draws 137–300 W of its 700, arXiv 2605.11999). Attention kernels run well
below the GEMM rate and are left as measured; MoE routed experts are not counted (their FLOPs depend on
routing), and neither are fp8 GEMMs (no sustained fp8 rate is read: the cap is for bf16 weights only).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace

import numpy as np

from simserve.deployment import Deployment

GRAPH_GAP_S = 4.7e-6  # GPU idle per CUDA-graph launch (vLLM PR #51167, H200)
LAUNCH_CPU_S = 6.0e-6  # CPU per eager kernel launch or graph replay (pie-project/pie PR #348, A100 host)
ATTENTION_KERNELS = 2  # KV-cache write + attention, run eagerly between piecewise graphs
MODES = ("full", "piecewise", "eager")


@dataclass(frozen=True)
class LaunchCosts:
    """Per stage and mode (MODES order): seconds the GPU idles between graphs, and CPU seconds to launch."""

    gpu: tuple[tuple[float, float, float], ...]
    cpu: tuple[tuple[float, float, float], ...]
    cap: int  # the largest captured size: batches above it run eagerly (0: all eager)


def kernels_per_layer(dep: Deployment) -> int:
    """Kernels one layer launches eagerly: its GEMMs, elementwise ops, attention and all-reduces."""
    from simserve.ops import all_reduces_per_layer, elementwise_ops, timed_linear_ops

    elementwise = sum(op.count for op in elementwise_ops(dep))
    return len(timed_linear_ops(dep)) + elementwise + ATTENTION_KERNELS + all_reduces_per_layer(dep)


def launch_costs(dep: Deployment, sizes: tuple[int, ...]) -> LaunchCosts:
    """vLLM 0.33.0's launch costs for `dep` with these CUDA-graph sizes (() is --enforce-eager)."""
    layers = dep.layers_per_stage
    pieces = layers + 1
    eager_cpu = layers * kernels_per_layer(dep) * LAUNCH_CPU_S
    gpu = (GRAPH_GAP_S, pieces * GRAPH_GAP_S, 0.0)
    cpu = (LAUNCH_CPU_S, (pieces + layers * ATTENTION_KERNELS) * LAUNCH_CPU_S, eager_cpu)
    return LaunchCosts(
        tuple(gpu for _ in range(dep.pp)), tuple(cpu for _ in range(dep.pp)), sizes[-1] if sizes else 0
    )


NO_LAUNCH = LaunchCosts(((0.0, 0.0, 0.0),), ((0.0, 0.0, 0.0),), 0)


def gemm_flops_per_token(dep: Deployment) -> float:
    """Dense GEMM FLOPs per token on one GPU of one stage (routed experts left out: see the docstring)."""
    from simserve.ops import linear_ops

    return dep.layers_per_stage * sum(op.share * op.flops(1) for op in linear_ops(dep))


def sustained_rate(dep: Deployment) -> float:
    """FLOP/s the GPU sustains on bf16 GEMMs at its power limit; 0 where not known (no cap)."""
    if dep.weight_bytes != 2:  # fp8 weights: no sustained fp8 rate read
        return 0.0
    return dep.gpu.sustained_tflops * 1e12


def sustained_linear(linear: np.ndarray, dep: Deployment, slope: float) -> tuple[np.ndarray, float]:
    """The per-token GEMM table (seconds for T = 0..end) at the sustained clock, and its slope beyond."""
    rate = sustained_rate(dep)
    if not rate:
        return linear, slope
    per_token = gemm_flops_per_token(dep) / rate  # seconds per token at the sustained rate
    floor = np.arange(len(linear), dtype=float) * per_token
    return np.maximum(linear, floor), max(slope, per_token)


def with_sustained_clock(timer, dep: Deployment):
    """A copy of a BatchTimer whose GEMMs run no faster than the GPU's sustained rate (timer unchanged if the
    GPU has none). The copy keeps the boost-clock table as `boost_linear` for reporting the clock's part."""
    tok = timer._tokens
    linear, slope = sustained_linear(tok.linear, dep, tok.slopes["linear"])
    if linear is tok.linear:
        return timer
    out = copy.copy(timer)
    out._tokens = replace(tok, linear=linear, slopes={**tok.slopes, "linear": slope})
    common = slope + tok.slopes["elementwise"] + tok.slopes["all_reduce"]
    out._tslope = [common + tok.send_recv_slopes[s] for s in range(dep.pp)]
    out._tok_np = out._stage_tables()
    out.__dict__.pop("_tok", None)  # the list copies: rebuilt from the new arrays on first use
    out.boost_linear = tok.linear
    return out


def with_launch_costs(timer, costs: LaunchCosts):
    """A copy of a BatchTimer that charges `costs` (vLLM's worker)."""
    out = copy.copy(timer)
    out.set_launch(costs)
    return out
