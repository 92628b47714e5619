"""The analytic backend's physics: tile steps, monotonicity, spec-sheet bounds, and the tables it hands the
CLI."""

import dataclasses

import numpy as np
import pytest

from simserve.catalog import GPU, MODELS, NETWORKS
from simserve.deployment import Deployment
from simserve.ops import linear_ops
from simserve.profiling import roofline as rl
from simserve.profiling.roofline_validation import decode_iteration_ms
from simserve.profiling.schema import TABLES, validate_table

A100, A40, H100 = GPU.get("a100"), GPU.get("a40"), GPU.get("h100")


def up_proj(model="mistral-7b", tp=1):
    return next(op for op in linear_ops(Deployment.create(model, "a100", tp)) if op.name == "up_proj")


def test_tile_step_at_257_tokens():
    op = up_proj()
    t = rl.gemm_ms(A100, [248, 256, 257], op.in_features, op.out_features)
    assert t[1] / t[0] - 1 < 0.05  # inside one tile: nearly free
    assert 0.15 < t[2] / t[1] - 1 < 0.6  # one more token starts a new 128-row tile (paper: +32%)


def test_small_batches_cost_about_the_same():
    # Decode-sized GEMMs are bound by reading the weights: 1 token and 64 tokens cost nearly the same.
    op = up_proj()
    t1, t64 = rl.gemm_ms(A100, [1, 64], op.in_features, op.out_features)
    assert t64 / t1 < 1.1


def test_gemm_never_beats_the_spec_sheet():
    tokens = np.arange(1, 8193, 37)
    for op in linear_ops(Deployment.create("llama2-70b", "a100", 2)):
        for gpu in (A100, A40, H100):
            t = rl.gemm_ms(gpu, tokens, op.in_features, op.out_features) * 1e-3
            bound = np.maximum(
                op.flops(tokens) / (gpu.peak_tflops * 1e12), op.bytes(tokens) / (gpu.hbm_gbps * 1e9)
            )
            assert np.all(t > bound)


def test_gemm_monotone_across_tiles():
    op = up_proj("yi-34b", 2)
    t = rl.gemm_ms(A100, np.arange(1, 4097), op.in_features, op.out_features)
    assert np.all(np.diff(t) >= 0)


def test_faster_gpu_is_faster():
    op = up_proj()
    for m in (1, 32, 512, 4096):
        a40, a100, h100 = (
            float(rl.gemm_ms(g, m, op.in_features, op.out_features)) for g in (A40, A100, H100)
        )
        assert h100 < a100 < a40


def test_elementwise_scales_with_bytes_and_knows_its_ops():
    t = rl.elementwise_ms(A100, "act", [1e3, 1e6, 1e9])
    assert np.all(np.diff(t) > 0)
    assert t[2] * 1e-3 > 1e9 / (A100.hbm_gbps * 1e9)
    with pytest.raises(ValueError, match="no elementwise cost"):
        rl.elementwise_ms(A100, "softmax", 1e6)


def test_decode_attention_monotone_and_memory_bound():
    b, kv = np.meshgrid([1, 2, 8, 32, 128], [16, 256, 1024, 4096, 16384], indexing="ij")
    t = rl.decode_attention_ms(A100, 32, 8, 128, b, kv)
    assert np.all(np.diff(t, axis=0) > 0) and np.all(np.diff(t, axis=1) > 0)
    # At full occupancy it streams the KV cache near (but below) the achieved bandwidth.
    kv_bytes = 128 * 2 * 8 * 128 * 16384 * 2
    assert kv_bytes / (A100.hbm_gbps * 1e9) < t[-1, -1] * 1e-3 < 1.5 * kv_bytes / (A100.hbm_gbps * 1e9)


def test_sliding_window_caps_attention():
    full = rl.decode_attention_ms(A100, 32, 8, 128, 32, 16384)
    windowed = rl.decode_attention_ms(A100, 32, 8, 128, 32, 16384, window=4096)
    assert windowed == pytest.approx(rl.decode_attention_ms(A100, 32, 8, 128, 32, 4096))
    assert windowed < full / 3


def test_prefill_attention_grows_with_chunk_and_prefix():
    c, p = np.meshgrid([16, 128, 512, 2048], [0, 512, 4096], indexing="ij")
    t = rl.prefill_attention_ms(A100, 32, 8, 128, c, p)
    assert np.all(np.diff(t, axis=0) > 0) and np.all(np.diff(t, axis=1) > 0)


def test_profile_tables_follow_the_schema():
    tables, prov = rl.profile(
        MODELS.get("mistral-7b"), A100, [1, 2], None, NETWORKS.get("ethernet-100g"), quick=True
    )
    for name, columns in TABLES.items():
        validate_table(tables[name].copy(), name, name)
        assert list(tables[name].columns[: len(columns)]) == columns
    assert set(tables["linear"]["op"]) == {"qkv_proj", "o_proj", "up_proj", "down_proj"}
    assert set(tables["linear"]["tp"]) == {1, 2}
    assert {256, 257, 4096}.issubset(set(tables["linear"]["num_tokens"]))
    col = tables["collectives"]
    assert set(col[col["op"] == "all_reduce"]["num_workers"]) == {2}  # TP 1 has no all-reduce
    assert set(col[col["op"] == "send_recv"]["link"]) == {
        "a100-pairwise-nvlink",
        "a100-pairwise-nvlink:pcie",
        "ethernet-100g",
    }  # collective models themselves: tests/test_nccl.py
    att = tables["attention"]
    assert (att[att["phase"] == "prefill"].eval("chunk + kv_len") <= 16384).all()
    assert prov["backend"] == "roofline (analytic)"
    assert prov["constants"]["gemm_compute_eff"] == rl.GEMM_COMPUTE_EFF


def test_profile_is_deterministic():
    args = (MODELS.get("yi-34b"), A100, [2], None, None)
    a, _ = rl.profile(*args, max_model_len=4096, max_tokens=4096, quick=True)
    b, _ = rl.profile(*args, max_model_len=4096, max_tokens=4096, quick=True)
    for name in TABLES:
        assert a[name].equals(b[name])


def test_constants_object_matches_module_constants():
    c = rl.KernelConstants()
    assert c.gemm_min_us == rl.GEMM_MIN_US and c.attn_kv_split == rl.ATTN_KV_SPLIT
    slower = dataclasses.replace(c, gemm_compute_eff=c.gemm_compute_eff / 2)
    assert rl.gemm_ms(A100, 4096, 4096, 4096, c=slower) > rl.gemm_ms(A100, 4096, 4096, 4096, c=c)


def test_decode_iteration_near_paper_slo_for_mistral_and_yi():
    # The paper set its strict TBT SLO at 5x this time (20 ms and 40 ms); GPU kernels alone should land close.
    mistral = decode_iteration_ms(Deployment.create("mistral-7b", "a100", 1))["total"]
    yi = decode_iteration_ms(Deployment.create("yi-34b", "a100", 2))["total"]
    assert 15 < mistral < 30 and 30 < yi < 55
