"""The measured backend: NVIDIA's per-op tables (aiconfigurator-core) read onto simserve's profile grid."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from simserve.catalog import GPU, MODELS, NODES
from simserve.errors import SimserveError
from simserve.profiling import measured
from simserve.profiling.measured_grid import EXTRAPOLATED, INTERPOLATED, MEASURED, loglog

needs_db = pytest.mark.skipif(
    not measured.installed(), reason=f"needs {measured.PACKAGE} ({measured.INSTALL_HINT})"
)


def test_loglog_is_exact_on_the_grid_and_for_power_laws_and_flags_extrapolation() -> None:
    xs = np.array([1.0, 4.0, 16.0, 64.0])
    ys = 3.0 * xs**1.5  # a power law: log-log interpolation reproduces it everywhere between the points
    v, k = loglog(xs, ys, [4.0, 8.0, 100.0])
    assert v[0] == pytest.approx(24.0) and k[0] == MEASURED
    assert v[1] == pytest.approx(3.0 * 8**1.5) and k[1] == INTERPOLATED
    assert v[2] == pytest.approx(3.0 * 100**1.5) and k[2] == EXTRAPOLATED
    # a step the table measured on both sides (256 → 257) survives; NaN points are skipped
    v, _ = loglog([256, 257, 512, 600], [1.0, 1.3, 2.0, np.nan], [256, 257])
    assert list(v) == pytest.approx([1.0, 1.3])


def test_decode_reads_every_context_at_once_as_it_read_them_one_at_a_time() -> None:
    """HeadTable's decode path interpolates all requested contexts together (and along batch once per grid
    length after `prime`): the values and kinds are those of bracketing and combining one context at a
    time."""
    from simserve.profiling.measured_attention import HeadTable, _combine
    from simserve.profiling.measured_grid import bracket

    rng = np.random.default_rng(3)
    grid_b, grid_l = [1, 2, 8, 32], [128, 1024, 4096, 16384]
    # steeper than quadratic at the top and falling at the bottom: the extrapolated slopes are clamped there
    bend = {128: 10.0, 16384: 30.0}
    rows = pd.DataFrame(
        [
            (b, n, 0.01 * b**0.3 * n**0.8 * bend.get(n, 1.0) * (1 + 0.05 * rng.random()))
            for n in grid_l
            for b in grid_b
        ],
        columns=["batch_size", "length", "latency"],
    )
    # below, on, inside and above the grid
    lengths = np.array([16.0, 128, 500, 1024, 3000, 4096, 16384, 40000])
    for batch in (1.0, 5.0, 64.0):
        table = HeadTable(rows, length_first=False)
        got, kinds = table.time(batch, lengths)
        for i, length in enumerate(lengths):
            xs = bracket(grid_l, length)
            parts = [
                loglog(rows[rows["length"] == x]["batch_size"], rows[rows["length"] == x]["latency"], [batch])
                for x in xs
            ]
            v, k = _combine(xs, [p[0] for p in parts], length, [p[1] for p in parts], np.array(grid_l))
            assert got[i] == v[0] and kinds[i] == k[0]
        primed = HeadTable(rows, length_first=False)
        primed.prime(np.array([batch]))
        again, again_kinds = primed.time(batch, lengths)
        assert np.array_equal(again, got) and np.array_equal(again_kinds, kinds)


def test_without_the_package_the_backend_says_how_to_install_it(monkeypatch, capsys, tmp_path) -> None:
    from simserve.cli import main

    monkeypatch.setattr(measured, "installed", lambda: False)
    with pytest.raises(SystemExit) as exc:
        main(
            [
                "profile",
                "--backend",
                "measured",
                "--gpu",
                "h200",
                "--model",
                "llama-2-70b",
                "--tp",
                "4",
                "--out",
                str(tmp_path),
            ]
        )
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and "pip install -e '.[measured]'" in err and len(err.splitlines()) == 1


def test_plan_labels_the_roofline_fallback_with_why(monkeypatch) -> None:
    from simserve.profiling.generated import measured_source

    monkeypatch.setattr(measured, "installed", lambda: False)
    assert "pip install -e '.[measured]'" in measured_source(GPU.get("b200"))
    assert "has no A40-48GB" in measured_source(GPU.get("a40"))


def test_every_database_system_is_a_catalog_gpu_with_a_default_node() -> None:
    from simserve.catalog.hardware import DEFAULT_NODE

    for gpu in measured.SYSTEMS:
        spec = GPU.get(gpu)
        assert spec.name == gpu and "datasheet" in spec.source
        assert NODES.get(DEFAULT_NODE[gpu]).gpu == gpu


@needs_db
def test_every_system_with_tables_maps_to_the_catalog() -> None:
    data = measured.systems_root() / "data"
    # Intel Arc
    nvidia = {p.name for p in data.iterdir() if p.is_dir() and measured.engines(p.name)} - {"b60"}
    assert nvidia <= set(measured.SYSTEMS.values())


@pytest.fixture(scope="module")
def h200_tp4():
    if not measured.installed():
        pytest.skip(f"needs {measured.PACKAGE}")
    from simserve.profiling.measured_backend import profile

    return profile(MODELS.get("llama-2-70b"), GPU.get("h200"), [4], None, None, 8192, 8192, quick=True)


@needs_db
def test_rows_on_the_grid_are_the_measured_times(h200_tp4) -> None:
    tables, prov = h200_tp4
    db = measured.open_database("H200")
    raw = db.gemm("bf16")
    raw = raw[raw["kernel_source"] == prov["measured"]["gemm_kernel"]]
    # Llama-2-70B at TP 4: qkv_proj is (8192 → 2560), both sizes on the package's grid, as are 256 and 257
    # tokens
    lin = tables["linear"]
    for m in (256, 257, 4096):
        row = lin[(lin["op"] == "qkv_proj") & (lin["num_tokens"] == m)].iloc[0]
        want = raw[(raw["m"] == m) & (raw["n"] == 2560) & (raw["k"] == 8192)]["latency"].median()
        assert row["time_ms"] == pytest.approx(want) and row["source"] == "measured"
    # up_proj (8192 → 14336) lies between measured n: interpolated, and between its neighbours' times
    up = lin[(lin["op"] == "up_proj") & (lin["num_tokens"] == 4096)].iloc[0]
    lo, hi = (
        raw[(raw["m"] == 4096) & (raw["n"] == n) & (raw["k"] == 8192)]["latency"].median()
        for n in (12288, 16384)
    )
    assert up["source"] == "interpolated" and lo < up["time_ms"] < hi


@needs_db
def test_provenance_names_the_package_release_counts_and_license(h200_tp4) -> None:
    tables, prov = h200_tp4
    m = prov["measured"]
    assert (
        prov["backend"] == "measured" and m["package"] == "aiconfigurator-core" and m["system"] == "h200_sxm"
    )
    assert m["engine"] == "vllm" and m["engine_version"] == measured.default_version("h200_sxm", "vllm")
    assert m["license"] == "Apache-2.0" and "NVIDIA" in m["attribution"]
    # H200's GEMM rows are no faster than HBM anywhere: the L2 floor lifts none (tests/test_l2_residency.py)
    assert m["gemm_l2_floor"]["rows_floored"] == 0 and m["gemm_l2_floor"]["l2_mib"] == 50
    for name, df in tables.items():
        assert sum(prov["row_counts"][name].values()) == len(df)
    assert prov["row_counts"]["elementwise"]["modelled"] == len(tables["elementwise"])


@needs_db
def test_collectives_use_the_engines_all_reduce_then_nccl_and_model_send_recv(h200_tp4) -> None:
    """vLLM 0.33.0 at TP 4 on Hopper: FlashInfer's all-reduce to 2 MiB, its custom one below 32 MiB, torch's
    symmetric memory at 32 MiB, NCCL above (vllm_allreduce.py); the measured custom kernel stands in for the
    first two, the faster measured kernel for the third."""
    from simserve.profiling.vllm_allreduce import MIB

    col = h200_tp4[0]["collectives"]
    ar = col[col["op"] == "all_reduce"].sort_values("size_bytes")
    ours, large = ar[ar["size_bytes"] < 32 * MIB], ar[ar["size_bytes"] > 32 * MIB]
    assert (
        ours["kernel"].str.contains("custom all-reduce").all()
        and large["kernel"].str.startswith("nccl").all()
    )
    assert ar[ar["size_bytes"] <= 2 * MIB]["kernel"].str.endswith("runs flashinfer").all()
    assert large["kernel"].str.endswith("runs nccl").all()
    assert (np.diff(large["time_ms"]) > 0).all()
    assert (col[col["op"] == "send_recv"]["source"] == "modelled").all()


def test_vllms_all_reduce_dispatch_by_generation_and_tp() -> None:
    from simserve.profiling.vllm_allreduce import MIB, backends

    sizes = np.array([64 * 1024, MIB, 16 * MIB, 100 * MIB])
    assert list(backends(90, 8, sizes)) == ["flashinfer", "symm_mem", "symm_mem", "nccl"]
    assert list(backends(90, 2, sizes)) == ["flashinfer", "flashinfer", "flashinfer", "nccl"]
    assert list(backends(80, 8, sizes)) == ["custom", "custom", "nccl", "nccl"]  # Ampere: custom below 8 MiB


@needs_db
def test_attention_grows_with_context_and_prefix(h200_tp4) -> None:
    att = h200_tp4[0]["attention"]
    dec = att[(att["phase"] == "decode") & (att["batch_size"] == 24)].sort_values("kv_len")
    assert dec["time_ms"].iloc[-1] > 3 * dec["time_ms"].iloc[0]
    pre = att[(att["phase"] == "prefill") & (att["chunk"] == 512)].sort_values("kv_len")
    assert (np.diff(pre["time_ms"]) >= 0).all() and pre["time_ms"].iloc[-1] > 2 * pre["time_ms"].iloc[0]
    assert set(pre.loc[pre["kv_len"] > 0, "source"]) <= {"derived", "extrapolated"}


@needs_db
def test_heads_fold_into_the_batch_for_a_shape_the_package_lacks() -> None:
    from simserve.profiling.measured_attention import Attention

    db = measured.open_database("H200")
    pre, dec = db.attention("prefill"), db.attention("decode")
    # 32 kv heads (Llama-2-7B at TP 1, MHA) are not in the decode table; 8/8 at 4× the batch does the same
    # work
    mha = Attention(pre, dec, 32, 32, 128, "bfloat16", "test")
    gqa = Attention(pre, dec, 8, 8, 128, "bfloat16", "test")
    t, kinds = mha.decode(np.array([16, 16]), np.array([1024, 4096]), None)
    want, _ = gqa.decode(np.array([64, 64]), np.array([1024, 4096]), None)
    assert t == pytest.approx(want) and (kinds >= 2).all()  # derived at least


@needs_db
@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (["--gpu", "a40"], "has no measured tables for A40-48GB; it has A100-80GB, "),
        (
            ["--gpu", "h200", "--engine", "tgi"],
            "no 'tgi' tables for H200 (h200_sxm); it has vllm 0.24.0; sglang",
        ),
        (
            ["--gpu", "h200", "--engine-version", "0.1.0"],
            "no vllm 0.1.0 tables for H200 (h200_sxm); it has vllm",
        ),
        (
            ["--gpu", "h200", "--backend", "roofline", "--engine", "sglang"],
            "use them with --backend measured",
        ),
    ],
)
def test_bad_gpu_engine_or_release_is_one_line_listing_what_exists(args, expect, tmp_path, capsys) -> None:
    from simserve.cli import main

    cmd = ["profile", "--backend", "measured", "--model", "llama-2-70b", "--tp", "4", "--out", str(tmp_path)]
    with pytest.raises(SystemExit) as exc:
        main(cmd + args)
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and expect in err and len(err.splitlines()) == 1
    assert not any(tmp_path.iterdir())


@needs_db
def test_a_malformed_table_is_named_with_its_problem(tmp_path, monkeypatch) -> None:
    version = tmp_path / "data" / "h200_sxm" / "gemm" / "vllm" / "0.24.0"
    version.mkdir(parents=True)
    (version / "gemm_perf.parquet").write_bytes(b"not parquet")
    ctx = tmp_path / "data" / "h200_sxm" / "attention" / "vllm" / "0.24.0"
    ctx.mkdir(parents=True)
    pd.DataFrame({"latency": [-1.0]}).to_parquet(ctx / "context_attention_perf.parquet")
    monkeypatch.setattr(measured, "systems_root", lambda: tmp_path)
    measured.engines.cache_clear()
    try:
        db = measured.open_database("H200", "vllm", "0.24.0")
        with pytest.raises(SimserveError, match=r"gemm_perf.parquet: not a readable parquet table"):
            db.gemm()
        with pytest.raises(
            SimserveError, match=r"context_attention_perf.parquet: missing column\(s\) kernel_source"
        ):
            db.attention("prefill")
    finally:
        measured.engines.cache_clear()


@needs_db
def test_cli_writes_a_profile_the_predictor_fits_and_run_labels_it(tmp_path, monkeypatch, capsys) -> None:
    from simserve.cli import main

    monkeypatch.setenv("SIMSERVE_CACHE", str(tmp_path / "cache"))
    main(
        [
            "profile",
            "--backend",
            "measured",
            "--gpu",
            "h100",
            "--model",
            "mistral-7b",
            "--tp",
            "1",
            "--quick",
            "--max-model-len",
            "4096",
            "--max-tokens",
            "4096",
            "--out",
            str(tmp_path / "p"),
        ]
    )
    prov = json.loads((tmp_path / "p/h100-sxm/mistral-7b/provenance.json").read_text())
    assert "--backend measured --engine vllm" in prov["command"] and prov["measured"]["system"] == "h100_sxm"
    main(
        [
            "run",
            "--model",
            "mistral-7b",
            "--gpu",
            "h100",
            "--profiles",
            str(tmp_path / "p"),
            "--requests",
            "20",
            "--qps",
            "1",
            "--max-model-len",
            "4096",
            "--out",
            str(tmp_path / "r"),
        ]
    )
    summary = json.loads((tmp_path / "r/summary.json").read_text())
    assert (
        summary["profile"].startswith("measured (aiconfigurator-core")
        and summary["summary"]["completed"] == 20
    )
    assert "measured (aiconfigurator-core" in capsys.readouterr().out


@needs_db
def test_a_gpu_with_tables_but_no_profile_gets_the_measured_command(tmp_path) -> None:
    from simserve.deployment import Deployment
    from simserve.predictor.load import load_timer

    with pytest.raises(
        SimserveError, match=r"`simserve profile --gpu b200 --model mistral-7b --tp 1 --backend measured"
    ):
        load_timer(Deployment.create("mistral-7b", "b200"), profiles_root=tmp_path)


@needs_db
def test_rows_of_another_engine_release_are_not_merged_into_a_measured_profile(tmp_path, capsys) -> None:
    from simserve.cli import main

    base = [
        "profile",
        "--backend",
        "measured",
        "--gpu",
        "h200",
        "--model",
        "mistral-7b",
        "--quick",
        "--max-model-len",
        "2048",
        "--max-tokens",
        "2048",
        "--out",
        str(tmp_path),
    ]
    main([*base, "--tp", "1"])
    with pytest.raises(SystemExit) as exc:
        main([*base, "--tp", "2", "--engine", "sglang"])
    assert exc.value.code == 2 and "was made differently" in capsys.readouterr().err


@needs_db
def test_an_fp8_deployment_reads_the_fp8_gemm_and_kv_rows() -> None:
    from simserve.profiling.measured_backend import profile

    model = MODELS.get("llama-2-70b")
    t8, p8 = profile(
        model, GPU.get("h200"), [4], None, None, 2048, 2048, quick=True, dtype="fp8", kv_dtype="fp8"
    )
    t16, _ = profile(model, GPU.get("h200"), [4], None, None, 2048, 2048, quick=True)
    assert p8["measured"]["gemm_dtype"] == "fp8" and p8["measured"]["kv_cache_dtype"] == "fp8"
    big = (t8["linear"]["num_tokens"] == 2048) & (t8["linear"]["op"] == "up_proj")
    assert t8["linear"].loc[big, "time_ms"].iloc[0] < 0.9 * t16["linear"].loc[big, "time_ms"].iloc[0]


@needs_db
def test_moe_rows_are_the_packaged_fused_moe_times_or_say_why_not() -> None:
    from simserve.deployment import Deployment
    from simserve.profiling.measured_backend import profile
    from simserve.profiling.measured_moe import read_moe

    model = MODELS.get("qwen3-235b-a22b")
    tables, prov = profile(model, GPU.get("h200"), [4], None, None, 2048, 2048, quick=True, dtype="fp8")
    lin = tables["linear"]
    ep4 = lin[lin["op"] == "moe@ep4"]
    # EP 4 = TP 4 is what vLLM runs with --enable-expert-parallel: the package's (moe_tp 1, moe_ep 4) rows,
    # block-scaled fp8 (Qwen's published fp8 checkpoint format), balanced routing, read as they are on the
    # grid
    db = measured.open_database("H200")
    raw, _ = read_moe(db)
    want = raw[
        (raw["hidden_size"] == 4096)
        & (raw["inter_size"] == 1536)
        & (raw["topk"] == 8)
        & (raw["num_experts"] == 128)
        & (raw["moe_tp_size"] == 1)
        & (raw["moe_ep_size"] == 4)
        & (raw["moe_dtype"] == "fp8_block")
        & (raw["distribution"] == "balanced")
    ]
    kernel = ep4["kernel"].iloc[0].split(" ")[0]
    want = want[want["kernel_source"] == kernel].groupby("num_tokens")["latency"].median()
    on_grid = ep4[ep4["num_tokens"].isin(want.index)]
    assert len(on_grid) >= 5 and (on_grid["source"] == "measured").all()
    assert on_grid["time_ms"].tolist() == pytest.approx(want[on_grid["num_tokens"]].tolist())
    # EP 2 inside TP 4 (experts split 2 ways as well): vLLM runs no such layout and the package has no rows,
    # so the rows are the roofline's, marked modelled, and say what the package lacks
    ep2 = lin[lin["op"] == "moe@ep2"]
    assert (ep2["source"] == "modelled").all() and "no fp8_block MoE rows for expert TP 2 × EP 2" in ep2[
        "kernel"
    ].iloc[0]
    assert prov["row_counts"]["linear"]["modelled"] == len(ep2)
    assert Deployment.create(model, "h200", 4, ep=4, dtype="fp8").expert_tp == 1


@needs_db
def test_mla_attention_is_the_module_less_its_projections() -> None:
    from simserve.deployment import Deployment
    from simserve.ops import linear_ops
    from simserve.profiling import measured_mla
    from simserve.profiling.measured_backend import gemm_ms, measured_gemm_rows, profile

    model = MODELS.get("deepseek-v3")
    tables, prov = profile(model, GPU.get("h200"), [8], None, None, 4096, 4096, quick=True, dtype="fp8")
    att = tables["attention"]
    assert (
        set(att["source"]) <= {"derived", "extrapolated"}
        and "MLA module" in prov["measured"]["attention_kernels"]["decode"]
    )
    # a measured decode module (16 heads per GPU at TP 8, one request) = the profile's attention + the MLA
    # projections from the bf16 GEMM table, where the grid meets the package's (batch 1, context 1024)
    db = measured.open_database("H200")
    mods, _ = measured_mla.read_modules(db)
    dec = mods["decode"]
    row = dec[
        (dec["num_heads"] == 16)
        & (dec["batch_size"] == 1)
        & (dec["step"] == 1024)
        & (dec["gemm_type"] == "bfloat16")
        & (dec["kv_cache_dtype"] == "bfloat16")
    ]
    dep = Deployment.create(model, "h200", 8, ep=8, dtype="fp8")
    rows, _ = measured_gemm_rows(db, "bf16")
    proj = sum(
        gemm_ms(rows, np.array([1.0]), op.in_features, op.out_features)[0][0]
        for op in linear_ops(dep)
        if op.name in ("qkv_a_proj", "q_b_proj", "kv_b_proj", "o_proj")
    )
    att_obj, _ = measured_mla.attention(mods, dep, "bfloat16", gemm_ms, rows, "h200")
    t, _ = att_obj.decode(np.array([1]), np.array([1024 + 1]), None)
    assert t[0] + proj == pytest.approx(row["latency"].median(), rel=1e-6)
    # decode attention grows with context and batch, as the kernel's bytes do
    d = att[att["phase"] == "decode"]
    b1 = d[d["batch_size"] == 1].sort_values("kv_len")["time_ms"].to_numpy()
    assert b1[-1] > b1[0]
    # routed experts of DeepSeek-V3 at EP 8: the package's block-fp8 rows
    lin = tables["linear"]
    assert (lin[lin["op"] == "moe@ep8"]["source"] != "modelled").all()


def test_skewed_routing_gets_a_roofline_profile_with_why() -> None:
    from simserve.profiling.generated import measured_source

    assert "no Zipf-skewed routing" in measured_source(GPU.get("h200"), MODELS.get("qwen3-235b-a22b"), 1.0)
