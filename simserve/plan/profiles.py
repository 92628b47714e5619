"""The op profile each planned deployment runs on: the shipped (or $SIMSERVE_PROFILES) one when it covers the
deployment, else an analytic roofline profile written once into $SIMSERVE_CACHE/plan-profiles/.

Most GPUs a plan compares have no measured profile, so the planner writes one with the roofline backend (spec-
sheet peaks with efficiencies calibrated per compute capability on measured kernels: docs/profiling.md) and labels
every row that uses it, so nobody mistakes an analytic number for a measured one.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path

from simserve.catalog import NETWORKS, GPUSpec, ModelSpec
from simserve.deployment import Deployment
from simserve.errors import SimserveError
from simserve.predictor.cache import cache_root
from simserve.predictor.coverage import profile_keys, require
from simserve.predictor.load import default_profiles_root
from simserve.profiling.schema import profile_dir, read_profile, slug, write_profile

GENERATED_NETWORK = "ethernet-100g"  # what Deployment.create puts between nodes when none is named


@dataclass(frozen=True)
class ProfileChoice:
    root: str | None  # None: the default root (shipped profiles/ or $SIMSERVE_PROFILES), as a sweep uses
    label: str  # e.g. "shipped roofline (analytic)" or "generated roofline (analytic)"


def generated_root(node=None) -> Path:
    """Where generated profiles live: one folder per box, since a profile's collectives are its box's."""
    root = cache_root() / "plan-profiles"
    return root if node is None else root / slug(node.name)


def _covers(root: Path, dep: Deployment, current: bool = False) -> str | None:
    """The profile's backend when the profile under `root` covers `dep`, else None. With `current`, a profile the
    roofline backend would now write differently (its tiles, constants, GPU, node or network spec changed) covers
    nothing."""
    from simserve.profiling.collectives import for_node
    from simserve.profiling.roofline import link_fields, model_fields

    path = profile_dir(root, dep.gpu.name, dep.profile_model)
    if not path.is_dir():
        return None
    try:
        profile = read_profile(path)
        require(profile_keys(profile), dep, path)
    except SimserveError:
        return None
    if current:
        fields = {**model_fields(dep.gpu, for_node(dep.node)), **link_fields(dep.node, NETWORKS.get(GENERATED_NETWORK))}
        now = json.loads(json.dumps(fields))
        if any(profile.provenance.get(k) != v for k, v in now.items()):
            return None
    return str(profile.provenance.get("backend", "unknown backend"))


def generate(
    gpu: GPUSpec, model: ModelSpec, node, max_model_len: int = 16384, dtype: str = "bf16", kv_dtype: str = "bf16",
    moe_skew: float = 0.0,
) -> Path:
    """Write a roofline profile of every power-of-two TP degree that fits `node`, with its node and the default
    network. Always the same degrees and no date in the provenance: the same inputs write the same bytes, so
    the fitted-predictor and probe caches (keyed by the profile's content) stay valid across plans."""
    from simserve.profiling.roofline import profile

    tps = [t for t in (1, 2, 4, 8, 16, 32) if t <= node.gpus_per_node and model.num_heads % t == 0]
    network = NETWORKS.get(GENERATED_NETWORK)
    tables, fields = profile(model, gpu, tps, node, network, max_model_len, max_model_len, dtype=dtype,
                             kv_dtype=kv_dtype, moe_skew=moe_skew)  # fmt: skip
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
    command += ["--node", node.name, "--network", network.name, "--backend", "roofline"]
    command += ["--max-model-len", str(max_model_len), "--max-tokens", str(max_model_len)]
    command += ["--dtype", dtype] if dtype != "bf16" else []
    command += ["--kv-dtype", kv_dtype] if kv_dtype != "bf16" else []
    command += ["--moe-skew", f"{moe_skew:g}"] if moe_skew else []
    provenance = {
        "command": shlex.join(command),
        "written_by": "simserve plan (no profile covered this GPU and model)",
        "deployment": {
            "model": model.name,
            "gpu": gpu.name,
            "tp": tps,
            "node": node.name,
            "network": network.name,
            "max_model_len": max_model_len,
        },  # fmt: skip
        **fields,
    }
    from simserve import precision

    name = model.name + precision.suffix(dtype, kv_dtype)
    return write_profile(profile_dir(generated_root(node), gpu.name, name), tables, provenance)


def resolve_profiles(deps: list[Deployment]) -> dict[Deployment, ProfileChoice]:
    """A profile for every deployment: the default root's when it covers it, else a generated roofline one
    (written at most once per GPU and model)."""
    shipped = default_profiles_root()
    out: dict[Deployment, ProfileChoice] = {}
    missing: dict[tuple[str, str, str], list[Deployment]] = {}
    for dep in deps:
        backend = _covers(shipped, dep)
        if backend is not None:
            out[dep] = ProfileChoice(None, f"shipped {backend}")
        else:
            key = (dep.gpu.name, dep.profile_model, dep.moe_skew, getattr(dep.node, "name", ""))
            missing.setdefault(key, []).append(dep)
    for group in missing.values():
        first = group[0]
        root = generated_root(first.node)  # a box's deployments share one profile (plan/candidates.best_box)
        if any(_covers(root, d, current=True) is None for d in group):
            generate(first.gpu, first.model, first.node, max(16384, *(d.max_model_len for d in group)),
                     first.dtype, first.kv_dtype, first.moe_skew)  # fmt: skip
        for dep in group:
            out[dep] = ProfileChoice(str(root), "generated roofline (analytic)")
    return out
