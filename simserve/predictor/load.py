"""Find, fit (cached) and compile the predictor for a deployment in one call."""

from __future__ import annotations

import os
from pathlib import Path

from simserve.deployment import Deployment
from simserve.errors import SimserveError
from simserve.predictor import timer_cache
from simserve.predictor.overhead import CpuOverhead
from simserve.predictor.timer import BatchTimer
from simserve.profiling.schema import SHIPPED_PROFILES, content_hash, profile_dir


def default_profiles_root() -> Path:
    """$SIMSERVE_PROFILES, else the repository's profiles/ folder."""
    env = os.environ.get("SIMSERVE_PROFILES")
    return Path(env) if env else SHIPPED_PROFILES


def load_timer(
    dep: Deployment,
    profiles_root: str | Path | None = None,
    cache: bool = True,
    overhead: CpuOverhead | None = None,
    seed: int = 0,
) -> BatchTimer:
    """The BatchTimer for `dep` from profiles/<gpu>/<model>/.

    Raises SimserveError when the profile is missing, unreadable, or lacks the deployment's TP degree or links
    (checked before fitting, so the error comes at once). With `cache`, the compiled timer is read from
    $SIMSERVE_CACHE/timer/ when this profile (by content hash) was compiled for this deployment before; only a
    miss imports the fitting code (scikit-learn, pandas).
    """
    root = Path(profiles_root) if profiles_root is not None else default_profiles_root()
    path = profile_dir(root, dep.gpu.name, dep.profile_model)
    if not path.exists():
        from simserve.predictor.coverage import profile_command
        from simserve.profiling import measured

        dense = not (dep.model.is_moe or dep.model.is_mla or dep.moe_skew)
        if dense and measured.unavailable(dep.gpu.name) is None:  # NVIDIA measured this GPU: say so first
            cmd = profile_command(dep, root).replace(
                f" --tp {dep.tp}", f" --tp {dep.tp} --backend measured", 1
            )
            raise SimserveError(
                f"no profile for {dep.profile_model} on {dep.gpu.name} in {root}; write one with `{cmd}` "
                "(NVIDIA's measured kernel tables; drop --backend measured for the analytic roofline model)"
            )
        raise SimserveError(
            f"no profile for {dep.profile_model} on {dep.gpu.name} in {root}; write one with "
            f"`{profile_command(dep, root)}` (the analytic roofline model; add --backend torch on that GPU "
            "to measure)"
        )
    overhead = overhead or CpuOverhead()
    tkey = digest = None
    if (path / "linear.csv").exists():
        digest = content_hash(path)
    if cache and digest is not None:
        tkey = timer_cache.key(digest, dep, overhead, seed)
        hit = timer_cache.load(tkey)
        if isinstance(hit, BatchTimer):
            return hit
    from simserve.predictor.coverage import needed_keys, profile_keys
    from simserve.predictor.fit import fit

    profile = _read_profile(path, digest)
    needed = needed_keys(profile_keys(profile), dep, path)
    # Only the models this deployment reads are fitted (a cached full fit, e.g. from `simserve fit`, is
    # reused).
    timer = fit(profile, seed=seed, use_cache=cache, only=set(needed)).compile(dep, overhead)
    if tkey is not None:
        timer_cache.store(tkey, timer)
    return timer


def timer_cached(
    dep: Deployment,
    profiles_root: str | Path | None = None,
    overhead: CpuOverhead | None = None,
    seed: int = 0,
) -> bool:
    """Is `dep`'s compiled timer in the on-disk cache (what load_timer would load instead of fitting)?"""
    root = Path(profiles_root) if profiles_root is not None else default_profiles_root()
    path = profile_dir(root, dep.gpu.name, dep.profile_model)
    if not (path / "linear.csv").exists():
        return False
    return timer_cache.has(timer_cache.key(content_hash(path), dep, overhead or CpuOverhead(), seed))


# Profiles read in this process, by content hash (a plan compiles the timers of many deployments on one
# profile; reading and validating its CSVs again for each was ~0.05 s a time). Read-only to every caller.
_PROFILES: dict[str, object] = {}


def read_profile_cached(path: str | Path):
    """read_profile(path), reusing this process's read when the directory's content hash is the same."""
    path = Path(path)
    return _read_profile(path, content_hash(path) if (path / "linear.csv").exists() else None)


def _read_profile(path: Path, digest: str | None):
    from simserve.profiling.schema import read_profile

    if digest is None:
        return read_profile(path)
    key = f"{path.resolve()}:{digest}"
    if key not in _PROFILES:
        if len(_PROFILES) >= 4:
            _PROFILES.pop(next(iter(_PROFILES)))
        _PROFILES[key] = read_profile(path)
    return _PROFILES[key]


def profile_label(dep: Deployment, profiles_root: str | Path | None = None) -> str:
    """Which kind of profile `dep`'s times rest on (measured / roofline / torch), from its provenance.json:
    every run and sweep output says it, so nobody mistakes an analytic number for a measured one."""
    import json

    root = Path(profiles_root) if profiles_root is not None else default_profiles_root()
    try:
        prov = json.loads(
            (profile_dir(root, dep.gpu.name, dep.profile_model) / "provenance.json").read_text()
        )
    except (OSError, ValueError):
        return "unknown (no readable provenance.json)"
    from simserve.profiling.generated import generated_root

    # A profile `run` or `sweep` wrote because none was shipped says so: "generated measured (…)".
    made = "generated " if generated_root().resolve() in root.resolve().parents else ""
    m = prov.get("measured")
    if prov.get("backend") == "measured" and isinstance(m, dict):
        return (
            f"{made}measured ({m.get('package')} {m.get('package_version')}: {m.get('engine')} "
            f"{m.get('engine_version')} kernels on {m.get('system')})"
        )
    why = prov.get("measured_unavailable")
    return (
        made
        + str(prov.get("backend", "unknown backend"))
        + (f"; not measured: {why}" if made and why else "")
    )
