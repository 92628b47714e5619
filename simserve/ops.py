"""The operators of one transformer layer on one GPU, with the shapes a deployment gives them.

Every profile backend times exactly these ops, and the predictor sums exactly these: one list, one place.
Linear ops multiply a (num_tokens × in_features) activation by an (in_features × out_features) weight shard.
Elementwise ops move `bytes_per_token` through HBM per token. Attention and collectives are described by the
dimensions their cost models need.

Beyond the dense GQA layer (LINEAR_OPS): latent attention (DeepSeek) projects through low-rank q and kv
(MLA_LINEAR_OPS) and caches one latent vector per token; a mixture-of-experts layer adds a replicated router,
any shared experts (plain linear ops) and the routed experts as grouped GEMMs (`expert_ops`), whose work
depends on how many distinct experts a batch touches (`expert_load`). A profile times the routed experts as
ONE fused op (`fused_expert_name`: gate+up GEMM, SiLU·up, down GEMM, as vLLM's fused-MoE kernel runs them and
as NVIDIA's measured MoE tables time them), so the `act` elementwise op leaves the routed rows out. An op's
`share` is the fraction of the layers that run it (DeepSeek-V3: the dense FFN on 3 of 61 layers, the experts
on 58).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simserve.deployment import ALL2ALL_BACKENDS, Deployment

LINEAR_OPS = ("qkv_proj", "o_proj", "up_proj", "down_proj")
MLA_LINEAR_OPS = ("qkv_a_proj", "q_b_proj", "kv_b_proj", "o_proj")
MOE_LINEAR_OPS = ("router", "shared_up", "shared_down")
EXPERT_OPS = ("moe_up", "moe_down")
ELEMENTWISE_OPS = ("attn_norm", "mlp_norm", "rotary", "act", "residual_add")
ATTENTION_PHASES = ("prefill", "decode")
COLLECTIVE_OPS = ("all_reduce", "send_recv")


@dataclass(frozen=True)
class LinearOp:
    name: str
    in_features: int
    out_features: int
    share: float = 1.0  # fraction of the model's layers that run this op

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
    # Latent attention (DeepSeek MLA), 0 otherwise: the cached latent's width and the rope key beside it, and
    # the per-head query/key and value widths of the decompressed (prefill) form.
    latent_dim: int = 0
    rope_dim: int = 0
    qk_head_dim: int = 0
    v_head_dim: int = 0


@dataclass(frozen=True)
class ExpertOp:
    """One GPU's routed experts of a MoE layer as one grouped GEMM: `local_experts` weight slices of
    (in_features × out_features); which of them a batch touches, and with how many rows, is `expert_load`."""

    name: str  # moe_up | moe_down
    in_features: int
    out_features: int
    local_experts: int
    share: float


def fused_expert_name(dep: Deployment) -> str:
    """The routed experts' fused op in a profile (`moe@ep4`, `moe@ep8z1` with skew 1): its work depends on EP
    and the routing spread as well as TP."""
    skew = f"z{dep.moe_skew:g}" if dep.moe_skew else ""
    return f"moe@ep{dep.ep}{skew}"


def linear_ops(dep: Deployment) -> list[LinearOp]:
    m, t = dep.model, dep.tp
    hd = m.head_dim
    if m.is_mla:
        h = dep.heads_per_gpu
        attn = [  # vLLM's MLA: q_a and kv_a fused and replicated; q_b, kv_b column-, o row-parallel
            LinearOp("qkv_a_proj", m.hidden, m.q_lora_rank + m.kv_lora_rank + m.qk_rope_head_dim),
            LinearOp("q_b_proj", m.q_lora_rank or m.hidden, h * (m.qk_nope_head_dim + m.qk_rope_head_dim)),
            # decode runs it weight-absorbed (q·W_UK, then ·W_UV after attention): the same FLOPs per token
            LinearOp("kv_b_proj", m.kv_lora_rank, h * (m.qk_nope_head_dim + m.v_head_dim)),
            LinearOp("o_proj", h * m.v_head_dim, m.hidden),
        ]
    else:
        attn = [
            LinearOp("qkv_proj", m.hidden, (dep.heads_per_gpu + 2 * dep.kv_heads_per_gpu) * hd),
            LinearOp("o_proj", dep.heads_per_gpu * hd, m.hidden),
        ]
    if not m.is_moe:
        return attn + [
            LinearOp("up_proj", m.hidden, m.ffn_in_width // t),  # gate and up fused for SwiGLU
            LinearOp("down_proj", m.ffn // t, m.hidden),
        ]
    dense, sparse = m.dense_layers / m.num_layers, m.moe_layers / m.num_layers
    ops = list(attn)
    if m.dense_layers:
        ops += [
            LinearOp("up_proj", m.hidden, m.ffn_in_width // t, dense),
            LinearOp("down_proj", m.ffn // t, m.hidden, dense),
        ]
    ops.append(LinearOp("router", m.hidden, m.num_experts, sparse))  # replicated on every GPU
    if m.shared_expert_ffn:
        ops += [
            LinearOp("shared_up", m.hidden, 2 * m.shared_expert_ffn // t, sparse),
            LinearOp("shared_down", m.shared_expert_ffn // t, m.hidden, sparse),
        ]
    return ops


def expert_ops(dep: Deployment) -> list[ExpertOp]:
    """The routed experts of one GPU (none for a dense model): gate+up fused, then down."""
    m = dep.model
    if not m.is_moe:
        return []
    width = m.expert_ffn // dep.expert_tp
    share = m.moe_layers / m.num_layers
    return [
        ExpertOp("moe_up", m.hidden, 2 * width, dep.local_experts, share),
        ExpertOp("moe_down", width, m.hidden, dep.local_experts, share),
    ]


def timed_linear_ops(dep: Deployment) -> list[tuple[str, float]]:
    """(profile op name, share of layers) of every GEMM a layer of `dep` runs: what the predictor sums."""
    out = [(op.name, op.share) for op in linear_ops(dep)]
    if dep.model.is_moe:  # the routed experts: one fused op (gate+up, activation, down) on the MoE layers
        out.append((fused_expert_name(dep), dep.model.moe_layers / dep.model.num_layers))
    return out


def expert_popularity(num_experts: int, top_k: int, skew: float) -> np.ndarray:
    """Each expert's chance of being among one token's top-k, most popular first (they sum to k).

    skew 0: balanced, k/E each (what load-balanced training aims for). skew s > 0: Zipf(s) popularity, p_i ∝
    1/(i+1)^s scaled to sum to k and capped at 1 (an expert is picked at most once per token); the cap's
    excess goes to the rest in proportion.
    """
    if skew <= 0:
        return np.full(num_experts, top_k / num_experts)
    w = 1.0 / np.arange(1, num_experts + 1, dtype=float) ** skew
    p = top_k * w / w.sum()
    for _ in range(num_experts):  # water-filling of the capped mass: at most E rounds, usually one or two
        over = p > 1.0
        if not over.any():
            break
        excess = float((p[over] - 1.0).sum())
        p[over] = 1.0
        free = p < 1.0
        p[free] += excess * p[free] / p[free].sum()
    return p


def expert_load(dep: Deployment, num_tokens) -> tuple[np.ndarray, np.ndarray]:
    """(distinct experts touched, token rows routed) on the busiest GPU, for batches of `num_tokens` tokens.

    Every GPU of the TP group sees the batch's T tokens. A token picks expert i with probability q_i
    (`expert_popularity`), independently across tokens, so the GPU holding experts S computes rows = T·Σ_S q_i
    and touches Σ_S (1 - (1 - q_i)^T) distinct experts. With skewed routing the busiest GPU is taken to hold
    the most popular experts (EP places experts by index, and nothing balances popularity): an upper bound on
    the slowest rank, which sets the layer's time.
    """
    m = dep.model
    t = np.asarray(num_tokens, dtype=float)
    q = expert_popularity(m.num_experts, m.experts_per_token, dep.moe_skew)[: dep.local_experts]
    rows = t * q.sum()
    touched = (
        np.sum(1.0 - np.power.outer(1.0 - q, t).T, axis=-1) if t.ndim else float(np.sum(1.0 - (1.0 - q) ** t))
    )
    return np.asarray(touched, dtype=float), rows


def elementwise_ops(dep: Deployment) -> list[ElementwiseOp]:
    m, b = dep.model, dep.model.dtype_bytes
    hd = m.head_dim
    norm_bytes = 2 * m.hidden * b  # read x, write normed x (the weight vector is negligible)
    rotary_bytes = 2 * (dep.heads_per_gpu + dep.kv_heads_per_gpu) * hd * b  # q and k, read and written
    ffn = m.ffn // dep.tp
    act_bytes = (3 * ffn if m.activation == "swiglu" else 2 * ffn) * b  # SiLU(gate)·up reads two, writes one
    # averaged over the layers: dense FFN where there is one, else the shared experts' (the routed
    if m.is_moe:
        # experts' activation is part of their fused op, `fused_expert_name`)
        moe = 3 * m.shared_expert_ffn // dep.tp * b
        act_bytes = round((m.dense_layers * act_bytes + m.moe_layers * moe) / m.num_layers)
    if m.is_mla:  # rope on the per-head rope part of q and on the one shared rope key
        rotary_bytes = 2 * (dep.heads_per_gpu + 1) * m.qk_rope_head_dim * b
    return [
        ElementwiseOp("attn_norm", norm_bytes, 1),
        ElementwiseOp("mlp_norm", norm_bytes, 1),
        ElementwiseOp("rotary", rotary_bytes, 1),
        ElementwiseOp("act", act_bytes, 1 if act_bytes else 0),  # 0: every FFN is a fused routed-expert op
        ElementwiseOp("residual_add", 3 * m.hidden * b, 2),
    ]


def attention_shape(dep: Deployment) -> AttentionShape:
    m = dep.model
    if m.is_mla:  # one latent "KV head" shared by every query head; head_dim is the cached width per token
        return AttentionShape(
            dep.heads_per_gpu,
            1,
            m.kv_lora_rank + m.qk_rope_head_dim,
            m.kv_lora_rank,
            m.qk_rope_head_dim,
            m.qk_nope_head_dim + m.qk_rope_head_dim,
            m.v_head_dim,
        )
    return AttentionShape(dep.heads_per_gpu, dep.kv_heads_per_gpu, m.head_dim)


def all_reduces_per_layer(dep: Deployment) -> int:
    """Row-parallel outputs are summed across TP ranks: after attention and after the MLP.

    Falcon runs attention and MLP in parallel on the same input and reduces their sum once.
    """
    if dep.tp == 1:
        return 0
    return 1 if dep.model.parallel_attn_mlp else 2


def all_reduce_bytes(dep: Deployment, num_tokens: int) -> int:
    return num_tokens * dep.model.hidden * dep.model.dtype_bytes


def expert_tokens(dep: Deployment, num_tokens):
    """Tokens the routed experts of one GPU see for a rank's batch of `num_tokens`: the rank's own, or under
    attention DP those of all dp ranks (each taken to carry as many as this one: the ranks run their MoE
    layers in lockstep, and a rank's step waits for the slowest)."""
    return dep.dp * num_tokens


def exchange_bytes(dep: Deployment, num_tokens: int) -> float:
    """Attention DP: the all-reduce size that times ONE of a MoE layer's two collectives (dispatch, combine).

    vLLM's default all2all backend (allgather_reducescatter) all-gathers the hidden states of the dp ranks'
    tokens (S = dp·T·hidden bf16 bytes in all) before the experts and reduce-scatters their outputs after. A
    ring all-gather or reduce-scatter of S moves (dp−1)/dp·S bytes per GPU, as a ring all-reduce of S/2 does,
    with one collective's launch: the timer charges two all-reduces of S/2 per MoE layer."""
    return dep.dp * num_tokens * dep.model.hidden * dep.model.dtype_bytes / 2


def a2a_op(dep: Deployment) -> str | None:
    """The collectives.csv op of a measured DeepEP dispatch + combine (`a2a_deepep_low_latency`), None for the
    default backend (timed from the all-reduce rows) or without attention DP."""
    return f"a2a_{dep.all2all}" if dep.dp > 1 and dep.all2all != ALL2ALL_BACKENDS[0] else None


def a2a_bytes(dep: Deployment, num_tokens: int) -> int:
    """The size key of DeepEP rows: one rank's tokens' hidden states (bf16), what each rank dispatches."""
    return num_tokens * dep.model.hidden * dep.model.dtype_bytes


def send_recv_bytes(dep: Deployment, num_tokens: int) -> int:
    """Activations one pipeline stage hands the next."""
    return num_tokens * dep.model.hidden * dep.model.dtype_bytes
