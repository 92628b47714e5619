"""The routers (simserve/sim/routers.py): hand-checked decisions, llm-d's index rules, and the compiled router
against its own source on a recorded sequence."""

from __future__ import annotations

import importlib.util
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from cli_runner import cli as run_cli

from simserve.sim import SimConfig, build_result, core_run, routers, simulate
from simserve.sim.prefix_cache import PrefixCache
from simserve.sim.request import Requests
from simserve.sim.testing import ConstantTimer


def _reqs(prompts, groups=None, shared=None) -> Requests:
    n = len(prompts)
    r = Requests(np.asarray(prompts, dtype=np.int64), np.ones(n, dtype=np.int64), np.zeros(n))
    if groups is not None:
        r.prefix_group[:] = groups
        r.prefix_tokens[:] = shared
    return r


def _view(router, rows) -> None:
    for i, row in enumerate(rows):
        router.observe(i, *row)


def test_round_robin_goes_in_turn():
    r = routers.Router("rr", 3, _reqs([20] * 7), 16, 100)
    assert [r.pick(i) for i in range(7)] == [0, 1, 2, 0, 1, 2, 0]


def test_least_outstanding_takes_the_fewest_and_ties_go_to_the_lowest_index():
    r = routers.Router("lor", 3, _reqs([20]), 16, 100)
    _view(r, [(4, 0, 0, 10), (2, 9, 9, 10), (2, 0, 0, 10)])
    assert r.pick(0) == 1


def test_kv_takes_the_lowest_usage_and_draws_ties_from_its_seeded_generator():
    r = routers.Router("kv", 3, _reqs([20]), 16, 100)
    _view(r, [(0, 0, 5, 10), (9, 9, 2, 10), (0, 0, 3, 10)])  # usage 0.5, 0.2, 0.3: load is not its concern
    assert r.pick(0) == 1
    picks = []
    for _ in range(200):
        _view(r, [(0, 0, 0, 10)] * 3)
        picks.append(r.pick(0))
    assert set(picks) == {0, 1, 2}  # random among equals, as llm-d's max-score picker is
    again = routers.Router("kv", 3, _reqs([20]), 16, 100)
    _view(again, [(0, 0, 5, 10), (9, 9, 2, 10), (0, 0, 3, 10)])
    again.pick(0)
    assert [again.pick(0) if _view(again, [(0, 0, 0, 10)] * 3) is None else None for _ in range(200)] == picks


def test_prefix_aware_scores_as_llm_ds_default_profile():
    """Replica 1 holds 2 of the prompt's 4 blocks (64 tokens on stream 7); queue: waiting 0, 2, 4 -> 1, 0.5,
    0; KV usage 0.5, 0, 0.25 -> 0.5, 1, 0.75. Scores: 2*1 + 2*0.5 + 0 = 3; 2*0.5 + 2*1 + 3*0.5 = 4.5; 0 +
    2*0.75 + 0 = 1.5: replica 1."""
    reqs = _reqs([32, 64], groups=[7, 7], shared=[32, 64])
    r = routers.Router("prefix-aware", 3, reqs, 16, 100)
    _view(r, [(0, 0, 0, 10)] * 3)
    r._remember(r._hashes(0), 1)  # request 0's two blocks are believed to be on replica 1
    _view(r, [(0, 0, 5, 10), (0, 2, 0, 10), (0, 4, 25, 100)])
    assert r.pick(1) == 1
    assert list(np.asarray(r.score)) == [3.0, 4.5, 1.5]
    # the pick fed the index: all four blocks of request 1 now point at replica 1
    assert all(r.pods[k] == {1} for k in r._hashes(1))


def test_prefix_aware_weights_change_the_answer():
    reqs = _reqs([32, 64], groups=[7, 7], shared=[32, 64])
    r = routers.Router("prefix-aware", 2, reqs, 16, 100, weights=(2.0, 2.0, 0.0))
    r._remember(r._hashes(0), 1)
    _view(r, [(0, 0, 0, 10), (0, 3, 0, 10)])
    assert r.pick(1) == 0  # without the prefix term the shorter queue wins


def test_the_index_counts_leading_blocks_only_and_evicts_least_recently_added():
    reqs = _reqs([64, 64, 15], groups=[1, 2, 1], shared=[64, 64, 15])
    r = routers.Router("prefix-aware", 2, reqs, 16, capacity=4)
    assert r._hashes(2) == []  # under one block: llm-d hashes nothing
    r._remember(r._hashes(0), 0)
    assert len(r.lru[0]) == 4
    r._remember(r._hashes(1), 0)  # four more keys into a capacity of 4: request 0's are evicted
    assert all(k not in r.pods for k in r._hashes(0))
    assert all(r.pods[k] == {0} for k in r._hashes(1))
    # matchLongestPrefix stops at the first block nobody holds, even if later ones are held
    keys = r._hashes(1)
    del r.pods[keys[0]]
    _view(r, [(0, 0, 0, 10)] * 2)
    r.pick(1)
    assert list(np.asarray(r.match)) == [0, 0]


def test_a_long_prompt_is_indexed_by_its_first_256_blocks_with_a_partial_last_one():
    reqs = _reqs([5000, 40], groups=[3, 3], shared=[5000, 40])
    r = routers.Router("prefix-aware", 1, reqs, 16, 10_000)
    assert len(r._hashes(0)) == routers.MAX_PREFIX_BLOCKS
    assert len(r._hashes(1)) == 3  # 16 + 16 + 8 tokens


def test_the_router_indexes_the_prefix_caches_keys():
    """_hashes is prefix_cache.block_keys over the prompt's blocks (the last one partial): the keys the cache
    matches on, so two prompts on one stream share their leading keys and nothing after it."""
    reqs = _reqs([100, 100, 100], groups=[4, -1, 4], shared=[40, 0, 100])
    cache = PrefixCache(10, 16, reqs)
    r = routers.Router("prefix-aware", 1, reqs, 16, 100)
    for rid in range(3):
        assert r._hashes(rid) == [cache.block_key(rid, k) for k in range(7)]
    assert r._hashes(0)[:2] == r._hashes(2)[:2] and r._hashes(0)[2] != r._hashes(2)[2]


def _source_routers():
    """routers.py as plain Python, even where the install compiled it."""
    spec = importlib.util.spec_from_file_location(
        "_routers_source", Path(routers.__file__).parent / "routers.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["lor", "kv", "prefix-aware"])
def test_the_compiled_router_decides_as_its_source_on_a_recorded_sequence(name):
    rng = np.random.default_rng(5)
    n, num = 400, 4
    reqs = _reqs(rng.integers(1, 900, n), groups=rng.integers(-1, 6, n), shared=rng.integers(0, 900, n))
    a = routers.Router(name, num, reqs, 16, 60)
    b = _source_routers().Router(name, num, reqs, 16, 60)
    for rid in range(n):
        view = [
            tuple(int(x) for x in (rng.integers(0, 9), rng.integers(0, 4), rng.integers(0, 60), 60))
            for _ in range(num)
        ]
        _view(a, view)
        _view(b, view)
        assert a.pick(rid) == b.pick(rid), rid
        assert list(np.asarray(a.score)) == list(np.asarray(b.score))


def test_prefix_aware_routes_a_shared_prefix_to_one_replica_and_reports_its_hit_rate(monkeypatch):
    """Four prompt streams over four replicas at a low rate: prefix-aware keeps each stream where its blocks
    are, so the prefix cache hits more than under round robin (vllm-v1 with prefix caching)."""
    rng = np.random.default_rng(0)
    n = 200
    prompt = rng.integers(300, 600, n)
    group = rng.integers(0, 4, n)
    cfg = SimConfig(policy="vllm-v1", prefix_caching=True, num_replicas=4, max_model_len=2048, watermark=0.0)
    rates = {}
    for name in ("rr", "prefix-aware"):
        run = simulate(
            prompt,
            np.full(n, 8),
            np.arange(n) * 0.05,
            ConstantTimer(0.002),
            400,
            replace(cfg, router=name),
            prefix=(group, np.full(n, 256)),
        )
        s = build_result(run).summary
        rates[name] = s.prefix_cache_hit_rate
        assert sum(row["requests"] for row in s.per_replica) == n
        assert len(s.per_replica) == 4 and all(
            row["prefix_cache_hit_rate"] is not None for row in s.per_replica
        )
        if name == "prefix-aware":  # every request of a stream on one replica, after its first
            assert all(
                len(set(run.reqs.replica[group[run.request_ids] == g].tolist())) <= 2 for g in range(4)
            )
    assert rates["prefix-aware"] > rates["rr"]


def test_mean_outstanding_is_littles_law_over_the_requests():
    """One request per replica, each 1 s in the system over a 2 s run: 0.5 outstanding on average."""
    cfg = SimConfig(policy="sarathi", num_replicas=2, router="rr", max_model_len=256)
    run = simulate([10, 10], [1, 1], [0.0, 1.0], ConstantTimer(1.0), 100, cfg)
    rows = build_result(run).summary.per_replica
    assert [row["requests"] for row in rows] == [1, 1]
    assert [row["mean_outstanding"] for row in rows] == [0.5, 0.5]
    assert rows[0]["prefix_cache_hit_rate"] is None
    one = simulate([10], [1], [0.0], ConstantTimer(1.0), 100, replace(cfg, num_replicas=1))
    assert "per_replica" not in build_result(one).summary.as_dict()  # one replica: the summary as before


def cli(capsys, *args: str) -> tuple[int, str]:
    code, out, err = run_cli(capsys, *args)
    return code, out + err


def test_an_unknown_router_is_one_line_with_the_choices(capsys, tmp_path):
    out = tmp_path / "o"
    code, text = cli(capsys, "run", "--router", "least-kv", "--requests", "10", "--out", str(out))
    assert code == 2, text
    assert "unknown router 'least-kv'; choose one of rr, lor, kv, prefix-aware" in text
    assert len(text.strip().splitlines()) == 1 and not out.exists()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--router", "lor", "--router-weights", "1,1,1"], "add --router prefix-aware"),
        (["--router", "prefix-aware", "--router-weights", "1,x"], "three numbers"),
        (["--router", "prefix-aware", "--router-weights", "1,-1,1"], "non-negative"),
    ],
)
def test_router_weights_belong_to_prefix_aware(capsys, tmp_path, args, words):
    code, text = cli(capsys, "run", *args, "--requests", "10", "--out", str(tmp_path / "o"))
    assert code == 2 and words in text and len(text.strip().splitlines()) == 1, text
    assert not (tmp_path / "o").exists()


def test_run_reports_per_replica_load(capsys, tmp_path):
    out = tmp_path / "o"
    code, text = cli(
        capsys,
        "run",
        "--model",
        "mistral-7b",
        "--gpu",
        "a100",
        "--requests",
        "60",
        "--qps",
        "4",
        "--replicas",
        "3",
        "--router",
        "prefix-aware",
        "--policy",
        "vllm-v1",
        "--trace",
        "prefix-repetition",
        "--out",
        str(out),
    )
    assert code == 0, text
    assert "per replica, --router prefix-aware" in text and "prefix-cache hit rate" in text
    rows = json.loads((out / "summary.json").read_text())["summary"]["per_replica"]
    assert [row["replica"] for row in rows] == [0, 1, 2] and sum(row["requests"] for row in rows) == 60


def test_prefix_aware_without_prefix_caching_says_what_it_routes_by(capsys, tmp_path):
    code, text = cli(
        capsys,
        "run",
        "--model",
        "mistral-7b",
        "--gpu",
        "a100",
        "--requests",
        "20",
        "--replicas",
        "2",
        "--router",
        "prefix-aware",
        "--out",
        str(tmp_path / "o"),
    )
    assert code == 0, text
    assert "routes by its own index" in text


def test_core_and_reference_share_the_router_object_type():
    """Both models build their router with routers.make (one implementation, not a twin)."""
    cfg = SimConfig(num_replicas=4, dp_attention=2, router="kv")
    r = routers.make(cfg, _reqs([10]), 50)
    assert (r.num, r.kind) == (2, routers.KV)
    assert core_run.core_params(cfg, 1, 50, 1, 4, None)["router"] is None  # the caller passes its Router
