"""Vidur import/export: exact values from the measured reference files, round trips, and bad input."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simserve.catalog import GPU, MODELS, NETWORKS, NODES
from simserve.cli import main
from simserve.io import exact_floats
from simserve.profiling import roofline
from simserve.profiling.schema import read_profile, write_profile
from simserve.profiling.vidur import EXTRA_STATS, OP_MAP, export_vidur, import_vidur

REF = Path(__file__).resolve().parents[1].parent / "shared" / "reference" / "vidur" / "profiling"
needs_ref = pytest.mark.skipif(
    not REF.is_dir(), reason="../shared/reference (measured Vidur profiles) is absent"
)
A100, NODE = GPU.get("a100"), NODES.get("a100-pairwise-nvlink")
CODELLAMA = MODELS.get(
    "codellama-34b"
)  # the legacy attention.csv's shape: 64 q / 8 kv heads, hidden 8192, TP 2


def vidur_dir(tmp: Path, mlp: str | None, attention: bool = True, network: bool = True) -> Path:
    """A Vidur-layout folder built from copies of the reference files (never copied into the repo)."""
    src = tmp / "vidur"
    src.mkdir()
    if mlp:
        shutil.copy(REF / "compute" / "a100" / mlp / "mlp.csv", src)
    if attention:
        shutil.copy(REF / "legacy" / "a100" / "attention.csv", src)
    if network:
        for name in ("all_reduce.csv", "send_recv.csv"):
            shutil.copy(REF / "network" / "a100_pairwise_nvlink" / name, src)
    return src


def run_cli(*args: str) -> int:
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
        raise SystemExit(0)
    return exit_info.value.code


@pytest.fixture(scope="module")
def codellama(tmp_path_factory):
    """The CodeLlama-34B mlp.csv, legacy attention.csv and pairwise-NVLink network files, imported and
    re-read."""
    src = vidur_dir(tmp_path_factory.mktemp("ref"), "codellama/CodeLlama-34b-Instruct-hf")
    tables, provenance = import_vidur(src, CODELLAMA, A100, NODE)
    return src, read_profile(write_profile(src.parent / "profile", tables, provenance))


def same(got: pd.Series, want: pd.Series) -> bool:
    """Bit-for-bit equal, NaN matching NaN."""
    a, b = np.asarray(got, dtype=float), np.asarray(want, dtype=float)
    return a.shape == b.shape and bool(np.all((a == b) | (np.isnan(a) & np.isnan(b))))


@needs_ref
def test_import_reproduces_every_reference_value(codellama):
    src, prof = codellama
    mlp = pd.read_csv(src / "mlp.csv", **exact_floats())
    for vop, op in OP_MAP.items():
        table = prof.linear if op in set(prof.linear["op"]) else prof.elementwise
        rows = table[table["op"] == op]
        assert same(rows["tp"], mlp["num_tensor_parallel_workers"]) and same(
            rows["num_tokens"], mlp["num_tokens"]
        )
        assert same(rows["time_ms"], mlp[f"time_stats.{vop}.median"]), op
        for stat, col in EXTRA_STATS.items():
            assert same(rows[col], mlp[f"time_stats.{vop}.{stat}"]), (op, stat)
    att = pd.read_csv(src / "attention.csv", **exact_floats())
    want = att["time_stats.attn_prefill.median"].where(
        att["is_prefill"], att["time_stats.attn_decode.median"]
    )
    assert same(prof.attention["time_ms"], want)
    assert same(prof.attention["kv_len"], att["kv_cache_size"]) and same(
        prof.attention["tp"], att["num_tensor_parallel_workers"]
    )
    assert (prof.attention["phase"] == np.where(att["is_prefill"], "prefill", "decode")).all()
    for op in ("all_reduce", "send_recv"):
        net = pd.read_csv(src / f"{op}.csv", **exact_floats())
        rows = prof.collectives[prof.collectives["op"] == op]
        assert same(rows["time_ms"], net[f"time_stats.{op}.median"]) and same(rows["size_bytes"], net["size"])
        assert same(rows["num_workers"], net["num_workers"])
        # send/recv with one device per node crosses nodes: no network was named, so it is not passed off as
        # one
        crosses = net["devices_per_node"] < net["num_workers"]
        assert (rows["link"] == np.where(crosses, "unknown-network", NODE.name)).all()


@needs_ref
def test_export_writes_vidur_columns_and_gives_back_the_measurements(codellama, tmp_path):
    src, prof = codellama
    files = export_vidur(prof, tmp_path / "out", CODELLAMA, A100, NODE)
    compute = tmp_path / "out/data/profiling/compute/a100/codellama/CodeLlama-34b-Instruct-hf"
    assert set(files.values()) == {
        compute / "mlp.csv",
        compute / "attention.csv",
        tmp_path / "out/data/profiling/network/a100_pairwise_nvlink/all_reduce.csv",
        tmp_path / "out/data/profiling/network/a100_pairwise_nvlink/send_recv.csv",
    }
    for path in files.values():
        ref = pd.read_csv(src / path.name, **exact_floats())
        ref = ref.loc[:, [not c.startswith("Unnamed:") for c in ref.columns]]
        out = pd.read_csv(path, **exact_floats())
        assert list(out.columns) == list(ref.columns), path.name
        # every measured column comes back unchanged (emb and the reshapes are not simserve ops: estimated)
        estimated = (
            "time_stats.emb.",
            "time_stats.attn_input_reshape",
            "time_stats.attn_output",
            "attention_backend",
            "profile_method",
        )
        for col in (c for c in ref.columns if not c.startswith(estimated)):
            numeric = pd.api.types.is_numeric_dtype(ref[col])
            assert (
                same(out[col], ref[col]) if numeric else (out[col].astype(str) == ref[col].astype(str)).all()
            ), col
    assert (
        pd.read_csv(compute / "attention.csv", **exact_floats())["attention_backend"]
        == "AttentionBackend.FLASH_ATTENTION"
    ).all()


@needs_ref
def test_llama2_mlp_alone_needs_fill_from(tmp_path):
    model = MODELS.get("llama-2-7b")
    src = vidur_dir(tmp_path, "meta-llama/Llama-2-7b-hf", attention=False, network=False)
    out = tmp_path / "profiles"
    assert (
        run_cli("vidur", "import", str(src), "--model", "llama-2-7b", "--gpu", "a100", "--out", str(out)) == 2
    )
    assert not out.exists()
    tables, provenance = roofline.profile(model, A100, [1, 2], NODE, None, quick=True)
    fill = write_profile(tmp_path / "roofline", tables, provenance)
    args = ["vidur", "import", str(src), "--model", "llama-2-7b", "--gpu", "a100", "--fill-from", str(fill)]
    assert run_cli(*args, "--out", str(out)) == 0
    prof = read_profile(out / "a100-80gb" / "llama-2-7b")
    mlp = pd.read_csv(src / "mlp.csv", **exact_floats())
    qkv = prof.linear[prof.linear["op"] == "qkv_proj"]
    assert same(qkv["time_ms"], mlp["time_stats.attn_pre_proj.median"])
    assert same(prof.attention["time_ms"], read_profile(fill).attention["time_ms"])
    assert prof.provenance["tables"]["linear"] == "vidur mlp.csv"
    assert "roofline" in prof.provenance["tables"]["attention"]


@needs_ref
def test_reads_vidur_tree_layout_and_refuses_another_models_attention(tmp_path):
    from simserve.profiling.vidur import locate

    found = locate(REF, MODELS.get("llama-2-7b"), A100, NODE)
    assert set(found) == {"mlp.csv", "all_reduce.csv", "send_recv.csv"}
    src = vidur_dir(tmp_path, "meta-llama/Llama-2-7b-hf")  # legacy attention is a 64-head model's
    with pytest.raises(Exception, match=r"attention.csv: row 1 has n_embd=8192 but Llama-2-7B has 4096"):
        import_vidur(src, MODELS.get("llama-2-7b"), A100, NODE)


def test_round_trip_through_vidur_format(tmp_path):
    model, network = MODELS.get("llama-2-7b"), NETWORKS.get("ethernet-100g")
    tables, provenance = roofline.profile(model, A100, [1, 2], NODE, network, quick=True)
    provenance.update(model=model.name, gpu=A100.name, node=NODE.name)
    prof = read_profile(write_profile(tmp_path / "p", tables, provenance))
    export_vidur(prof, tmp_path / "vidur", model, A100, NODE)
    back_tables, _ = import_vidur(tmp_path / "vidur", model, A100, NODE, network)
    back = read_profile(write_profile(tmp_path / "back", back_tables, {"backend": "vidur-import"}))
    for name in ("linear", "elementwise", "attention", "collectives"):
        a, b = getattr(prof, name), getattr(back, name)
        # Vidur's format has no hop between NVLink pairs (vidur_export.collective_frame)
        if name == "collectives":
            assert (a["link"] == f"{NODE.name}:pcie").any()
            a = a[a["link"] != f"{NODE.name}:pcie"]
        keys = [c for c in a.columns if c in b.columns and c != "time_ms"]
        a, b = a.sort_values(keys, kind="stable"), b.sort_values(keys, kind="stable")
        assert len(a) == len(b) and (a[keys].to_numpy() == b[keys].to_numpy()).all(), name
        assert same(a["time_ms"], b["time_ms"]), name


def test_as_model_needs_the_same_layer_shapes(tmp_path):
    mistral = MODELS.get("mistral-7b")
    tables, provenance = roofline.profile(mistral, A100, [1], NODE, None, quick=True)
    prof = read_profile(write_profile(tmp_path / "p", tables, provenance))
    files = export_vidur(prof, tmp_path / "ok", mistral, A100, NODE, vidur_model=MODELS.get("llama-3-8b"))
    mlp = pd.read_csv(next(p for p in files.values() if p.name == "mlp.csv"))
    assert "meta-llama/Meta-Llama-3-8B" in str(next(iter(files.values())))
    assert (mlp["vocab_size"] == 128256).all() and (mlp["n_kv_head"] == 8).all()
    with pytest.raises(Exception, match="differs from Mistral-7B in num_kv_heads"):
        export_vidur(prof, tmp_path / "bad", mistral, A100, NODE, vidur_model=MODELS.get("llama-2-7b"))


def test_export_refuses_to_replace_a_folder_it_did_not_write(tmp_path, capsys):
    tables, provenance = roofline.profile(MODELS.get("llama-2-7b"), A100, [1], NODE, None, quick=True)
    prof_dir = write_profile(tmp_path / "profiles" / "a100-80gb" / "llama-2-7b", tables, provenance)
    keep = tmp_path / "mine"
    keep.mkdir()
    (keep / "notes.txt").write_text("mine")
    assert run_cli("vidur", "export", str(prof_dir), "--out", str(keep)) == 2
    assert "holds files simserve did not write" in capsys.readouterr().err
    assert [p.name for p in keep.iterdir()] == ["notes.txt"]
    assert run_cli("vidur", "export", str(prof_dir), "--out", str(tmp_path / "vidur")) == 0
    assert (
        run_cli("vidur", "export", str(prof_dir), "--out", str(tmp_path / "vidur")) == 0
    )  # its own: replaced


def small_vidur_dir(tmp_path: Path) -> Path:
    """A two-row Vidur mlp.csv for Llama-2-7B, written here (no reference data needed)."""
    src = tmp_path / "small"
    src.mkdir()
    cols = {"time_stats.emb.median": [0.3, 0.3], **{f"time_stats.{op}.median": [0.1, 0.2] for op in OP_MAP}}
    shape = {
        "n_head": 32,
        "n_kv_head": 32,
        "n_embd": 4096,
        "n_expanded_embd": 11008,
        "vocab_size": 32768,
        "use_gated_mlp": True,
        "num_tokens": [8, 16],
        "num_tensor_parallel_workers": 1,
    }
    pd.DataFrame({**cols, **shape}).to_csv(src / "mlp.csv", index=False)
    return src


@pytest.mark.parametrize(
    ("corrupt", "message"),
    [
        (lambda f: f.write_bytes(b'a,b\n1,2,3,"\n\x00'), "mlp.csv is not a readable CSV"),
        (
            lambda f: f.write_text(f.read_text().replace("0.2,", "nan,", 1)),
            r"mlp.csv: row 2 \(line 3\) has time_stats",
        ),
        (lambda f: f.write_text(f.read_text().replace("0.2,", "-0.2,", 1)), r"row 2 \(line 3\).*negative"),
        (lambda f: f.write_text(f.read_text().replace("0.2,", "fast,", 1)), r"row 2 \(line 3\).*'fast'"),
        (lambda f: f.unlink(), "no Vidur profile files"),
    ],
)
def test_bad_vidur_files_fail_with_one_line_and_write_nothing(tmp_path, capsys, corrupt, message):
    src = small_vidur_dir(tmp_path)
    corrupt(src / "mlp.csv")
    tables, provenance = roofline.profile(MODELS.get("llama-2-7b"), A100, [1], NODE, None, quick=True)
    fill = write_profile(tmp_path / "fill", tables, provenance)
    out = tmp_path / "profiles"
    args = ["vidur", "import", str(src), "--model", "llama-2-7b", "--gpu", "a100", "--fill-from", str(fill)]
    assert run_cli(*args, "--out", str(out)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1
    assert pd.Series([err]).str.contains(message).all(), err
    assert not out.exists()


def test_missing_source_folder(tmp_path, capsys):
    assert run_cli("vidur", "import", str(tmp_path / "nope"), "--model", "llama-2-7b", "--gpu", "a100") == 2
    assert "does not exist" in capsys.readouterr().err
