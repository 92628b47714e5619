"""The validation commands without their data: each source absent is skipped with its reason, nothing
crashes."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import validate_collectives  # noqa: E402
import validate_kernels  # noqa: E402

from simserve.profiling import arch_calibration as ac  # noqa: E402
from simserve.profiling import perfdb_validation as pv  # noqa: E402


def test_kernel_tables_without_reference_or_database_say_why(tmp_path):
    text = validate_kernels.per_gpu_section(None, None)
    assert "Not validated" in text and "aiconfigurator-core is not installed" in text
    (tmp_path / "compute" / "mi300x").mkdir(parents=True)  # a GPU folder no catalog GPU maps to
    mlp, db, notes = validate_kernels.per_gpu_tables(tmp_path, None)
    assert mlp.empty and db is None and any("compute/mi300x" in n for n in notes)


def test_collective_tables_without_data_say_why():
    text = validate_collectives.section(None, None)
    assert text.startswith(validate_collectives.BEGIN) and text.endswith(validate_collectives.END)
    assert "Vidur's network profiles not found" in text and "NCCL tables" in text


def test_calibration_without_data_fits_nothing(tmp_path):
    assert ac.calibrate_all(None, None) == {}
    assert ac.fit(90, tmp_path, tmp_path) is None  # empty folders: no rows of either source


def test_collectives_doc_keeps_its_prose_around_the_generated_tables(tmp_path):
    doc = tmp_path / "collectives.md"
    doc.write_text(
        f"# Title\n\nprose\n\n{validate_collectives.BEGIN}\nold\n{validate_collectives.END}\n\ntail\n"
    )
    assert validate_collectives.main(["--reference", str(tmp_path / "none"), "--out", str(doc)]) == 0
    text = doc.read_text()
    assert text.startswith("# Title\n\nprose\n\n") and text.endswith("\n\ntail\n") and "\nold\n" not in text


@pytest.mark.skipif(pv.data_root() is None, reason=pv.missing_reason())
def test_missing_system_table_is_skipped(tmp_path):
    assert pv.load_gemm(tmp_path, ("h100_sxm",)).empty and pv.load_attention(tmp_path).empty
