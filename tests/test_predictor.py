"""The execution-time predictor on a synthetic closed-form profile: fit, compile, the BatchTimer's API."""

from __future__ import annotations

import math

import numpy as np
import pytest

from simserve.deployment import Deployment
from simserve.errors import SimserveError
from simserve.ops import attention_shape, elementwise_ops, linear_ops
from simserve.predictor import COMPONENTS, CpuOverhead, fit
from simserve.predictor import synthetic as syn
from simserve.predictor.fit import FAMILIES


@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    return syn.write_synthetic_profile(tmp_path_factory.mktemp("profiles"), tps=(1, 2))


@pytest.fixture(scope="module")
def predictor(profile):
    return fit(profile, use_cache=False)


@pytest.fixture(scope="module")
def timer(predictor):
    return predictor.compile(Deployment.create("mistral-7b", "a100", tp=1))


def test_held_out_report_covers_every_family(predictor):
    assert list(predictor.summary["family"]) == list(FAMILIES)
    assert (predictor.summary["held_out"] > 0).all()
    # A closed-form profile is nearly exactly learnable; the only misses are held-out points on a tile step.
    assert (predictor.summary["mape_pct"] < 1.0).all(), predictor.summary
    assert set(predictor.report["family"]) == set(FAMILIES)


def test_gemm_tile_step_survives_compile(timer):
    t255, t256, t257 = (timer([(n, 0)], []) for n in (255, 256, 257))
    assert t257 > 1.15 * t256  # a fresh 128-row tile for one token
    assert t256 < 1.02 * t255  # same tile: only the memory-bound ops grow


def test_matches_the_closed_form_by_hand(timer):
    """One 1000-token chunk after a 3000-token prefix, summed from the synthetic formulas."""
    dep = timer.deployment
    c, p = 1000, 3000
    lin = sum(
        syn.linear_ms(2.0 * op.in_features * op.out_features, 2.0 * op.in_features * op.out_features, c)
        for op in linear_ops(dep)
    )
    ew = sum(
        op.count * (syn.KERNEL_MS + 1e3 * c * op.bytes_per_token / syn.BW) for op in elementwise_ops(dep)
    )
    s = attention_shape(dep)
    att = 2 * syn.KERNEL_MS + 1e3 * 4.0 * s.q_heads * s.head_dim * c * (p + (c + 1) / 2) / (0.3 * syn.PEAK)
    cpu = CpuOverhead().total_ms(1)
    expected = (dep.layers_per_stage * (lin + ew + att) + cpu) * 1e-3
    assert timer([(c, p)], []) == pytest.approx(expected, rel=0.01)
    parts = timer.breakdown([(c, p)], [])
    assert parts["elementwise"] == pytest.approx(
        dep.layers_per_stage * ew * 1e-3, rel=0.01
    )  # residual add ×2


def test_breakdown_sums_to_call(timer):
    rng = np.random.default_rng(2)
    for _ in range(20):
        prefills = [
            (int(c), int(p)) for c, p in zip(rng.integers(1, 3000, 3), rng.integers(0, 9000, 3), strict=True)
        ]
        kv = rng.integers(1, 8000, int(rng.integers(0, 60))).tolist()
        parts = timer.breakdown(prefills, kv)
        assert tuple(parts) == COMPONENTS
        assert sum(parts.values()) == pytest.approx(timer(prefills, kv), rel=1e-12)
        assert parts["all_reduce"] == parts["send_recv"] == 0.0  # TP1, PP1


def test_a_verifications_drafts_share_its_decode_read(timer):
    """A speculative verification of n = 4 tokens over c = 3000 (docs/speculative.md, Costs): the linear
    layers and the per-request CPU terms see the 4 tokens of 4 decodes, attention one decode read of its c + n
    keys -- far less than 4 decodes' reads of c + 1 ... c + 4."""
    c, n = 3000, 4
    parts = timer.breakdown([], [c + n], drafts=n - 1)
    four = timer.breakdown([], list(range(c + 1, c + n + 1)))
    one = timer.breakdown([], [c + n])
    assert parts["attention_decode"] == one["attention_decode"] < 0.5 * four["attention_decode"]
    for name in ("linear", "elementwise"):  # at 4 tokens (memory-bound here: about their time at 1)
        assert parts[name] == four[name]
    assert parts["cpu_overhead"] == pytest.approx(four["cpu_overhead"], rel=1e-9)
    assert parts["cpu_overhead"] > one["cpu_overhead"]
    assert sum(parts.values()) == pytest.approx(timer([], [c + n], drafts=n - 1), rel=1e-12)
    assert timer([], [c + n], drafts=n - 1) < timer([], list(range(c + 1, c + n + 1)))


def test_numpy_and_list_decodes_agree(timer):
    kv = np.arange(100, 4100, 40)
    assert timer([(512, 0)], kv) == pytest.approx(timer([(512, 0)], kv.tolist()), rel=1e-15)


def test_empty_batch_and_bad_stage(timer):
    assert timer([], []) == 0.0
    with pytest.raises(ValueError, match="stage 1 out of range"):
        timer([(16, 0)], [], stage=1)


def test_beyond_the_tables_grows_linearly(timer):
    # Orca can batch 16 full 8k prompts: 131k tokens, far past the 16k-token table.
    full = [timer([(8192, 0)] * n, []) for n in (4, 8, 16)]
    assert all(math.isfinite(t) and t > 0 for t in full)
    assert full[2] / full[1] == pytest.approx(2.0, rel=0.05)
    assert full[1] / full[0] == pytest.approx(2.0, rel=0.05)
    long = [timer([], [20000] * 32), timer([], [40000] * 32)]  # context past the decode table
    assert long[1] > long[0]


def test_fit_is_deterministic(profile, predictor):
    again = fit(profile, use_cache=False)
    dep = Deployment.create("mistral-7b", "a100", tp=2)
    batch = ([(300, 1200), (64, 0)], list(range(50, 5050, 100)))
    assert again.compile(dep)(*batch) == predictor.compile(dep)(*batch)
    assert again.report.equals(predictor.report)


def test_tensor_parallel_adds_all_reduce(predictor):
    t2 = predictor.compile(Deployment.create("mistral-7b", "a100", tp=2))
    parts = t2.breakdown([(512, 0)], [])
    assert parts["all_reduce"] > 0
    assert parts["send_recv"] == 0


def test_pipeline_stages_split_overhead_and_send(predictor):
    dep = Deployment.create("mistral-7b", "a100", tp=2, pp=4)  # 4 GPUs per node: stage 1 → 2 crosses nodes
    timer = predictor.compile(dep)
    assert timer.num_stages == 4
    parts = [timer.breakdown([(256, 0)], [1000] * 10, stage=s) for s in range(4)]
    sends = [p["send_recv"] for p in parts]
    assert sends[3] == 0 and 0 < sends[0] < sends[1]  # the network hop is the slow one
    assert sends[0] == pytest.approx(sends[2])
    ov = CpuOverhead()
    assert parts[0]["cpu_overhead"] == pytest.approx(
        (ov.ms("schedule", 11) + ov.ms("prepare_inputs", 11)) * 1e-3
    )
    assert parts[1]["cpu_overhead"] == parts[2]["cpu_overhead"] == 0.0
    assert parts[3]["cpu_overhead"] == pytest.approx(
        (ov.ms("sampler", 11) + ov.ms("process_outputs", 11)) * 1e-3
    )
    assert parts[0]["linear"] == pytest.approx(parts[3]["linear"])  # 8 layers each


def test_profile_without_the_tp_is_one_clear_error(predictor):
    with pytest.raises(
        SimserveError, match=r"no TP 4 rows .*simserve profile --gpu a100-80gb --model mistral-7b --tp 4"
    ):
        predictor.compile(Deployment.create("mistral-7b", "a100", tp=4))


def test_profile_without_the_network_is_one_clear_error(tmp_path):
    path = syn.write_synthetic_profile(tmp_path, tps=(2,), network=None, max_tokens=512, max_len=1024)
    predictor = fit(path, use_cache=False)
    predictor.compile(Deployment.create("mistral-7b", "a100", tp=2, pp=2))  # inside one node: fine
    with pytest.raises(SimserveError, match="no send_recv rows over ethernet-100g"):
        predictor.compile(Deployment.create("mistral-7b", "a100", tp=2, pp=4))


def test_tree_ensemble_is_scikit_learns_extra_trees_bit_for_bit(predictor):
    """TreeEnsemble fits and evaluates ExtraTreesRegressor's trees without its per-call machinery: the same
    predictions to the last bit, on the rows a model was fitted on and on a table-sized grid (whose long runs
    of rows with one answer are evaluated once: `_run_starts`)."""
    from sklearn.ensemble import ExtraTreesRegressor

    from simserve.predictor.fit import ModelKey
    from simserve.predictor.regressor import MIN_LEAF, N_TREES, RUNS_FROM, TreeEnsemble

    rng = np.random.default_rng(3)
    tokens = np.unique(rng.integers(1, 4096, 300)).astype(float)
    batch, kv = rng.integers(1, 64, 400).astype(float), rng.integers(16, 8192, 400).astype(float)
    tiles = np.c_[tokens, np.ceil(tokens / 128) * 128, np.ceil(tokens / 64) * 64]
    cases = [  # (features, target): a tile-stepped token model and a 3-feature decode model
        (tiles, 1.0 + 0.1 * np.sin(tokens / 300)),
        (np.c_[batch, kv, batch * kv], 1.0 + rng.random(400) * 0.2),
    ]
    for x, y in cases:
        for seed in (0, 7):
            ours = TreeEnsemble.fit(x, y, N_TREES, MIN_LEAF, seed)
            ref = ExtraTreesRegressor(n_estimators=N_TREES, min_samples_leaf=MIN_LEAF, random_state=seed)
            ref.fit(x, y)
            grid = np.repeat(x, 8, axis=0) * np.linspace(0.5, 3.0, 8 * len(x))[:, None]
            grid = np.concatenate([grid, x])  # rows in runs, then the fitted rows in their own order
            assert len(grid) >= RUNS_FROM
            assert ours.predict(grid).tobytes() == ref.predict(grid).tobytes()
            assert ours.predict(x).tobytes() == ref.predict(x).tobytes()
            assert ours._predict(grid.astype(np.float32)).tobytes() == ours.predict(grid).tobytes()
    # and a fitted model's token table: 16k rows in a few thousand runs, the same values as row by row
    fitted = predictor.models[ModelKey("linear", predictor.report["op"][0], 1)]
    t = np.arange(1, 16385, dtype=float)
    trees_x, _ = fitted.model.features(t)
    x32 = trees_x.astype(np.float32)
    ens = fitted.model.correction
    assert len(ens._run_starts(x32)) < len(t) // 2
    assert ens.predict(trees_x).tobytes() == ens._predict(x32).tobytes()
