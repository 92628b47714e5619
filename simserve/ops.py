"""The operators of one transformer layer on one GPU, with the shapes a deployment gives them.

Every profile backend times exactly these ops, and the predictor sums exactly these: one list, one place.
Linear ops multiply a (num_tokens × in_features) activation by an (in_features × out_features) weight shard.
Elementwise ops move `bytes_per_token` through HBM per token. Attention and collectives are described by the
dimensions their cost models need.
"""

from __future__ import annotations

from dataclasses import dataclass

from simserve.deployment import Deployment

LINEAR_OPS = ("qkv_proj", "o_proj", "up_proj", "down_proj")
ELEMENTWISE_OPS = ("attn_norm", "mlp_norm", "rotary", "act", "residual_add")
ATTENTION_PHASES = ("prefill", "decode")
COLLECTIVE_OPS = ("all_reduce", "send_recv")


@dataclass(frozen=True)
class LinearOp:
    name: str
    in_features: int
    out_features: int

    def flops(self, num_tokens: int) -> float:
        return 2.0 * num_tokens * self.in_features * self.out_features

    def bytes(self, num_tokens: int, dtype_bytes: int = 2) -> float:
        # weights once, input and output once: no re-reads (they stay in L2/shared memory per tile)
        m, k, n = num_tokens, self.in_features, self.out_features
        return dtype_bytes * (k * n + m * k + m * n)


@dataclass(frozen=True)
class ElementwiseOp:
    name: str
    bytes_per_token: int  # read + written per token on one GPU
    count: int  # times per layer (two residual adds per layer, for example)


@dataclass(frozen=True)
class AttentionShape:
    q_heads: int  # per GPU
    kv_heads: int  # per GPU
    head_dim: int


def linear_ops(dep: Deployment) -> list[LinearOp]:
    m, t = dep.model, dep.tp
    hd = m.head_dim
    return [
        LinearOp("qkv_proj", m.hidden, (dep.heads_per_gpu + 2 * dep.kv_heads_per_gpu) * hd),
        LinearOp("o_proj", dep.heads_per_gpu * hd, m.hidden),
        LinearOp("up_proj", m.hidden, m.ffn_in_width // t),  # gate and up fused for SwiGLU
        LinearOp("down_proj", m.ffn // t, m.hidden),
    ]


def elementwise_ops(dep: Deployment) -> list[ElementwiseOp]:
    m, b = dep.model, dep.model.dtype_bytes
    hd = m.head_dim
    norm_bytes = 2 * m.hidden * b  # read x, write normed x (the weight vector is negligible)
    rotary_bytes = 2 * (dep.heads_per_gpu + dep.kv_heads_per_gpu) * hd * b  # q and k, read and written
    ffn = m.ffn // dep.tp
    act_bytes = (3 * ffn if m.activation == "swiglu" else 2 * ffn) * b  # SiLU(gate)·up reads two, writes one
    return [
        ElementwiseOp("attn_norm", norm_bytes, 1),
        ElementwiseOp("mlp_norm", norm_bytes, 1),
        ElementwiseOp("rotary", rotary_bytes, 1),
        ElementwiseOp("act", act_bytes, 1),
        ElementwiseOp("residual_add", 3 * m.hidden * b, 2),
    ]


def attention_shape(dep: Deployment) -> AttentionShape:
    return AttentionShape(dep.heads_per_gpu, dep.kv_heads_per_gpu, dep.model.head_dim)


def all_reduces_per_layer(dep: Deployment) -> int:
    """Row-parallel outputs are summed across TP ranks: after attention and after the MLP.

    Falcon runs attention and MLP in parallel on the same input and reduces their sum once.
    """
    if dep.tp == 1:
        return 0
    return 1 if dep.model.parallel_attn_mlp else 2


def all_reduce_bytes(dep: Deployment, num_tokens: int) -> int:
    return num_tokens * dep.model.hidden * dep.model.dtype_bytes


def send_recv_bytes(dep: Deployment, num_tokens: int) -> int:
    """Activations one pipeline stage hands the next."""
    return num_tokens * dep.model.hidden * dep.model.dtype_bytes
