"""The caches never change an answer: bad entries are misses, outputs are the same bytes cold or warm."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from simserve.cachedir import Removal, clear, trim, usage
from simserve.cli import main
from simserve.predictor import cache as predictor_cache
from simserve.tune.probe import ProbeCache, probe, probe_key
from simserve.tune.toy import ToyScenario

TOY = ToyScenario(num_requests=64)
Q = (0.5, 0.99)


def _cli(args: list[str], capsys) -> tuple[int, str, str]:
    try:
        main(args)
        code = 0
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_probe_entry_of_the_wrong_shape_is_a_miss(tmp_path):
    cache = ProbeCache(tmp_path)
    fresh = probe(TOY, 1.0, Q)
    for wrong in (
        [],
        {"metrics": []},
        {"metrics": {"qps": 1.0}, "cdf": {}},
        {"metrics": {"qps": "x"}, "cdf": {}},
    ):
        cache.put(probe_key(TOY, 1.0, Q), wrong)
        assert probe(TOY, 1.0, Q, cache)["metrics"] == fresh["metrics"]
    assert cache.get(probe_key(TOY, 1.0, Q))["metrics"] == fresh["metrics"]  # and the entry is repaired


def test_a_predictor_entry_of_the_wrong_type_is_refitted(tmp_path, monkeypatch):
    from simserve.predictor.fit import Predictor, fit
    from simserve.profiling import roofline
    from simserve.profiling.schema import read_profile, write_profile

    monkeypatch.setenv("SIMSERVE_CACHE", str(tmp_path / "cache"))
    from simserve.catalog import GPU, MODELS, NODES

    tables, prov = roofline.profile(
        MODELS.get("mistral-7b"), GPU.get("a100"), [1], NODES.get("a100-pairwise-nvlink"), None, quick=True
    )
    prof = read_profile(write_profile(tmp_path / "p" / "a100-80gb" / "mistral-7b", tables, prov))
    key = predictor_cache.key(prof.content_hash, 0)
    predictor_cache.store(key, {"not": "a predictor"})
    assert isinstance(fit(prof), Predictor)
    assert isinstance(predictor_cache.load(key), Predictor)


def test_sweep_outputs_are_the_same_bytes_from_a_cold_or_a_warm_cache(tmp_path, capsys):
    args = ["sweep", "--toy", "--policies", "vllm,sarathi", "--budgets", "256,512", "--executor", "serial"]
    args += ["--cache", str(tmp_path / "cache"), "--no-plots"]
    for name in ("cold", "warm"):
        code, out, err = _cli([*args, "--out", str(tmp_path / name)], capsys)
        assert code == 0, err
    assert "from cache, 0 simulations" in out
    for f in ("sweep.csv", "probes.csv", "summary.json", "latency_cdfs.json"):
        assert (tmp_path / "cold" / f).read_bytes() == (tmp_path / "warm" / f).read_bytes(), f


def _entries(root: Path, n: int, size: int) -> None:
    for i in range(n):
        f = root / "probes" / f"{i:02d}.json"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(b"x" * size)
        os.utime(f, (time.time() - 86400 * (n - i), time.time() - 86400 * (n - i)))  # entry 0 is the oldest


def test_cache_info_clear_and_the_size_bound(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SIMSERVE_CACHE", str(tmp_path))
    _entries(tmp_path, 10, 1000)
    assert [(u.kind, u.files, u.bytes) for u in usage()] == [("probes", 10, 10_000)]
    assert trim(4500) == Removal(6, 6000)  # the six oldest go
    assert sorted(p.name for p in (tmp_path / "probes").iterdir()) == [
        "06.json",
        "07.json",
        "08.json",
        "09.json",
    ]
    assert clear(older_than_days=2.5) == Removal(2, 2000)  # 06 and 07 (4 and 3 days old); 08 and 09 stay
    code, out, _ = _cli(["cache", "info"], capsys)
    assert code == 0 and "probes" in out
    code, _, err = _cli(["cache", "clear", "--kind", "nothing"], capsys)
    assert code == 2 and "kinds there: probes" in err
    monkeypatch.setenv("SIMSERVE_CACHE_MAX_MB", "0")
    code, out, _ = _cli(["cache", "info"], capsys)  # every command ends by applying the bound
    assert code == 0 and usage()[0].files == 0
    assert json.dumps([u.files for u in usage()]) == "[0]"


def test_a_probe_is_keyed_on_the_profile_the_timer_reads_even_from_simserve_profiles(tmp_path, monkeypatch):
    import shutil

    from simserve.sim.scenario import Scenario

    scenario = Scenario(model="mistral-7b", gpu="a100", num_requests=8)
    shipped = probe_key(scenario, 1.0, (0.99,))
    other = tmp_path / "p" / "a100-80gb" / "mistral-7b"
    shutil.copytree(Path(__file__).parents[1] / "profiles/a100-80gb/mistral-7b", other)
    (other / "linear.csv").write_text((other / "linear.csv").read_text().replace(",0.0", ",0.1", 1))
    monkeypatch.setenv("SIMSERVE_PROFILES", str(tmp_path / "p"))
    # another profile under $SIMSERVE_PROFILES must not replay the shipped profile's probes
    assert probe_key(scenario, 1.0, (0.99,)) != shipped


def test_a_profile_rewritten_in_place_changes_the_probe_key(tmp_path, monkeypatch):
    """The profile's hash is remembered per process (tune/probe._dir_digest), keyed by each file's mtime and
    size: a rewritten file must not keep the old key."""
    import os
    import shutil

    from simserve.sim.scenario import Scenario

    other = tmp_path / "p" / "a100-80gb" / "mistral-7b"
    shutil.copytree(Path(__file__).parents[1] / "profiles/a100-80gb/mistral-7b", other)
    monkeypatch.setenv("SIMSERVE_PROFILES", str(tmp_path / "p"))
    scenario = Scenario(model="mistral-7b", gpu="a100", num_requests=8)
    before = probe_key(scenario, 1.0, (0.99,))
    assert probe_key(scenario, 1.0, (0.99,)) == before
    f = other / "linear.csv"
    st = f.stat()
    f.write_text(f.read_text().replace(",0.0", ",0.1", 1))
    # a rewrite within the same clock tick still moves it
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    assert probe_key(scenario, 1.0, (0.99,)) != before
