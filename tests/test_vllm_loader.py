"""What vLLM 0.33.0 refuses to load (simserve/vllm_loader.py): refused in `run` in one line, exit 2, and left
out of the plan's search with the reason."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from simserve.catalog import GPU, MODELS
from simserve.cli import main
from simserve.deployment import Deployment
from simserve.plan.candidates import enumerate_candidates
from simserve.vllm_loader import refusal

# The architecture and quantization fields of https://huggingface.co/Qwen/Qwen3-4B-FP8/blob/main/config.json
# ("fine-grained fp8 quantization with block size of 128", the model card): 36 layers, hidden 2560, MLP 9728.
QWEN3_4B_FP8 = str(Path(__file__).parent / "fixtures" / "hf_configs" / "Qwen3-4B-FP8" / "config.json")


def _dep(model, tp: int, ep: int = 1, dtype: str = "fp8") -> Deployment:
    return Deployment.create(model, "h100", tp, 1, dtype=dtype, ep=ep)


def test_a_block_fp8_checkpoint_whose_down_proj_shard_misses_the_block_is_refused_at_that_tp() -> None:
    # 9728 / 8 = 1216 = 9.5 blocks of 128: vLLM's validate_fp8_block_shape raises on the row-parallel
    # down_proj
    why = refusal(_dep(QWEN3_4B_FP8, 8))
    assert why is not None and "mlp.down_proj" in why and "input_size_per_partition = 1216" in why
    assert "fp8_utils.py:1296" in why
    assert refusal(_dep(QWEN3_4B_FP8, 4)) is None  # 2432 = 19 blocks
    assert refusal(_dep(QWEN3_4B_FP8, 8, dtype="bf16")) is None  # served in bf16, no blocks to check


def test_moe_expert_shards_are_refined_as_vllm_does_and_refused_only_below_32() -> None:
    qwen = dataclasses.replace(MODELS.get("qwen3-235b-a22b"), fp8_weight_block=(128, 128))  # the -FP8 release
    # 1536 / 8 = 192: not a multiple of 128, but gcd(128, 128, 192, 4096) = 64 >= 32: refined scales, it loads
    assert refusal(_dep(qwen, 8)) is None and refusal(_dep(qwen, 8, ep=8)) is None
    # 3072 / 16 = 192 still refines; 3200 / 8 = 400 (gcd 16) does not, but whole 3200-wide experts (25 blocks)
    # do
    wide = dataclasses.replace(qwen, expert_ffn=3200)
    why = refusal(_dep(wide, 8))
    assert (
        why is not None
        and "400-wide expert shard" in why
        and why.endswith("add --ep 8 (whole experts per GPU)")
    )
    assert refusal(_dep(wide, 8, ep=8)) is None
    # an expert width that is no multiple of the block is refused in every layout (vLLM checks whole experts
    # too)
    odd = dataclasses.replace(qwen, expert_ffn=1552)
    assert "even with whole experts per GPU" in refusal(_dep(odd, 8, ep=8))


def test_kv_heads_must_divide_tp_or_be_divided_by_it() -> None:
    base = dataclasses.replace(MODELS.get("llama-3-8b"), num_heads=48, num_kv_heads=12, hidden=6144)
    assert refusal(_dep(base, 4)) is None and refusal(_dep(base, 2)) is None
    why = refusal(_dep(base, 8))  # 12 KV heads over 8 ranks: neither divides the other
    assert why is not None and "12 KV heads over TP 8" in why


def test_run_refuses_in_one_line_with_exit_2(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(
            [
                "run",
                "--model",
                QWEN3_4B_FP8,
                "--dtype",
                "fp8",
                "--gpu",
                "h100",
                "--tp",
                "8",
                "--requests",
                "8",
                "--qps",
                "1",
                "--out",
                "/nonexistent/never-written",
            ]
        )
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: vLLM 0.33.0 refuses") and "\n" not in err and "--tp" in err


def test_the_plan_does_not_search_what_vllm_refuses() -> None:
    model = Deployment.create(QWEN3_4B_FP8, "h100").model
    cands, rejected = enumerate_candidates(model, [GPU.get("h100")], 8, (512,), 128, 4096, dtype="fp8")
    tps = {c.deployment.tp for c in cands}
    assert 8 not in tps and {1, 2, 4} <= tps
    assert any(r.startswith("H100-SXM TP8 PP1: vLLM 0.33.0 refuses") for r in rejected)
