"""One probe = one simulation of a scenario at one request rate, reduced to metrics and CDF curves, cached on
disk.

A probe's result depends only on the scenario and the rate, never on the SLO or the search tolerance (those
only turn metrics into pass/fail), so the cache is keyed per (scenario, qps): a sweep over several SLOs, a
rerun, or a search interrupted half-way all replay the simulations already done. The key also covers the
simserve version, a digest of simserve's own source, and the content of the profile and trace files the
scenario reads, so an edit to any of them is a cache miss rather than a stale answer.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from simserve.io import write_text_atomic
from simserve.shipped import package_dir, version
from simserve.sim.scenario import scenario_fields  # noqa: F401  (re-exported: sweep, regress, tests)
from simserve.tune.capacity import SLO, Simulate, quantile_key

# Quantiles every probe records, so one cached run serves SLOs at any of these without re-simulating.
STANDARD_QUANTILES = (0.5, 0.9, 0.95, 0.99, 0.999)
# Quantile levels of the stored CDF curves (for the TBT/TTFT CDF plots): fine in the tail where SLOs live.
CDF_GRID = tuple(np.round(np.concatenate([np.linspace(0, 0.9, 46), np.linspace(0.905, 1.0, 20)]), 4))
CACHE_FORMAT = 1
_RECORD_SOURCES = ("tune/probe.py", "tune/simadapter.py", "tune/toy.py")


class CacheMiss(Exception):
    """Raised by an offline replay when a probe has not been simulated yet."""


def quantiles_for(slo: SLO | None) -> tuple[float, ...]:
    if slo is None:
        return STANDARD_QUANTILES
    extra = (slo.tbt_quantile, slo.scheduling_delay_quantile, slo.ttft_quantile, slo.tpot_quantile)
    return tuple(sorted(set(STANDARD_QUANTILES) | set(extra)))


@functools.lru_cache(maxsize=1)
def source_digest() -> str:
    """sha256 over the simserve source a probe's result depends on: any model, predictor or policy edit
    changes it. The CLI and the tuner's own search, sweep and plotting code are left out (they do not change
    what one simulation returns), except the modules that turn a simulation into a probe record. The
    planner (plan/) is left out too: it only chooses scenarios, so a plan and a sweep share probes."""
    root = package_dir()
    h = hashlib.sha256()
    for f in sorted(root.rglob("*.py")):
        rel = f.relative_to(root).as_posix()
        if rel.startswith(("cli/", "plan/")) or (rel.startswith("tune/") and rel not in _RECORD_SOURCES):
            continue
        h.update(rel.encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


@functools.lru_cache(maxsize=64)
def _file_digest(path: str, mtime_ns: int, size: int) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


@functools.lru_cache(maxsize=64)
def _dir_digest(path: str, stats: tuple) -> str:
    from simserve.profiling.schema import content_hash

    return content_hash(path)


def input_digests(scenario: Any) -> dict[str, str]:
    """Content hashes of the files a scenario reads: its profile directory and its trace file."""
    out: dict[str, str] = {}
    fields = {f.name: getattr(scenario, f.name) for f in dataclasses.fields(scenario)}
    for name, value in fields.items():  # a disaggregated scenario: each pool's profile
        if _is_scenario(value):
            out.update({f"{name}.{k}": v for k, v in input_digests(value).items()})
    if "gpu" in fields and "model" in fields:
        from simserve.predictor.load import default_profiles_root
        from simserve.profiling.schema import profile_dir

        # NOTE: the root the timer really reads ($SIMSERVE_PROFILES included): keyed on the shipped root, a
        # sweep on another profile set replayed the shipped profile's probes.
        root = fields.get("profiles_root") or default_profiles_root()
        model = _catalog_name("MODELS", fields["model"])
        config = _model_config(str(fields["model"]))
        if config is not None:  # a config.json: its bytes are an input, its spec names the profile
            from simserve.catalog.hf_config import load_hf_config

            out["model_config"] = hashlib.sha256(config.read_bytes()).hexdigest()[:16]
            model = load_hf_config(config).name
        from simserve.precision import suffix

        # an fp8 deployment reads <model>-fp8/ etc. (Deployment.profile_model)
        model += suffix(fields.get("dtype", "bf16"), fields.get("kv_dtype", "bf16"))
        path = profile_dir(root, _catalog_name("GPU", fields["gpu"]), model)
        if path.is_dir():
            # NOTE: by the files' (name, mtime, size), as the trace's below: a plan asks for ~2,000 probe keys
            stats = tuple((f.name, f.stat().st_mtime_ns, f.stat().st_size) for f in sorted(path.iterdir()))
            out["profile"] = _dir_digest(str(path), stats)
    trace = fields.get("trace")
    if isinstance(trace, str | Path):
        path = _trace_file(str(trace))
        if path is not None:
            st = path.stat()
            out["trace"] = _file_digest(str(path), st.st_mtime_ns, st.st_size)
    return out


def _catalog_name(table: str, name: Any) -> str:
    """The catalog's spelling of a name ("a100" → "A100-80GB"), which is what profile directories use."""
    from simserve import catalog
    from simserve.errors import SimserveError

    try:
        return getattr(catalog, table).get(str(name)).name
    except SimserveError:
        return str(name)


def _model_config(name: str) -> Path | None:
    """The config.json a scenario's model names, if it names one (not a catalog entry)."""
    from simserve import catalog
    from simserve.catalog.hf_config import is_config_path

    if name in catalog.MODELS or not is_config_path(name):
        return None
    p = Path(name).expanduser()
    p = p / "config.json" if p.is_dir() else p
    return p if p.is_file() else None


def _trace_file(name: str) -> Path | None:
    from simserve.errors import SimserveError
    from simserve.workload.trace import resolve_trace

    try:
        return resolve_trace(name)[0]
    except SimserveError:  # not a file: the scenario check reports it
        return None


def probe_key(scenario: Any, qps: float, quantiles: tuple[float, ...]) -> str:
    payload = {
        "format": CACHE_FORMAT,
        "kind": f"{type(scenario).__module__}.{type(scenario).__qualname__}",
        "scenario": _canonical(_jsonable(scenario_fields(scenario))),
        "qps": f"{qps:.6g}",
        "quantiles": list(quantiles),
        "simserve": version(),
        "source": source_digest(),
        "inputs": input_digests(scenario),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:32]


def _canonical(d: dict) -> dict:
    """Catalog spellings of the model and GPU ("a100" and "A100-80GB" are one GPU), so every command that
    names a scenario its own way (a sweep's --gpu a100, a plan's catalog names) shares its probes."""
    for field, table in (("model", "MODELS"), ("gpu", "GPU")):
        if isinstance(d.get(field), str):
            d[field] = _catalog_name(table, d[field])
    return d


def _jsonable(d: Mapping) -> dict:
    # A disaggregated scenario's pools are scenarios: each keys by its own fields, canonical names included.
    return {
        k: _canonical(_jsonable(scenario_fields(v)))
        if _is_scenario(v)
        else (str(v) if isinstance(v, Path) else v)
        for k, v in d.items()
    }


def _is_scenario(v: Any) -> bool:
    return dataclasses.is_dataclass(v) and not isinstance(v, type)


class ProbeCache:
    """One JSON file per probe under root/<2 hex>/<key>.json, each written atomically."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def key(self, scenario: Any, qps: float, quantiles: tuple[float, ...]) -> str:
        """The probe's key (probe_key); a cache that lives for one run may remember it (scheduler.Overlay)."""
        return probe_key(scenario, qps, quantiles)

    def get(self, key: str) -> dict | None:
        try:
            return json.loads(self.path(key).read_text())
        except (FileNotFoundError, json.JSONDecodeError, UnicodeDecodeError):
            # A missing or unreadable entry is simply simulated again (atomic writes make the latter rare).
            return None

    def put(self, key: str, record: dict) -> None:
        write_text_atomic(self.path(key), json.dumps(record, sort_keys=True) + "\n")

    def __len__(self) -> int:
        return sum(1 for _ in self.root.glob("*/*.json")) if self.root.is_dir() else 0


def simulate_record(scenario: Any, qps: float, quantiles: tuple[float, ...]) -> dict:
    """Run one simulation and reduce it to {"metrics": {...}, "cdf": {...}} (the cached record); a run that
    had not reached steady state is simulated again over more requests (simadapter.steady_record)."""
    from simserve.tune.simadapter import record_from_scenario, steady_record

    def one(s: Any) -> dict:
        # the closed-form test model reduces its own run
        if hasattr(s, "record"):
            return s.record(qps, quantiles, CDF_GRID)
        return record_from_scenario(s, qps, quantiles, CDF_GRID)

    return steady_record(scenario, one)


def probe(
    scenario: Any,
    qps: float,
    quantiles: tuple[float, ...],
    cache: ProbeCache | None = None,
    offline: bool = False,
) -> dict:
    """The record of (scenario, qps): from the cache when there, else simulated (and cached)."""
    key = cache.key(scenario, qps, quantiles) if cache is not None else probe_key(scenario, qps, quantiles)
    record = cache.get(key) if cache is not None else None
    if record is not None and not well_formed(record, quantiles):
        record = None  # valid JSON of the wrong shape (hand-edited, another tool's file): simulate again
    if record is None:
        if offline:
            raise CacheMiss(key)
        record = simulate_record(scenario, qps, quantiles)
        record["qps"] = qps
        if cache is not None:
            cache.put(key, record)
    return record


def well_formed(record: object, quantiles: tuple[float, ...]) -> bool:
    """A probe record has numeric metrics with every quantile the SLOs may ask for, and its CDF curves."""
    if not isinstance(record, dict) or not isinstance(record.get("cdf"), dict):
        return False
    metrics = record.get("metrics")
    if not isinstance(metrics, dict) or not all(
        v is None or isinstance(v, int | float) for v in metrics.values()
    ):
        return False
    needed = {quantile_key(f, q) for f in ("tbt", "ttft", "scheduling_delay", "tpot") for q in quantiles}
    return needed <= metrics.keys() and "qps" in metrics


def simulator(
    scenario: Any, quantiles: tuple[float, ...], cache: ProbeCache | None = None, offline: bool = False
) -> Simulate:
    """The `simulate(qps) -> metrics` callable the capacity search needs, backed by the cache."""

    def simulate(qps: float) -> dict[str, float]:
        return probe(scenario, qps, quantiles, cache, offline)["metrics"]

    return simulate


class MemoryCache(ProbeCache):
    """A cache held in memory: a worker that cannot see the driver's disk returns its entries instead."""

    def __init__(self) -> None:
        self.entries: dict[str, dict] = {}

    def get(self, key: str) -> dict | None:
        return self.entries.get(key)

    def put(self, key: str, record: dict) -> None:
        self.entries[key] = record

    def __len__(self) -> int:
        return len(self.entries)
