"""Fit caching by content hash, and load_timer's lookup of profiles/<gpu>/<model>/."""

from __future__ import annotations

import sys

import pandas as pd
import pytest

from simserve.deployment import Deployment
from simserve.errors import SimserveError
from simserve.predictor import cache, default_profiles_root, fit, load_timer
from simserve.predictor import synthetic as syn
from simserve.profiling.schema import content_hash

fit_module = sys.modules["simserve.predictor.fit"]  # the module, not the `fit` function the package exports


@pytest.fixture()
def small_profile(tmp_path):
    return syn.write_synthetic_profile(
        tmp_path / "profiles", tps=(1,), network=None, max_tokens=512, max_len=1024
    )


@pytest.fixture()
def counted_fits(monkeypatch, tmp_path):
    """Point the cache at tmp and count real fits."""
    monkeypatch.setenv("SIMSERVE_CACHE", str(tmp_path / "cache"))
    calls = []
    real = fit_module.fit_profile

    def counting(profile, seed=0, only=None):
        calls.append(profile.path)
        return real(profile, seed, only)

    monkeypatch.setattr(fit_module, "fit_profile", counting)
    return calls


def test_second_fit_comes_from_the_cache(small_profile, counted_fits):
    first = fit(small_profile)
    second = fit(small_profile)
    assert len(counted_fits) == 1
    assert second.report.equals(first.report)
    assert cache.path_for(cache.key(content_hash(small_profile), 0)).is_file()
    dep = Deployment.create("mistral-7b", "a100")
    assert second.compile(dep)([(100, 0)], [500, 600]) == first.compile(dep)([(100, 0)], [500, 600])


def test_editing_the_profile_refits(small_profile, counted_fits):
    fit(small_profile)
    f = small_profile / "elementwise.csv"
    df = pd.read_csv(f)
    df["time_ms"] *= 2
    df.to_csv(f, index=False)
    fit(small_profile)
    assert len(counted_fits) == 2


def test_corrupt_cache_entry_is_refitted(small_profile, counted_fits):
    fit(small_profile)
    entry = cache.path_for(cache.key(content_hash(small_profile), 0))
    entry.write_bytes(b"not a pickle")
    again = fit(small_profile)
    assert len(counted_fits) == 2
    assert again.summary["held_out"].sum() > 0
    fit(small_profile)  # the refit overwrote the bad entry
    assert len(counted_fits) == 2


def test_no_cache_always_fits(small_profile, counted_fits):
    fit(small_profile, use_cache=False)
    fit(small_profile, use_cache=False)
    assert len(counted_fits) == 2


def test_load_timer_finds_the_profile(small_profile, monkeypatch, tmp_path):
    monkeypatch.setenv("SIMSERVE_CACHE", str(tmp_path / "cache"))
    root = small_profile.parents[1]
    timer = load_timer(Deployment.create("mistral-7b", "a100"), profiles_root=root)
    assert timer.num_stages == 1 and timer([(64, 0)], []) > 0
    monkeypatch.setenv("SIMSERVE_PROFILES", str(root))
    assert default_profiles_root() == root
    assert load_timer(Deployment.create("mistral-7b", "a100"))([(64, 0)], []) == timer([(64, 0)], [])


def test_load_timer_errors_before_fitting(small_profile, counted_fits):
    root = small_profile.parents[1]
    with pytest.raises(SimserveError, match=r"has no TP 2 rows \(it has TP 1\); run `simserve profile"):
        load_timer(Deployment.create("mistral-7b", "a100", tp=2), profiles_root=root)
    with pytest.raises(
        SimserveError,
        match=r"no profile for Yi-34B on A100-80GB .*simserve profile --gpu a100-80gb --model yi-34b --tp 2",
    ):
        load_timer(Deployment.create("yi-34b", "a100", tp=2), profiles_root=root)
    assert counted_fits == []


def test_corrupt_profile_is_one_clear_error(small_profile):
    (small_profile / "attention.csv").write_text("phase,tp\nprefill,oops\n")
    with pytest.raises(SimserveError, match="attention.csv"):
        load_timer(
            Deployment.create("mistral-7b", "a100"), profiles_root=small_profile.parents[1], cache=False
        )


def test_stale_entries_of_the_same_profile_are_dropped(small_profile, counted_fits):
    digest = content_hash(small_profile)
    stale = cache.path_for(f"{digest}-seed0-v0-old")
    other = cache.path_for("0123456789abcdef-seed0-v0-old")  # another profile's entry stays
    for f in (stale, other):
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(b"old")
    fit(small_profile)
    assert not stale.exists() and other.exists()


def test_a_timer_fits_only_the_models_its_deployment_reads(tmp_path, monkeypatch):
    """load_timer fits the deployment's own models (no held-out refit, nothing in the fit cache), and the
    compiled tables are bit for bit those of the full fit."""
    monkeypatch.setenv("SIMSERVE_CACHE", str(tmp_path / "cache"))
    prof = syn.write_synthetic_profile(
        tmp_path / "profiles", tps=(1, 2), network=None, max_tokens=512, max_len=1024
    )
    dep = Deployment.create("mistral-7b", "a100", tp=2)
    seen = []
    real = fit_module.fit_profile

    def recording(profile, seed=0, only=None):
        seen.append(real(profile, seed, only))
        return seen[-1]

    monkeypatch.setattr(fit_module, "fit_profile", recording)
    timer = load_timer(dep, profiles_root=prof.parents[1])
    (partial,) = seen
    assert partial.report["held_out"].sum() == 0 and not (tmp_path / "cache" / "predictor").exists()
    full = fit(prof, use_cache=False)
    assert set(partial.models) < set(full.models)
    assert {k.tp for k in partial.models} == {0, 2}  # TP 2 ops and the TP 2 all-reduce, nothing of TP 1
    ref = full.compile(dep)
    for name in ("_tok", "_dec", "_pre", "_tslope"):
        assert getattr(timer, name) == getattr(ref, name)
