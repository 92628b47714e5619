"""The torch backend: its quick CPU path (what CI can run), device labelling, attention masks, collectives."""

from __future__ import annotations

import sys

import pytest

from simserve.catalog import GPU, ModelSpec
from simserve.deployment import Deployment
from simserve.errors import SimserveError
from simserve.ops import ELEMENTWISE_OPS, LINEAR_OPS

# Small shapes keep the CPU runs to about a second; GQA (8 q heads over 2 kv heads) so the grouped path is
# exercised.
TINY = ModelSpec(
    name="tiny-gqa",
    hf_id="test/tiny-gqa",
    num_layers=2,
    hidden=256,
    num_heads=8,
    num_kv_heads=2,
    ffn=512,
    vocab=1000,
    max_position=4096,
    source="test",
)
TINY_FALCON = ModelSpec(
    name="tiny-falcon",
    hf_id="test/tiny-falcon",
    num_layers=2,
    hidden=256,
    num_heads=8,
    num_kv_heads=8,
    ffn=1024,
    vocab=1000,
    max_position=4096,
    activation="gelu",
    norm="layernorm",
    parallel_attn_mlp=True,
    source="test",
)


def test_missing_torch_names_the_install(monkeypatch):
    from simserve.profiling import torch_backend

    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` raise ImportError
    with pytest.raises(SimserveError, match=r"pip install 'simserve\[torch\]'"):
        torch_backend.import_torch()


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip(
        "torch", reason="the torch backend tests need PyTorch (pip install torch==2.13.0)"
    )


@pytest.fixture(scope="module")
def cpu_only(torch):
    if torch.cuda.is_available():
        pytest.skip("these tests check the CPU path; this machine has a CUDA GPU")


@pytest.fixture(scope="module")
def quick_profile(torch, cpu_only):
    from simserve.profiling.torch_backend import profile

    return profile(TINY, GPU.get("a100"), [1, 2], None, None, quick=True)


def test_quick_cpu_profile_is_a_valid_profile(quick_profile, tmp_path):
    from simserve.profiling.schema import read_profile, write_profile
    from simserve.profiling.torch_backend import QUICK_GRID

    tables, provenance = quick_profile
    prof = read_profile(write_profile(tmp_path / "p", tables, provenance))
    for table, ops in ((prof.linear, LINEAR_OPS), (prof.elementwise, ELEMENTWISE_OPS)):
        assert set(table["op"]) == set(ops)
        assert set(table["tp"]) == {1, 2}
        assert sorted(set(table["num_tokens"])) == QUICK_GRID["tokens"]
        assert len(table) == len(ops) * 2 * len(QUICK_GRID["tokens"])
        assert (table["time_min_ms"] <= table["time_ms"]).all() and (
            table["time_ms"] <= table["time_max_ms"]
        ).all()
    att = prof.attention
    assert set(att["phase"]) == {"prefill", "decode"}
    decode, prefill = att[att["phase"] == "decode"], att[att["phase"] == "prefill"]
    assert (decode["chunk"] == 1).all() and (prefill["batch_size"] == 1).all()
    assert set(zip(prefill["chunk"], prefill["kv_len"], strict=True)) == {
        (16, 0),
        (16, 64),
        (64, 0),
        (64, 64),
    }
    assert len(decode) == 2 * len(QUICK_GRID["batches"]) * len(QUICK_GRID["kv"])
    assert (att["time_ms"] > 0).all()


def test_cpu_run_is_labelled_as_the_cpu_never_as_the_gpu(quick_profile):
    tables, provenance = quick_profile
    assert provenance["backend"] == "torch"
    assert provenance["device"].startswith("CPU") and "not a A100-80GB" in provenance["device"]
    assert provenance["device_is_requested_gpu"] is False
    assert provenance["timer"].startswith("time.perf_counter")
    assert provenance["dtype"] == "float32"
    # one visible device: collectives come from the alpha-beta model, marked row by row and in the provenance
    assert set(tables["collectives"]["method"]) == {"analytic"}
    assert "not measured" in provenance["collectives"]


def test_cpu_without_quick_refuses(torch, cpu_only):
    from simserve.profiling.torch_backend import profile

    with pytest.raises(SimserveError, match=r"no CUDA GPU is visible.*--quick"):
        profile(TINY, GPU.get("a100"), [1], None, None, quick=False)


def test_gelu_layernorm_model_runs(torch, cpu_only):
    from simserve.profiling.torch_backend import profile

    tables, _ = profile(TINY_FALCON, GPU.get("a100"), [2], None, None, max_model_len=128, quick=True)
    assert set(tables["elementwise"]["op"]) == set(ELEMENTWISE_OPS)
    prefill = tables["attention"][tables["attention"]["phase"] == "prefill"]
    assert (prefill["chunk"] + prefill["kv_len"] <= 128).all()


@pytest.mark.parametrize(
    ("gpu", "device_name"),
    [
        ("a100", "NVIDIA A100-SXM4-80GB"),
        ("h100", "NVIDIA H100 80GB HBM3"),
        ("h200", "NVIDIA H200"),
        ("a40", "NVIDIA A40"),
    ],
)
def test_device_names_match_their_catalog_gpu(gpu, device_name):
    from simserve.profiling.torch_backend import check_device

    check_device(GPU.get(gpu), device_name)


@pytest.mark.parametrize(
    ("gpu", "device_name"),
    [
        ("a100", "NVIDIA A100-SXM4-40GB"),
        ("a100", "NVIDIA H100 80GB HBM3"),
        ("h100", "NVIDIA H100 PCIe"),
        ("h200", "NVIDIA H200 NVL"),
        ("a40", "NVIDIA A100-SXM4-80GB"),
    ],
)
def test_a_different_device_is_refused_naming_both(gpu, device_name):
    from simserve.profiling.torch_backend import check_device

    spec = GPU.get(gpu)
    with pytest.raises(SimserveError) as err:
        check_device(spec, device_name)
    assert spec.name in str(err.value) and device_name in str(err.value)


def test_chunked_prefill_is_causal_in_the_chunk_and_full_over_the_prefix(torch, cpu_only):
    from simserve.profiling.torch_backend import Attention

    attn = Attention(
        torch, Deployment.create(TINY, "a100", 1), torch.float32, torch.device("cpu"), capacity=64
    )
    chunk, prefix = 5, 7
    q = torch.randn(1, chunk, attn.hq, attn.d)
    out = attn.prefill(chunk, prefix, q)()  # (1, heads, chunk, head_dim)
    k, v = attn._kv(1, prefix + chunk, heads_first=True)
    k, v = (t.repeat_interleave(attn.hq // attn.hkv, dim=1) for t in (k, v))
    for i in range(chunk):  # query i sees the whole prefix and chunk tokens 0..i
        seen = prefix + i + 1
        scores = (q[0, i][:, None, :] @ k[0, :, :seen].transpose(-1, -2)) / attn.d**0.5
        want = (scores.softmax(-1) @ v[0, :, :seen])[:, 0]
        torch.testing.assert_close(out[0, :, i], want, rtol=1e-4, atol=1e-5)


def test_decode_reads_each_kv_head_for_its_query_group(torch, cpu_only):
    from simserve.profiling.torch_backend import Attention

    attn = Attention(
        torch, Deployment.create(TINY, "a100", 1), torch.float32, torch.device("cpu"), capacity=64
    )
    batch, kv_len = 3, 9
    q = torch.randn(batch, 1, attn.hq, attn.d)
    out = attn.decode(batch, kv_len, q)()
    k, v = attn._kv(batch, kv_len, heads_first=True)
    k, v = (t.repeat_interleave(attn.hq // attn.hkv, dim=1) for t in (k, v))
    want = ((q.transpose(1, 2) @ k.transpose(-1, -2)) / attn.d**0.5).softmax(-1) @ v
    torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-5)


def test_collectives_run_across_spawned_processes(torch):
    """The NCCL code path, run with gloo on two CPU processes (the only multi-process setup CI has)."""
    from simserve.profiling.torch_backend import measure_collectives

    rows = measure_collectives([2], [4096], "cpu", warmup=0, repeats=2)
    assert sorted(rows["op"]) == ["all_reduce", "send_recv"]
    assert (rows["num_workers"] == 2).all() and (rows["size_bytes"] == 4096).all()
    assert (rows["time_ms"] > 0).all()


def test_shipped_gpu_timed_profiles_are_real_gpu_runs_and_fit(tmp_path, monkeypatch):
    """profiles/torch/ holds profiles the torch backend timed on the GPU they name (not a CPU quick run), and
    the predictor fits each at every TP degree it holds."""
    from simserve.predictor.load import default_profiles_root, load_timer
    from simserve.profiling.schema import read_profile

    monkeypatch.setenv("SIMSERVE_CACHE", str(tmp_path))
    root = default_profiles_root() / "torch"
    dirs = sorted(p for p in root.glob("*/*") if (p / "provenance.json").is_file())
    assert dirs, f"no GPU-timed profiles under {root}"
    for path in dirs:
        prof = read_profile(path)
        prov = prof.provenance
        assert prov["backend"] == "torch" and prov["device_is_requested_gpu"] and not prov["quick"], path
        assert prov["device"].lower() == f"nvidia {prov['gpu']}".lower(), path
        for tp in sorted(set(prof.linear["tp"])):
            dep = Deployment.create(prov["model"].lower(), prov["gpu"].lower(), int(tp))
            assert load_timer(dep, root, cache=False)([(512, 0)], [512] * 8) > 0
