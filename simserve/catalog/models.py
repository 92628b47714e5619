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
    ffn: int
    vocab: int
    max_position: int
    source: str
    activation: str = "swiglu"  # "swiglu": gate and up projections fused; "gelu": up only
    norm: str = "rmsnorm"  # "rmsnorm" or "layernorm"
    parallel_attn_mlp: bool = False  # Falcon: attention and MLP read the same normed input
    sliding_window: int | None = None
    aliases: tuple[str, ...] = ()
    dtype_bytes: int = 2  # fp16/bf16 weights and KV cache, as in the paper

    def __post_init__(self) -> None:
        if self.activation not in ("swiglu", "gelu"):
            raise ValueError(f"activation must be 'swiglu' or 'gelu', got {self.activation!r}")
        if self.norm not in ("rmsnorm", "layernorm"):
            raise ValueError(f"norm must be 'rmsnorm' or 'layernorm', got {self.norm!r}")
        if self.hidden % self.num_heads:
            raise ValueError(f"hidden {self.hidden} is not a multiple of num_heads {self.num_heads}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads {self.num_heads} is not a multiple of num_kv_heads {self.num_kv_heads}"
            )

    @classmethod
    def from_name(cls, name: str) -> ModelSpec:
        return MODELS.get(name)

    @property
    def head_dim(self) -> int:
        return self.hidden // self.num_heads

    @property
    def ffn_in_width(self) -> int:
        """Output width of the up projection: gate and up fused for SwiGLU."""
        return 2 * self.ffn if self.activation == "swiglu" else self.ffn

    @property
    def layer_params(self) -> int:
        qkv = self.hidden * (self.num_heads + 2 * self.num_kv_heads) * self.head_dim
        o = self.num_heads * self.head_dim * self.hidden
        mlp = self.hidden * self.ffn_in_width + self.ffn * self.hidden
        norms = (2 if self.norm == "rmsnorm" else 4) * self.hidden
        return qkv + o + mlp + norms

    @property
    def embedding_params(self) -> int:
        """Input embedding plus the (untied) LM head."""
        return 2 * self.vocab * self.hidden

    @property
    def num_params(self) -> int:
        return self.num_layers * self.layer_params + self.embedding_params


MODELS: Table[ModelSpec] = Table(
    "model",
    [
        ModelSpec(
            name="Mistral-7B",
            hf_id="mistralai/Mistral-7B-v0.1",
            num_layers=32, hidden=4096, num_heads=32, num_kv_heads=8, ffn=14336, vocab=32000,
            max_position=32768, sliding_window=4096,
            aliases=("mistral-7b", "mistral", "mistral-7b-v0.1", "mistralai/Mistral-7B-v0.1",
                     "mistral-7b-instruct-v0.2", "mistralai/Mistral-7B-Instruct-v0.2"),
            source="https://huggingface.co/mistralai/Mistral-7B-v0.1/blob/main/config.json",
        ),
        ModelSpec(
            name="Yi-34B",
            hf_id="01-ai/Yi-34B",
            num_layers=60, hidden=7168, num_heads=56, num_kv_heads=8, ffn=20480, vocab=64000,
            max_position=4096,
            aliases=("yi-34b", "yi", "01-ai/Yi-34B"),
            source="https://huggingface.co/01-ai/Yi-34B/blob/main/config.json",
        ),
        ModelSpec(
            name="LLaMA2-70B",
            hf_id="meta-llama/Llama-2-70b-hf",
            num_layers=80, hidden=8192, num_heads=64, num_kv_heads=8, ffn=28672, vocab=32000,
            max_position=4096,
            aliases=("llama2-70b", "llama-2-70b", "llama-2-70b-hf", "meta-llama/Llama-2-70b-hf"),
            source="https://huggingface.co/meta-llama/Llama-2-70b-hf/blob/main/config.json",
        ),
        ModelSpec(
            name="Falcon-180B",
            hf_id="tiiuae/falcon-180B",
            num_layers=80, hidden=14848, num_heads=232, num_kv_heads=8, ffn=59392, vocab=65024,
            max_position=2048, activation="gelu", norm="layernorm", parallel_attn_mlp=True,
            aliases=("falcon-180b", "falcon", "tiiuae/falcon-180B"),
            source="https://huggingface.co/tiiuae/falcon-180B/blob/main/config.json",
        ),
        ModelSpec(
            name="Llama-2-7B",
            hf_id="meta-llama/Llama-2-7b-hf",
            num_layers=32, hidden=4096, num_heads=32, num_kv_heads=32, ffn=11008, vocab=32000,
            max_position=4096,
            aliases=("llama-2-7b", "llama2-7b", "llama-2-7b-hf", "meta-llama/Llama-2-7b-hf"),
            source="https://huggingface.co/meta-llama/Llama-2-7b-hf/blob/main/config.json",
        ),
        ModelSpec(
            name="Llama-3-8B",
            hf_id="meta-llama/Meta-Llama-3-8B",
            num_layers=32, hidden=4096, num_heads=32, num_kv_heads=8, ffn=14336, vocab=128256,
            max_position=8192,
            aliases=("llama-3-8b", "llama3-8b", "meta-llama-3-8b", "meta-llama/Meta-Llama-3-8B"),
            source="https://huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json",
        ),
        ModelSpec(
            name="CodeLlama-34B",
            hf_id="codellama/CodeLlama-34b-Instruct-hf",
            num_layers=48, hidden=8192, num_heads=64, num_kv_heads=8, ffn=22016, vocab=32000,
            max_position=16384,
            aliases=("codellama-34b", "codellama", "codellama-34b-instruct-hf", "codellama/CodeLlama-34b-Instruct-hf",
                     "codellama/CodeLlama-34b-hf"),
            source="https://huggingface.co/codellama/CodeLlama-34b-Instruct-hf/blob/main/config.json",
        ),
        ModelSpec(
            name="Llama-3-70B",
            hf_id="meta-llama/Meta-Llama-3-70B",
            num_layers=80, hidden=8192, num_heads=64, num_kv_heads=8, ffn=28672, vocab=128256,
            max_position=8192,
            aliases=("llama-3-70b", "llama3-70b", "meta-llama-3-70b", "meta-llama/Meta-Llama-3-70B"),
            source="https://huggingface.co/meta-llama/Meta-Llama-3-70B/blob/main/config.json",
        ),
    ],
)  # fmt: skip
