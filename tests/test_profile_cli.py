"""`simserve profile`: what it writes, what it records, and that a failing run leaves nothing behind."""

import json
import sys

import pytest

from simserve.cli import main
from simserve.profiling import schema
from simserve.profiling.schema import read_profile


def run(*args):
    try:
        main(["profile", *args])
    except SystemExit as exc:  # typer exits 0 after a command succeeds
        if exc.code not in (0, None):
            raise


def failing(capsys, *args) -> str:
    with pytest.raises(SystemExit) as exc:
        run(*args)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err
    return err


def test_writes_a_readable_profile_with_provenance(tmp_path, capsys):
    run("--gpu", "a100", "--model", "mistral-7b", "--tp", "1,2", "--quick", "--out", str(tmp_path))
    prof = read_profile(tmp_path / "a100-80gb" / "mistral-7b")
    assert set(prof.linear["tp"]) == {1, 2}
    p = prof.provenance
    assert p["backend"] == "roofline (analytic)"
    assert p["command"].startswith("simserve profile --gpu a100 --model mistral-7b --tp 1,2")
    assert p["deployment"]["node"] == "a100-pairwise-nvlink" and p["deployment"]["pp"] == 1
    assert {"simserve", "numpy", "pandas", "python"} <= set(p["versions"])
    assert p["date"].endswith("+00:00")
    assert p["gemm_tiles"]["arch"] == "ampere" and p["gemm_tiles"]["rows"] == 128
    assert "linear.csv" in capsys.readouterr().out


def test_rerun_replaces_the_profile_cleanly(tmp_path):
    args = (
        "--gpu",
        "a40",
        "--model",
        "llama2-70b",
        "--tp",
        "2,4",
        "--pp",
        "2",
        "--quick",
        "--out",
        str(tmp_path),
    )
    run(*args)
    run(*args)
    assert [p.name for p in tmp_path.iterdir()] == ["a40-48gb"]
    assert sorted(p.name for p in (tmp_path / "a40-48gb").iterdir()) == ["llama2-70b"]
    assert read_profile(tmp_path / "a40-48gb" / "llama2-70b").provenance["deployment"]["pp"] == 2


def test_replica_across_nodes_gets_network_rows(tmp_path):
    run(
        "--gpu", "a100", "--model", "falcon-180b", "--tp", "4", "--pp", "2", "--quick", "--out", str(tmp_path)
    )
    prof = read_profile(tmp_path / "a100-80gb" / "falcon-180b")
    assert "ethernet-100g" in set(prof.collectives["link"])
    assert prof.provenance["deployment"]["network"] == "ethernet-100g"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--gpu", "a100", "--model", "yi-34b", "--tp", "3"), "does not divide"),
        (("--gpu", "a100", "--model", "no-such-model"), "unknown model"),
        (("--gpu", "tpu9", "--model", "yi-34b"), "unknown GPU"),
        (("--gpu", "a100", "--model", "yi-34b", "--tp", "1,x"), "--tp must be"),
        (("--gpu", "a100", "--model", "yi-34b", "--backend", "magic"), "unknown backend"),
        (("--gpu", "a100", "--model", "yi-34b", "--tp", "8"), "more GPUs than one"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, args, message):
    err = failing(capsys, *args, "--out", str(tmp_path / "out"))
    assert message in err
    assert not (tmp_path / "out").exists()


def test_missing_torch_backend_is_a_clear_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(
        sys.modules, "simserve.profiling.torch_backend", None
    )  # import now raises ImportError
    err = failing(capsys, "--gpu", "a100", "--model", "yi-34b", "--backend", "torch", "--out", str(tmp_path))
    assert "torch" in err and "--backend roofline" in err
    assert list(tmp_path.iterdir()) == []


def test_interrupted_write_leaves_no_partial_profile(tmp_path, monkeypatch, capsys):
    out = tmp_path / "profiles"
    run("--gpu", "a100", "--model", "mistral-7b", "--tp", "1", "--quick", "--out", str(out))
    target = out / "a100-80gb" / "mistral-7b"
    before = {f.name: f.read_bytes() for f in target.iterdir()}

    real_write_csv, calls = schema.write_csv, []

    def write_csv(df, f):  # the disk fills up while the second table is being written
        calls.append(1)
        if len(calls) == 2:
            f.write_text("half a tab")  # a partial file in the temporary directory
            raise OSError("disk full")
        return real_write_csv(df, f)

    monkeypatch.setattr(schema, "write_csv", write_csv)
    with pytest.raises(SystemExit) as exit_:
        run("--gpu", "a100", "--model", "mistral-7b", "--tp", "1,2", "--quick", "--out", str(out))
    err = capsys.readouterr().err  # one line, the file system's words, no traceback
    assert exit_.value.code == 2 and err.count("\n") == 1 and "disk full" in err
    # The old profile is intact, and no temporary directory is left beside it.
    assert {f.name: f.read_bytes() for f in target.iterdir()} == before
    assert [p.name for p in target.parent.iterdir()] == ["mistral-7b"]
    assert json.loads((target / "provenance.json").read_text())["deployment"]["tp"] == [1]
