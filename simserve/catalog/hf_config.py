"""A model spec from a Hugging Face `config.json` on disk (offline): `--model path/to/config.json`.

Only the architecture fields that cost time or memory are read, and a block-quantized fp8 checkpoint's
`quantization_config.weight_block_size`, which the engine checks the TP shards against
(simserve/vllm_loader.py). The architectures are those simserve's execution model covers: dense decoders with
grouped-query attention (Llama, Mistral, Qwen2, Qwen3), top-k routed mixtures of experts (Mixtral, Qwen3-MoE)
and DeepSeek-V3's shared + routed experts with multi-head latent attention. Anything else is refused by name
rather than guessed at.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from simserve.errors import SimserveError

DENSE = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM")
MOE = ("MixtralForCausalLM", "Qwen3MoeForCausalLM")
MLA_MOE = ("DeepseekV3ForCausalLM",)
SUPPORTED = DENSE + MOE + MLA_MOE


def is_config_path(name: str) -> bool:
    """Whether `--model` names a file rather than a catalog entry: a .json path, or a file or folder that
    exists (a folder without config.json is then refused as such, not as an unknown catalog name)."""
    return name.endswith(".json") or Path(name).expanduser().exists()


def load_hf_config(path: str | Path):
    """The ModelSpec of a config.json (or of the folder holding one); SimserveError naming what is wrong."""
    p = Path(path).expanduser()
    if p.is_dir():
        if not (p / "config.json").exists():
            raise SimserveError(
                f"{p} is a folder with no config.json in it; pass the folder of a Hugging Face model (the "
                "one holding its config.json), the path of a config.json, or a catalog name (simserve list "
                "models)"
            )
        p = p / "config.json"
    if not p.is_file():
        raise SimserveError(
            f"model config {p} does not exist; pass a catalog name or the path of a config.json"
        )
    p = p.resolve()
    return _load(str(p), p.stat().st_mtime_ns)


@lru_cache(maxsize=32)
def _load(path: str, _mtime: int):
    try:
        cfg = json.loads(Path(path).read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise SimserveError(
            f"model config {path} is not UTF-8 text (byte {exc.start}: {exc.reason}); pass a Hugging Face "
            "config.json"
        ) from None
    except (OSError, ValueError, RecursionError) as exc:  # ValueError: json.JSONDecodeError and its kin
        raise SimserveError(
            f"model config {path} is not readable JSON ({exc}); pass a Hugging Face config.json"
        ) from None
    if not isinstance(cfg, dict):
        raise SimserveError(f"model config {path} must hold a JSON object (a Hugging Face config.json)")
    # Not added to the catalog: a scenario keeps the path, which resolves the same in any worker process, and
    # a config whose folder shares a catalog name must not replace that entry.
    return spec_from_config(cfg, path)


# A checkpoint folder's precision marker ("Qwen3-235B-A22B-FP8", "...-FP8-Dynamic"): not part of the model's
# name, which profiles extend with the *served* precision ("-fp8"), so keeping it named them "...-FP8-fp8".
_PRECISION_MARK = re.compile(r"[-_.]fp8(?:[-_.](?:dynamic|static|block|e4m3))?\Z", re.IGNORECASE)


def _name(path: str) -> str:
    folder = Path(path).parent.name or Path(path).stem
    return _PRECISION_MARK.sub("", folder) or folder


# Sizes and counts above this are no model's (and would overflow the int32/int64 arithmetic of tables and
# kernels downstream); below 1 they divide by zero or give negative memory.
_MAX = 2**31 - 1
_REQUIRED = object()


class _Fields:
    """Reads a config's integer fields, each checked and named in the one-line error."""

    def __init__(self, cfg: dict[str, Any], where: str, arch: str):
        self.cfg, self.where, self.arch = cfg, where, arch

    def bad(self, what: str) -> SimserveError:
        return SimserveError(f"model config {self.where}: {what}; correct it in the config.json")

    def int(self, key: str, default: Any = _REQUIRED, minimum: int = 1) -> int:
        """A whole number >= minimum (1: a size or count; 0: an optional rank or count); null: the default."""
        value = self.cfg.get(key)
        if value is None:
            if default is _REQUIRED:
                raise SimserveError(
                    f"model config {self.where}: missing field {key!r}, which {self.arch} needs"
                )
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.bad(f"{key} must be a whole number, got {value!r}")
        if value < minimum:
            raise self.bad(
                f"{key} must be {'a positive whole number' if minimum == 1 else '0 or more'}, got {value}"
            )
        if value > _MAX:
            raise self.bad(f"{key} {value} is beyond any model's (at most {_MAX})")
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.cfg.get(key, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.bad(f"{key} must be true or false, got {value!r}")
        return value


def spec_from_config(cfg: dict[str, Any], where: str):
    """Map the config's fields onto a ModelSpec (see the module docstring for what is read).

    Every size and count read is a positive whole number (rank and count fields that may be absent: >= 0), and
    the head counts divide as the architecture needs; anything else is one line naming the field."""
    from simserve.catalog.models import ModelSpec

    archs = cfg.get("architectures") or []
    arch = archs[0] if isinstance(archs, list) and archs else None
    if not isinstance(arch, str) or arch not in SUPPORTED:
        raise SimserveError(
            f"model config {where}: architectures {archs!r} is not modelled; supported: "
            f"{', '.join(SUPPORTED)}"
        )
    f = _Fields(cfg, where, arch)
    act = cfg.get("hidden_act", "silu")
    if act != "silu":
        raise SimserveError(
            f"model config {where}: hidden_act {act!r} is not modelled for {arch}; supported: silu"
        )
    heads = f.int("num_attention_heads")
    # Hugging Face's own default when absent: one KV head per query head (multi-head attention).
    kv_heads = f.int("num_key_value_heads", heads)
    if heads % kv_heads:
        raise f.bad(
            f"num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads} (each KV "
            f"head serves a whole group of query heads)"
        )
    hidden = f.int("hidden_size")
    layers = f.int("num_hidden_layers")
    fields: dict[str, Any] = dict(
        name=_name(where),
        hf_id=str(cfg.get("_name_or_path") or _name(where)),
        num_layers=layers,
        hidden=hidden,
        num_heads=heads,
        num_kv_heads=kv_heads,
        vocab=f.int("vocab_size"),
        max_position=f.int("max_position_embeddings"),
        tied_embeddings=f.flag("tie_word_embeddings", False),
        source=where,
    )
    if arch not in MLA_MOE:
        head_dim = f.int("head_dim", 0)
        if head_dim and head_dim * heads != hidden:
            fields["head_size"] = head_dim  # only where it differs from hidden / heads (Qwen3)
        elif not head_dim and hidden % heads:
            raise f.bad(
                f"hidden_size {hidden} is not a multiple of num_attention_heads {heads} (without head_dim "
                f"each head is hidden_size / num_attention_heads wide)"
            )
    # Qwen configs carry a window value they do not use unless use_sliding_window is set; 0 or null: none
    unused = arch.startswith("Qwen") and not f.flag("use_sliding_window", False)
    fields["sliding_window"] = None if unused else (f.int("sliding_window", 0, minimum=0) or None)

    def experts(count_key: str, width_key: str) -> dict[str, int]:
        n, k = f.int(count_key), f.int("num_experts_per_tok")
        if k > n:
            raise f.bad(
                f"num_experts_per_tok {k} exceeds {count_key} {n} (a token is routed to top-k of the experts)"
            )
        return dict(num_experts=n, experts_per_token=k, expert_ffn=f.int(width_key))

    if arch in DENSE:
        fields["ffn"] = f.int("intermediate_size")
    elif arch == "MixtralForCausalLM":
        fields.update(ffn=0, **experts("num_local_experts", "intermediate_size"))
    elif arch == "Qwen3MoeForCausalLM":
        step, dense = f.int("decoder_sparse_step", 1), cfg.get("mlp_only_layers")
        if step != 1 or dense:
            raise SimserveError(
                f"model config {where}: decoder_sparse_step {cfg.get('decoder_sparse_step')} / "
                f"mlp_only_layers {dense} (dense layers between MoE layers) are not modelled; supported: "
                "every layer MoE (decoder_sparse_step 1, mlp_only_layers [])"
            )
        fields.update(ffn=0, **experts("num_experts", "moe_intermediate_size"))
    else:  # DeepSeek-V3
        if f.int("moe_layer_freq", 1) != 1:
            raise SimserveError(
                f"model config {where}: moe_layer_freq {cfg['moe_layer_freq']} is not modelled; supported: 1"
            )
        moe = experts("n_routed_experts", "moe_intermediate_size")
        first_dense = f.int("first_k_dense_replace", 0, minimum=0)
        if first_dense >= layers:
            raise f.bad(
                f"first_k_dense_replace {first_dense} leaves no MoE layer of num_hidden_layers {layers}"
            )
        fields.update(
            ffn=f.int("intermediate_size"),
            **moe,
            shared_expert_ffn=f.int("n_shared_experts", 0, minimum=0) * moe["expert_ffn"],
            first_dense_layers=first_dense,
            q_lora_rank=f.int("q_lora_rank", 0, minimum=0),
            kv_lora_rank=f.int("kv_lora_rank"),
            qk_nope_head_dim=f.int("qk_nope_head_dim"),
            qk_rope_head_dim=f.int("qk_rope_head_dim"),
            v_head_dim=f.int("v_head_dim"),
        )
    quant = cfg.get("quantization_config")
    if isinstance(quant, dict) and quant.get("quant_method") == "fp8" and quant.get("weight_block_size"):
        block = quant["weight_block_size"]
        if not (
            isinstance(block, list) and len(block) == 2 and all(isinstance(b, int) and b > 0 for b in block)
        ):
            raise SimserveError(
                f"model config {where}: quantization_config.weight_block_size {block!r} is not two "
                f"positive integers [block_n, block_k]"
            )
        fields["fp8_weight_block"] = (block[0], block[1])
    try:
        return ModelSpec(**fields)
    except ValueError as exc:
        raise SimserveError(f"model config {where}: {exc}") from None
