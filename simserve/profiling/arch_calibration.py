"""Per-architecture calibration of the roofline: which in-sample rows fit each compute capability's constants.

Every compute capability's GEMM constants (minimum duration, achieved fractions of dense tensor peak and of
HBM bandwidth) and elementwise constants (minimum duration and achieved bandwidth fraction per op) are fitted
on that architecture's in-sample rows only, by the same Nelder-Mead on mean |log(predicted/measured)| as the
A100 calibration (roofline_validation.calibrate). The in-sample rows are fixed before any fit:

* Vidur's reference profiles (../shared/reference/vidur/profiling/compute/<gpu>): the models of
  roofline_validation.CALIBRATION_MODELS_BY_GPU; every other model of that GPU is held out.
* NVIDIA's database (aiconfigurator-core): the shapes perfdb_validation marks "calibration" (n and k powers of
  two); other shapes and the whole H200 are held out.

Where two sources measure one architecture's GEMMs each weighs the same in the loss, however many rows it has;
Hopper's GEMMs are the exception, fitted on the database alone (GEMM_FROM_DATABASE_ONLY says why). Nothing is
fitted on elementwise ops of Ada or Blackwell (no measurement of them here): they borrow sm86's and sm90's
(same memory technology, nearest SM design). Attention (fit_attention) is fitted per capability on the
database's context and generation tables of one GPU each (perfdb_validation.ATTENTION_SYSTEMS), and fp8 GEMMs
(fit_fp8) on the per-tensor fp8 tables of the same GPU as its bf16 GEMMs, with the same split.
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

# compute capability -> (Vidur GPU folder, database systems) whose in-sample rows fit it. sm80 is the original
# A100 calibration (roofline_validation.calibrate): the database's A100 GEMMs stay out-of-sample for it.
SOURCES = {
    86: ("a40", ()),
    89: (None, ("l40s",)),
    90: ("h100", ("h100_sxm",)),
    100: (None, ("b200_sxm",)),
    103: (None, ("b300_sxm",)),  # Blackwell Ultra; GB300 held out
    120: (None, ("rtx_pro_6000_server",)),  # GB202 (RTX PRO 6000): no tcgen05, its own kernels
}
# Hopper's GEMMs are fitted on the database alone: Vidur's H100 profile ran an older cuBLAS whose GEMMs take
# 13% longer than the database's at the same shapes (27% at 129-512 tokens; docs/kernel-validation.md, "Two
# measurements"), and simserve models today's engines (vLLM 0.33; the database measured 0.24's kernels).
# Vidur's H100 GEMMs stay in the report, out-of-sample, with that offset; its elementwise ops still fit
# sm90's.
GEMM_FROM_DATABASE_ONLY = (90,)
# The most of the spec sheet's memory bandwidth a kernel streams from DRAM (refresh, page switches, ECC:
# ~92-95% in bandwidth tests). Unbounded, the Blackwell fits reach 1.01-1.09: the benchmark repeats one GEMM
# and small weight matrices stay in the 126 MB L2 between repeats, which a serving engine streaming every
# layer's weights never sees.
MAX_MEMORY_EFF = 0.95
ELEMENTWISE_BORROWED = {89: 86, 100: 90}  # no elementwise measurement: the nearest memory system's constants
GEMM_NAMES = ("gemm_min_us", "gemm_compute_eff", "gemm_memory_eff")
# fitted too where the library picks tiles (gemm_tiles.ArchTiles.choices)
STREAM_NAME = "gemm_stream_half_tiles_per_sm"
ARCH_OF = {86: "ampere", 89: "ada", 90: "hopper", 100: "blackwell", 103: "blackwell", 120: "blackwell"}


def gemm_names(cc: int) -> tuple[str, ...]:
    from simserve.profiling.gemm_tiles import ARCH_TILES

    return GEMM_NAMES + ((STREAM_NAME,) if ARCH_TILES[ARCH_OF[cc]].choices else ())


def _ratios_gemm(ref_lin, db, c: rl.KernelConstants, tiles=None) -> list[np.ndarray]:
    """predicted / measured per source (Vidur rows, database rows), so each source weighs the same in a
    loss."""
    out = []
    if ref_lin is not None and len(ref_lin):
        out.append(v.predict_mlp(ref_lin, c, tiles) / ref_lin["measured_ms"].to_numpy())
    if db is not None and len(db):
        out.append(pv.predict(db, {g: c for g in db["gpu"].unique()}, tiles) / db["measured_ms"].to_numpy())
    return out


def in_sample(
    root: Path | None, db_root: Path | None, cc: int
) -> tuple[pd.DataFrame | None, pd.DataFrame | None]:
    """(Vidur rows, database GEMM rows) that may fit compute capability `cc`; None where a source is
    absent."""
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


def _gemm_fit(lin, db, base: rl.KernelConstants, tiles=None, names=GEMM_NAMES) -> tuple[float, list[float]]:
    def loss(x: list[float]) -> float:
        if min(x) <= 0 or x[2] > MAX_MEMORY_EFF:
            return 10.0  # a duration or fraction below zero, or more than HBM can stream, has no meaning
        c = dataclasses.replace(base, **dict(zip(names, x, strict=True)))
        return float(
            np.mean([np.mean(np.abs(np.log(np.maximum(r, 1e-12)))) for r in _ratios_gemm(lin, db, c, tiles)])
        )

    x = v._fit(loss, [4.0, 0.8, 0.85, 0.05][: len(names)])
    return loss(x), x


def _vidur_linear_rows(mlp: pd.DataFrame | None, cc: int) -> pd.DataFrame | None:
    """Vidur's measured linear-op rows for compute capability `cc`; None where its GEMMs come from NVIDIA's
    database alone (GEMM_FROM_DATABASE_ONLY) or Vidur's rows are absent."""
    if mlp is None or cc in GEMM_FROM_DATABASE_ONLY:
        return None
    return mlp[mlp["kind"] == "linear"].reset_index(drop=True)


def tile_loss(cc: int, root: Path | None, db_root: Path | None, tiles) -> tuple[float, list[float]]:
    """In-sample GEMM loss of compute capability `cc` with `tiles`, its constants refitted: (loss,
    constants)."""
    mlp, db = in_sample(root, db_root, cc)
    lin = _vidur_linear_rows(mlp, cc)
    return _gemm_fit(lin, db, rl.ARCH_KERNELS.get(cc, rl.KERNELS), tiles, gemm_names(cc))


def fit(cc: int, root: Path | None, db_root: Path | None) -> dict[str, object] | None:
    """Refitted constants of compute capability `cc` (GEMM, and elementwise where measured), or None without
    data."""
    mlp, db = in_sample(root, db_root, cc)
    lin = _vidur_linear_rows(mlp, cc)
    if (lin is None or lin.empty) and (db is None or db.empty):
        return None
    names = gemm_names(cc)
    _, x = _gemm_fit(lin, db, rl.ARCH_KERNELS.get(cc, rl.KERNELS), names=names)
    out: dict[str, object] = dict(zip(names, x, strict=True))
    if mlp is not None:
        gpu = GPU.get(mlp["gpu"].iloc[0])
        costs = {}
        for op in rl.ELEMENTWISE_COST:
            same = ("attn_norm", "mlp_norm") if op.endswith("_norm") else (op,)
            rows = mlp[mlp["op"].isin(same)]
            nb, f = rows["nbytes"].to_numpy(), v._log_loss(rows["measured_ms"].to_numpy())
            costs[op] = v._fit(
                lambda x, nb=nb, f=f: f((x[0] * 1e-6 + nb / (x[1] * gpu.hbm_gbps * 1e9)) * 1e3), [2.0, 0.5]
            )
        out["elementwise_cost"] = costs
    return out


def fit_fp8(cc: int, db_root: Path | None) -> dict[str, float] | None:
    """Refitted fp8 GEMM constants of compute capability `cc` (roofline.KernelConstants.fp8_gemm) on the
    in-sample per-tensor fp8 GEMMs of its database system (the bf16 split: power-of-two n and k; every other
    shape and every other system held out), or None without data. The bf16 fit's loss and bounds."""
    systems = SOURCES[cc][1]
    if not systems or db_root is None:
        return None
    db = pv.load_gemm(db_root, systems, dtype="fp8")
    db = db[db["set"] == "calibration"].reset_index(drop=True)
    if db.empty:
        return None
    names = gemm_names(cc)
    base = dataclasses.replace(rl.ARCH_KERNELS.get(cc, rl.KERNELS), fp8_gemm=())
    _, x = _gemm_fit(None, db, base, names=names)
    return dict(zip(names, x, strict=True))


def fit_moe(cc: int, db_root: Path | None, dtype: str = "bf16") -> dict[str, float] | None:
    """Refitted grouped-GEMM constants of compute capability `cc` for `dtype` experts
    (roofline.KernelConstants moe_gemm / moe_fp8_gemm) on the in-sample fused-MoE rows of its database system
    (perfdb_validation.load_moe: Qwen3-235B-A22B and Mixtral-8x7B; DeepSeek-V3 and the other GPUs held out),
    or None without data."""
    systems = SOURCES[cc][1]
    if not systems or db_root is None:
        return None
    df = pv.load_moe(db_root, systems, dtype)
    df = df[df["set"] == "calibration"].reset_index(drop=True)
    if df.empty:
        return None
    base = dataclasses.replace(rl.ARCH_KERNELS.get(cc, rl.KERNELS), moe_gemm=(), moe_fp8_gemm=())
    measured = df["measured_ms"].to_numpy()

    def loss(x: list[float]) -> float:
        if min(x) <= 0 or x[2] > MAX_MEMORY_EFF:
            return 10.0
        c = dataclasses.replace(base, **dict(zip(GEMM_NAMES, x, strict=True)))
        return float(
            np.mean(np.abs(np.log(pv.predict_moe(df, {g: c for g in df["gpu"].unique()}) / measured)))
        )

    return dict(zip(GEMM_NAMES, v._fit(loss, [4.0, 0.6, 0.8]), strict=True))


def calibrate_all(root: Path | None, db_root: Path | None) -> dict[int, dict[str, object]]:
    """Every compute capability of SOURCES with data present: {cc: refitted constants}."""
    return {cc: r for cc in SOURCES if (r := fit(cc, root, db_root)) is not None}


# ------------------------------------------------------------------------------------------------- attention

PREFILL_NAMES = ("prefill_min_us", "prefill_compute_eff", "prefill_tile_us")
DECODE_NAMES = ("decode_min_us", "decode_memory_eff", "decode_half_units_per_sm")


def fit_attention(cc: int, db_root: Path | None) -> dict[str, float] | None:
    """Refitted roofline_attention constants of compute capability `cc` on its system's in-sample attention
    rows (perfdb_validation.ATTENTION_SYSTEMS), decode first (prefill's memory term uses its bandwidth), or
    None."""
    from simserve.profiling import roofline_attention as ra

    system = pv.ATTENTION_SYSTEMS.get(cc)
    if system is None or db_root is None:
        return None
    att = pv.load_attention(db_root, (system,))
    att = att[att["set"] == "calibration"]
    if att.empty:
        return None
    base = ra.ARCH_ATTENTION[cc]
    out: dict[str, float] = {}
    for phase, names, x0 in (
        ("decode", DECODE_NAMES, [10.0, 0.8, 0.1]),
        ("prefill", PREFILL_NAMES, [5.0, 0.6, 3.0]),
    ):
        rows = att[att["phase"] == phase].reset_index(drop=True)
        measured = rows["measured_ms"].to_numpy()

        def loss(x: list[float], rows=rows, measured=measured, names=names) -> float:
            if min(x) <= 0 or (names is DECODE_NAMES and x[1] > MAX_MEMORY_EFF):
                return 10.0
            c = dataclasses.replace(base, **out, **dict(zip(names, x, strict=True)))
            return float(np.mean(np.abs(np.log(pv.predict_attention(rows, c) / measured))))

        out.update(zip(names, v._fit(loss, x0), strict=True))
    return out
