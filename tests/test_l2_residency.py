"""Rows NVIDIA's tables timed with the weights warm in L2 are floored to streaming them from HBM; cold rows
stay."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from simserve.catalog import GPU
from simserve.profiling import l2_residency, measured

needs_db = pytest.mark.skipif(
    not measured.installed(), reason=f"needs {measured.PACKAGE} ({measured.INSTALL_HINT})"
)

MIB = 2**20
# A made-up GPU of 64 MiB L2: 6 bf16 weights of 4096 x 4096 (32 MiB each, 192 MiB) cannot stay resident within
# 2x L2; 6 of 1024 x 1024 (2 MiB each, 12 MiB) can.
GPU_64 = dataclasses.replace(GPU.get("l40s"), l2_mib=64)


def _rows() -> pd.DataFrame:
    # cold: 32 MiB of weights in 40 µs = 0.84 GB/ms (838.9 GB/s) at m = 1, 35 µs at m = 16 (958.7 GB/s: the
    # fastest) warm: 2 MiB in 1 µs (2.1 TB/s: faster than the bus) at m = 1, 10 µs at m = 4096 (compute, above
    # any floor)
    return pd.DataFrame(
        {
            "m": [1, 16, 1, 4096, 32],
            "n": [4096, 4096, 1024, 1024, 4096],
            "k": [4096, 4096, 1024, 1024, 4096],
            "latency": [0.040, 0.035, 0.001, 0.010, 0.050],
        }
    )


def test_cold_bandwidth_is_the_fastest_skinny_row_that_cannot_be_resident() -> None:
    rate = l2_residency.cold_bandwidth(_rows(), "bfloat16", GPU_64)
    assert rate == pytest.approx(32 * MIB / 35e-6)  # the m = 16 row; m = 32 is not skinny, 1024² is not cold


def test_a_warm_row_rises_to_its_weights_cold_streaming_time_and_cold_rows_stay() -> None:
    rows = _rows()
    out, floor = l2_residency.floor_to_hbm(rows, "bfloat16", GPU_64)
    rate = 32 * MIB / 35e-6
    want = 2 * MIB / rate * 1e3  # ms to stream 2 MiB at the cold rate: 2.19 µs
    assert out["latency"].iloc[2] == pytest.approx(want) and want > rows["latency"].iloc[2]
    untouched = [0, 1, 3, 4]  # cold shapes, and a warm shape whose time is above its floor
    assert out["latency"].iloc[untouched].tolist() == rows["latency"].iloc[untouched].tolist()
    assert (floor.floored, floor.rows) == (1, 5) and floor.median_lift == pytest.approx(want / 0.001)
    prov = floor.provenance(GPU_64)
    assert prov["label"] == l2_residency.LABEL and prov["rows_floored"] == 1 and prov["l2_mib"] == 64


def test_one_weight_per_loop_fits_where_six_do_not() -> None:
    # fp8_block runs one layer per timed loop (collect_gemm.py outside_loop_count = 1): 48 MiB fits 2 x 64 MiB
    n = k = 7168  # 49 MiB of fp8 weights
    assert l2_residency.can_be_resident(n, k, "fp8_block", GPU_64)
    assert not l2_residency.can_be_resident(n, k, "fp8", GPU_64)


def test_a_gpu_without_a_known_l2_or_a_table_without_cold_rows_is_unchanged() -> None:
    rows = _rows()
    for gpu, table in ((dataclasses.replace(GPU_64, l2_mib=0), rows), (GPU_64, rows.iloc[[2, 3]])):
        out, floor = l2_residency.floor_to_hbm(table, "bfloat16", gpu)
        assert out["latency"].tolist() == table["latency"].tolist() and floor.floored == 0


def test_every_gpu_of_the_database_has_an_l2_size_with_a_source() -> None:
    from simserve.catalog import hardware

    # the built-in entries (a test may have loaded docs/examples/catalog.yaml's L40S over the table's)
    builtin = {g.name: g for g in hardware._DATABASE_GPUS}
    builtin |= {n: GPU.get(n) for n in ("A100-80GB", "A40-48GB", "H100-SXM", "H200", "H100-NVL")}
    assert set(measured.SYSTEMS) <= set(builtin) and all(g.l2_mib > 0 for g in builtin.values())
    for name in (
        "A100-80GB",
        "A40-48GB",
        "H100-SXM",
        "H200",
        "B200",
        "B300",
        "L40S",
        "RTX-P6000",
        "A30",
        "L4",
    ):
        assert name in hardware.L2_SOURCES


@needs_db
def test_the_packaged_tables_are_warm_only_where_l2_is_large_against_the_bus() -> None:
    from simserve.profiling.measured_backend import measured_gemm_rows

    for name, warm in (("L40S", True), ("RTX-P6000", True), ("H200", False), ("H100-SXM", False)):
        gpu = GPU.get(name)
        rows, _ = measured_gemm_rows(measured.open_database(gpu.name), "bf16")
        out, floor = l2_residency.floor_to_hbm(rows, "bfloat16", gpu)
        # the cold rate the table shows is below the spec sheet's bus bandwidth
        assert floor.cold_gbps < gpu.hbm_gbps
        assert (floor.floored > 0) == warm
        assert np.all(out["latency"].to_numpy() >= rows["latency"].to_numpy())
        if warm:  # L40S: skinny GEMMs whose 6 weights fit its 96 MB L2 were timed at up to 2.9x its bus
            skinny = rows[
                (rows["m"] <= 16) & l2_residency.can_be_resident(rows["n"], rows["k"], "bfloat16", gpu)
            ]
            fastest = (
                l2_residency.weight_bytes(skinny["n"], skinny["k"], "bfloat16") / skinny["latency"]
            ).max()
            assert fastest / 1e6 > 1.5 * gpu.hbm_gbps


def test_the_h200_torch_timings_extra_time_grows_with_the_weights_up_to_l2_only() -> None:
    """The shipped torch H200 profiles zero-fill 2x L2 before each call: a weight-bound GEMM then pays for
    writing back the dirty lines its reads evict, min(weights, L2) bytes. Their extra time over the measured
    profile grows with the weights while they are under L2 (50 MiB) and stops growing past it."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from l2_in_tables import torch_gap

    gap = torch_gap("h200")
    extra = gap["extra_us"].to_numpy()
    assert len(gap) == 5 and extra[0] < extra[1] < extra[2]  # up to 96 MiB: more to write back
    assert extra[3] < 1.2 * extra[2] and extra[4] < 1.2 * extra[2]  # past L2: no more
    # within 40% of min(weights, L2) / HBM bandwidth in every bin
    assert np.all(np.abs(extra / gap["writeback_us"].to_numpy() - 1) < 0.4)


def test_validation_rows_are_split_by_whether_the_collectors_loop_fits_in_twice_l2() -> None:
    from simserve.profiling import perfdb_validation as pv

    # L40S, 96 MiB L2 (192 MiB for two): 6 x 2 MiB (1024 x 1024) may stay warm; 6 x 128 MiB (8192 x 8192)
    # cannot. H100, 50 MiB L2: 6 x 32 MiB (4096 x 4096, 192 MiB) cannot either; 6 x 2 MiB can.
    df = pd.DataFrame(
        {
            "system": ["l40s", "l40s", "h100_sxm", "h100_sxm"],
            "m": [1, 1, 1, 1],
            "n": [1024, 8192, 4096, 1024],
            "k": [1024, 8192, 4096, 1024],
        }
    )
    assert list(pv.condition(df)) == [pv.L2_WARM, pv.SERVING, pv.SERVING, pv.L2_WARM]
