"""Today's models: the catalog entries, config.json parsing, parameter counts against the published totals."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from simserve.catalog.models import MODELS, resolve_model
from simserve.errors import SimserveError

CONFIGS = Path(__file__).parent / "fixtures" / "hf_configs"
NEW = (
    "Llama-3.1-8B",
    "Llama-3.1-70B",
    "Llama-3.1-405B",
    "Qwen3-32B",
    "Qwen3-235B-A22B",
    "Mixtral-8x7B",
    "DeepSeek-V3",
)
BOOKKEEPING = {"name", "hf_id", "source", "aliases"}


def _arch(spec) -> dict:
    return {k: v for k, v in dataclasses.asdict(spec).items() if k not in BOOKKEEPING}


@pytest.mark.parametrize("name", NEW)
def test_catalog_entry_equals_its_config_json(name):
    # The fixtures copy the published configs' architecture fields; parsing one must give the hand-written
    # entry.
    assert _arch(resolve_model(str(CONFIGS / name / "config.json"))) == _arch(MODELS.get(name))
    assert MODELS.get(name).source.startswith("https://huggingface.co/")


# Published totals (model cards / papers): total and active parameters in billions, to the digits they give.
PUBLISHED = {
    "Llama-3.1-8B": (8.03, 8.03),
    "Llama-3.1-70B": (70.6, 70.6),
    "Llama-3.1-405B": (405.9, 405.9),
    "Qwen3-32B": (32.8, 32.8),
    "Qwen3-235B-A22B": (235.1, 22.2),  # model card: 235B total, 22B activated
    "Mixtral-8x7B": (46.7, 12.9),  # Mistral: 46.7B total, 12.9B active
    "DeepSeek-V3": (671.0, 37.6),  # 671B + 14B MTP module (not served) ; 37B activated
}


@pytest.mark.parametrize("name", NEW)
def test_parameter_counts_match_published_totals(name):
    m = MODELS.get(name)
    total, active = PUBLISHED[name]
    assert m.num_params / 1e9 == pytest.approx(total, rel=0.005)
    assert m.active_params / 1e9 == pytest.approx(active, rel=0.01)


def test_folder_with_config_json_is_a_model(tmp_path):
    d = tmp_path / "my-model"
    d.mkdir()
    cfg = json.loads((CONFIGS / "Qwen3-32B" / "config.json").read_text())
    (d / "config.json").write_text(json.dumps(cfg))
    spec = resolve_model(str(d))
    assert spec.name == "my-model" and spec.head_dim == 128 and spec.hidden == 5120


def _write(tmp_path, cfg) -> str:
    p = tmp_path / "m" / "config.json"
    p.parent.mkdir(exist_ok=True)
    p.write_text(json.dumps(cfg))
    return str(p)


def test_unmodelled_architecture_is_named(tmp_path):
    cfg = {"architectures": ["GPT2LMHeadModel"], "n_embd": 768}
    with pytest.raises(
        SimserveError, match=r"\['GPT2LMHeadModel'\] is not modelled; supported: LlamaForCausalLM"
    ):
        resolve_model(_write(tmp_path, cfg))


def test_missing_field_is_named(tmp_path):
    cfg = json.loads((CONFIGS / "Mixtral-8x7B" / "config.json").read_text())
    del cfg["num_local_experts"]
    with pytest.raises(SimserveError, match="missing field 'num_local_experts'"):
        resolve_model(_write(tmp_path, cfg))


def test_missing_file_is_one_line(tmp_path):
    with pytest.raises(SimserveError, match="does not exist"):
        resolve_model(str(tmp_path / "nope" / "config.json"))


def test_qwen_window_only_when_used(tmp_path):
    cfg = json.loads((CONFIGS / "Qwen3-32B" / "config.json").read_text())
    cfg["sliding_window"] = 4096
    assert resolve_model(_write(tmp_path, cfg)).sliding_window is None  # use_sliding_window false
    cfg["use_sliding_window"] = True
    (tmp_path / "m" / "config.json").write_text(json.dumps(cfg))
    assert resolve_model(str(tmp_path / "m" / "config.json")).sliding_window == 4096


def test_deepseek_layers_split_dense_and_moe():
    m = MODELS.get("deepseek-v3")
    assert (m.dense_layers, m.moe_layers) == (3, 58)
    assert m.is_mla and m.is_moe
