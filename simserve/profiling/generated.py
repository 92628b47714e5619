"""Profiles simserve writes itself when none covers a deployment: a measured profile from NVIDIA's per-op
database when it has the GPU (simserve/profiling/measured_backend.py), else an analytic roofline profile,
written once into $SIMSERVE_CACHE/plan-profiles/ (one folder per box). Which profile a run uses is
simserve/resolve.py's.

Roofline profiles use spec-sheet peaks with efficiencies calibrated per compute capability on measured kernels
(docs/profiling.md).
"""

from __future__ import annotations

import shlex
from pathlib import Path

from simserve.cachedir import cache_root
from simserve.catalog import NETWORKS, GPUSpec, ModelSpec
from simserve.profiling.schema import profile_dir, slug, write_profile

GENERATED_NETWORK = "ethernet-100g"  # what Deployment.create puts between nodes when none is named


def generated_root(node=None) -> Path:
    """Where generated profiles live: one folder per box, since a profile's collectives are its box's."""
    root = cache_root() / "plan-profiles"
    return root if node is None else root / slug(node.name)


def measured_package_version() -> str | None:
    from simserve.profiling import measured

    return measured.package_version() if measured.installed() else None


def measured_source(gpu: GPUSpec, model: ModelSpec | None = None, moe_skew: float = 0.0) -> str | None:
    """None when a measured profile can be built for `gpu` (and `model`), else why not (for the roofline
    label)."""
    from simserve.profiling import measured

    if moe_skew:  # the package measured balanced and its own power-law routing, not simserve's Zipf skew
        return f"the measured MoE tables have no Zipf-skewed routing (--moe-skew {moe_skew:g})"
    return measured.unavailable(gpu.name)


def generate(
    gpu: GPUSpec,
    model: ModelSpec,
    node,
    max_model_len: int = 16384,
    dtype: str = "bf16",
    kv_dtype: str = "bf16",
    moe_skew: float = 0.0,
    not_measured: str | None = None,
) -> Path:
    """Write a measured profile (when the database has the GPU and the model is dense) or else a roofline one,
    of every power-of-two TP degree that fits `node`, with its node and the default network. Always the same
    degrees and no date in the provenance: the same inputs write the same bytes, so the fitted-predictor and
    probe caches (keyed by the profile's content) stay valid across plans."""
    from simserve.profiling import measured_backend, roofline

    tps = [t for t in (1, 2, 4, 8, 16, 32) if t <= node.gpus_per_node and model.num_heads % t == 0]
    # `not_measured`: why the measured backend, though available, could not write this model (a head dim the
    # tables lack): a roofline profile that says so
    not_measured = not_measured or measured_source(gpu, model, moe_skew)
    backend = "roofline" if not_measured else "measured"
    if backend == "measured":  # the TP degrees whose all-reduce NVIDIA measured (2, 4, 8 in 0.12.0)
        tps = [t for t in tps if t <= measured_backend.MAX_MEASURED_TP]
    profile = measured_backend.profile if backend == "measured" else roofline.profile
    network = NETWORKS.get(GENERATED_NETWORK)
    tables, fields = profile(
        model,
        gpu,
        tps,
        node,
        network,
        max_model_len,
        max_model_len,
        dtype=dtype,
        kv_dtype=kv_dtype,
        moe_skew=moe_skew,
    )
    command = [
        "simserve",
        "profile",
        "--gpu",
        gpu.name,
        "--model",
        model.name,
        "--tp",
        ",".join(map(str, tps)),
    ]
    command += ["--node", node.name, "--network", network.name, "--backend", backend]
    command += ["--max-model-len", str(max_model_len), "--max-tokens", str(max_model_len)]
    command += ["--dtype", dtype] if dtype != "bf16" else []
    command += ["--kv-dtype", kv_dtype] if kv_dtype != "bf16" else []
    command += ["--moe-skew", f"{moe_skew:g}"] if moe_skew else []
    provenance = {
        "command": shlex.join(command),
        "written_by": "simserve plan, run or sweep (no profile covered this GPU and model)",
        **({"measured_unavailable": not_measured} if backend == "roofline" else {}),
        **({"measured_package_version": measured_package_version()} if backend == "roofline" else {}),
        "deployment": {
            "model": model.name,
            "gpu": gpu.name,
            "tp": tps,
            "node": node.name,
            "network": network.name,
            "max_model_len": max_model_len,
        },
        **fields,
    }
    from simserve import precision

    name = model.name + precision.suffix(dtype, kv_dtype)
    return write_profile(profile_dir(generated_root(node), gpu.name, name), tables, provenance)
