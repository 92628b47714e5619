"""NVIDIA's per-op performance database (the `aiconfigurator-core` package): which GPUs, engines and releases
it measured, and its GEMM, attention and all-reduce tables read into plain DataFrames.

The package (Apache-2.0, NVIDIA) ships measured kernel times as parquet files under
`aiconfigurator_core/systems/data/<system>/<op family>/<engine>/<version>/`. simserve reads them at profile
time and never copies a raw table into its repository: a profile built from them holds only simserve's grid of
interpolated op times, with the package's license and attribution in its provenance (measured_backend.py).

Units as the package stores them: latency in milliseconds; GEMM m, n, k as the (m × k) @ (k × n) problem;
attention `num_heads`/`num_key_value_heads` per GPU, context rows a whole prompt of `isl` tokens (no cached
prefix), generation rows one query token per request over `isl + step` cached tokens; all-reduce
`message_size` in elements (bf16/half: 2 bytes each; the packaged collection notes say so, and NCCL's int8
rows of 2N elements take the time of half rows of N).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from simserve.errors import SimserveError

PACKAGE = "aiconfigurator-core"
INSTALL_HINT = "pip install -e '.[measured]'"
LICENSE = "Apache-2.0"
ATTRIBUTION = (
    "Kernel times from NVIDIA's aiconfigurator-core performance database "
    "(https://github.com/ai-dynamo/aiconfigurator, Copyright (c) 2025-2026 NVIDIA CORPORATION & AFFILIATES, "
    "licensed under the Apache License 2.0, https://www.apache.org/licenses/LICENSE-2.0). simserve "
    "interpolated them onto its profile grid; the values in this profile are derived from, not identical "
    "to, the package's tables."
)

# The catalog's GPU (simserve/catalog/hardware.py) → the package's system name. Systems the package describes
# but holds no tables for (a100_pcie, a30, h100_pcie, l4 in 0.12.0) are listed too: `simserve list gpus` says
# so.
SYSTEMS = {
    "A100-80GB": "a100_sxm",
    "A100-PCIe": "a100_pcie",
    "A30": "a30",
    "H100-SXM": "h100_sxm",
    "H100-PCIe": "h100_pcie",
    "H200": "h200_sxm",
    "B200": "b200_sxm",
    "B300": "b300_sxm",
    "GB200": "gb200",
    "GB300": "gb300",
    "L4": "l4",
    "L40S": "l40s",
    "RTX-P6000": "rtx_pro_6000_server",
}
# The box each system's collectives were measured in (its systems/<name>.yaml `node`: 8 GPUs on NVSwitch for
# the SXM parts, a 4-GPU tray of an NVL72 rack for GB200/GB300, a PCIe server for L40S and RTX Pro 6000).
# Measured all-reduce rows describe that box only: a profile for another box (e.g. A100 NVLink pairs) models
# its own.
BOXES = {
    "a100_sxm": "dgx-a100",
    "h100_sxm": "dgx-h100",
    "h200_sxm": "hgx-h200",
    "b200_sxm": "dgx-b200",
    "b300_sxm": "hgx-b300",
    "gb200": "gb200-nvl72",
    "gb300": "gb300-nvl72",
    "l40s": "l40s-pcie",
    "rtx_pro_6000_server": "rtx-pro-6000-pcie",
}
ENGINES = ("vllm", "sglang", "trtllm")
GEMM_DTYPES = {"bf16": "bfloat16", "fp8": "fp8", "fp8_block": "fp8_block"}


def installed() -> bool:
    return importlib.util.find_spec("aiconfigurator_core") is not None


def package_version() -> str:
    return importlib.metadata.version(PACKAGE)


def systems_root() -> Path:
    """The package's systems/ folder; without the package, one line saying how to install it."""
    spec = importlib.util.find_spec("aiconfigurator_core") if installed() else None
    if spec is None or not spec.submodule_search_locations:
        raise SimserveError(f"the measured backend needs NVIDIA's {PACKAGE} package: {INSTALL_HINT}")
    return Path(next(iter(spec.submodule_search_locations))) / "systems"


def unavailable(gpu_name: str) -> str | None:
    """None when a measured profile can be built for the GPU, else why not (for labels and hints)."""
    if gpu_name not in SYSTEMS:
        return f"{PACKAGE} has no {gpu_name}"
    if not installed():
        return f"measured tables need {INSTALL_HINT}"
    if not engines(SYSTEMS[gpu_name]):
        return f"{PACKAGE} {package_version()} has no tables for {gpu_name}"
    return None


def system_of(gpu_name: str) -> str:
    """The package's system for a catalog GPU, or one line naming the GPUs that have measured tables."""
    system = SYSTEMS.get(gpu_name)
    if system is None or not engines(system):
        have = ", ".join(g for g, s in SYSTEMS.items() if engines(s))
        raise SimserveError(
            f"{PACKAGE} {package_version()} has no measured tables for {gpu_name}; it has {have} "
            f"(use --backend roofline for {gpu_name})"
        )
    return system


@cache
def engines(system: str) -> dict[str, tuple[str, ...]]:
    """Engine → releases with both GEMM and attention tables on `system` (oldest first); {} without data."""
    data = systems_root() / "data" / system
    out: dict[str, tuple[str, ...]] = {}
    for engine in ENGINES:
        gemm = _versions(data / "gemm" / engine, "gemm_perf.parquet")
        ctx = _versions(data / "attention" / engine, "context_attention_perf.parquet")
        both = sorted(set(gemm) & set(ctx), key=version_key)
        if both:
            out[engine] = tuple(both)
    return out


def _versions(folder: Path, filename: str) -> list[str]:
    return [p.name for p in folder.iterdir() if (p / filename).exists()] if folder.is_dir() else []


def version_key(version: str) -> tuple:
    """Release order: 0.5.6.post2 < 0.5.10 < 0.5.14; 1.3.0rc10 < 1.3.0rc20 (numbers compared as numbers)."""
    import re

    return tuple((int(p), "") if p.isdigit() else (-1, p) for p in re.findall(r"\d+|[a-z]+", version.lower()))


@cache
def system_spec(system: str) -> dict:
    import yaml

    path = systems_root() / f"{system}.yaml"
    try:
        return yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise SimserveError(f"{path}: unreadable system description ({exc}); reinstall {PACKAGE}") from None


def default_version(system: str, engine: str) -> str:
    """The release the package itself queries by default (its query_versions.yaml `current`), else the
    newest."""
    import yaml

    have = engines(system).get(engine, ())
    try:
        slots = yaml.safe_load((systems_root() / "query_versions.yaml").read_text()) or {}
    except (OSError, yaml.YAMLError):
        slots = {}
    pinned = {**slots.get("defaults", {}), **slots.get("overrides", {}).get(system, {})}.get(engine) or {}
    current = pinned.get("current") if isinstance(pinned, dict) else None
    return current if current in have else have[-1]


@dataclass(frozen=True)
class Database:
    """The tables of one GPU (system) for one engine release."""

    system: str
    engine: str
    version: str

    @property
    def folder(self) -> Path:
        return systems_root() / "data" / self.system

    def gemm(self, dtype: str = "bf16"):
        if dtype not in GEMM_DTYPES:
            raise SimserveError(f"no GEMM dtype {dtype!r}; the database has {', '.join(GEMM_DTYPES)}")
        path = self.folder / "gemm" / self.engine / self.version / "gemm_perf.parquet"
        df = read_table(path, ["gemm_dtype", "kernel_source", "m", "n", "k", "latency"])
        df = df[df["gemm_dtype"] == GEMM_DTYPES[dtype]]
        if df.empty:
            raise SimserveError(f"{path}: no {GEMM_DTYPES[dtype]} GEMM rows; choose another dtype or engine")
        return df

    def attention(self, phase: str):
        name = {"prefill": "context_attention_perf.parquet", "decode": "generation_attention_perf.parquet"}[
            phase
        ]
        path = self.folder / "attention" / self.engine / self.version / name
        cols = [
            "kernel_source",
            "batch_size",
            "isl",
            "num_heads",
            "num_key_value_heads",
            "head_dim",
            "kv_cache_dtype",
            "step",
            "latency",
        ]
        # older collections (a100_sxm vllm 0.14.0) predate sliding-window rows: all their rows are full
        # attention
        return read_table(path, cols, optional={"window_size": 0})

    def nccl(self) -> tuple[str, object]:
        """(NCCL version, its all_reduce rows): the NCCL release the package pairs with this system."""
        version = str(system_spec(self.system).get("misc", {}).get("nccl_version", ""))
        path = self.folder / "comm" / "nccl" / version / "nccl_perf.parquet"
        if not version or not path.exists():
            have = _versions(self.folder / "comm" / "nccl", "nccl_perf.parquet")
            raise SimserveError(
                f"{path}: missing; the {self.system} NCCL tables are {', '.join(have) or 'none'}"
            )
        df = read_table(path, ["op_name", "nccl_dtype", "num_gpus", "message_size", "latency"])
        return version, df[(df["op_name"] == "all_reduce") & (df["nccl_dtype"] == "half")]

    def custom_allreduce(self) -> tuple[str, object] | None:
        """(release, rows) of the engine's own all-reduce: this release's table, else the newest earlier one
        (the package fills comm tables from earlier releases of the same engine the same way); None when there
        is none."""
        have = _versions(self.folder / "comm" / self.engine, "custom_allreduce_perf.parquet")
        usable = [v for v in have if version_key(v) <= version_key(self.version)]
        if not usable:
            return None
        version = max(usable, key=version_key)
        path = self.folder / "comm" / self.engine / version / "custom_allreduce_perf.parquet"
        return version, read_table(path, ["kernel_source", "num_gpus", "message_size", "latency"])


def open_database(gpu_name: str, engine: str = "vllm", version: str | None = None) -> Database:
    system = system_of(gpu_name)
    have = engines(system)
    if engine not in have:
        raise SimserveError(
            f"{PACKAGE} has no {engine!r} tables for {gpu_name} ({system}); it has "
            + "; ".join(f"{e} {', '.join(v)}" for e, v in have.items())
        )
    version = version or default_version(system, engine)
    if version not in have[engine]:
        raise SimserveError(
            f"{PACKAGE} has no {engine} {version} tables for {gpu_name} ({system}); it has {engine} "
            f"{', '.join(have[engine])}"
        )
    return Database(system, engine, version)


def read_table(path: Path, columns: list[str], optional: dict | None = None):
    """One parquet table, checked: a missing or unreadable file, a missing column or a bad latency is named.
    `optional` columns get their default where a table lacks them."""
    import pandas as pd

    try:
        df = pd.read_parquet(path)
    except FileNotFoundError:
        raise SimserveError(f"{path}: missing; reinstall {PACKAGE} ({INSTALL_HINT})") from None
    except Exception as exc:  # pyarrow raises several types for a corrupt file
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SimserveError(f"{path}: not a readable parquet table ({first}); reinstall {PACKAGE}") from None
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise SimserveError(f"{path}: missing column(s) {', '.join(missing)}; reinstall {PACKAGE}")
    for col, default in (optional or {}).items():
        if col not in df.columns:
            df[col] = default
    lat = pd.to_numeric(df["latency"], errors="coerce")
    bad = lat.isna() | ~(lat > 0)
    if bad.any():
        row = int(bad.to_numpy().nonzero()[0][0])
        raise SimserveError(
            f"{path}: row {row + 1} has latency={df['latency'].iloc[row]!r} (not a positive number); "
            f"reinstall {PACKAGE}"
        )
    return df[columns + list(optional or {})].assign(latency=lat)
