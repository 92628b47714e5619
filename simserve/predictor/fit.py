"""Fit the execution-time models on a profile, and report their held-out error.

One regressor per (op, TP) for linear and elementwise ops, per TP for each attention phase, and per
(collective, link, workers) for collectives. A profile fixes every op's shapes for a given TP, so each op is a
function of its own work variables only; pooling ops into one model with the op as a feature would make the
trees split on the op first anyway, and would lose the per-op physics baseline (see regressor.py). Separate
models also let the error report name the op that is poorly modelled.

Training happens here only, in `fit`; a Predictor is just the fitted models. Fitting is cached on disk by the
profile's content hash (cache.py).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from simserve import numerics
from simserve.predictor import cache
from simserve.predictor.fitted import Fitted, ModelKey
from simserve.predictor.regressor import (
    PhysicsTimesTrees,
    collective_features,
    decode_features,
    prefill_features,
    token_features,
)
from simserve.profiling.schema import Profile, content_hash, read_profile

if TYPE_CHECKING:
    from simserve.deployment import Deployment
    from simserve.predictor.overhead import CpuOverhead
    from simserve.predictor.timer import BatchTimer

FAMILIES = ("linear", "elementwise", "attention_prefill", "attention_decode", "collective")
HELD_OUT = 0.2  # fraction of each group's rows kept out of training to measure the error
MIN_ROWS_FOR_SPLIT = 10  # smaller groups are fitted on everything and report no held-out error


@dataclass
class Predictor:
    """Fitted per-op models for one profile. `compile(dep)` turns them into a fast BatchTimer."""

    profile_path: Path
    profile_hash: str
    provenance: dict
    models: dict[ModelKey, Fitted]
    report: pd.DataFrame  # held-out error per model
    summary: pd.DataFrame = field(default_factory=pd.DataFrame)  # held-out error per family (pooled rows)

    def get(self, family: str, op: str, tp: int = 0, link: str = "", num_workers: int = 0) -> Fitted | None:
        return self.models.get(ModelKey(family, op, tp, link, num_workers))

    def predict_ms(self, key: ModelKey, *columns) -> np.ndarray:
        return self.models[key].model.predict(*columns)

    def compile(self, dep: Deployment, overhead: CpuOverhead | None = None) -> BatchTimer:
        from simserve.predictor.timer import compile_timer

        return compile_timer(self, dep, overhead)


def _groups(profile: Profile) -> list[tuple[ModelKey, pd.DataFrame, tuple[str, ...]]]:
    """Split the profile's tables into the row groups that each get a model."""
    out: list[tuple[ModelKey, pd.DataFrame, tuple[str, ...]]] = []
    for family, df in (("linear", profile.linear), ("elementwise", profile.elementwise)):
        for (op, tp), g in df.groupby(["op", "tp"], sort=True):
            out.append((ModelKey(family, str(op), int(tp)), g, ("num_tokens",)))
    att = profile.attention
    for phase, family, cols in (
        ("prefill", "attention_prefill", ("chunk", "kv_len")),
        ("decode", "attention_decode", ("batch_size", "kv_len")),
    ):
        for tp, g in att[att["phase"] == phase].groupby("tp", sort=True):
            out.append((ModelKey(family, phase, int(tp)), g, cols))
    for (op, link, workers), g in profile.collectives.groupby(["op", "link", "num_workers"], sort=True):
        out.append((ModelKey("collective", str(op), 0, str(link), int(workers)), g, ("size_bytes",)))
    return out


_FEATURES = {
    "linear": token_features,
    "elementwise": token_features,
    "attention_prefill": prefill_features,
    "attention_decode": decode_features,
    "collective": collective_features,
}


def _fit_group(
    key: ModelKey, rows: pd.DataFrame, cols: tuple[str, ...], seed: int, held_out: bool = True
) -> tuple[Fitted, np.ndarray]:
    """Fit on a seeded 80% split to measure the held-out APEs, then refit on every row for use.

    The two fits are independent (each seeds its own trees), so `held_out=False` gives the same model."""
    features = _FEATURES[key.family]
    rows = rows.sort_values(list(cols), kind="stable")
    ape = np.array([])
    if held_out and len(rows) >= MIN_ROWS_FOR_SPLIT:
        # NOTE: imported here, not at the top: coverage checks import this module, and a warm plan never fits
        from sklearn.model_selection import train_test_split

        train, test = train_test_split(rows, test_size=HELD_OUT, random_state=seed)
        held = PhysicsTimesTrees(features, seed).fit(
            tuple(train[c].to_numpy() for c in cols), train["time_ms"]
        )
        pred = held.predict(*(test[c].to_numpy() for c in cols))
        true = test["time_ms"].to_numpy(dtype=float)
        ok = true > 0  # a zero measurement has no percentage error
        ape = np.abs(pred[ok] / true[ok] - 1.0) * 100.0
    model = PhysicsTimesTrees(features, seed).fit(tuple(rows[c].to_numpy() for c in cols), rows["time_ms"])
    points = {c: np.unique(rows[c].to_numpy(dtype=float)) for c in cols}
    return Fitted(model, cols, points), ape


def _stats(ape: np.ndarray) -> dict[str, float]:
    if ape.size == 0:
        return {"mape_pct": float("nan"), "p90_ape_pct": float("nan"), "max_ape_pct": float("nan")}
    return {
        "mape_pct": numerics.fsum(ape.tolist()) / ape.size,
        "p90_ape_pct": numerics.percentiles(ape, [90])[0],
        "max_ape_pct": float(ape.max()),
    }


# Models fitted with `only`, by (profile content hash, seed, key), most recently used last: a plan builds the
# timers of many deployments on one profile (every PP degree of a TP degree reads the same linear, elementwise
# and attention rows), and a group's fit depends on its rows and the seed alone (_fit_group), so a model
# fitted for one deployment is the model another would fit. Bounded: ~1 MB of trees per model.
_FITTED: OrderedDict[tuple[str, int, ModelKey], Fitted] = OrderedDict()
MAX_FITTED = 64


def fit_profile(profile: Profile, seed: int = 0, only: Collection[ModelKey] | None = None) -> Predictor:
    """Fit every model of `profile` (no cache). Deterministic: same profile and seed, same models.

    With `only`, just those models, without their held-out error: what one deployment's timer needs (a TP 1
    deployment reads 12 of the shipped Mistral-7B profile's 37 models), at about a sixth of the cost."""
    models: dict[ModelKey, Fitted] = {}
    rows, pooled = [], {f: [] for f in FAMILIES}
    digest = _hash(profile) if only is not None else ""
    for key, group, cols in _groups(profile):
        if only is not None and key not in only:
            continue
        memo = (digest, seed, key) if digest else None
        if memo is not None and memo in _FITTED:
            fitted, ape = _FITTED[memo], np.array([])
            _FITTED.move_to_end(memo)
        else:
            fitted, ape = _fit_group(key, group, cols, seed, held_out=only is None)
            if memo is not None:
                _FITTED[memo] = fitted
                if len(_FITTED) > MAX_FITTED:
                    _FITTED.popitem(last=False)
        models[key] = fitted
        pooled[key.family].append(ape)
        rows.append({**key.__dict__, "rows": len(group), "held_out": ape.size, **_stats(ape)})
    report = pd.DataFrame(rows)
    summary = pd.DataFrame(
        [
            {
                "family": f,
                "models": len(apes),
                "held_out": int(sum(a.size for a in apes)),
                **_stats(np.concatenate(apes) if apes else np.array([])),
            }
            for f, apes in pooled.items()
        ]
    )
    return Predictor(profile.path, _hash(profile), dict(profile.provenance), models, report, summary)


def import_fitting() -> None:
    """Import what fitting and compiling a timer imports (scikit-learn's trees, and SciPy under them): a
    process that is about to fork workers which will fit calls this first, so that they share one import."""
    from simserve.heap import collector_paused

    # 0.1 CPU-s of collections while SciPy loads, and not walked again in the workers
    with collector_paused():
        import sklearn.tree  # noqa: F401

        from simserve.predictor import coverage, tables, timer  # noqa: F401


def _hash(profile: Profile) -> str:
    path = Path(profile.path)
    return content_hash(path) if (path / "linear.csv").exists() else ""


def fit(
    profile: str | Path | Profile,
    seed: int = 0,
    use_cache: bool = True,
    only: Collection[ModelKey] | None = None,
) -> Predictor:
    """Train the per-op models on a profile directory (or a read Profile), reusing a cached fit when one
    exists.

    The cache key is the profile's content hash plus the seed and the library versions, so editing a profile's
    CSVs refits; a corrupt or unreadable cache entry is refitted, not fatal. With `only` (the models one
    deployment needs, `coverage.needed_keys`), a miss fits just those and caches nothing: the caller caches
    the compiled timer instead.
    """
    prof = profile if isinstance(profile, Profile) else read_profile(profile)
    digest = _hash(prof)
    key = cache.key(digest, seed) if (use_cache and digest) else None
    if key is not None:
        hit = cache.load(key)
        if isinstance(hit, Predictor):
            hit.profile_path = Path(prof.path)
            return hit
    predictor = fit_profile(prof, seed, only)
    if key is not None and only is None:
        cache.store(key, predictor)
    return predictor


def print_report(predictor: Predictor, console=None) -> None:
    """Held-out error per family and per model as rich tables."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console(markup=False, emoji=False)  # a path or op name is text, not markup

    def pct(v: float) -> str:
        return "—" if v != v else f"{v:.1f}"

    fam = Table(title=f"held-out error by family ({predictor.profile_path})")
    for col in ("family", "models", "held-out rows", "MAPE %", "p90 APE %", "max APE %"):
        fam.add_column(col, justify="left" if col == "family" else "right")
    for r in predictor.summary.itertuples():
        fam.add_row(
            r.family, str(r.models), str(r.held_out), pct(r.mape_pct), pct(r.p90_ape_pct), pct(r.max_ape_pct)
        )
    console.print(fam)
    per = Table(title="held-out error by model")
    for col in ("family", "op", "tp", "link", "workers", "rows", "MAPE %", "p90 APE %", "max APE %"):
        per.add_column(col, justify="left" if col in ("family", "op", "link") else "right")
    for r in predictor.report.itertuples():
        per.add_row(
            r.family,
            r.op,
            str(r.tp or ""),
            r.link,
            str(r.num_workers or ""),
            str(r.rows),
            pct(r.mape_pct),
            pct(r.p90_ape_pct),
            pct(r.max_ape_pct),
        )
    console.print(per)
