"""The op profile a deployment runs on in `plan`, `run` and `sweep`: the shipped (or $SIMSERVE_PROFILES) one when it
covers the deployment, else one written once into $SIMSERVE_CACHE/plan-profiles/: a measured profile from NVIDIA's
per-op database when it has the GPU (simserve/profiling/measured_backend.py), else an analytic roofline profile.

Every plan row, run summary and sweep title says which it rests on ("shipped measured", "generated measured", "generated roofline (analytic)"), and
a roofline label says why no measured profile was built (the GPU is not in the database, or the package is not
installed), so nobody mistakes an analytic number for a measured one.
Roofline profiles use spec-sheet peaks with efficiencies calibrated per compute capability on measured kernels
(docs/profiling.md).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from simserve.catalog import NETWORKS, GPUSpec, ModelSpec
from simserve.deployment import Deployment
from simserve.errors import SimserveError
from simserve.predictor.cache import cache_root
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
    from simserve.predictor.coverage import require  # pandas: not on a warm run's path
    from simserve.profiling.collectives import for_node
    from simserve.profiling.roofline import link_fields, model_fields

    path = profile_dir(root, dep.gpu.name, dep.profile_model)
    measured_now = measured_source(dep.gpu, dep.model, dep.moe_skew)
    if not path.is_dir():
        return None
    try:
        profile, keys = _read(str(path), _stamp(path))
        require(keys, dep, path)
    except SimserveError:
        return None
    if current:
        is_measured = profile.provenance.get("backend") == "measured"
        if is_measured != (measured_now is None):
            return None  # the package was installed or removed since: write the kind that can be built now
        fields = {**({} if is_measured else model_fields(dep.gpu, for_node(dep.node))),
                  **link_fields(dep.node, NETWORKS.get(GENERATED_NETWORK))}  # fmt: skip
        now = json.loads(json.dumps(fields))
        if any(profile.provenance.get(k) != v for k, v in now.items()):
            return None
        version = profile.provenance.get("measured", {}).get("package_version")
        if is_measured and version != measured_package_version():
            return None
    return str(profile.provenance.get("backend", "unknown backend"))


def _stamp(path: Path) -> tuple:
    """(name, mtime, size) of every file in a profile directory: a rewritten profile reads afresh."""
    return tuple(sorted((f.name, st.st_mtime_ns, st.st_size) for f in path.iterdir() if (st := f.stat())))


@lru_cache(maxsize=4)
def _read(path: str, stamp: tuple):
    """A profile and the (op, TP, …) keys it covers, read once per plan: every deployment of one GPU and model
    in a box shares the profile, and the plan asks about each (a read is ~0.3 CPU-s of exact CSV parsing)."""
    from simserve.predictor.coverage import profile_keys

    profile = read_profile(Path(path))
    return profile, profile_keys(profile)


def measured_package_version() -> str | None:
    from simserve.profiling import measured

    return measured.package_version() if measured.installed() else None


def measured_source(gpu: GPUSpec, model: ModelSpec | None = None, moe_skew: float = 0.0) -> str | None:
    """None when a measured profile can be built for `gpu` (and `model`), else why not (for the roofline label)."""
    from simserve.profiling import measured

    if model is not None and (model.is_moe or model.is_mla or moe_skew):
        return "the measured backend reads dense GQA layers only"  # the package's MoE and MLA tables: not yet
    return measured.unavailable(gpu.name)


def generate(
    gpu: GPUSpec, model: ModelSpec, node, max_model_len: int = 16384, dtype: str = "bf16", kv_dtype: str = "bf16",
    moe_skew: float = 0.0,
    not_measured: str | None = None,
) -> Path:
    """Write a measured profile (when the database has the GPU and the model is dense) or else a roofline one, of
    every power-of-two TP degree that fits `node`, with its node and the default network. Always the same degrees
    and no date in the provenance: the same inputs write the same bytes, so the fitted-predictor and probe caches
    (keyed by the profile's content) stay valid across plans."""
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
    command += ["--node", node.name, "--network", network.name, "--backend", backend]
    command += ["--max-model-len", str(max_model_len), "--max-tokens", str(max_model_len)]
    command += ["--dtype", dtype] if dtype != "bf16" else []
    command += ["--kv-dtype", kv_dtype] if kv_dtype != "bf16" else []
    command += ["--moe-skew", f"{moe_skew:g}"] if moe_skew else []
    provenance = {
        "command": shlex.join(command),
        "written_by": "simserve plan, run or sweep (no profile covered this GPU and model)",
        **({"measured_unavailable": not_measured} if backend == "roofline" else {}),
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
    """A profile for every deployment: the default root's when it covers it, else a generated measured one, else a
    generated roofline one labelled with why (written at most once per GPU and model)."""
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
        why = measured_source(first.gpu, first.model, first.moe_skew)
        label = "generated measured" if why is None else "generated roofline (analytic)"
        if why is not None and first.gpu.name in _measured_systems():
            label += f"; not measured: {why}"  # the database has this GPU: say why its tables were not used
        for dep in group:
            out[dep] = ProfileChoice(str(root), label)
    return out


def _measured_systems() -> dict:
    from simserve.profiling import measured

    return measured.SYSTEMS


def for_scenario(scenario):
    """`scenario` on a profile that covers it, and the one line to print when it is a generated one (else None).

    An explicit --profiles or $SIMSERVE_PROFILES is the user's own profile set: it is never replaced, and a
    profile missing there stays the error naming the command that writes it (load_timer's)."""
    import os
    from dataclasses import replace

    if scenario.profiles_root is not None or os.environ.get("SIMSERVE_PROFILES"):
        return scenario, None
    from simserve.sim.scenario import check_scenario

    try:
        check_scenario(scenario)  # a scenario that cannot run (does not fit, bad option) reports that, not this
    except SimserveError:
        return scenario, None
    dep = scenario.deployment()
    if profile_dir(default_profiles_root(), dep.gpu.name, dep.profile_model).is_dir():
        return scenario, None  # shipped: load_timer checks its TP degrees and links (reading no table here)
    root = generated_root(dep.node)
    path = profile_dir(root, dep.gpu.name, dep.profile_model)
    why = measured_source(dep.gpu, dep.model, dep.moe_skew)
    args = (dep.gpu, dep.model, dep.node, max(16384, dep.max_model_len), dep.dtype, dep.kv_dtype, dep.moe_skew)
    if _covers(root, dep, current=True) is None:
        try:
            generate(*args)
        except SimserveError as exc:
            if why is not None:
                raise
            why = str(exc)  # the tables lack this model's shapes: a roofline profile, labelled with why
            generate(*args, not_measured=why)
        done = "generated a" if why is None else "generated an"
    else:
        done = "reused the"
        why = read_profile(path).provenance.get("measured_unavailable", why)
    if why is None:
        from simserve.profiling import measured

        m = read_profile(path).provenance.get("measured", {})
        kind = (f"measured profile ({measured.PACKAGE} {m.get('package_version')}, {m.get('engine')} "
                f"{m.get('engine_version')} kernels)")  # fmt: skip
    else:
        kind = f"analytic roofline profile (not measured: {why})"
    line = f"no shipped profile for {dep.profile_model} on {dep.gpu.name}: {done} {kind} in {path}"
    return replace(scenario, profiles_root=str(root)), line
