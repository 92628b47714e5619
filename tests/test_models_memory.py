"""Precision, latent attention and expert parallelism in memory and in the op list, checked by hand."""

from __future__ import annotations

import numpy as np
import pytest

from simserve.deployment import Deployment
from simserve.errors import SimserveError
from simserve.memory import kv_bytes_per_token, plan_memory, weights_bytes_per_gpu
from simserve.ops import expert_load, expert_ops, expert_popularity, linear_ops, timed_linear_ops


def test_bf16_weights_are_every_parameter_twice():
    dep = Deployment.create("llama-3.1-8b", "h100", 1)
    assert weights_bytes_per_gpu(dep) == dep.model.num_params * 2


def test_fp8_halves_the_linear_layers_only():
    m = Deployment.create("llama-3.1-70b", "h100", 4).model
    bf16 = weights_bytes_per_gpu(Deployment.create(m, "h100", 4))
    fp8 = weights_bytes_per_gpu(Deployment.create(m, "h100", 4, dtype="fp8"))
    linear = m.num_layers * (m.attention_params + m.dense_mlp_params) / 4
    embed_norms = (2 * m.vocab * m.hidden + m.num_layers * m.norm_params) / 4
    assert bf16 == pytest.approx(2 * (linear + embed_norms))
    assert fp8 == pytest.approx(linear + 2 * embed_norms)  # embeddings, LM head and norms stay bf16


def test_kv_bytes_per_token_by_hand():
    dep = Deployment.create("llama-3.1-8b", "h100", 1)
    assert kv_bytes_per_token(dep) == 2 * 2 * 8 * 128 * 32  # K,V · bf16 · kv heads · head dim · layers
    assert (
        kv_bytes_per_token(Deployment.create("llama-3.1-8b", "h100", 1, kv_dtype="fp8")) == 8 * 128 * 32 * 2
    )


def test_latent_kv_is_one_vector_per_token_and_layer_on_every_rank():
    for tp in (1, 8):
        dep = Deployment.create("deepseek-v3", "h200", tp, dtype="fp8")
        assert kv_bytes_per_token(dep) == 2 * (512 + 64) * 61  # not divided by TP: vLLM replicates it


def test_expert_weights_per_gpu_do_not_depend_on_ep():
    a = Deployment.create("qwen3-235b-a22b", "h200", 8, ep=1)
    b = Deployment.create("qwen3-235b-a22b", "h200", 8, ep=8)
    assert weights_bytes_per_gpu(a) == weights_bytes_per_gpu(b)
    # and they hold the whole model once over the 8 GPUs (router replicated: a rounding error)
    assert 8 * weights_bytes_per_gpu(a) == pytest.approx(2 * a.model.num_params, rel=0.002)


def test_expert_ops_under_ep_hold_whole_experts():
    tp_only = {op.name: op for op in expert_ops(Deployment.create("qwen3-235b-a22b", "h100", 8, ep=1))}
    ep = {op.name: op for op in expert_ops(Deployment.create("qwen3-235b-a22b", "h100", 8, ep=8))}
    assert (tp_only["moe_up"].local_experts, tp_only["moe_up"].out_features) == (128, 2 * 1536 // 8)
    assert (ep["moe_up"].local_experts, ep["moe_up"].out_features) == (16, 2 * 1536)
    names = [n for n, _ in timed_linear_ops(Deployment.create("qwen3-235b-a22b", "h100", 8, ep=8))]
    assert names == ["qkv_proj", "o_proj", "router", "moe@ep8"]


def test_deepseek_ops_weight_dense_and_moe_layers():
    ops = {op.name: op for op in linear_ops(Deployment.create("deepseek-v3", "h200", 8, ep=8))}
    assert ops["up_proj"].share == pytest.approx(3 / 61) and ops["shared_up"].share == pytest.approx(58 / 61)
    assert ops["kv_b_proj"].in_features == 512 and ops["o_proj"].in_features == 16 * 128


def test_balanced_expert_load():
    dep = Deployment.create("qwen3-235b-a22b", "h100", 8, ep=8)
    touched, rows = expert_load(dep, np.array([1.0, 10_000.0]))
    assert rows.tolist() == [1.0, 10_000.0]  # k/E · 16 local experts = 1 row per token
    assert touched[0] == pytest.approx(16 * 8 / 128)  # one token: k/E of each local expert
    assert touched[1] == pytest.approx(16.0)  # a big batch touches all of them


def test_skewed_router_loads_the_busiest_gpu_more():
    p = expert_popularity(128, 8, 1.0)
    assert p.sum() == pytest.approx(8.0) and p.max() <= 1.0 and p[0] > p[-1]
    dep = Deployment.create("qwen3-235b-a22b", "h100", 8, ep=8, moe_skew=1.0)
    touched, rows = expert_load(dep, np.array([1000.0]))
    assert rows[0] > 1000.0 * 1.5  # the most popular 16 experts take far more than 1/8 of the 8000 picks


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(model="qwen3-235b-a22b", tp=8, ep=3), "EP 3 does not divide Qwen3-235B-A22B's 128 experts"),
        (dict(model="qwen3-235b-a22b", tp=4, ep=8), "EP 8 does not divide TP 4"),
        (dict(model="llama-3.1-8b", tp=2, ep=2), "needs a mixture-of-experts model"),
        (dict(model="llama-3.1-8b", tp=1, dtype="int4"), "--dtype 'int4' is not supported"),
    ],
)
def test_bad_parallelism_or_dtype_is_one_line(kwargs, match):
    with pytest.raises(SimserveError, match=match):
        Deployment.create(gpu="h100", **kwargs)


def test_deepseek_fits_8_h200_in_fp8_but_not_bf16():
    ok = Deployment.create("deepseek-v3", "h200", 8, dtype="fp8", ep=8)
    assert plan_memory(ok, 2048).num_blocks > 0
    with pytest.raises(
        SimserveError, match=r"does not fit: weights 15\d\.\d GiB \(bf16\).*--dtype/--kv-dtype fp8"
    ):
        plan_memory(Deployment.create("deepseek-v3", "h200", 8), 2048)
