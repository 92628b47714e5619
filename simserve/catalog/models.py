"""Model architectures, copied by hand from each model's published config (source URL in every entry)."""

from __future__ import annotations

from dataclasses import dataclass

from simserve.catalog.table import Table


@dataclass(frozen=True)
class ModelSpec:
    name: str
    hf_id: str
    num_layers: int
    hidden: int
    num_heads: int
    num_kv_heads: int
    ffn: int  # dense FFN width (a MoE model's leading dense layers; 0 when every layer is MoE)
    vocab: int
    max_position: int  # the context the model accepts (config max_position_embeddings)
    source: str
    activation: str = "swiglu"  # "swiglu": gate and up projections fused; "gelu": up only
    norm: str = "rmsnorm"  # "rmsnorm" or "layernorm"
    parallel_attn_mlp: bool = False  # Falcon: attention and MLP read the same normed input
    sliding_window: int | None = None
    aliases: tuple[str, ...] = ()
    dtype_bytes: int = 2  # activations (and the checkpoint's weights); Deployment.dtype picks served weights
    head_size: int | None = None  # config head_dim when it is not hidden / num_heads (Qwen3: 128 vs 80)
    tied_embeddings: bool = False  # LM head shares the input embedding (one vocab × hidden matrix)
    # Mixture of experts: 0 experts is a dense model. Every layer after `first_dense_layers` is a MoE layer.
    num_experts: int = 0  # routed experts per MoE layer
    experts_per_token: int = 0  # top-k
    expert_ffn: int = 0  # one routed expert's intermediate width (SwiGLU)
    shared_expert_ffn: int = 0  # summed intermediate width of the always-on shared experts (DeepSeek)
    first_dense_layers: int = 0  # leading layers with a dense FFN of width `ffn` (DeepSeek-V3: 3)
    # Multi-head latent attention (DeepSeek-V2/V3); kv_lora_rank 0 means ordinary (grouped-query) attention.
    q_lora_rank: int = 0  # 0: q projected straight from the hidden state
    kv_lora_rank: int = 0  # the compressed KV the cache holds per token per layer, beside the rope key
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # A block-quantized fp8 checkpoint's [block_n, block_k] (config.json
    # quantization_config.weight_block_size): vLLM checks its TP shards against it at load time
    # (simserve/vllm_loader.py). None: bf16, or per-tensor fp8.
    fp8_weight_block: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        # NOTE: a catalog file's zero or fractional head count failed as a ZeroDivisionError traceback below
        for name in ("num_layers", "hidden", "num_heads", "num_kv_heads", "vocab", "max_position"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive whole number, got {value!r}")
        for name in (
            "ffn",
            "num_experts",
            "experts_per_token",
            "expert_ffn",
            "shared_expert_ffn",
            "first_dense_layers",
            "q_lora_rank",
            "kv_lora_rank",
            "qk_nope_head_dim",
            "qk_rope_head_dim",
            "v_head_dim",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a whole number >= 0, got {value!r}")
        if self.head_size is not None and (
            isinstance(self.head_size, bool) or not isinstance(self.head_size, int) or self.head_size < 1
        ):
            raise ValueError(f"head_size must be a positive whole number, got {self.head_size!r}")
        if self.activation not in ("swiglu", "gelu"):
            raise ValueError(f"activation must be 'swiglu' or 'gelu', got {self.activation!r}")
        if self.norm not in ("rmsnorm", "layernorm"):
            raise ValueError(f"norm must be 'rmsnorm' or 'layernorm', got {self.norm!r}")
        if self.head_size is None and not self.is_mla and self.hidden % self.num_heads:
            raise ValueError(f"hidden {self.hidden} is not a multiple of num_heads {self.num_heads}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads {self.num_heads} is not a multiple of num_kv_heads {self.num_kv_heads}"
            )
        if self.num_experts:
            if not 0 < self.experts_per_token <= self.num_experts or self.expert_ffn < 1:
                raise ValueError(
                    f"a MoE model needs 0 < experts_per_token <= num_experts and expert_ffn > 0 (got "
                    f"{self.experts_per_token} of {self.num_experts}, expert_ffn {self.expert_ffn})"
                )
            if self.activation != "swiglu":
                raise ValueError("MoE experts are modelled as SwiGLU MLPs; activation must be 'swiglu'")
            if not 0 <= self.first_dense_layers < self.num_layers:
                raise ValueError(
                    f"first_dense_layers must be in [0, {self.num_layers}), got {self.first_dense_layers}"
                )
        if self.dense_layers and self.ffn < 1:
            raise ValueError(f"{self.dense_layers} dense layers need ffn > 0")
        if self.is_mla and not (self.qk_nope_head_dim and self.qk_rope_head_dim and self.v_head_dim):
            raise ValueError(
                "latent attention (kv_lora_rank > 0) needs qk_nope_head_dim, qk_rope_head_dim, v_head_dim"
            )

    @classmethod
    def from_name(cls, name: str) -> ModelSpec:
        return resolve_model(name)

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def moe_layers(self) -> int:
        return self.num_layers - self.first_dense_layers if self.is_moe else 0

    @property
    def dense_layers(self) -> int:
        return self.num_layers - self.moe_layers

    @property
    def head_dim(self) -> int:
        return self.head_size or self.hidden // self.num_heads

    @property
    def ffn_in_width(self) -> int:
        """Output width of the up projection: gate and up fused for SwiGLU."""
        return 2 * self.ffn if self.activation == "swiglu" else self.ffn

    @property
    def attention_params(self) -> int:
        if self.is_mla:
            h, qk = self.num_heads, self.qk_nope_head_dim + self.qk_rope_head_dim
            q = (
                (self.hidden * self.q_lora_rank + self.q_lora_rank * h * qk)
                if self.q_lora_rank
                else self.hidden * h * qk
            )
            kv = self.hidden * (self.kv_lora_rank + self.qk_rope_head_dim)
            kv += self.kv_lora_rank * h * (self.qk_nope_head_dim + self.v_head_dim)
            # + latent norms
            return q + kv + h * self.v_head_dim * self.hidden + self.q_lora_rank + self.kv_lora_rank
        qkv = self.hidden * (self.num_heads + 2 * self.num_kv_heads) * self.head_dim
        return qkv + self.num_heads * self.head_dim * self.hidden

    @property
    def dense_mlp_params(self) -> int:
        return self.hidden * self.ffn_in_width + self.ffn * self.hidden

    @property
    def expert_params(self) -> int:
        """All routed experts of one MoE layer (SwiGLU: gate, up and down)."""
        return self.num_experts * 3 * self.hidden * self.expert_ffn

    @property
    def moe_shared_params(self) -> int:
        """What every GPU's share of a MoE layer holds besides the routed experts: router and shared
        experts."""
        return self.hidden * self.num_experts + 3 * self.hidden * self.shared_expert_ffn

    @property
    def norm_params(self) -> int:
        return (2 if self.norm == "rmsnorm" else 4) * self.hidden

    @property
    def layer_params(self) -> int:
        """Parameters of one layer, averaged over the layers for a MoE model with leading dense layers."""
        return round(self.layers_params / self.num_layers)

    @property
    def layers_params(self) -> int:
        per_layer = self.attention_params + self.norm_params
        moe = self.moe_shared_params + self.expert_params
        return self.num_layers * per_layer + self.dense_layers * self.dense_mlp_params + self.moe_layers * moe

    @property
    def embedding_params(self) -> int:
        """Input embedding plus the LM head (one matrix when they are tied)."""
        return (1 if self.tied_embeddings else 2) * self.vocab * self.hidden

    @property
    def num_params(self) -> int:
        return self.layers_params + self.embedding_params

    @property
    def active_params(self) -> int:
        """Parameters one token passes through: the routed experts count top-k of num_experts."""
        if not self.is_moe:
            return self.num_params
        inactive = self.moe_layers * self.expert_params * (1 - self.experts_per_token / self.num_experts)
        return round(self.num_params - inactive)


def resolve_model(name_or_path: str | ModelSpec) -> ModelSpec:
    """A catalog name or alias, or the path of a Hugging Face config.json (or of the folder holding one)."""
    if isinstance(name_or_path, ModelSpec):
        return name_or_path
    from simserve.catalog.hf_config import is_config_path, load_hf_config

    if isinstance(name_or_path, str) and name_or_path not in MODELS and is_config_path(name_or_path):
        return load_hf_config(name_or_path)
    return MODELS.get(name_or_path)


MODELS: Table[ModelSpec] = Table(
    "model",
    [
        ModelSpec(
            name="Mistral-7B",
            hf_id="mistralai/Mistral-7B-v0.1",
            num_layers=32,
            hidden=4096,
            num_heads=32,
            num_kv_heads=8,
            ffn=14336,
            vocab=32000,
            max_position=32768,
            sliding_window=4096,
            aliases=(
                "mistral-7b",
                "mistral",
                "mistral-7b-v0.1",
                "mistralai/Mistral-7B-v0.1",
                "mistral-7b-instruct-v0.2",
                "mistralai/Mistral-7B-Instruct-v0.2",
            ),
            source="https://huggingface.co/mistralai/Mistral-7B-v0.1/blob/main/config.json",
        ),
        ModelSpec(
            name="Yi-34B",
            hf_id="01-ai/Yi-34B",
            num_layers=60,
            hidden=7168,
            num_heads=56,
            num_kv_heads=8,
            ffn=20480,
            vocab=64000,
            max_position=4096,
            aliases=("yi-34b", "yi", "01-ai/Yi-34B"),
            source="https://huggingface.co/01-ai/Yi-34B/blob/main/config.json",
        ),
        ModelSpec(
            name="LLaMA2-70B",
            hf_id="meta-llama/Llama-2-70b-hf",
            num_layers=80,
            hidden=8192,
            num_heads=64,
            num_kv_heads=8,
            ffn=28672,
            vocab=32000,
            max_position=4096,
            aliases=("llama2-70b", "llama-2-70b", "llama-2-70b-hf", "meta-llama/Llama-2-70b-hf"),
            source="https://huggingface.co/meta-llama/Llama-2-70b-hf/blob/main/config.json",
        ),
        ModelSpec(
            name="Falcon-180B",
            hf_id="tiiuae/falcon-180B",
            num_layers=80,
            hidden=14848,
            num_heads=232,
            num_kv_heads=8,
            ffn=59392,
            vocab=65024,
            max_position=2048,
            activation="gelu",
            norm="layernorm",
            parallel_attn_mlp=True,
            aliases=("falcon-180b", "falcon", "tiiuae/falcon-180B"),
            source="https://huggingface.co/tiiuae/falcon-180B/blob/main/config.json",
        ),
        ModelSpec(
            name="Llama-2-7B",
            hf_id="meta-llama/Llama-2-7b-hf",
            num_layers=32,
            hidden=4096,
            num_heads=32,
            num_kv_heads=32,
            ffn=11008,
            vocab=32000,
            max_position=4096,
            aliases=("llama-2-7b", "llama2-7b", "llama-2-7b-hf", "meta-llama/Llama-2-7b-hf"),
            source="https://huggingface.co/meta-llama/Llama-2-7b-hf/blob/main/config.json",
        ),
        ModelSpec(
            name="Llama-3-8B",
            hf_id="meta-llama/Meta-Llama-3-8B",
            num_layers=32,
            hidden=4096,
            num_heads=32,
            num_kv_heads=8,
            ffn=14336,
            vocab=128256,
            max_position=8192,
            aliases=("llama-3-8b", "llama3-8b", "meta-llama-3-8b", "meta-llama/Meta-Llama-3-8B"),
            source="https://huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json",
        ),
        ModelSpec(
            name="CodeLlama-34B",
            hf_id="codellama/CodeLlama-34b-Instruct-hf",
            num_layers=48,
            hidden=8192,
            num_heads=64,
            num_kv_heads=8,
            ffn=22016,
            vocab=32000,
            max_position=16384,
            aliases=(
                "codellama-34b",
                "codellama",
                "codellama-34b-instruct-hf",
                "codellama/CodeLlama-34b-Instruct-hf",
                "codellama/CodeLlama-34b-hf",
            ),
            source="https://huggingface.co/codellama/CodeLlama-34b-Instruct-hf/blob/main/config.json",
        ),
        ModelSpec(
            name="Llama-3-70B",
            hf_id="meta-llama/Meta-Llama-3-70B",
            num_layers=80,
            hidden=8192,
            num_heads=64,
            num_kv_heads=8,
            ffn=28672,
            vocab=128256,
            max_position=8192,
            aliases=("llama-3-70b", "llama3-70b", "meta-llama-3-70b", "meta-llama/Meta-Llama-3-70B"),
            source="https://huggingface.co/meta-llama/Meta-Llama-3-70B/blob/main/config.json",
        ),
        # Today's models. Numbers from each model's config.json on the Hugging Face hub,
        # cross-checked by tests/test_hf_config.py against fixtures that copy those configs' architecture
        # fields.
        ModelSpec(
            name="Llama-3.1-8B",
            hf_id="meta-llama/Llama-3.1-8B",
            num_layers=32,
            hidden=4096,
            num_heads=32,
            num_kv_heads=8,
            ffn=14336,
            vocab=128256,
            max_position=131072,
            aliases=(
                "llama-3.1-8b",
                "llama3.1-8b",
                "meta-llama/Llama-3.1-8B",
                "meta-llama/Llama-3.1-8B-Instruct",
                "meta-llama/Meta-Llama-3.1-8B",
                "llama-3.1-8b-instruct",
            ),
            source="https://huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json",
        ),
        ModelSpec(
            name="Llama-3.1-70B",
            hf_id="meta-llama/Llama-3.1-70B",
            num_layers=80,
            hidden=8192,
            num_heads=64,
            num_kv_heads=8,
            ffn=28672,
            vocab=128256,
            max_position=131072,
            aliases=(
                "llama-3.1-70b",
                "llama3.1-70b",
                "meta-llama/Llama-3.1-70B",
                "meta-llama/Llama-3.1-70B-Instruct",
                "llama-3.1-70b-instruct",
                "llama-3.3-70b",
                "meta-llama/Llama-3.3-70B-Instruct",
            ),
            source="https://huggingface.co/meta-llama/Llama-3.1-70B/blob/main/config.json "
            "(Llama-3.3-70B-Instruct has the same architecture)",
        ),
        ModelSpec(
            name="Llama-3.1-405B",
            hf_id="meta-llama/Llama-3.1-405B",
            num_layers=126,
            hidden=16384,
            num_heads=128,
            num_kv_heads=8,
            ffn=53248,
            vocab=128256,
            max_position=131072,
            aliases=(
                "llama-3.1-405b",
                "llama3.1-405b",
                "meta-llama/Llama-3.1-405B",
                "meta-llama/Llama-3.1-405B-Instruct",
            ),
            source="https://huggingface.co/meta-llama/Llama-3.1-405B/blob/main/config.json",
        ),
        ModelSpec(
            name="Qwen3-32B",
            hf_id="Qwen/Qwen3-32B",
            num_layers=64,
            hidden=5120,
            num_heads=64,
            num_kv_heads=8,
            ffn=25600,
            vocab=151936,
            max_position=40960,
            head_size=128,
            aliases=("qwen3-32b", "Qwen/Qwen3-32B"),
            source="https://huggingface.co/Qwen/Qwen3-32B/blob/main/config.json",
        ),
        ModelSpec(
            name="Qwen3-235B-A22B",
            hf_id="Qwen/Qwen3-235B-A22B",
            num_layers=94,
            hidden=4096,
            num_heads=64,
            num_kv_heads=4,
            ffn=0,
            vocab=151936,
            max_position=40960,
            head_size=128,
            num_experts=128,
            experts_per_token=8,
            expert_ffn=1536,
            aliases=("qwen3-235b-a22b", "qwen3-235b", "Qwen/Qwen3-235B-A22B"),
            source="https://huggingface.co/Qwen/Qwen3-235B-A22B/blob/main/config.json (decoder_sparse_step "
            "1, mlp_only_layers []: every layer is MoE; its intermediate_size 12288 is unused)",
        ),
        ModelSpec(
            name="Mixtral-8x7B",
            hf_id="mistralai/Mixtral-8x7B-v0.1",
            num_layers=32,
            hidden=4096,
            num_heads=32,
            num_kv_heads=8,
            ffn=0,
            vocab=32000,
            max_position=32768,
            num_experts=8,
            experts_per_token=2,
            expert_ffn=14336,
            aliases=(
                "mixtral-8x7b",
                "mixtral",
                "mistralai/Mixtral-8x7B-v0.1",
                "mistralai/Mixtral-8x7B-Instruct-v0.1",
            ),
            source="https://huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json "
            "(intermediate_size 14336 is each expert's width; sliding_window null)",
        ),
        ModelSpec(
            name="DeepSeek-V3",
            hf_id="deepseek-ai/DeepSeek-V3",
            num_layers=61,
            hidden=7168,
            num_heads=128,
            num_kv_heads=128,
            ffn=18432,
            vocab=129280,
            max_position=163840,
            num_experts=256,
            experts_per_token=8,
            expert_ffn=2048,
            shared_expert_ffn=2048,
            first_dense_layers=3,
            q_lora_rank=1536,
            kv_lora_rank=512,
            qk_nope_head_dim=128,
            qk_rope_head_dim=64,
            v_head_dim=128,
            fp8_weight_block=(128, 128),  # the published checkpoint is fp8 in 128 x 128 blocks
            aliases=(
                "deepseek-v3",
                "deepseek-r1",
                "deepseek-ai/DeepSeek-V3",
                "deepseek-ai/DeepSeek-R1",
                "deepseek-v3-0324",
                "deepseek-ai/DeepSeek-V3-0324",
            ),
            source="https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json (n_shared_experts "
            "1 × moe_intermediate_size 2048; first_k_dense_replace 3; the multi-token-prediction layer "
            "(num_nextn_predict_layers 1) is not served and not counted; quantization_config: fp8, "
            "weight_block_size [128, 128])",
        ),
    ],
)
