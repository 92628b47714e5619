"""Vidur's names: its op columns, statistics, file names, and its labels for the catalog's GPUs and boxes."""

from __future__ import annotations

from simserve.catalog import GPUSpec, NodeSpec

# Vidur's op name -> simserve's, for the nine per-layer ops of mlp.csv (Vidur's `emb` has no simserve op).
OP_MAP = {
    "attn_pre_proj": "qkv_proj",
    "attn_post_proj": "o_proj",
    "mlp_up_proj": "up_proj",
    "mlp_down_proj": "down_proj",
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "mlp_norm",
    "attn_rope": "rotary",
    "mlp_act": "act",
    "add": "residual_add",
}
MLP_OPS = (
    "emb",
    "input_layernorm",
    "attn_pre_proj",
    "attn_rope",
    "attn_post_proj",
    "post_attention_layernorm",
    "mlp_up_proj",
    "mlp_act",
    "mlp_down_proj",
    "add",
)  # Vidur's column order
STATS = ("min", "max", "mean", "median", "std")
EXTRA_STATS = {s: f"time_{s}_ms" for s in STATS if s != "median"}
FILES = ("mlp.csv", "attention.csv", "all_reduce.csv", "send_recv.csv")
UNKNOWN_NETWORK = "unknown-network"
EXPORT_MARKER = "simserve-export.json"
# Vidur's names for the catalog's GPUs and boxes (vidur/types DeviceSKUType, NodeSKUType).
VIDUR_DEVICE = {"A100-80GB": "a100", "A40-48GB": "a40", "H100-SXM": "h100", "H200": "h200"}
VIDUR_NODE = {
    "a100-pairwise-nvlink": "a100_pairwise_nvlink",
    "a40-pairwise-nvlink": "a40_pairwise_nvlink",
    "dgx-a100": "a100_dgx",
    "dgx-h100": "h100_dgx",
    "hgx-h200": "h200_dgx",
}
# Vidur filters mlp.csv rows by vocab_size and pads the Llama-2 family's to 32768
# (vidur/config/model_config.py, Llama2ModelConfig); other models use their published vocabulary.
VIDUR_VOCAB = {
    "meta-llama/Llama-2-7b-hf": 32768,
    "meta-llama/Llama-2-70b-hf": 32768,
    "codellama/CodeLlama-34b-Instruct-hf": 32768,
}


def vidur_device(gpu: GPUSpec) -> str:
    return VIDUR_DEVICE.get(gpu.name, gpu.name.lower().split("-")[0])


def vidur_node(node: NodeSpec) -> str:
    return VIDUR_NODE.get(node.name, node.name.replace("-", "_"))


def stat_column(op: str, stat: str = "median") -> str:
    return f"time_stats.{op}.{stat}"
