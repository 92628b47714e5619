"""GPU memory: weights per GPU, KV bytes per token and block, and how many KV blocks a policy gets."""

from __future__ import annotations

from dataclasses import dataclass

from simserve.deployment import Deployment
from simserve.errors import SimserveError

GIB = 2**30


def weights_bytes_per_gpu(dep: Deployment) -> float:
    """The largest weight shard among the stages: layers split by TP, embeddings on the first and last stage."""
    m = dep.model
    layers = dep.layers_per_stage * m.layer_params / dep.tp
    embed = m.vocab * m.hidden / dep.tp  # vocab-parallel: one of input embedding / LM head per end stage
    per_stage = [layers + embed * ((s == 0) + (s == dep.pp - 1)) for s in range(dep.pp)]
    return max(per_stage) * m.dtype_bytes


def kv_bytes_per_token(dep: Deployment) -> int:
    """K and V for one token on one GPU, over that GPU's layers."""
    m = dep.model
    return 2 * m.dtype_bytes * dep.kv_heads_per_gpu * m.head_dim * dep.layers_per_stage


def kv_bytes_per_block(dep: Deployment) -> int:
    return kv_bytes_per_token(dep) * dep.block_size


def activation_bytes_per_token(dep: Deployment) -> float:
    """Peak activation memory per token of a forward pass, on one GPU.

    During the MLP the residual stream, the normed input, the up-projection output and the activation output
    are live at once; attention (FlashAttention) needs no seq² buffer. Approximation: no allocator slack.
    """
    m = dep.model
    live = 2 * m.hidden + (m.ffn_in_width + m.ffn) / dep.tp
    return live * m.dtype_bytes


def profile_tokens(policy: str, max_model_len: int, budget: int | None, max_batch: int) -> int:
    """Tokens in the forward pass the serving engine profiles memory with (Sarathi-Serve's model_runner).

    Sarathi and chunked prefills profile one chunk; vLLM one max-length prompt; Orca and request-level FCFS
    `max_batch` max-length prompts, which is why the paper ran Orca with a batch of only 8 or 16.
    """
    if policy in ("sarathi", "chunked", "hybrid", "slo-aware", "pressure", "equal-cost", "vllm-v1"):
        return min(budget or max_model_len, max_model_len)  # the adaptive ones: their largest chunk
    if policy == "vllm":
        return max_model_len
    return max_batch * max_model_len


@dataclass(frozen=True)
class MemoryPlan:
    capacity_bytes: float  # utilization × total memory
    weights_bytes: float
    activation_bytes: float
    kv_block_bytes: int
    num_blocks: int

    @property
    def kv_bytes(self) -> float:
        return self.num_blocks * self.kv_block_bytes

    def describe(self) -> str:
        return (
            f"weights {self.weights_bytes / GIB:.1f} GiB + activations {self.activation_bytes / GIB:.1f} GiB "
            f"+ KV {self.kv_bytes / GIB:.1f} GiB ({self.num_blocks} blocks) of {self.capacity_bytes / GIB:.1f} GiB"
        )


def plan_memory(dep: Deployment, profile_tokens_: int) -> MemoryPlan:
    """KV blocks = floor((utilization·HBM − weights − activation peak) / bytes per block), per GPU.

    Fails with the numbers when not even one max-length request fits (the engine refuses to start then).
    """
    capacity = dep.memory_utilization * dep.gpu.memory_bytes
    weights = weights_bytes_per_gpu(dep)
    act = activation_bytes_per_token(dep) * profile_tokens_
    block = kv_bytes_per_block(dep)
    blocks = int((capacity - weights - act) // block)
    need = -(-dep.max_model_len // dep.block_size)
    if blocks < need:
        free = max(capacity - weights - act, 0) / GIB
        raise SimserveError(
            f"{dep.describe()} does not fit: weights {weights / GIB:.1f} GiB + activations {act / GIB:.1f} GiB "
            f"per GPU leave {free:.1f} GiB of {capacity / GIB:.1f} GiB usable "
            f"({dep.memory_utilization:.0%} of {dep.gpu.memory_gib:.1f} GiB) for KV, but one "
            f"{dep.max_model_len}-token request needs {need * block / GIB:.2f} GiB; "
            f"use more GPUs (raise --tp or --pp), a bigger GPU or a shorter max length"
        )
    return MemoryPlan(capacity, weights, act, block, blocks)
