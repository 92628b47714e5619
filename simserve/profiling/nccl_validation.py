"""The NCCL model against measured collectives: per-box errors, and the one constant measured here.

Reads Vidur's measured NCCL timings (../shared/reference/vidur/profiling/network, MIT) at test or benchmark
time; nothing here ships data. Every row is predicted through the functions the profile writer and the
simulator use: `nccl.node_fabric` for an all-reduce of n GPUs of one box, `nccl.stage_hop` + `nccl.hop_ms` for
a send/recv between GPU 0 and GPU 1 (a pipeline hop at TP 1). a100_dgx is the calibration box (it sets
`nccl.LAUNCH_US`); a100_pairwise_nvlink is validation only. Rows that cross nodes are counted but not
predicted: the network between the measured nodes is not documented.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from simserve.catalog import NODES
from simserve.profiling import nccl

# measured box (Vidur's folder name) -> simserve node, and its role
BOXES = {
    "a100_dgx": "dgx-a100",
    "a100_pairwise_nvlink": "a100-pairwise-nvlink",
    "h100_pairwise_nvlink": "h100-nvl-pairs",
}
CALIBRATION_BOX = "a100_dgx"
OPS = ("all_reduce", "send_recv")


def load(root: Path) -> pd.DataFrame:
    """box, node, op, num_workers, devices_per_node, size_bytes, measured_ms — every measured row."""
    frames = []
    for box, node in BOXES.items():
        for op in OPS:
            if not (root / "network" / box / f"{op}.csv").is_file():
                continue  # h100_pairwise_nvlink has no send_recv (upstream's is a copy of the A100 one)
            df = pd.read_csv(root / "network" / box / f"{op}.csv")
            frames.append(
                pd.DataFrame(
                    {
                        "box": box,
                        "node": node,
                        "op": op,
                        "num_workers": df["num_workers"],
                        "devices_per_node": df["devices_per_node"],
                        "size_bytes": df["size"],
                        "measured_ms": df[f"time_stats.{op}.median"],
                    }
                )
            )
    out = pd.concat(frames, ignore_index=True)
    out["set"] = np.where(out["box"] == CALIBRATION_BOX, "calibration", "validation")
    return out[out["measured_ms"] > 0].reset_index(drop=True)


def inside_one_box(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["devices_per_node"] == df["num_workers"]].reset_index(drop=True)


def predict(df: pd.DataFrame, launch_us: float | None = None) -> np.ndarray:
    """Predicted ms of rows inside one box, through the simulator's own path (launch: the box's
    generation's)."""
    out = np.full(len(df), np.nan)
    for (node_name, op, n), idx in df.groupby(["node", "op", "num_workers"]).groups.items():
        node, sizes = NODES.get(node_name), df.loc[idx, "size_bytes"]
        pos = df.index.get_indexer(idx)
        launch = nccl.launch_us_for(node) if launch_us is None else launch_us
        if op == "all_reduce":
            out[pos] = nccl.collective_ms("all_reduce", nccl.node_fabric(node, int(n)), sizes, launch)
        else:  # GPU 0 -> GPU 1: the hop a TP-1 pipeline's first stage sends over
            out[pos] = nccl.hop_ms(node, None, nccl.stage_hop(node, None, 1, 0), sizes, launch)
    return out


def errors(df: pd.DataFrame, launch_us: float | None = None) -> pd.DataFrame:
    df = inside_one_box(df)
    out = df.assign(predicted_ms=predict(df, launch_us))
    out["ape"] = (out["predicted_ms"] / out["measured_ms"] - 1).abs() * 100
    out["bias"] = (out["predicted_ms"] / out["measured_ms"] - 1) * 100
    return out


def summary(err: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Median and p90 absolute percentage error per group, and the signed median bias."""
    g = err.groupby(by)
    return pd.DataFrame(
        {
            "n": g.size(),
            "median_ape": g["ape"].median(),
            "p90_ape": g["ape"].quantile(0.9),
            "median_bias": g["bias"].median(),
        }
    ).round(1)


BUS_BANDS_MIB = (1, 4, 16, 64, 256, 1024)


def all_reduce_busbw(err: pd.DataFrame) -> pd.DataFrame:
    """Measured and predicted all-reduce bus bandwidth (nccl-tests' busbw: 2(n−1)/n × bytes / time, GB/s) per
    box, GPUs and size band (1–4 MiB, 4–16, …): where the model's shortfall is bandwidth and where it is a
    fixed cost.

    `extra_us` is the median of measured − predicted: growing with size within a box means bandwidth, flat
    means latency. `err` is `errors(...)` (rows inside one box)."""
    ar = err[(err["op"] == "all_reduce") & (err["size_bytes"] >= BUS_BANDS_MIB[0] * 2**20)]
    n = ar["num_workers"]
    moved = 2 * (n - 1) / n * ar["size_bytes"]
    out = ar.assign(
        band=pd.cut(
            ar["size_bytes"] / 2**20,
            BUS_BANDS_MIB,
            right=False,
            labels=[f"{a}-{b} MiB" for a, b in zip(BUS_BANDS_MIB[:-1], BUS_BANDS_MIB[1:], strict=True)],
        ),
        measured_gbps=moved / (ar["measured_ms"] * 1e6),
        predicted_gbps=moved / (ar["predicted_ms"] * 1e6),
        extra_us=(ar["measured_ms"] - ar["predicted_ms"]) * 1e3,
    )
    g = out.groupby(["box", "num_workers", "band"], observed=True)
    return pd.DataFrame(
        {
            "n": g.size(),
            "measured_busbw": g["measured_gbps"].median(),
            "predicted_busbw": g["predicted_gbps"].median(),
            "median_bias": g["bias"].median(),
            "extra_us": g["extra_us"].median(),
        }
    ).round(1)


def calibrate_launch_us(df: pd.DataFrame) -> float:
    """Host-side launch cost: median of measured − NCCL-predicted time over the calibration box's smallest
    point-to-point messages (≤ 64 KiB), where the kernel itself is a few µs and NCCL's tuner plays no part."""
    rows = inside_one_box(df)
    rows = rows[
        (rows["box"] == CALIBRATION_BOX) & (rows["op"] == "send_recv") & (rows["size_bytes"] <= 65536)
    ]
    kernel = predict(rows.reset_index(drop=True), launch_us=0.0)
    return float(np.median(rows["measured_ms"].to_numpy() - kernel) * 1e3)


# ------------------------------------------------- NVIDIA's NCCL tables (aiconfigurator-core), per generation

# database system -> (catalog node it measured or stands in for, arch, role). The A100 and H100 tables set the
# launch ratio (in-sample) and the H100's NVLS bound; the H200's is held out. B200 and L40S only give their
# generation's launch (no catalog box of theirs here: an 8-GPU NVSwitch box and a PCIe Gen4 box stand in for
# the kernel time, which is a few µs of LL latency at ≤ 64 KiB).
DB_SYSTEMS = {
    "a100_sxm": ("dgx-a100", "ampere", "calibration"),
    "h100_sxm": ("dgx-h100", "hopper", "calibration"),
    "h200_sxm": ("hgx-h200", "hopper", "validation"),
    "b200_sxm": ("dgx-h100", "blackwell", "launch only"),
    "l40s": ("l40s-pcie-host", "ada", "launch only"),
}
# The L40S box's rings beyond one PCIe switch pair go through host memory: its 4-GPU rows fit the host copy
# rate of the l40s-pcie-host node (in-sample), its 8-GPU rows are held out; its 2 GPUs are a P2P pair (20
# GB/s), not host.
HOST_BOX = {"system": "l40s", "calibration": 4, "validation": 8}
SMALL_BYTES = 65536


def _db_nccl_file(db_root: Path, system: str) -> Path | None:
    from simserve.profiling.perfdb_validation import _version_key

    base = db_root / system / "comm" / "nccl"
    versions = (
        sorted((d.name for d in base.iterdir() if (d / "nccl_perf.parquet").is_file()), key=_version_key)
        if base.is_dir()
        else []
    )
    return base / versions[-1] / "nccl_perf.parquet" if versions else None


def load_db(db_root: Path) -> pd.DataFrame:
    """box, node, arch, op, num_workers, size_bytes, measured_ms, set: fp16 all-reduces of every DB_SYSTEMS
    table."""
    frames = []
    for system, (node, arch, role) in DB_SYSTEMS.items():
        path = _db_nccl_file(db_root, system)
        if path is None:
            continue
        df = pd.read_parquet(path, columns=["op_name", "nccl_dtype", "num_gpus", "message_size", "latency"])
        df = df[(df["op_name"] == "all_reduce") & (df["nccl_dtype"] == "half")]
        role = np.full(len(df), role, dtype=object)
        if system == HOST_BOX["system"]:
            n = df["num_gpus"].to_numpy()
            role = np.where(
                n == HOST_BOX["calibration"],
                "calibration",
                np.where(n == HOST_BOX["validation"], "validation", "launch only"),
            )
        frames.append(
            pd.DataFrame(
                {
                    "box": f"{system} (NCCL {path.parent.name})",
                    "system": system,
                    "node": node,
                    "arch": arch,
                    "op": "all_reduce",
                    "num_workers": df["num_gpus"].to_numpy(),
                    "devices_per_node": df["num_gpus"].to_numpy(),
                    "size_bytes": df["message_size"].to_numpy() * 2,
                    "measured_ms": df["latency"].to_numpy(dtype=float),
                    "set": role,
                }
            )
        )
    out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return out[out["measured_ms"] > 0].reset_index(drop=True) if len(out) else out


def db_errors(db: pd.DataFrame) -> pd.DataFrame:
    """Rows of boxes the catalog holds (not the stand-ins), predicted with each node's generation's launch."""
    rows = db[db["set"] != "launch only"].reset_index(drop=True)
    out = rows.assign(predicted_ms=predict(rows))
    out["ape"] = (out["predicted_ms"] / out["measured_ms"] - 1).abs() * 100
    out["bias"] = (out["predicted_ms"] / out["measured_ms"] - 1) * 100
    return out


def launch_residuals_us(db: pd.DataFrame) -> dict[str, float]:
    """Per arch: median measured − NCCL kernel time (no launch) of its 2-GPU all-reduces ≤ SMALL_BYTES."""
    small = db[(db["num_workers"] == 2) & (db["size_bytes"] <= SMALL_BYTES)].reset_index(drop=True)
    kernel = predict(small, launch_us=0.0)
    resid = (small["measured_ms"].to_numpy() - kernel) * 1e3
    return {
        arch: float(np.median(resid[(small["arch"] == arch).to_numpy()])) for arch in small["arch"].unique()
    }


def launch_by_arch(db: pd.DataFrame) -> dict[str, float]:
    """nccl.LAUNCH_US (measured on Vidur's a100_dgx) × each generation's residual / the A100's, one
    harness."""
    r = launch_residuals_us(db)
    return {arch: nccl.LAUNCH_US * v / r["ampere"] for arch, v in r.items()}


def host_copy_gbps(db: pd.DataFrame) -> float:
    """The host copy rate of HOST_BOX's in-sample GPU count: median busbw of its all-reduces ≥ 16 MiB × n / 2
    (a pcie-host ring of n GPUs gets 2/n of what 2 GPUs reach: nccl.node_fabric)."""
    n = HOST_BOX["calibration"]
    rows = db[(db["system"] == HOST_BOX["system"]) & (db["num_workers"] == n) & (db["size_bytes"] >= 2**24)]
    busbw = 2 * (n - 1) / n * rows["size_bytes"] / (rows["measured_ms"] * 1e6)
    return float(busbw.median() * n / 2)
