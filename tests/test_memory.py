import pytest

from simserve.deployment import Deployment
from simserve.errors import SimserveError
from simserve.memory import (
    kv_bytes_per_block,
    kv_bytes_per_token,
    plan_memory,
    profile_tokens,
    weights_bytes_per_gpu,
)
from simserve.ops import all_reduces_per_layer, linear_ops

GIB = 2**30


def test_mistral_kv_block_is_2_mib():
    # 2 (K,V) · 2 bytes · 16 tokens · 8 kv heads · 128 head dim · 32 layers
    dep = Deployment.create("mistral-7b", "a100")
    assert kv_bytes_per_token(dep) == 2 * 2 * 8 * 128 * 32
    assert kv_bytes_per_block(dep) == 2 * GIB // 1024


def test_weights_split_by_tp_and_pp():
    one = weights_bytes_per_gpu(Deployment.create("llama2-70b", "a40", tp=1, pp=1))
    eight = weights_bytes_per_gpu(Deployment.create("llama2-70b", "a40", tp=4, pp=2))
    assert one / GIB == pytest.approx(128.5, rel=0.01)  # 68.98 B params × 2 bytes
    # with PP2 the first stage holds the input embedding and the last the LM head: an even split
    assert eight == pytest.approx(one / 8)
    four = weights_bytes_per_gpu(Deployment.create("llama2-70b", "a40", tp=2, pp=4))
    assert one / 8 < four < one / 7  # middle stages hold no embedding, so the end stages are the largest


def test_kv_pool_by_policy_orders_as_activation_peaks():
    dep = Deployment.create("mistral-7b", "a100")
    blocks = {
        p: plan_memory(dep, profile_tokens(p, 8192, 512, 16)).num_blocks for p in ("sarathi", "vllm", "orca")
    }
    assert blocks["sarathi"] > blocks["vllm"] > blocks["orca"]
    # usable 85% of 79.15 GiB minus 13.5 GiB of weights leaves ~53 GiB of 2 MiB blocks
    assert 26_000 < blocks["sarathi"] < 28_000


def test_does_not_fit_names_the_numbers():
    dep = Deployment.create("falcon-180b", "a100", tp=1)
    with pytest.raises(SimserveError) as exc:
        plan_memory(dep, 512)
    msg = str(exc.value)
    assert "does not fit" in msg and "weights 334.4 GiB" in msg and "--tp" in msg and "\n" not in msg


@pytest.mark.parametrize(
    "tp,pp,problem", [(3, 1, "does not divide"), (1, 3, "does not divide"), (0, 1, "at least 1")]
)
def test_bad_parallelism(tp, pp, problem):
    with pytest.raises(SimserveError, match=problem):
        Deployment.create("mistral-7b", "a100", tp=tp, pp=pp)


def test_tp_larger_than_node_is_refused():
    with pytest.raises(SimserveError, match="across nodes"):
        Deployment.create("falcon-180b", "a100", tp=8, pp=1)  # the paper's box holds 4 A100s


def test_falcon_pp_crosses_nodes_over_ethernet():
    dep = Deployment.create("falcon-180b", "a100", tp=4, pp=2)
    assert dep.num_nodes == 2 and dep.network.name == "ethernet-100g"
    assert dep.crosses_nodes(0) and all_reduces_per_layer(dep) == 1


def test_linear_shapes_follow_tp():
    dep = Deployment.create("yi-34b", "a100", tp=2)
    ops = {op.name: (op.in_features, op.out_features) for op in linear_ops(dep)}
    assert ops == {
        "qkv_proj": (7168, (28 + 2 * 4) * 128),
        "o_proj": (28 * 128, 7168),
        "up_proj": (7168, 20480),
        "down_proj": (10240, 7168),
    }
