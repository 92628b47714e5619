"""The op profile a deployment runs on in `plan`, `run` and `sweep`: the shipped (or $SIMSERVE_PROFILES) one
when it covers the deployment, else one generated once (simserve/profiling/generated.py): measured from
NVIDIA's per-op database when it has the GPU, else an analytic roofline profile.

Every plan row, run summary and sweep title says which it rests on ("shipped measured", "generated measured",
"generated roofline (analytic)"), and a roofline label says why no measured profile was built (the GPU is not
in the database, or the package is not installed), so nobody mistakes an analytic number for a measured one.
This is orchestration above the predictor and the simulator (it asks the predictor whether a profile covers a
deployment, and checks a Scenario first).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from simserve.catalog import NETWORKS
from simserve.deployment import Deployment
from simserve.errors import SimserveError
from simserve.predictor.load import default_profiles_root
from simserve.profiling.generated import (
    GENERATED_NETWORK,
    generate,
    generated_root,
    measured_package_version,
    measured_source,
)
from simserve.profiling.schema import profile_dir, read_profile


@dataclass(frozen=True)
class ProfileChoice:
    root: str | None  # None: the default root (shipped profiles/ or $SIMSERVE_PROFILES), as a sweep uses
    label: str  # e.g. "shipped roofline (analytic)" or "generated roofline (analytic)"


def _covers(root: Path, dep: Deployment, current: bool = False) -> str | None:
    """The profile's backend when the profile under `root` covers `dep`, else None. With `current`, a profile
    the roofline backend would now write differently (its tiles, constants, GPU, node or network spec changed)
    covers nothing."""
    from simserve.predictor.coverage import profile_keys, require  # pandas: not on a warm run's path
    from simserve.predictor.load import read_profile_cached
    from simserve.profiling.collectives import for_node
    from simserve.profiling.roofline import link_fields, model_fields

    path = profile_dir(root, dep.gpu.name, dep.profile_model)
    measured_now = measured_source(dep.gpu, dep.model, dep.moe_skew)
    if not path.is_dir():
        return None
    try:
        profile = read_profile_cached(path)  # NOTE: a plan asks this for every deployment on one profile
        require(profile_keys(profile), dep, path)
    except SimserveError:
        return None
    if current:
        is_measured = profile.provenance.get("backend") == "measured"
        # a roofline profile written because the measured tables lacked this model's shapes stays current
        # while the same package release is installed (building the measured one again would fail the same
        # way)
        fell_back = (
            measured_now is None
            and "measured_unavailable" in profile.provenance
            and profile.provenance.get("measured_package_version") == measured_package_version()
        )
        if is_measured != (measured_now is None) and not fell_back:
            return None  # the package was installed or removed since: write the kind that can be built now
        fields = {
            **({} if is_measured else model_fields(dep.gpu, for_node(dep.node))),
            **link_fields(dep.node, NETWORKS.get(GENERATED_NETWORK)),
        }
        now = json.loads(json.dumps(fields))
        if any(profile.provenance.get(k) != v for k, v in now.items()):
            return None
        version = profile.provenance.get("measured", {}).get("package_version")
        if is_measured and version != measured_package_version():
            return None
    return str(profile.provenance.get("backend", "unknown backend"))


def resolve_profiles(deps: list[Deployment]) -> dict[Deployment, ProfileChoice]:
    """A profile for every deployment: the default root's when it covers it, else a generated measured one,
    else a generated roofline one labelled with why (written at most once per GPU and model)."""
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
        why = measured_source(first.gpu, first.model, first.moe_skew)
        args = (
            first.gpu,
            first.model,
            first.node,
            max(16384, *(d.max_model_len for d in group)),
            first.dtype,
            first.kv_dtype,
            first.moe_skew,
        )
        if any(_covers(root, d, current=True) is None for d in group):
            why = _generate_or_fall_back(args, why)
        else:
            prov = profile_dir(root, first.gpu.name, first.profile_model) / "provenance.json"
            why = json.loads(prov.read_text()).get("measured_unavailable", why)
        label = "generated measured" if why is None else "generated roofline (analytic)"
        if why is not None and first.gpu.name in _measured_systems():
            label += f"; not measured: {why}"  # the database has this GPU: say why its tables were not used
        for dep in group:
            out[dep] = ProfileChoice(str(root), label)
    return out


def _generate_or_fall_back(args: tuple, why: str | None) -> str | None:
    """generate(*args); where the measured backend cannot write this model (the tables lack its shapes), a
    roofline profile instead that records why. Returns why the profile is not measured (None: it is)."""
    try:
        generate(*args)
    except SimserveError as exc:
        if why is not None:
            raise  # the roofline backend itself failed: nothing to fall back to
        why = str(exc)
        generate(*args, not_measured=why)
    return why


def _measured_systems() -> dict:
    from simserve.profiling import measured

    return measured.SYSTEMS


def for_scenario(scenario):
    """`scenario` on a profile that covers it, and the one line to print when it is a generated one (else
    None).

    An explicit --profiles or $SIMSERVE_PROFILES is the user's own profile set: it is never replaced, and a
    profile missing there stays the error naming the command that writes it (load_timer's)."""
    import os
    from dataclasses import replace

    if scenario.profiles_root is not None or os.environ.get("SIMSERVE_PROFILES"):
        return scenario, None
    from simserve.sim.scenario import check_scenario

    try:
        # a scenario that cannot run (does not fit, bad option) reports that, not this
        check_scenario(scenario)
    except SimserveError:
        return scenario, None
    dep = scenario.deployment()
    shipped = profile_dir(default_profiles_root(), dep.gpu.name, dep.profile_model)
    lacking = None
    if shipped.is_dir():
        tps = _profiled_tps(shipped)
        if tps is None or dep.tp in tps or not _generable(dep):
            # shipped: load_timer checks its TP degrees and links (reading no table here)
            return scenario, None
        lacking = f"the shipped profile {shipped} has TP {', '.join(map(str, tps))}, not TP {dep.tp}"
    root = generated_root(dep.node)
    path = profile_dir(root, dep.gpu.name, dep.profile_model)
    why = measured_source(dep.gpu, dep.model, dep.moe_skew)
    args = (
        dep.gpu,
        dep.model,
        dep.node,
        max(16384, dep.max_model_len),
        dep.dtype,
        dep.kv_dtype,
        dep.moe_skew,
    )
    if _covers(root, dep, current=True) is None:
        why = _generate_or_fall_back(args, why)
        done = "generated a" if why is None else "generated an"
    else:
        done = "reused the"
        why = read_profile(path).provenance.get("measured_unavailable", why)
    if why is None:
        from simserve.profiling import measured

        m = read_profile(path).provenance.get("measured", {})
        kind = (
            f"measured profile ({measured.PACKAGE} {m.get('package_version')}, {m.get('engine')} "
            f"{m.get('engine_version')} kernels)"
        )
    else:
        kind = f"analytic roofline profile (not measured: {why})"
    head = lacking or f"no shipped profile for {dep.profile_model} on {dep.gpu.name}"
    return replace(scenario, profiles_root=str(root)), f"{head}: {done} {kind} in {path}"


def _profiled_tps(path: Path) -> list[int] | None:
    """The TP degrees a profile's provenance.json says it holds (None when it does not say: load_timer
    decides)."""
    try:
        tps = json.loads((path / "provenance.json").read_text()).get("deployment", {}).get("tp")
    except (OSError, ValueError):
        return None
    return sorted(int(t) for t in tps) if isinstance(tps, list) else None


def _generable(dep: Deployment) -> bool:
    """Whether generate() writes `dep`'s TP degree: it fits the box and divides the heads (and, for a measured
    profile, is one whose all-reduce NVIDIA measured)."""
    from simserve.profiling import measured_backend

    fits = dep.node is not None and dep.tp <= dep.node.gpus_per_node and dep.model.num_heads % dep.tp == 0
    measured_now = measured_source(dep.gpu, dep.model, dep.moe_skew) is None
    return fits and (not measured_now or dep.tp <= measured_backend.MAX_MEASURED_TP)
