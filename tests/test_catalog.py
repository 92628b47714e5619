import pytest

from simserve.catalog import GPU, MODELS, GPUSpec, ModelSpec, load_catalog_file
from simserve.errors import SimserveError


@pytest.mark.parametrize(
    "alias,name",
    [
        ("mistral-7b", "Mistral-7B"),
        ("MISTRAL_7B", "Mistral-7B"),
        ("llama-2-70b", "LLaMA2-70B"),
        ("meta-llama/Llama-2-7b-hf", "Llama-2-7B"),
        ("falcon-180b", "Falcon-180B"),
    ],
)
def test_model_aliases_resolve_case_insensitively(alias, name):
    assert ModelSpec.from_name(alias).name == name


@pytest.mark.parametrize(
    "alias,name", [("a100", "A100-80GB"), ("A40", "A40-48GB"), ("h100", "H100-SXM"), ("h200", "H200")]
)
def test_gpu_aliases(alias, name):
    assert GPUSpec.from_name(alias).name == name


def test_unknown_name_lists_known_ones():
    with pytest.raises(SimserveError) as exc:
        ModelSpec.from_name("gpt-5")
    msg = str(exc.value)
    assert "gpt-5" in msg and "Mistral-7B" in msg and "Falcon-180B" in msg and "\n" not in msg


@pytest.mark.parametrize(
    "name,billions",
    [
        ("mistral-7b", 7.24),
        ("yi-34b", 34.39),
        ("llama2-70b", 68.98),
        ("falcon-180b", 179.5),
        ("llama-2-7b", 6.74),
        ("llama-3-8b", 8.03),
        ("codellama-34b", 33.74),
        ("llama-3-70b", 70.55),
    ],
)
def test_parameter_counts_match_published_sizes(name, billions):
    # Published sizes (model cards): a wrong layer count, FFN width or head count shows up here.
    assert ModelSpec.from_name(name).num_params / 1e9 == pytest.approx(billions, rel=0.005)


def test_falcon_is_gelu_layernorm_parallel():
    falcon = ModelSpec.from_name("falcon-180b")
    assert (falcon.activation, falcon.norm, falcon.parallel_attn_mlp, falcon.head_dim) == (
        "gelu",
        "layernorm",
        True,
        64,
    )


def test_user_catalog_file_adds_model_and_gpu(tmp_path):
    f = tmp_path / "mine.toml"
    f.write_text(
        '[[models]]\nname = "Tiny-1B"\nhf_id = "me/tiny"\nnum_layers = 4\nhidden = 256\nnum_heads = '
        '4\nnum_kv_heads = 2\nffn = 512\nvocab = 1000\nmax_position = 2048\nsource = "mine"\naliases = '
        '["tiny"]\n[[gpus]]\nname = "Toy-GPU"\nmemory_gib = 8\npeak_tflops = 10\nhbm_gbps = 100\nnum_sms = '
        '4\narch = "ampere"\nsource = "x"\n'
    )
    try:
        assert load_catalog_file(f) == ["Tiny-1B", "Toy-GPU"]
        assert ModelSpec.from_name("tiny").num_layers == 4
        assert GPUSpec.from_name("toy-gpu").memory_gib == 8
    finally:
        MODELS._specs.pop("Tiny-1B", None)
        GPU._specs.pop("Toy-GPU", None)


def test_shipped_example_catalog_loads():
    from pathlib import Path

    added = load_catalog_file(Path(__file__).parents[1] / "docs/examples/catalog.yaml")
    assert "Qwen2-7B" in added and "L40S" in added
    assert ModelSpec.from_name("qwen2-7b").num_params / 1e9 == pytest.approx(7.6, rel=0.02)


@pytest.mark.parametrize(
    "text,problem",
    [
        ("models:\n  - name: X\n", "missing field"),
        ("models:\n  - {name: X, colour: red}\n", "unknown field"),
        ("gizmos: []\n", "unknown section"),
        ("models: [\n", "could not be parsed"),
        (
            "models:\n  - {name: X, hf_id: a, num_layers: 2, hidden: 10, num_heads: 3, num_kv_heads: 1, "
            "ffn: 8, vocab: 5, max_position: 9, source: s}\n",
            "not a multiple",
        ),
    ],
)
def test_bad_catalog_files_fail_in_one_line(tmp_path, text, problem):
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    with pytest.raises(SimserveError, match=problem) as exc:
        load_catalog_file(f)
    assert "\n" not in str(exc.value)
