"""The GEMM rate each GPU sustains under its power limit, read from NVIDIA's measured tables.

NVIDIA's aiconfigurator-core GEMM tables time each shape for many repetitions. A bf16 GEMM that runs for 32 ms
or more is timed for well over the power controller's reaction time (the 8192³ products measured on an H200
here lost 12% to the power limit within ~15 ms of random-data work: /work/.library/device/KINDS.md is where
that run is recorded), so the fastest such GEMM is the rate the GPU holds at its power limit on compute-bound
work. Short GEMMs in the same tables (< 1 ms) run up to 13% faster on Hopper and Blackwell: the clock had not
come down yet. simserve's sustained-clock model (simserve/predictor/step.py) caps a step's GEMM rate at the
long-GEMM rate printed here; the catalog (simserve/catalog/hardware.py, `sustained_tflops`) holds these values
and tests/test_step_parts.py checks them against the package when it is installed.

    python benchmarks/sustained_gemm.py
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from simserve.profiling import measured

LONG_MS = 32.0  # rows timed at least this long per call count as sustained
SHORT_MS = 1.0


def rates(gpu: str) -> dict | None:
    """Best bf16 GEMM TFLOP/s of the package's newest vLLM GEMM table for `gpu`: short (< 1 ms) and long
    rows."""
    try:
        db = measured.open_database(gpu, "vllm", None)
    except Exception:  # the package lacks this GPU's tables
        return None
    table = db.gemm("bf16") if hasattr(db, "gemm") else None
    if table is None or table.empty:
        return None
    t = table.assign(tf=2.0 * table["m"] * table["n"] * table["k"] / (table["latency"] * 1e-3) / 1e12)
    long, short = t[t["latency"] >= LONG_MS], t[t["latency"] < SHORT_MS]
    if long.empty:
        return None
    return {
        "gpu": gpu,
        "version": db.version,
        "long_rows": len(long),
        "sustained_tflops": round(float(long["tf"].max()), 1),
        "short_best_tflops": round(float(short["tf"].max()), 1),
        "short_over_long": round(float(short["tf"].max() / long["tf"].max()), 3),
    }


def main() -> None:
    argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    ).parse_args()
    rows = [r for gpu in measured.SYSTEMS if (r := rates(gpu)) is not None]
    print(pd.DataFrame(rows).to_string(index=False) if rows else "aiconfigurator-core is not installed")


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()
