"""Capacity regression: recompute a few fixed configurations' capacities and compare them with a baseline.

The baseline (regress/baseline.json) is written only by `simserve regress --update`, never by hand. A case
fails when its capacity moved by more than `TOLERANCE` relative to the baseline, or when its configuration
no longer matches the baseline's (then the baseline must be regenerated deliberately).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simserve.errors import SimserveError
from simserve.io import write_text_atomic
from simserve.shipped import version
from simserve.tune.capacity import SLO, CapacityResult
from simserve.tune.executors import Runner
from simserve.tune.jobs import CapacityTask, run_tasks
from simserve.tune.probe import MemoryCache, ProbeCache, scenario_fields

SEARCH_TOLERANCE = 0.025
# Search results are deterministic, so any change comes from the model. Bisection reports the highest passing
# probe within SEARCH_TOLERANCE of the boundary, so a boundary that moves by δ can show up as a move of up to
# δ + SEARCH_TOLERANCE; twice the search tolerance flags moves of the true capacity beyond ~2.5%.
TOLERANCE = 2 * SEARCH_TOLERANCE
REQUESTS = 128  # small: the check runs in CI; it detects change, it does not measure the paper's capacities


@dataclass(frozen=True)
class Case:
    name: str
    scenario: dict[str, Any] = field(hash=False)  # Scenario fields that differ from its defaults
    slo_s: float = 0.1
    start_qps: float = 1.0


CASES: tuple[Case, ...] = (
    Case(
        "mistral-7b/a100/sharegpt/sarathi-512",
        {
            "model": "mistral-7b",
            "gpu": "a100",
            "trace": "sharegpt",
            "policy": "sarathi",
            "budget": 512,
            "max_batch": 128,
            "num_requests": REQUESTS,
        },
        slo_s=0.1,
    ),
    Case(
        "mistral-7b/a100/sharegpt/vllm-bs128",
        {
            "model": "mistral-7b",
            "gpu": "a100",
            "trace": "sharegpt",
            "policy": "vllm",
            "max_batch": 128,
            "num_requests": REQUESTS,
        },
        slo_s=0.1,
    ),
    Case(
        "llama2-70b/a40-tp4-pp2/sharegpt/sarathi-512",
        {
            "model": "llama-2-70b",
            "gpu": "a40",
            "tp": 4,
            "pp": 2,
            "trace": "sharegpt",
            "policy": "sarathi",
            "budget": 512,
            "max_batch": 128,
            "num_requests": REQUESTS,
            # the paper's 8k ShareGPT on the 4k-context model, as the paper ran it
            "allow_long_context": True,
        },
        slo_s=1.0,
        start_qps=0.5,
    ),
)


def real_scenario(**fields: Any) -> Any:
    from simserve.sim.scenario import Scenario

    return Scenario(**fields)


def compute(
    cases: Sequence[Case],
    make_scenario: Callable[..., Any] = real_scenario,
    executor: str = "local",
    workers: int | None = None,
    cache_dir: str | Path | None = None,
) -> dict[str, CapacityResult]:
    tasks = [
        CapacityTask(make_scenario(**c.scenario), SLO(c.slo_s), SEARCH_TOLERANCE, c.start_qps) for c in cases
    ]
    cache = ProbeCache(cache_dir) if cache_dir is not None else MemoryCache()
    with Runner(executor, workers) as runner:
        results = run_tasks(tasks, runner, cache, shared=cache_dir is not None)
    return {c.name: r for c, r in zip(cases, results, strict=True)}


def _fields(scenario: Any) -> dict[str, Any]:
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in scenario_fields(scenario).items()}


def baseline_doc(
    cases: Sequence[Case], results: dict[str, CapacityResult], make_scenario: Callable[..., Any]
) -> dict[str, Any]:
    return {
        "note": "written by `simserve regress --update`; never edit by hand",
        "simserve": version(),
        "search_tolerance": SEARCH_TOLERANCE,
        "tolerance": TOLERANCE,
        "cases": {
            c.name: {
                "config": c.scenario,
                "scenario": _fields(make_scenario(**c.scenario)),
                "slo_s": c.slo_s,
                "capacity_qps": results[c.name].capacity_qps,
                "probes": len(results[c.name].probes),
            }
            for c in cases
        },
    }


def write_baseline(
    path: str | Path,
    executor: str = "local",
    workers: int | None = None,
    cache_dir: str | Path | None = None,
    cases: Sequence[Case] = CASES,
    make_scenario: Callable[..., Any] = real_scenario,
) -> dict[str, Any]:
    doc = baseline_doc(cases, compute(cases, make_scenario, executor, workers, cache_dir), make_scenario)
    write_text_atomic(path, json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return doc


@dataclass(frozen=True)
class Report:
    lines: list[str]
    failed: list[str]  # names of the cases that moved or no longer match


def default_baseline() -> Path | None:
    """The project's regress/baseline.json, found beside the package (a checkout or an editable install), not
    in the working directory: from elsewhere `regress` read, and `regress --update` wrote,
    ./regress/baseline.json. None for an installed wheel, which does not carry the baseline."""
    from simserve.shipped import package_dir

    project = package_dir().parent
    if (project / "pyproject.toml").is_file() and (project / "regress").is_dir():
        return project / "regress" / "baseline.json"
    return None


def update_command(path: str | Path) -> str:
    """The command that writes the baseline at `path`."""
    default = default_baseline()
    same = default is not None and Path(path).resolve() == default.resolve()
    return "simserve regress --update" + ("" if same else f" --baseline {path}")


def load_baseline(path: str | Path) -> dict[str, Any]:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise SimserveError(f"no baseline at {path}; create it with `{update_command(path)}`") from None
    except json.JSONDecodeError as exc:
        raise SimserveError(
            f"{path} is not valid JSON ({exc}); regenerate it with `{update_command(path)}`"
        ) from None


def check(
    path: str | Path,
    executor: str = "local",
    workers: int | None = None,
    cache_dir: str | Path | None = None,
    cases: Sequence[Case] = CASES,
    make_scenario: Callable[..., Any] = real_scenario,
) -> Report:
    base = load_baseline(path)
    tol = float(base.get("tolerance", TOLERANCE))
    current = compute(cases, make_scenario, executor, workers, cache_dir)
    lines, failed = [], []
    for c in cases:
        now = current[c.name].capacity_qps
        old = base.get("cases", {}).get(c.name)
        if old is None:
            failed.append(c.name)
            lines.append(f"NEW    {c.name}: {now:.4g} qps, not in the baseline")
            continue
        # The case's own settings must match; other Scenario fields are recorded for reference only, so a
        # new simulator option with a default does not invalidate the baseline.
        if old.get("config") != c.scenario or old["slo_s"] != c.slo_s:
            failed.append(c.name)
            lines.append(f"CONFIG {c.name}: its configuration differs from the baseline's")
            continue
        was = float(old["capacity_qps"])
        change = (now - was) / was if was > 0 else (0.0 if now == 0 else float("inf"))
        moved = abs(change) > tol
        failed += [c.name] if moved else []
        tag = "MOVED " if moved else "ok    "
        lines.append(
            f"{tag} {c.name}: {now:.4g} qps (baseline {was:.4g}, {change:+.1%}; tolerance ±{tol:.0%})"
        )
    for name in sorted(set(base.get("cases", {})) - {c.name for c in cases}):
        failed.append(name)
        lines.append(f"GONE   {name}: in the baseline but no longer checked")
    return Report(lines, failed)
