"""fp8 GEMMs, grouped expert GEMMs and latent attention in the roofline backend: the physics, not fitted
numbers."""

from __future__ import annotations

import numpy as np
import pytest

from simserve import precision
from simserve.catalog import GPU
from simserve.deployment import Deployment
from simserve.ops import attention_shape, expert_load, expert_ops
from simserve.profiling import roofline
from simserve.profiling.roofline import decode_attention_ms, gemm_ms
from simserve.profiling.roofline_moe import grouped_gemm_ms, mla_decode_attention_ms


def _gemm(gpu: str, dtype: str, m: int) -> float:
    g = GPU.get(gpu)
    return float(gemm_ms(precision.gemm_gpu(g, dtype), m, 8192, 28672, precision.dtype_bytes(dtype)))


def test_fp8_gemm_on_hopper_halves_the_weight_bytes_but_not_the_compute_time():
    # W8A8 with per-tensor scales (vLLM's CUTLASS scaled-mm): the fp8 peak is 2x bf16's, but NVIDIA's measured
    # H100 GEMMs reach ~1.1-1.7x at large m (roofline.ARCH_KERNELS' fp8 constants are fitted on them), and the
    # activations are quantised first (roofline.quantisation_bytes)
    compute = _gemm("h100", "bf16", 8192) / _gemm("h100", "fp8", 8192)
    assert 1.05 < compute < 1.5
    # weight-bound (one token): half the weight bytes, less what the quantisation kernels and the floor cost
    weights = _gemm("h100", "bf16", 1) / _gemm("h100", "fp8", 1)
    assert 1.4 < weights < 2.0
    g = GPU.get("h100")
    assert roofline.quantisation_bytes(g, 4.0, 8192, 1) == 5 * 4 * 8192
    assert (
        roofline.quantisation_bytes(g, 4.0, 8192, 2) == 0
        and roofline.quantisation_bytes(GPU.get("a100"), 4.0, 8192, 1) == 0
    )


def test_fp8_on_ampere_is_weight_only():
    # no fp8 tensor cores: compute-bound GEMMs keep their bf16 time, weight-streaming (decode) ones halve
    assert precision.gemm_gpu(GPU.get("a100"), "fp8").peak_tflops == GPU.get("a100").peak_tflops
    assert _gemm("a100", "fp8", 8192) == pytest.approx(_gemm("a100", "bf16", 8192), rel=0.02)
    # (not a full 2×: the 64-row padded tile's bf16 math is a third of the one-token time on A100)
    assert 1.4 < _gemm("a100", "bf16", 1) / _gemm("a100", "fp8", 1) < 2.0


def test_fp8_kv_halves_long_decode_attention():
    g = GPU.get("h100")
    bf16 = decode_attention_ms(g, 8, 1, 128, 64, 8192, 2)
    fp8 = decode_attention_ms(g, 8, 1, 128, 64, 8192, 1)
    assert bf16 / fp8 == pytest.approx(2.0, rel=0.1)


def test_one_decode_token_reads_only_its_experts():
    # one token touches k experts: a decode step's expert time is the weights of 8 of 128 experts, not all
    dep = Deployment.create("qwen3-235b-a22b", "h100", 8, ep=1)
    up = expert_ops(dep)[0]
    touched, rows = expert_load(dep, np.array([1.0, 4096.0]))
    t = grouped_gemm_ms(dep.gpu, touched, rows, up.in_features, up.out_features)
    all_experts = grouped_gemm_ms(dep.gpu, 128.0, 1.0, up.in_features, up.out_features)
    # beyond the fixed per-call time (the fitted MoE minimum carries the routing kernels:
    # roofline.moe_constants)
    t0 = roofline.moe_constants(roofline.kernels_for(dep.gpu), 2).gemm_min_us * 1e-3
    assert t[0] - t0 < (all_experts - t0) / 8
    assert t[1] > 5 * t[0]


def test_expert_parallel_decode_reads_the_same_bytes_per_gpu():
    # ep=8: 16 whole experts per GPU; ep=1: 128 slices of 1/8. A one-token step reads k/E of either.
    times = []
    for ep in (1, 8):
        dep = Deployment.create("qwen3-235b-a22b", "h100", 8, ep=ep)
        op = expert_ops(dep)[0]
        touched, rows = expert_load(dep, np.array([1.0]))
        times.append(float(grouped_gemm_ms(dep.gpu, touched, rows, op.in_features, op.out_features)[0]))
    assert times[0] == pytest.approx(times[1], rel=0.05)


def test_latent_decode_is_cheaper_than_the_mha_it_replaces():
    dep = Deployment.create("deepseek-v3", "h200", 8)
    s = attention_shape(dep)
    g = dep.gpu
    mla = float(mla_decode_attention_ms(g, s, 64, 8192))
    mha = float(decode_attention_ms(g, s.q_heads, s.q_heads, 128, 64, 8192))  # 16 heads of K and V, width 128
    assert mla < mha / 4  # 576 bytes per token against 2·16·128 = 4096


def test_skewed_routing_slows_expert_parallel_more_than_tensor_parallel():
    def expert_ms(ep: int, skew: float, tokens: float = 2048.0) -> float:
        dep = Deployment.create("qwen3-235b-a22b", "h100", 8, ep=ep, moe_skew=skew)
        touched, rows = expert_load(dep, np.array([tokens]))
        return sum(
            float(grouped_gemm_ms(dep.gpu, touched, rows, op.in_features, op.out_features)[0])
            for op in expert_ops(dep)
        )

    # balanced decode batch: the same weight bytes per GPU either way
    assert expert_ms(8, 0.0, 32.0) == pytest.approx(expert_ms(1, 0.0, 32.0), rel=0.05)
    # balanced prefill: EP reads each routed row's hidden state once per layout instead of on every TP rank
    assert expert_ms(8, 0.0) < expert_ms(1, 0.0)
    # skewed: with TP-sharded experts every GPU shares the hot experts; with EP one GPU holds them
    assert expert_ms(8, 1.0) > 1.5 * expert_ms(1, 1.0)


def test_routed_experts_are_one_fused_op_with_their_activation():
    from simserve.ops import elementwise_ops
    from simserve.profiling.roofline import elementwise_ms
    from simserve.profiling.roofline_moe import fused_expert_ms

    dep = Deployment.create("qwen3-235b-a22b", "h100", 4, ep=4)
    up, down = expert_ops(dep)
    tokens = np.array([1.0, 512.0])
    touched, rows = expert_load(dep, tokens)
    gemms = sum(grouped_gemm_ms(dep.gpu, touched, rows, op.in_features, op.out_features) for op in (up, down))
    act = elementwise_ms(dep.gpu, "act", rows * 3 * 1536 * 2)  # SiLU(gate)·up on every routed row, bf16
    assert fused_expert_ms(dep, tokens) == pytest.approx(gemms + act)
    # no shared experts and no dense layers: the `act` elementwise op has nothing left to time
    assert {op.name: op.count for op in elementwise_ops(dep)}["act"] == 0
    ds = {op.name: op for op in elementwise_ops(Deployment.create("deepseek-v3", "h200", 8))}["act"]
    assert ds.count == 1 and ds.bytes_per_token > 0  # DeepSeek-V3: the shared expert and the 3 dense layers
