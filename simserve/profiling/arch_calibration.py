"""Per-architecture calibration of the roofline: which in-sample rows fit each compute capability's constants.

Every compute capability's GEMM constants (minimum duration, achieved fractions of dense tensor peak and of HBM
bandwidth) and elementwise constants (minimum duration and achieved bandwidth fraction per op) are fitted on that
architecture's in-sample rows only, by the same Nelder-Mead on mean |log(predicted/measured)| as the A100
calibration (roofline_validation.calibrate). The in-sample rows are fixed before any fit:

* Vidur's reference profiles (../shared/reference/vidur/profiling/compute/<gpu>): the models of
  roofline_validation.CALIBRATION_MODELS_BY_GPU; every other model of that GPU is held out.
* NVIDIA's database (aiconfigurator-core): the shapes perfdb_validation marks "calibration" (n and k powers of two);
  other shapes and the whole H200 are held out.

Where two sources measure one architecture (Hopper: Vidur's H100 profile and the database's H100 GEMMs) each
source weighs the same in the loss, however many rows it has. Nothing is fitted on elementwise ops of Ada or
Blackwell (no measurement of them here): they borrow sm86's and sm90's (same memory technology, nearest SM design).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd

from simserve.catalog import GPU
from simserve.profiling import perfdb_validation as pv
from simserve.profiling import roofline as rl
from simserve.profiling import roofline_validation as v

# compute capability -> (Vidur GPU folder, database systems) whose in-sample rows fit it. sm80 is the original A100
# calibration (roofline_validation.calibrate): the database's A100 GEMMs stay out-of-sample for it.
SOURCES = {
    86: ("a40", ()),
    89: (None, ("l40s",)),
    90: ("h100", ("h100_sxm",)),
    100: (None, ("b200_sxm",)),
}
ELEMENTWISE_BORROWED = {89: 86, 100: 90}  # no elementwise measurement: the nearest memory system's constants
GEMM_NAMES = ("gemm_min_us", "gemm_compute_eff", "gemm_memory_eff")


def _ratios_gemm(ref_lin, db, c: rl.KernelConstants, tiles=None) -> list[np.ndarray]:
    """predicted / measured per source (Vidur rows, database rows), so each source weighs the same in a loss."""
    out = []
    if ref_lin is not None and len(ref_lin):
        out.append(v.predict_mlp(ref_lin, c, tiles) / ref_lin["measured_ms"].to_numpy())
    if db is not None and len(db):
        out.append(pv.predict(db, {g: c for g in db["gpu"].unique()}, tiles) / db["measured_ms"].to_numpy())
    return out


def in_sample(
    root: Path | None, db_root: Path | None, cc: int
) -> tuple[pd.DataFrame | None, pd.DataFrame | None]:
    """(Vidur rows, database GEMM rows) that may fit compute capability `cc`; None where a source is absent."""
    folder, systems = SOURCES[cc]
    mlp = None
    if folder and root is not None and (root / "compute" / folder).is_dir():
        mlp = v.load_mlp(root, folder=folder)
        mlp = mlp[(mlp["set"] == "calibration") & (mlp["measured_ms"] > 0)].reset_index(drop=True)
    db = None
    if systems and db_root is not None:
        db = pv.load_gemm(db_root, systems)
        db = db[db["set"] == "calibration"].reset_index(drop=True)
    return mlp, db


def _gemm_fit(lin, db, base: rl.KernelConstants, tiles=None) -> tuple[float, list[float]]:
    def loss(x: list[float]) -> float:
        c = dataclasses.replace(base, **dict(zip(GEMM_NAMES, x, strict=True)))
        return float(
            np.mean([np.mean(np.abs(np.log(np.maximum(r, 1e-12)))) for r in _ratios_gemm(lin, db, c, tiles)])
        )

    x = v._fit(loss, [4.0, 0.8, 0.85])
    return loss(x), x


def tile_loss(cc: int, root: Path | None, db_root: Path | None, tiles) -> tuple[float, list[float]]:
    """In-sample GEMM loss of compute capability `cc` with `tiles`, its constants refitted: (loss, constants)."""
    mlp, db = in_sample(root, db_root, cc)
    lin = None if mlp is None else mlp[mlp["kind"] == "linear"].reset_index(drop=True)
    return _gemm_fit(lin, db, rl.ARCH_KERNELS.get(cc, rl.KERNELS), tiles)


def fit(cc: int, root: Path | None, db_root: Path | None) -> dict[str, object] | None:
    """Refitted constants of compute capability `cc` (GEMM, and elementwise where measured), or None without data."""
    mlp, db = in_sample(root, db_root, cc)
    lin = None if mlp is None else mlp[mlp["kind"] == "linear"].reset_index(drop=True)
    if (lin is None or lin.empty) and (db is None or db.empty):
        return None
    _, x = _gemm_fit(lin, db, rl.ARCH_KERNELS.get(cc, rl.KERNELS))
    out: dict[str, object] = dict(zip(GEMM_NAMES, x, strict=True))
    if mlp is not None:
        gpu = GPU.get(mlp["gpu"].iloc[0])
        costs = {}
        for op in rl.ELEMENTWISE_COST:
            same = ("attn_norm", "mlp_norm") if op.endswith("_norm") else (op,)
            rows = mlp[mlp["op"].isin(same)]
            nb, f = rows["nbytes"].to_numpy(), v._log_loss(rows["measured_ms"].to_numpy())
            costs[op] = v._fit(lambda x, nb=nb, f=f: f((x[0] * 1e-6 + nb / (x[1] * gpu.hbm_gbps * 1e9)) * 1e3),
                               [2.0, 0.5])  # fmt: skip
        out["elementwise_cost"] = costs
    return out


def calibrate_all(root: Path | None, db_root: Path | None) -> dict[int, dict[str, object]]:
    """Every compute capability of SOURCES with data present: {cc: refitted constants}."""
    return {cc: r for cc in SOURCES if (r := fit(cc, root, db_root)) is not None}
