"""Build the tiny model directory the engine-CPU measurements run vLLM on (no hub access, no weights).

    /work/envs/vllm033/bin/python tools/engine_cpu_model.py /work/envs/tiny-llama

A 2-layer `LlamaForCausalLM` config (hidden 256, 4 heads, 2 KV heads, FFN 512, vocab 32000) and a byte-level
BPE tokenizer trained here with the `tokenizers` library on the Python standard library's own sources (sorted
file list, so the same Python gives the same tokenizer), with a chat template. Only the tokenizer's cost
matters to what is measured (tokenize, incremental detokenize); the model is never run with real weights
(`--load-format dummy`, or not at all under tools/engine_cpu_fake_worker.py). Recipe: shared notes
vllm-server-on-cpu.md, step 3.
"""

from __future__ import annotations

import json
import sys
import sysconfig
from pathlib import Path

VOCAB = 32000
CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "vocab_size": VOCAB,
    "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-5,
    "torch_dtype": "float32",
    "bos_token_id": 1,
    "eos_token_id": 2,
    "tie_word_embeddings": False,
    "rope_theta": 10000.0,
}
# A Llama-2-style chat template: the server renders it with jinja2 for every chat request.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'system' %}<<SYS>>\n{{ "
    "message['content'] }}\n<</SYS>>\n\n{% elif message['role'] == 'user' %}[INST] {{ "
    "message['content'] }} [/INST]{% else %} {{ message['content'] }}{{ eos_token }}{% endif "
    "%}{% endfor %}"
)


def corpus() -> list[str]:
    root = Path(sysconfig.get_paths()["stdlib"])
    return [str(p) for p in sorted(root.glob("*.py"))]


def build(out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=["<unk>", "<s>", "</s>"],
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train(corpus(), trainer)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "unk_token": "<unk>",
                "model_max_length": 32768,
                "chat_template": CHAT_TEMPLATE,
                "add_bos_token": False,
                "clean_up_tokenization_spaces": False,
            },
            indent=1,
        )
    )
    (out / "special_tokens_map.json").write_text(
        json.dumps({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"})
    )
    (out / "config.json").write_text(json.dumps(CONFIG, indent=1))
    (out / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2}))
    print(f"wrote {out}: vocab {tok.get_vocab_size()}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: tools/engine_cpu_model.py OUT_DIR")
    build(Path(sys.argv[1]))
