"""Why Vidur's H100 GEMMs are slower than NVIDIA's table: the checks behind 'no condition term' (issue 21)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from simserve.catalog import GPU
from simserve.profiling import roofline_validation as v

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import vidur_h100_condition as vc  # noqa: E402

REF = v.reference_root(Path(__file__))


def test_eager_cublas_is_not_slower_than_the_graph_replayed_table_once_the_flush_is_off() -> None:
    # Our H200 torch timings (eager, one call between CUDA events, L2 zero-filled first) against NVIDIA's H200
    # table (the shipped measured profile), the flush's write-back min(W, L2) / HBM taken off: at m > 512,
    # where a GEMM runs long enough that launch and flush do not matter, eager and graph agree within 3%
    # (median), so running eagerly cannot make Vidur's kernels 15% slower there.
    t = vc.torch_vs_table()
    assert len(t) > 10_000
    assert abs(t[t["num_tokens"] > 512]["r"].median()) < 0.03


@pytest.mark.skipif(not (REF / "compute" / "h100").is_dir(), reason=f"no compute/h100 under {REF}")
def test_vidurs_fastest_h100_gemm_is_above_an_h100_nvls_peak() -> None:
    # Vidur's docs list an H100 NVL box beside the DGX H100; the data rule the NVL (835 TF/s dense) out.
    best = vc.best_tflops(REF)
    assert best["h100"] > GPU.get("h100-nvl").peak_tflops
    assert best["h100"] < GPU.get("h100").peak_tflops
