"""GPU memory: weights per GPU, KV bytes per token and block, and how many KV blocks a policy gets."""

from __future__ import annotations

from dataclasses import dataclass

from simserve.deployment import Deployment
from simserve.errors import SimserveError

GIB = 2**30


def stage_layer_counts(dep: Deployment) -> list[tuple[int, int]]:
    """(dense layers, MoE layers) on each pipeline stage: a MoE model's leading dense layers sit on stage
    0."""
    m, per = dep.model, dep.layers_per_stage
    out = []
    for s in range(dep.pp):
        lo, hi = s * per, (s + 1) * per
        dense = max(0, min(hi, m.dense_layers) - lo) if m.is_moe else per
        out.append((dense, per - dense))
    return out


def weights_bytes_per_gpu(dep: Deployment) -> float:
    """The largest weight shard among the stages: layers split by TP, embeddings on the first and last stage.

    Linear-layer weights take dep.weight_bytes each (fp8: 1); norms, embeddings and the LM head stay bf16. A
    MoE layer's routed experts are split over the stage's TP group whatever the EP degree (EP·expert-TP = TP),
    so every GPU holds num_experts/TP experts' worth — num_experts/(DP·TP) under attention DP, whose ranks
    share them; the router is replicated on every GPU.
    """
    m = dep.model
    act = m.dtype_bytes
    wb = dep.weight_bytes
    # the dense formula as it always was: the same floats, the same KV blocks
    if not m.is_moe and not m.tied_embeddings and wb == act:
        layers = dep.layers_per_stage * m.layer_params / dep.tp
        embed = m.vocab * m.hidden / dep.tp
        return max(layers + embed * ((s == 0) + (s == dep.pp - 1)) for s in range(dep.pp)) * act
    attn = (m.attention_params * wb + m.norm_params * act) / dep.tp
    dense_mlp = m.dense_mlp_params * wb / dep.tp
    moe = (
        m.expert_params + 3 * m.hidden * m.shared_expert_ffn
    ) * wb / dep.tp + m.hidden * m.num_experts * act
    if dep.dp > 1:  # the ranks share the routed experts: DP x TP GPUs hold them, not TP
        moe -= m.expert_params * wb * (1 / dep.tp - 1 / dep.ep)
    # vocab-parallel: one of input embedding / LM head per end stage
    embed = m.vocab * m.hidden * act / dep.tp
    per_stage = []
    for s, (dense, sparse) in enumerate(stage_layer_counts(dep)):
        ends = (s == 0) + (s == dep.pp - 1)
        if m.tied_embeddings and dep.pp == 1:
            ends = 1  # one shared matrix
        per_stage.append((dense + sparse) * attn + dense * dense_mlp + sparse * moe + embed * ends)
    return max(per_stage)


def kv_bytes_per_token(dep: Deployment) -> int:
    """K and V for one token on one GPU, over that GPU's layers.

    Latent attention (DeepSeek) caches one compressed vector of kv_lora_rank + qk_rope_head_dim per token and
    layer instead of K and V per head; every TP rank keeps the whole of it (vLLM replicates the latent cache).
    """
    m = dep.model
    if m.is_mla:
        return dep.kv_bytes * (m.kv_lora_rank + m.qk_rope_head_dim) * dep.layers_per_stage
    return 2 * dep.kv_bytes * dep.kv_heads_per_gpu * m.head_dim * dep.layers_per_stage


def kv_bytes_per_block(dep: Deployment) -> int:
    return kv_bytes_per_token(dep) * dep.block_size


def activation_bytes_per_token(dep: Deployment) -> float:
    """Peak activation memory per token of a forward pass, on one GPU.

    During the MLP the residual stream, the normed input, the up-projection output and the activation output
    are live at once; attention (FlashAttention) needs no seq² buffer. Approximation: no allocator slack.
    """
    m = dep.model
    ffn = m.ffn_in_width + m.ffn if m.dense_layers else 0
    if m.is_moe:  # the routed copies of each token (top-k) through the experts, plus the shared experts
        moe = (
            3 * (m.experts_per_token * m.expert_ffn + m.shared_expert_ffn)
            + 2 * m.experts_per_token * m.hidden * dep.tp
        )
        ffn = max(ffn, moe)
    live = 2 * m.hidden + ffn / dep.tp
    return live * m.dtype_bytes


def profile_tokens(policy: str, max_model_len: int, budget: int | None, max_batch: int) -> int:
    """Tokens in the forward pass the serving engine profiles memory with (Sarathi-Serve's model_runner).

    Sarathi and chunked prefills profile one chunk; vLLM one max-length prompt; Orca and request-level FCFS
    `max_batch` max-length prompts, which is why the paper ran Orca with a batch of only 8 or 16; SGLang none
    (its memory fraction leaves activations out).
    """
    if policy == "sglang":
        # SGLang's --mem-fraction-static is weights + KV pool only: its default already sets the activations
        # and CUDA graphs aside (handle_gpu_memory_settings, simserve/tune/sglang.py), so none is taken here.
        return 0
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
            f"+ KV {self.kv_bytes / GIB:.1f} GiB ({self.num_blocks} blocks) of "
            f"{self.capacity_bytes / GIB:.1f} GiB"
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
        # suggest only the fp8 switches not already on (a one-byte dtype is the smallest modelled)
        fp8 = {
            flag: what
            for flag, what, dtype in (("--dtype", "weights", dep.dtype), ("--kv-dtype", "KV", dep.kv_dtype))
            if dtype != "fp8"
        }
        fp8_fix = f", fp8 {'/'.join(fp8.values())} ({'/'.join(fp8)} fp8)" if fp8 else ""
        raise SimserveError(
            f"{dep.describe()} does not fit: weights {weights / GIB:.1f} GiB ({dep.dtype}) + activations "
            f"{act / GIB:.1f} GiB "
            f"per GPU leave {free:.1f} GiB of {capacity / GIB:.1f} GiB usable "
            f"({dep.memory_utilization:.0%} of {dep.gpu.memory_gib:.1f} GiB) for KV, but one "
            f"{dep.max_model_len}-token request needs {need * block / GIB:.2f} GiB; "
            f"use more GPUs (raise --tp or --pp), a bigger GPU{fp8_fix} or a shorter max length"
        )
    return MemoryPlan(capacity, weights, act, block, blocks)
