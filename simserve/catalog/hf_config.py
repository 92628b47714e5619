"""A model spec from a Hugging Face `config.json` on disk (offline): `--model path/to/config.json`.

Only the architecture fields that cost time or memory are read, and a block-quantized fp8 checkpoint's
`quantization_config.weight_block_size`, which the engine checks the TP shards against (simserve/vllm_loader.py). The architectures are those simserve's execution
model covers: dense decoders with grouped-query attention (Llama, Mistral, Qwen2, Qwen3), top-k routed mixtures
of experts (Mixtral, Qwen3-MoE) and DeepSeek-V3's shared + routed experts with multi-head latent attention.
Anything else is refused by name rather than guessed at.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from simserve.errors import SimserveError

DENSE = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM")
MOE = ("MixtralForCausalLM", "Qwen3MoeForCausalLM")
MLA_MOE = ("DeepseekV3ForCausalLM",)
SUPPORTED = DENSE + MOE + MLA_MOE


def is_config_path(name: str) -> bool:
    """Whether `--model` names a file rather than a catalog entry: a .json path, or a folder with config.json."""
    p = Path(name).expanduser()
    return name.endswith(".json") or (p.is_dir() and (p / "config.json").is_file())


def load_hf_config(path: str | Path):
    """The ModelSpec of a config.json (or of the folder holding one); SimserveError naming what is wrong."""
    p = Path(path).expanduser()
    if p.is_dir():
        p = p / "config.json"
    if not p.is_file():
        raise SimserveError(f"model config {p} does not exist; pass a catalog name or the path of a config.json")
    p = p.resolve()
    return _load(str(p), p.stat().st_mtime_ns)


@lru_cache(maxsize=32)
def _load(path: str, _mtime: int):
    try:
        cfg = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise SimserveError(f"model config {path} is not readable JSON ({exc}); pass a Hugging Face config.json") from None
    if not isinstance(cfg, dict):
        raise SimserveError(f"model config {path} must hold a JSON object (a Hugging Face config.json)")
    # Not added to the catalog: a scenario keeps the path, which resolves the same in any worker process, and a
    # config whose folder shares a catalog name must not replace that entry.
    return spec_from_config(cfg, path)


def _name(cfg: dict[str, Any], path: str) -> str:
    folder = Path(path).parent.name
    return folder or Path(path).stem


def spec_from_config(cfg: dict[str, Any], where: str):
    """Map the config's fields onto a ModelSpec (see the module docstring for what is read)."""
    from simserve.catalog.models import ModelSpec

    archs = cfg.get("architectures") or []
    arch = archs[0] if isinstance(archs, list) and archs else None
    if arch not in SUPPORTED:
        raise SimserveError(
            f"model config {where}: architectures {archs!r} is not modelled; supported: {', '.join(SUPPORTED)}"
        )

    def need(key: str) -> Any:
        if cfg.get(key) is None:
            raise SimserveError(f"model config {where}: missing field {key!r}, which {arch} needs")
        return cfg[key]

    act = cfg.get("hidden_act", "silu")
    if act != "silu":
        raise SimserveError(f"model config {where}: hidden_act {act!r} is not modelled for {arch}; supported: silu")
    heads = int(need("num_attention_heads"))
    fields: dict[str, Any] = dict(
        name=_name(cfg, where),
        hf_id=str(cfg.get("_name_or_path") or _name(cfg, where)),
        num_layers=int(need("num_hidden_layers")),
        hidden=int(need("hidden_size")),
        num_heads=heads,
        # Hugging Face's own default when absent: one KV head per query head (multi-head attention).
        num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
        vocab=int(need("vocab_size")),
        max_position=int(need("max_position_embeddings")),
        tied_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        source=where,
    )
    if cfg.get("head_dim") and arch not in MLA_MOE and int(cfg["head_dim"]) * heads != fields["hidden"]:
        fields["head_size"] = int(cfg["head_dim"])  # only where it differs from hidden / heads (Qwen3)
    window = cfg.get("sliding_window")
    if arch.startswith("Qwen") and not cfg.get("use_sliding_window", False):
        window = None  # Qwen configs carry a window value they do not use unless use_sliding_window is set
    fields["sliding_window"] = int(window) if window else None

    if arch in DENSE:
        fields["ffn"] = int(need("intermediate_size"))
    elif arch == "MixtralForCausalLM":
        fields.update(ffn=0, num_experts=int(need("num_local_experts")),
                      experts_per_token=int(need("num_experts_per_tok")), expert_ffn=int(need("intermediate_size")))  # fmt: skip
    elif arch == "Qwen3MoeForCausalLM":
        if int(cfg.get("decoder_sparse_step", 1)) != 1 or cfg.get("mlp_only_layers"):
            raise SimserveError(
                f"model config {where}: decoder_sparse_step {cfg.get('decoder_sparse_step')} / mlp_only_layers "
                f"{cfg.get('mlp_only_layers')} (dense layers between MoE layers) are not modelled; supported: every "
                f"layer MoE (decoder_sparse_step 1, mlp_only_layers [])"
            )
        fields.update(ffn=0, num_experts=int(need("num_experts")),
                      experts_per_token=int(need("num_experts_per_tok")), expert_ffn=int(need("moe_intermediate_size")))  # fmt: skip
    else:  # DeepSeek-V3
        if int(cfg.get("moe_layer_freq", 1)) != 1:
            raise SimserveError(
                f"model config {where}: moe_layer_freq {cfg['moe_layer_freq']} is not modelled; supported: 1"
            )
        expert_ffn = int(need("moe_intermediate_size"))
        fields.update(
            ffn=int(need("intermediate_size")),
            num_experts=int(need("n_routed_experts")),
            experts_per_token=int(need("num_experts_per_tok")),
            expert_ffn=expert_ffn,
            shared_expert_ffn=int(cfg.get("n_shared_experts") or 0) * expert_ffn,
            first_dense_layers=int(cfg.get("first_k_dense_replace") or 0),
            q_lora_rank=int(cfg.get("q_lora_rank") or 0),
            kv_lora_rank=int(need("kv_lora_rank")),
            qk_nope_head_dim=int(need("qk_nope_head_dim")),
            qk_rope_head_dim=int(need("qk_rope_head_dim")),
            v_head_dim=int(need("v_head_dim")),
        )
    quant = cfg.get("quantization_config")
    if isinstance(quant, dict) and quant.get("quant_method") == "fp8" and quant.get("weight_block_size"):
        block = quant["weight_block_size"]
        if not (isinstance(block, list) and len(block) == 2 and all(isinstance(b, int) and b > 0 for b in block)):
            raise SimserveError(f"model config {where}: quantization_config.weight_block_size {block!r} is not two "
                                f"positive integers [block_n, block_k]")  # fmt: skip
        fields["fp8_weight_block"] = (block[0], block[1])
    try:
        return ModelSpec(**fields)
    except ValueError as exc:
        raise SimserveError(f"model config {where}: {exc}") from None
