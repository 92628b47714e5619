"""Validate the roofline backend against measured kernels of every GPU with data; write
docs/kernel-validation.md.

    python benchmarks/validate_kernels.py              # error tables -> docs/kernel-validation.md
    python benchmarks/validate_kernels.py --calibrate
        # also refit the constants and print them beside the used ones
    python benchmarks/validate_kernels.py --steps
        # only print the GEMM tile steps per GPU (no file written)

Reads ../shared/reference/vidur/profiling (Vidur's measured profiles, MIT: every GPU folder under compute/)
beside the checkout, and, when the package is installed, the bf16 GEMM tables of aiconfigurator-core (NVIDIA's
per-op database, Apache-2.0). Errors are absolute percentage errors of the predicted against the measured
median time; bias is the signed median. In-sample and out-of-sample rows are reported apart (the split: "The
split" below).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from common import md, run_script

from simserve.catalog import GPU, load_catalog_file
from simserve.deployment import Deployment
from simserve.ops import linear_ops
from simserve.profiling import arch_calibration as ac
from simserve.profiling import gemm_tiles as gt
from simserve.profiling import nccl
from simserve.profiling import nccl_validation as nv
from simserve.profiling import perfdb_validation as pv
from simserve.profiling import roofline as rl
from simserve.profiling import roofline_attention as ra
from simserve.profiling import roofline_validation as v

ROOT = Path(__file__).resolve().parents[1]
COMMAND = "python benchmarks/validate_kernels.py"  # with --calibrate for the last section
PAPER = [  # (label, Deployment.create args, paper strict TBT SLO / 5 in ms)
    ("Mistral-7B, A100, TP1", ("mistral-7b", "a100", 1, 1), 20.0),
    ("Yi-34B, A100, TP2", ("yi-34b", "a100", 2, 1), 40.0),
    ("LLaMA2-70B, A40, TP4 PP2", ("llama2-70b", "a40", 4, 2, "a40-pairwise-nvlink"), 200.0),
    (
        "Falcon-180B, A100, TP4 PP2, ethernet-100g",
        ("falcon-180b", "a100", 4, 2, None, "ethernet-100g"),
        200.0,
    ),
    ("Llama-3-8B, A100, TP1 (Mistral's shapes)", ("llama-3-8b", "a100", 1, 1), None),
    ("Llama-2-7B, A100, TP1 (MHA: 4x the KV reads)", ("llama-2-7b", "a100", 1, 1), None),
]


GPU_STEPS = ((128, 136), (256, 264), (512, 520), (1024, 1032))
STEP_GPUS = ("a100", "a40", "l40s", "h100", "h200")  # L40S (Ada) comes from docs/examples/catalog.yaml
# Measured on H100 (issue 10): the 256 -> 264 and 512 -> 520 token steps of the GEMMs.
H100_MEASURED = {"256->264": 39.0, "512->520": 44.0}


def _step_row(label: str, gpu, ops, tiles: gt.ArchTiles | None = None) -> dict:
    row = {"GEMM": label}
    for a, b in GPU_STEPS:
        t = sum(rl.gemm_ms(gpu, [a, b], op.in_features, op.out_features, tiles=tiles) for op in ops)
        row[f"{a}->{b}"] = round(float(100 * (t[1] / t[0] - 1)), 1)
    return row


def gpu_steps(ref: Path | None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Predicted GEMM time steps (%) per GPU for Mistral-7B's four GEMMs at TP1, and reference rows beside
    them."""
    if "l40s" not in GPU:
        load_catalog_file(ROOT / "docs" / "examples" / "catalog.yaml")
    ops = linear_ops(Deployment.create("mistral-7b", "a100", 1, 1))
    rows = []
    for name in STEP_GPUS:
        gpu = GPU.get(name)
        label = f"{gpu.name} ({gpu.arch}, {gpu.num_sms} SMs)"
        for op in ops:
            rows.append(
                {"GPU": label, **_step_row(f"{op.name} {op.in_features}x{op.out_features}", gpu, [op])}
            )
        rows.append({"GPU": label, **_step_row("sum of the four", gpu, ops)})
    per_gpu = pd.DataFrame(rows).set_index(["GPU", "GEMM"])
    h100 = GPU.get("h100")
    refs = [
        {"row": "H100-SXM predicted (sum of the four)", **_step_row("", h100, ops)},
        {
            "row": "H100-SXM with fixed 256-row tiles (the model before tile choice)",
            **_step_row("", h100, ops, dataclasses.replace(gt.ARCH_TILES["hopper"], choices=())),
        },
        {
            "row": "H100-SXM with Ampere tiles (the model before per-architecture tiles)",
            **_step_row("", h100, ops, gt.ARCH_TILES["ampere"]),
        },
        {
            "row": "H100 measured (issue 10)",
            **{f"{a}->{b}": H100_MEASURED.get(f"{a}->{b}", "-") for a, b in GPU_STEPS},
        },
    ]
    if ref is not None:
        mlp = v.load_mlp(ref, ("Llama-3-8B",))
        lin = mlp[(mlp["kind"] == "linear") & (mlp["tp"] == 1)].groupby("num_tokens")["measured_ms"].sum()
        measured = {"row": "A100 measured (Vidur, Llama-3-8B TP1: Mistral-7B's GEMM shapes)"}
        for a, b in GPU_STEPS:
            ok = a in lin.index and b in lin.index
            measured[f"{a}->{b}"] = round(float(100 * (lin[b] / lin[a] - 1)), 1) if ok else "-"
        refs.insert(
            0, {"row": "A100-80GB predicted (sum of the four)", **_step_row("", GPU.get("a100"), ops)}
        )
        refs.insert(1, measured)
    for r in refs:
        r.pop("GEMM", None)
    return per_gpu, pd.DataFrame(refs).set_index("row")


def ampere_wave_ablation(ref: Path) -> pd.DataFrame:
    """A100 linear-op errors with Ampere's tiles as used (no wave term) and with a wave term on 108 SMs."""
    mlp = v.load_mlp(ref)
    lin = mlp[mlp["kind"] == "linear"].reset_index(drop=True)
    ampere = gt.ARCH_TILES["ampere"]
    variants = {
        "as used: no wave term": ampere,
        "with waves of 128x128 tiles on 108 SMs": dataclasses.replace(ampere, persistent=True, cols=128),
        "with waves of 128x256 tiles on 108 SMs": dataclasses.replace(ampere, persistent=True, cols=256),
    }
    rows = []
    for name, tiles in variants.items():
        err = v.with_errors(lin, v.predict_mlp(lin, tiles=tiles))["ape"]
        rows.append(
            {
                "A100 tiles": name,
                "n": len(err),
                "median_ape": round(float(err.median()), 2),
                "p90_ape": round(float(err.quantile(0.9)), 2),
            }
        )
    return pd.DataFrame(rows).set_index("A100 tiles")


def steps_section(ref: Path | None) -> str:
    per_gpu, refs = gpu_steps(ref)
    ablation = []
    if ref is not None:
        ablation = [
            "Why Ampere has no wave term: on the measured A100 GEMMs (all seven models, every TP) a wave "
            "term on",
            "108 SMs makes the linear-op errors worse: consistent with cuBLAS's per-problem tile choice "
            "hiding them.",
            "",
            md(ampere_wave_ablation(ref)),
            "",
        ]
    return (
        "\n".join(
            [
                "### GEMM tile steps per GPU (predicted, Mistral-7B at TP1)",
                "",
                f"`{COMMAND} --steps` prints this section alone.",
                "Predicted time ratio - 1, in %, of each GEMM (and of the sum of the four) at the second "
                "token count vs the",
                "first. The tiles per architecture and the wave count on the",
                "GPU's SMs are in simserve/profiling/gemm_tiles.py: Ampere and Ada run 64-row tiles below "
                "256 tokens and",
                "128-row tiles from 256 with no wave term (the A100 calibration); Hopper and Blackwell run "
                "the fastest of",
                "64-256 x 64-256 tiles per problem, split-K below one wave, in whole waves on their SMs "
                "(chosen_tile_seconds).",
                "",
                md(per_gpu),
                "",
                "Beside the measurements: the A100 row sums the measured Vidur GEMMs of Llama-3-8B (the same "
                "four GEMM",
                "shapes); the H100 figures are the measured steps quoted in issue 10 (not in the reference "
                "data here).",
                "",
                md(refs),
                "",
                "With the tile chosen per problem the predicted Hopper steps are smaller than the +39/+44% "
                "quoted in issue",
                "10, whose GEMM shapes and library are not in the data here; NVIDIA's database (the same "
                "H100, vLLM 0.24's",
                "torch and cuBLAS) measures +3.5% at 256 -> 257 tokens and -1% at 512 -> 513 for 8192 x "
                "8192, +24% at",
                "128 -> 129 for 4096 x 1024: a library that picks its tile per problem steps only where no "
                "other tile fills",
                "the waves. The fixed 256-row tiles of the model before predicted +96% at 256 -> 257 there.",
                "",
                *ablation,
            ]
        ).rstrip()
        + "\n"
    )


def tile_steps(mlp: pd.DataFrame) -> pd.DataFrame:
    """Sum of the four GEMMs at 264 vs 256 tokens (and 256 vs 248), measured and predicted, per model and
    TP."""
    lin = (
        mlp[mlp["kind"] == "linear"]
        .groupby(["model", "tp", "num_tokens"])[["measured_ms", "predicted_ms"]]
        .sum()
    )
    rows = []
    for (model, tp), g in lin.groupby(level=[0, 1]):
        g = g.droplevel([0, 1])
        for a, b in (
            (56, 64),
            (64, 72),
            (120, 128),
            (128, 136),
            (192, 200),
            (248, 256),
            (256, 264),
            (384, 392),
            (512, 520),
        ):
            if a in g.index and b in g.index:
                rows.append(
                    {
                        "step": f"{a}->{b}",
                        "model": model,
                        "tp": tp,
                        "measured": 100 * (g.loc[b, "measured_ms"] / g.loc[a, "measured_ms"] - 1),
                        "predicted": 100 * (g.loc[b, "predicted_ms"] / g.loc[a, "predicted_ms"] - 1),
                    }
                )
    df = pd.DataFrame(rows)
    return (
        df.groupby("step", sort=False)[["measured", "predicted"]]
        .median()
        .round(1)
        .rename(columns={"measured": "measured median %", "predicted": "predicted median %"})
    )


SPLIT = """The split, fixed before any fit (`CALIBRATION_MODELS_BY_GPU` in simserve/profiling/roofline_validation.py,
`perfdb_validation.py`): **in-sample** rows are the Vidur models each GPU's constants were fitted on — A100:
Llama-2-7B, Llama-2-70B; A40: internlm-20b, Qwen-72B (GEMMs and elementwise); H100: internlm-20b, Qwen-72B
(elementwise only) — and, in NVIDIA's database, the GEMMs whose n and k are both powers of two on the one GPU
per compute capability that fits it (L40S sm89, H100 sm90, B200 sm100, B300 sm103, RTX PRO 6000 sm120).
**Out-of-sample**: every other Vidur model (A40/H100: CodeLlama-34B, phi-2) and all of Vidur's H100 GEMMs (sm90's
GEMMs are fitted on the database alone: Vidur's older cuBLAS runs the same shapes 13% slower, "Two measurements"
below), every database shape with a non-power-of-two n or k (1536 ... 12288: most real models' widths), the
database's A100 GEMMs (sm80 is fitted on Vidur only) and the whole H200, GB200 and GB300 (the dies of the H100,
B200 and B300 in other packages: only spec-sheet numbers differ). Database window: m 1-4096 tokens, n and k
1024-32768, bf16, the newest vLLM table per system."""  # noqa: E501


def per_gpu_tables(
    ref: Path | None, db_root: Path | None
) -> tuple[pd.DataFrame, pd.DataFrame | None, list[str]]:
    """(Vidur rows with errors for every reference GPU folder, database GEMM rows with errors or None,
    notes)."""
    notes, frames = [], []
    if ref is not None:
        for folder in v.reference_gpus(ref):
            df = v.load_mlp(ref, folder=folder)
            frames.append(v.with_errors(df, v.predict_mlp(df)))
        for folder in v.unknown_reference_gpus(ref):
            notes.append(f"compute/{folder}: no catalog GPU is mapped to it (REFERENCE_GPUS), skipped")
    mlp = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    db = None
    if db_root is None:
        notes.append(pv.missing_reason())
    else:
        db = pv.load_gemm(db_root)
        db = v.with_errors(db, pv.predict(db))
    return mlp, db, notes


def _sample(df: pd.DataFrame) -> pd.Series:
    return np.where(df["set"] == "calibration", "in-sample", "out-of-sample")


def condition_section(db: pd.DataFrame) -> list[str]:
    """The bf16 headline split by the condition each row was timed in (perfdb_validation.condition)."""
    db = db.assign(condition=pv.condition(db))

    def missed(rows: pd.DataFrame) -> str:
        t = v.summary(rows, ["gpu", "sample"]).reset_index()
        t = t[t["median_ape"] > 8.0]
        return ", ".join(f"{r.gpu} {r.sample} ({r.median_ape:.2f}%)" for r in t.itertuples()) or "none"

    serving = db[db["condition"] == pv.SERVING]
    return [
        "By the condition the row was timed in: serving's (the collector's 6 weights exceed 2x L2, so none "
        "of",
        "their lines survives between replays, as in a decode step that streams every layer's weights) and "
        "the",
        'rows that may have been timed L2-warm, a condition serving never has ("What the tables measured"',
        "below; the measured backend floors those rows to HBM streaming, l2_residency.py):",
        "",
        md(v.summary(db, ["gpu", "condition", "sample"])),
        "",
        "Goal (median <= 8%), per GPU and sample, missed on the serving-condition rows by: "
        f"{missed(serving)};",
        f"over all rows by: {missed(db)}.",
        "",
    ]


def power_section(db_root: Path, db: pd.DataFrame) -> str:
    """Does a table say its GPU ran at its power limit? Which tables carry power readings, what they read, and
    the roofline's bias on long compute-bound GEMMs by kernel duration (where a power-limited clock would
    show)."""
    import pyarrow.parquet as pq

    with_power = sorted(
        str(f.relative_to(db_root))
        for f in db_root.glob("*/*/*/*/*.parquet")
        if any(c in ("power", "power_limit") for c in pq.read_schema(f).names)
    )
    gemm_power = [f for f in with_power if "/gemm/" in f]
    reads = []
    for f in with_power:
        t = pd.read_parquet(db_root / f, columns=["power", "power_limit"]).dropna()
        share = t["power"] / t["power_limit"]
        reads.append(
            {
                "table": f,
                "rows": len(t),
                "power_limit_w": float(t["power_limit"].median()),
                **{f"p{int(q * 100)} of limit": round(float(share.quantile(q)), 3) for q in (0.5, 0.9, 0.99)},
            }
        )
    c = db.assign(condition=pv.condition(db))
    c = c[(c["condition"] == pv.SERVING) & (c["m"] >= 1024)]
    c = c.assign(
        bias=(c["predicted_ms"] / c["measured_ms"] - 1) * 100,
        kernel_ms=pd.cut(c["measured_ms"], [0, 0.25, 1, 4, np.inf], labels=["<0.25", "0.25-1", "1-4", ">4"]),
    )
    trend = c.groupby(["gpu", "kernel_ms"], observed=True)["bias"].agg(["size", "median"]).reset_index()
    trend = trend.assign(
        cell=[f"{b:+.1f} ({n})" for b, n in zip(trend["median"], trend["size"], strict=True)]
    )
    trend = trend.pivot(index="gpu", columns="kernel_ms", values="cell").fillna("-")
    return "\n".join(
        [
            "### Power: no GEMM table carries power readings",
            "",
            "`benchmark_with_power` (collector/helper.py) samples NVML power only when "
            "COLLECTOR_MEASURE_POWER is set,",
            "and `log_perf` then adds `power` and `power_limit` columns. Tables with those columns in the "
            "package:",
            f"{len(with_power)}, GEMM tables among them: {len(gemm_power)}. So the L40S's (350 W) sustained "
            "tensor",
            "clock cannot be read from its own table, and no power-limited term is derived; the tables that "
            "do carry",
            "readings:",
            "",
            md(pd.DataFrame(reads).set_index("table")) if reads else "(none)",
            "",
            "What a power-limited clock would leave in the GEMM rows: the roofline (one compute efficiency "
            "per",
            "capability) too fast on the longest kernels, each row of the collector's loop being 36 "
            "back-to-back",
            "kernels. Median bias in % (− = roofline faster; rows in brackets) of serving-condition rows "
            "with",
            "m >= 1024, by measured kernel time in ms:",
            "",
            md(trend),
            "",
            "The longest GEMMs run slower than the roofline on every Hopper and Blackwell part and on the "
            "L40S, as a",
            "clock lowered to hold the power limit would make them; the A100 (fitted on Vidur's eager rows) "
            "goes the",
            "other way and the RTX PRO 6000 (600 W) stays flat. Without the readings the size of such a term "
            "per GPU",
            "would have to be fitted to these rows, so none is modelled. Few Hopper and Blackwell rows run "
            "that long;",
            "the L40S's long rows are among its serving-condition rows, which are within 8% (above): it "
            "misses 8% on",
            "its L2-warm rows, not on these.",
        ]
    )


def goals(mlp: pd.DataFrame, db: pd.DataFrame | None) -> list[str]:
    """Issue 21's kernel goals, per source: on which rows each is met and on which it is not (from the
    tables)."""

    def verdict(rows: pd.DataFrame, limit: float) -> str:
        t = v.summary(rows.assign(sample=_sample(rows)), ["gpu", "sample"]).reset_index()
        bad = t[t["median_ape"] > limit]
        miss = ", ".join(f"{r.gpu} {r.sample} {r.median_ape:.1f}%" for r in bad.itertuples())
        return f"met by {t['gpu'].nunique() - bad['gpu'].nunique()} of {t['gpu'].nunique()} GPUs" + (
            f"; missed by {miss}" if miss else ""
        )

    lines = [
        "Goals of issue 21, from the tables below (median absolute error per GPU, in- and out-of-sample):",
        "",
    ]
    if not mlp.empty:
        lin = verdict(mlp[mlp["kind"] == "linear"], 8.0)
        why = ' (H100: the cuBLAS release, "Vidur\'s H100 condition")' if "H100-SXM" in lin else ""
        lines += [
            f"- GEMMs <= 8%, Vidur's profiles: {lin}{why}.",
            f"- Elementwise <= 15%, Vidur's profiles: {verdict(mlp[mlp['kind'] == 'elementwise'], 15.0)}.",
        ]
    if db is not None and len(db):
        serving = db[pv.condition(db) == pv.SERVING]
        lines += [
            f"- GEMMs <= 8%, NVIDIA's tables, rows in serving's condition: {verdict(serving, 8.0)}.",
            f"- GEMMs <= 8%, NVIDIA's tables, all rows (with those that may be L2-warm): {verdict(db, 8.0)}.",
            "- Attention: reported, no goal (below).",
        ]
    return [*lines, ""]


def per_gpu_section(ref: Path | None, db_root: Path | None) -> str:
    mlp, db, notes = per_gpu_tables(ref, db_root)
    out = ["## Per GPU, per op: in-sample and out-of-sample", "", SPLIT, "", *goals(mlp, db)]
    if not mlp.empty:
        mlp = mlp.assign(sample=_sample(mlp))
        lin, ew = mlp[mlp["kind"] == "linear"], mlp[mlp["kind"] == "elementwise"]
        out += [
            "### Vidur profiles: linear ops (GEMMs) — goal: median <= 8% on every GPU",
            "",
            md(v.summary(lin, ["gpu", "sample"])),
            "",
            "Per op:",
            "",
            md(v.summary(lin, ["gpu", "sample", "op"])),
            "",
            "### Vidur profiles: elementwise ops — goal: median <= 15%",
            "",
            md(v.summary(ew, ["gpu", "sample"])),
            "",
            "Per op:",
            "",
            md(v.summary(ew, ["gpu", "sample", "op"])),
            "",
        ]
    if db is not None and len(db):
        db = db.assign(
            sample=_sample(db),
            m_band=pd.cut(db["m"], [0, 16, 128, 512, 4096], labels=["1-16", "17-128", "129-512", "513-4096"]),
        )
        versions = ", ".join(f"{s}: {ver}" for s, ver in db.groupby("system")["version"].first().items())
        out += [
            f"### NVIDIA's database: bf16 GEMMs (aiconfigurator-core; {versions}) — goal: median <= 8%",
            "",
            md(v.summary(db, ["gpu", "sample"])),
            "",
            "By token count m (all rows):",
            "",
            md(v.summary(db, ["gpu", "m_band"])),
            "",
            *condition_section(db),
        ]
    if db_root is not None:
        out += [fp8_section(db_root), "", moe_section(db_root), ""]
        out += [attention_section(db_root, ref), ""]
    out += [run_script("torch_vs_measured", "--section"), ""]
    if db_root is not None:
        out += [run_script("l2_in_tables", "--section"), ""]
    if db is not None and len(db):
        out += [power_section(db_root, db), ""]
    if ref is not None and db_root is not None:
        out += [two_sources_section(ref, db_root), ""]
        if (ref / "compute" / "h100").is_dir():
            out += [run_script("vidur_h100_condition", "--reference", str(ref)), ""]
    if notes:
        out += ["Not validated: " + "; ".join(notes) + ".", ""]
    return "\n".join(out)


def attention_section(db_root: Path, ref: Path | None = None) -> str:
    """Attention against the database's kernels (roofline_attention.py), in-sample and out-of-sample apart."""
    att = pv.load_attention(db_root)
    if att.empty:
        return ""
    att = v.with_errors(att, pv.predict_attention(att))
    att["sample"] = _sample(att)
    att["tokens_band"] = pd.cut(
        att["tokens"], [0, 512, 4096, 16384], labels=["1-512", "513-4096", "4097-16384"]
    )
    d128 = att[att["head_dim"] == 128]
    kernels = ", ".join(
        f"{g}: {k}" for g, k in att.groupby("gpu")["kernel"].agg(lambda x: x.mode()[0]).items()
    )
    legacy = []
    if ref is not None:
        old = v.load_attention(ref)
        shape = v.LEGACY_ATTN_SHAPE
        pred = np.where(
            old["phase"] == "decode",
            ra.decode_ms(v.A100, *shape, old["batch_size"], old["kv_len"]),
            ra.prefill_ms(v.A100, *shape, old["chunk"], old["kv_len"]),
        )
        old = v.with_errors(old, pred)
        old["group"] = np.where(old["phase"] == "decode", "decode", "prefill (chunks over prefixes)")
        legacy = [
            "The sm80 constants against Vidur's legacy A100 attention file (an older FlashAttention that "
            "computed the",
            "whole score rectangle; the shipped A100/A40 profiles and latent attention still use the legacy "
            "model",
            "fitted on it, roofline.prefill_attention_ms — A100 detail below):",
            "",
            md(v.summary(old, ["group"])),
            "",
        ]
    return "\n".join(
        [
            "### NVIDIA's database: attention — prefill (causal FlashAttention) and decode, per compute "
            "capability",
            "",
            "`simserve/profiling/roofline_attention.py`: causal tiles (fully masked key tiles skipped), "
            "query heads of a",
            "KV head packed into one tile, a fixed cost per query tile, waves of tiles on the SMs and the "
            "longest tile",
            "as a floor; decode as before with each capability's own constants. Fitted per compute "
            "capability on one",
            "GPU's head-dim-128, power-of-two query-head rows (A100, L40S, H100, B200, B300, RTX PRO 6000); "
            "every other",
            "head count and head dim, and H200, GB200, GB300 whole, are out-of-sample. Prefill: `batch` "
            "prompts of",
            "`tokens` from an empty cache in one kernel; decode: `batch` sequences over `tokens` of KV. "
            f"Kernels: {kernels}.",
            "",
            "Head dim 128:",
            "",
            md(v.summary(d128, ["gpu", "phase", "sample"])),
            "",
            "By head dim (all rows, all GPUs):",
            "",
            md(v.summary(att, ["phase", "head_dim"])),
            "",
            "By length (head dim 128):",
            "",
            md(v.summary(d128, ["gpu", "phase", "tokens_band"])),
            "",
            *legacy,
            "Before this model (the legacy A100 kernel on every GPU's spec sheet) full-prompt prefill came "
            "out 1.5-2.5x",
            "too slow on every GPU (median bias +53% B200 to +153% A100), decode 11-58% off.",
        ]
    )


def fp8_section(db_root: Path) -> str:
    """The roofline's fp8 GEMMs (W8A8, per-tensor scales) against the database's, in- and out-of-sample."""
    fp8 = pv.load_gemm(db_root, dtype="fp8")
    if fp8.empty:
        return ""
    fp8 = v.with_errors(fp8, pv.predict(fp8)).assign(sample=_sample(fp8))
    return "\n".join(
        [
            "### NVIDIA's database: fp8 GEMMs (per-tensor W8A8, vLLM's CutlassFP8ScaledMMLinearKernel) — "
            "reported",
            "",
            "An fp8 deployment's GEMMs on fp8 tensor cores: the activations' quantisation first (a max "
            "reduction and a",
            "quantising pass, roofline.quantisation_bytes), then the scaled-mm on the fp8 peak with one byte "
            "per weight,",
            "with constants of its own per compute capability (roofline.ARCH_KERNELS fp8, "
            "arch_calibration.fit_fp8) fitted",
            "on the same GPU and split as the bf16 GEMMs (L40S, H100, B200, B300, RTX PRO 6000 power-of-two "
            "shapes; H200,",
            "GB200 and GB300 held out whole). On the bf16 constants they were 20-48% too fast (median bias "
            "-20% RTX PRO",
            "6000 to -48% B200): vLLM 0.24's per-tensor path reaches 0.46-0.53 of the fp8 peak on Hopper and "
            "Blackwell,",
            "~1.1-1.7x its bf16 GEMMs, not 2x, and at n = 1024 it is slower than bf16 (the shape dependence "
            "the one",
            "efficiency per capability leaves in the P90). Ampere has no fp8 tensor cores (weight-only: no "
            "table).",
            "",
            md(v.summary(fp8, ["gpu", "sample"])),
            "",
        ]
    )


def moe_section(db_root: Path) -> str:
    """The roofline's fused MoE (roofline_moe.fused_expert_ms) against the database's, in- and
    out-of-sample."""
    moe = pd.concat([pv.load_moe(db_root, dtype=d) for d in ("bf16", "fp8")], ignore_index=True)
    if moe.empty:
        return ""
    moe = v.with_errors(moe, pv.predict_moe(moe)).assign(sample=_sample(moe))
    return "\n".join(
        [
            "### NVIDIA's database: fused MoE (vLLM's Triton fused_experts, balanced routing) — reported",
            "",
            "The routed experts of Qwen3-235B-A22B, Mixtral-8x7B and DeepSeek-V3 at the layouts vLLM runs "
            "(TP 1-8,",
            "EP = TP 2-8), bf16 and block-scaled fp8 experts (perfdb_validation.load_moe). Grouped-GEMM "
            "constants per",
            "compute capability and expert dtype (roofline.ARCH_KERNELS moe, moe_fp8; "
            "arch_calibration.fit_moe) fitted",
            "on Qwen3 and Mixtral on the GPU that fits the capability's GEMMs; DeepSeek-V3's shape (fp8 "
            "only) and the",
            "H200, GB200 and GB300 are held out. Before, on the dense GEMM constants: bf16 8-27% too fast, "
            "fp8 12-51%.",
            "The fitted minimum durations (8-19 µs per grouped GEMM) carry the routing, sort/align and "
            "un-permute",
            "kernels the form does not count, so they do not carry over to DeepSeek-V3's 256 experts: its "
            "held-out",
            "rows stay 22-41% off (P90 ~100%). The L40S keeps the dense constants for bf16 experts (its fit "
            "drives the",
            "minimum to 0).",
            "",
            md(v.summary(moe, ["dtype", "gpu", "sample"])),
            "",
        ]
    )


def two_sources_section(ref: Path, db_root: Path) -> str:
    """Vidur's measured GEMMs against the database's at the very same (m, k, n): how far two measurements
    agree."""
    rows = []
    for folder, system in (("a100", "a100_sxm"), ("h100", "h100_sxm")):
        path = pv.gemm_file(db_root, system)
        if folder not in v.reference_gpus(ref) or path is None:
            continue
        lin = v.load_mlp(ref, folder=folder)
        lin = lin[lin["kind"] == "linear"].rename(columns={"num_tokens": "m"})
        full = pd.read_parquet(path, columns=["gemm_dtype", "m", "n", "k", "latency"])
        j = lin.merge(full[full["gemm_dtype"] == "bfloat16"][["m", "n", "k", "latency"]], on=["m", "n", "k"])
        r = (j["measured_ms"] / j["latency"] - 1) * 100
        bands = r.groupby(pd.cut(j["m"], [0, 16, 128, 512, 4096]), observed=True).median().round(1)
        rows.append(
            {
                "GPU": folder,
                "shared shapes": len(j),
                "median %": round(float(r.median()), 1),
                "p10 %": round(float(r.quantile(0.1)), 1),
                "p90 %": round(float(r.quantile(0.9)), 1),
                **{f"m {iv.left + 1}-{iv.right}": x for iv, x in bands.items()},
            }
        )
    return "\n".join(
        [
            "### Two measurements of the same GEMM: Vidur's profile / NVIDIA's database − 1",
            "",
            "Rows where Vidur's measured (m, k, n) is also in the database's bf16 table. On the A100 the two "
            "agree at",
            "the median; on the H100 Vidur's kernels take 13% longer (27% at 129-512 tokens: an older cuBLAS "
            "without",
            "the tuned sm90 kernels of the database's vLLM 0.24 stack). One set of Hopper constants cannot "
            "be within 8%",
            "of both. Hopper's GEMM constants are fitted on the database alone (the stack nearest the vLLM "
            "release",
            "simserve models), so Vidur's H100 GEMMs come out ~16% too fast at the median, about this "
            "offset.",
            "",
            md(pd.DataFrame(rows).set_index("GPU")),
        ]
    )


def tile_ablation(ref: Path | None, db_root: Path | None) -> str:
    """In-sample loss of GEMM tile variants per architecture, constants refitted for each (the choice's
    evidence)."""
    if db_root is None:
        return ""
    rows = []
    for cc, arch in ((90, "hopper"), (100, "blackwell"), (89, "ada")):
        base = gt.ARCH_TILES[arch]
        if not base.choices:  # Ada keeps Ampere's fixed tiles: against the choice model on its own rows
            variants = {
                "fixed 64/128-row tiles, no wave term (used)": base,
                "tile chosen per problem, split-K, waves": dataclasses.replace(base, choices=gt.SM90_CHOICES),
            }
        else:
            variants = {
                "tile chosen per problem, split-K, waves (used)": base,
                "fixed 256-row tiles, persistent (wave term)": dataclasses.replace(
                    base, choices=(), rows=256, persistent=True
                ),
                "fixed 256-row tiles, no wave term": dataclasses.replace(
                    base, choices=(), rows=256, persistent=False
                ),
                "fixed 128-row tiles, persistent (wave term)": dataclasses.replace(
                    base, choices=(), rows=128, persistent=True
                ),
                "fixed 128-row tiles, no wave term": dataclasses.replace(
                    base, choices=(), rows=128, persistent=False
                ),
            }
        for name, tiles in variants.items():
            loss, x = ac.tile_loss(cc, ref, db_root, tiles)
            rows.append(
                {
                    "arch": arch,
                    "tiles": name,
                    "in-sample loss": round(loss, 4),
                    "min_us": round(x[0], 2),
                    "compute_eff": round(x[1], 3),
                    "memory_eff": round(x[2], 3),
                    "stream_half_per_sm": round(x[3], 3) if len(x) > 3 else 0.0,
                }
            )
    return "\n".join(
        [
            "### Tile ablation (Hopper, Blackwell)",
            "",
            "Mean |log(predicted/measured)| on each architecture's in-sample database GEMMs with the GEMM "
            "constants",
            "(and, on Hopper and Blackwell, the weight-streaming half-point) refitted for each tile variant",
            "(simserve/profiling/gemm_tiles.py). The variant in use has the lowest loss. On Ada the choice "
            "model would",
            "bring the L40S's median from 8.2% to 8.05% but fits its in-sample rows worse, so Ada keeps "
            "Ampere's tiles;",
            "what keeps it above 8% is its small weight matrices: where the collector's 6 weights fit in the "
            "96 MB L2",
            "the table's skinny GEMMs read them at up to 2.47 TB/s from a 864 GB/s GDDR6 bus, which no "
            "bandwidth",
            'fraction of DRAM can follow and serving, streaming every layer, never sees ("What the tables '
            'measured").',
            "",
            md(pd.DataFrame(rows).set_index(["arch", "tiles"])),
            "",
        ]
    )


def report(ref: Path, command: str = COMMAND) -> str:
    mlp = v.load_mlp(ref)
    mlp = v.with_errors(mlp, v.predict_mlp(mlp))
    mlp["set"] = np.where(mlp["model"].isin(v.CALIBRATION_MODELS), "calibration", "held out")
    lin, ew = mlp[mlp["kind"] == "linear"], mlp[mlp["kind"] == "elementwise"]
    target = lin[lin["model"].isin(v.TARGET_MODELS)]
    att = v.load_attention(ref)
    att = v.with_errors(att, v.predict_attention(att))
    att["group"] = np.where(
        att["phase"] == "decode",
        "decode",
        np.where(att["chunk"] <= 128, "prefill, chunk <= 128", "prefill, chunk > 128"),
    )
    net = nv.load(ref)
    col = nv.errors(net)
    decode_pt = att[(att["phase"] == "decode") & (att["batch_size"] == 32) & (att["kv_len"] == 4032)].iloc[0]

    db_root = pv.data_root()
    out = [
        "# Kernel validation: roofline backend vs measured kernels, per GPU",
        "",
        f"Generated by `{command}` from `../shared/reference/vidur/profiling` (Vidur's measured profiles) "
        "and",
        "aiconfigurator-core's bf16 GEMM tables (NVIDIA's per-op database) when installed. Sections after "
        "the first",
        "are A100 detail (tile steps, attention, collectives, decode cross-check).",
        "",
        per_gpu_section(ref, db_root),
        "",
        tile_ablation(ref, db_root),
        "# A100 detail",
        "",
        "APE: absolute percentage error of predicted vs measured median; bias: signed median (negative = "
        "faster than",
        f"measured). Calibration set for GEMM/elementwise constants: {', '.join(v.CALIBRATION_MODELS)}; "
        "every other",
        "model is held out. Attention constants are fitted on the one legacy shape (in-sample); collectives "
        "follow",
        "NCCL's tuner with one constant (launch) measured on the a100_dgx box (docs/collectives.md). "
        "Constants and",
        "their physical meaning: docs/execution-model.md.",
        "",
        f"## A100 linear ops, target models ({', '.join(v.TARGET_MODELS)}; TP 1/2/4/8) — target: median APE "
        "<= 8% per op",
        "",
        md(v.summary(target, ["op"])),
        "",
        "### Per model (all four ops, every measured model)",
        "",
        md(v.summary(lin, ["model", "set"])),
        "",
        "### Per op and model (median APE)",
        "",
        md(v.summary(lin, ["model", "op"])["median_ape"].unstack()),
        "",
        "### Per TP (target models)",
        "",
        md(v.summary(target, ["tp"])),
        "",
        "### Held-out models only, per op",
        "",
        md(v.summary(lin[lin["set"] == "held out"], ["op"])),
        "",
        "### GEMM tile steps (sum of the four GEMMs; median over models and TPs)",
        "",
        md(tile_steps(mlp)),
        "",
        "The measured grid steps by 8 tokens, so 256 -> 264 is the measured tile step; the model's step "
        "already",
        "appears at 257 (64-row tiles below 256 tokens, 128-row tiles from 256).",
        "",
        steps_section(ref),
        "",
        "## Elementwise ops (no hard target)",
        "",
        md(v.summary(ew, ["op"])),
        "",
        "### Per model (all elementwise ops)",
        "",
        md(v.summary(ew, ["model", "set"])),
        "",
        "## Attention (legacy A100 file: 32 q / 4 kv heads per GPU, d = 128) — target: decode median APE <= "
        "15%",
        "",
        md(v.summary(att, ["group"])),
        "",
        f"Check point decode b=32, kv=4032: measured {decode_pt['measured_ms'] * 1e3:.0f} µs, "
        f"predicted {decode_pt['predicted_ms'] * 1e3:.0f} µs.",
        "",
        "## Collectives: NCCL's model per box (docs/collectives.md)",
        "",
        "Every row inside one box, predicted through the simulator's own path (`nccl.node_fabric` for an "
        "all-reduce,",
        "`nccl.stage_hop` + `nccl.hop_ms` for the GPU 0 -> 1 send/recv). The calibration box sets one "
        "constant (the",
        f"launch, {nccl.LAUNCH_US} µs, from its small send/recv messages); nothing is fitted on the "
        "validation box.",
        "",
        "### Calibration box: a100_dgx (DGX A100, NVSwitch)",
        "",
        md(nv.summary(col[col["set"] == "calibration"], ["op", "num_workers"])),
        "",
        "### Validation boxes: a100_pairwise_nvlink (Azure NC96ads A100 v4), h100_pairwise_nvlink (4× H100 "
        "NVL)",
        "",
        md(nv.summary(col[col["set"] == "validation"], ["box", "op", "num_workers"])),
        "",
        "### By message size (both boxes)",
        "",
        md(
            nv.summary(
                col.assign(
                    size=pd.cut(
                        col["size_bytes"],
                        [0, 2**16, 2**20, 2**24, 2**30],
                        labels=["<=64K", "64K-1M", "1M-16M", ">16M"],
                    )
                ),
                ["set", "op", "size"],
            )
        ),
        "",
        "### All-reduce bus bandwidth by size: measured vs the model (docs/collectives.md, known error)",
        "",
        "busbw = 2(n−1)/n × bytes / time (GB/s, medians per band); extra_us = median measured − predicted: "
        "it grows",
        "with size where the shortfall is bandwidth, stays flat where it is a fixed cost.",
        "",
        md(nv.all_reduce_busbw(col)),
        "",
        f"Not validated: {int((net['devices_per_node'] < net['num_workers']).sum())} measured rows that "
        "cross nodes",
        "(the network between the measured nodes is not documented), and H100/H200 (no measurement here).",
        "",
        decode_section(),
    ]
    return "\n".join(out) + "\n"


def decode_section() -> str:
    rows = []
    for label, args, slo in PAPER:
        r = v.decode_iteration_ms(Deployment.create(*args))
        rows.append(
            {
                "deployment": label,
                **{k: round(x, 1) for k, x in r.items()},
                "paper SLO/5": slo if slo else "-",
                "ratio": round(r["total"] / slo, 2) if slo else "-",
            }
        )
    return "\n".join(
        [
            "## Decode iteration vs the paper's strict SLO / 5 (batch 32, context 4096)",
            "",
            "GPU kernels only, summed over all layers (per-stage time × PP): linear + elementwise + "
            "attention + TP",
            "all-reduces, in ms. CPU overheads, pipeline bubbles and the PP send/recv (shown apart) are not "
            "included.",
            "",
            md(pd.DataFrame(rows).set_index("deployment")),
        ]
    )


def calibration_section(ref: Path) -> str:
    used, fitted = rl.constants_dict(), v.calibrate(ref)
    rows = []
    for name, value in fitted.items():
        if name == "elementwise_cost":
            for op, (t0, eff) in value.items():
                rows.append((f"{op} min_us", t0, used[name][op]["min_us"]))
                rows.append((f"{op} bw_eff", eff, used[name][op]["bw_eff"]))
        else:
            rows.append((name, value, used[name]))
    df = pd.DataFrame(rows, columns=["constant", "refitted", "in use"]).set_index("constant").round(4)
    arch_rows = []
    for cc, fitted_cc in ac.calibrate_all(ref, pv.data_root()).items():
        in_use = rl.constants_dict(rl.ARCH_KERNELS[cc])
        for name, value in fitted_cc.items():
            if name == "elementwise_cost":
                for op, (t0, eff) in value.items():
                    arch_rows.append((f"sm{cc}", f"{op} min_us", t0, in_use[name][op]["min_us"]))
                    arch_rows.append((f"sm{cc}", f"{op} bw_eff", eff, in_use[name][op]["bw_eff"]))
            else:
                arch_rows.append((f"sm{cc}", name, value, in_use[name]))
        fitted_fp8 = ac.fit_fp8(cc, pv.data_root()) or {}
        for i, (name, value) in enumerate(fitted_fp8.items()):
            arch_rows.append((f"sm{cc}", f"fp8 {name}", value, rl.ARCH_KERNELS[cc].fp8_gemm[i]))
        for dtype, field in (("bf16", "moe_gemm"), ("fp8", "moe_fp8_gemm")):
            used_moe = getattr(rl.ARCH_KERNELS[cc], field)
            for i, (name, value) in enumerate((ac.fit_moe(cc, pv.data_root(), dtype) or {}).items()):
                arch_rows.append(
                    (f"sm{cc}", f"moe {dtype} {name}", value, used_moe[i] if used_moe else "dense")
                )
    per_cc = pd.DataFrame(arch_rows, columns=["sm", "constant", "refitted", "in use"]).set_index(
        ["sm", "constant"]
    )
    att_rows = []
    for cc in pv.ATTENTION_SYSTEMS:
        fitted_att = ac.fit_attention(cc, pv.data_root())
        in_use_att = dataclasses.asdict(ra.ARCH_ATTENTION[cc])
        for name, value in (fitted_att or {}).items():
            att_rows.append((f"sm{cc}", name, value, in_use_att[name]))
    per_att = pd.DataFrame(att_rows, columns=["sm", "constant", "refitted", "in use"]).set_index(
        ["sm", "constant"]
    )
    return "\n".join(
        [
            "",
            "## Calibration: refitted now vs the rounded constants in use",
            "",
            f"`{COMMAND} --calibrate` (Nelder-Mead on mean |log(predicted/measured)|, in-sample rows only).",
            "",
            "### sm80 (A100; attention and the collectives' launch too)",
            "",
            md(df),
            "",
            "### Other compute capabilities (simserve/profiling/arch_calibration.py: sources per sm; "
            "elementwise only",
            "where measured — sm89 and sm100 borrow sm86's and sm90's)",
            "",
            md(per_cc.round(4)),
            "",
            "### Attention per compute capability (roofline_attention.py; arch_calibration.fit_attention)",
            "",
            md(per_att.round(4)) if att_rows else "(aiconfigurator-core not installed: not refitted)",
            "",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reference", type=Path, default=v.reference_root(Path(__file__)))
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "kernel-validation.md")
    p.add_argument(
        "--calibrate", action="store_true", help="refit the constants and print them beside the used ones"
    )
    p.add_argument(
        "--steps", action="store_true", help="only print the GEMM tile steps per GPU (no file written)"
    )
    args = p.parse_args(argv)
    if args.steps:
        print(steps_section(args.reference if args.reference.is_dir() else None))
        return 0
    if not args.reference.is_dir():
        print(f"error: reference data not found at {args.reference}; pass --reference PATH", file=sys.stderr)
        return 2
    text = report(args.reference, COMMAND + (" --calibrate" if args.calibrate else ""))
    if args.calibrate:
        text += calibration_section(args.reference)
    from simserve.io import write_text_atomic

    write_text_atomic(args.out, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
