"""The roofline against NVIDIA's measured GEMMs (aiconfigurator-core), per GPU, in- and out-of-sample."""

import pytest

from simserve.profiling import perfdb_validation as pv
from simserve.profiling import roofline_validation as v

ROOT = pv.data_root()
pytestmark = pytest.mark.skipif(ROOT is None, reason=pv.missing_reason())


@pytest.fixture(scope="module")
def gemms():
    db = pv.load_gemm(ROOT)
    return v.with_errors(db, pv.predict(db))


def test_split_holds_out_h200_and_non_power_of_two_shapes(gemms):
    for system in ("h200_sxm", "gb200", "gb300", "a100_sxm"):  # dies of fitted GPUs; sm80 is fitted on Vidur
        assert (gemms[gemms["system"] == system]["set"] == "held out").all()
    from simserve.profiling.arch_calibration import SOURCES

    assert {s for _, systems in SOURCES.values() for s in systems} == set(pv.GEMM_FIT_SYSTEMS)
    cal = gemms[gemms["set"] == "calibration"]
    assert ((cal["n"] & (cal["n"] - 1)) == 0).all() and ((cal["k"] & (cal["k"] - 1)) == 0).all()
    assert gemms["m"].max() <= 4096 and gemms["n"].min() >= 1024


def test_out_of_sample_gemm_errors_per_gpu(gemms):
    held = gemms[gemms["set"] == "held out"].groupby("gpu")["ape"].median()
    every = {"A100-80GB", "H100-SXM", "H200", "L40S", "B200", "GB200", "B300", "GB300", "RTX-P6000"}
    assert every <= set(held.index)
    # Goal 8%: met by every GPU but the L40S (~8.2%: where the collector's 6 weights fit in its 96 MB L2 the
    # table reads them at up to 2.9x its GDDR6 bus; 6.8% on its rows timed cold, tests/test_l2_residency.py);
    # 26-27% on Hopper before per-architecture constants, 9-10% before the tile choice
    # (gemm_tiles.chosen_tile_seconds).
    assert all(held[g] <= 8.0 for g in every - {"L40S"}), held.to_dict()
    assert held["L40S"] <= 9.0, held.to_dict()


def test_unknown_system_has_no_table(tmp_path):
    assert pv.gemm_file(tmp_path, "h100_sxm") is None
    assert pv.load_gemm(tmp_path).empty


def test_attention_rows_of_every_gpu_are_predicted_in_and_out_of_sample():
    att = pv.load_attention(ROOT)
    assert {"A100-80GB", "H100-SXM", "H200", "L40S", "B200", "GB200", "B300", "GB300", "RTX-P6000"} <= set(
        att["gpu"]
    )
    assert set(att["phase"]) == {"prefill", "decode"} and (att["kv_heads"] <= att["q_heads"]).all()
    for system in ("h200_sxm", "gb200", "gb300"):
        assert (att[att["system"] == system]["set"] == "held out").all()
    err = v.with_errors(att, pv.predict_attention(att))
    assert err["predicted_ms"].gt(0).all() and len(err) == len(att)
    held = (
        err[(err["set"] == "held out") & (err["head_dim"] == 128)].groupby(["phase", "gpu"])["ape"].median()
    )
    # reported, not a hard goal: causal prefill within 20% at the median out-of-sample on every GPU (was
    # 53-153% too slow with the legacy A100 kernel), decode within 21% (GDDR GPUs ~18-20%, HBM ones 5-11%)
    assert (held["prefill"] <= 20.0).all() and (held["decode"] <= 21.0).all(), held.to_dict()
    assert held["decode"][["H100-SXM", "H200", "B300"]].max() <= 8.0, held.to_dict()


def test_fp8_gemms_are_fitted_per_capability_and_held_out_whole_on_the_other_dies():
    from simserve.profiling import arch_calibration as ac
    from simserve.profiling import roofline as rl

    fp8 = pv.load_gemm(ROOT, dtype="fp8")
    # Ampere has no fp8 tensor cores
    assert set(fp8["dtype"]) == {"fp8"} and "A100-80GB" not in set(fp8["gpu"])
    for system in ("h200_sxm", "gb200", "gb300"):
        assert (fp8[fp8["system"] == system]["set"] == "held out").all()
    err = pv.predict(fp8) / fp8["measured_ms"].to_numpy() - 1
    held = fp8.assign(err=err)[fp8["set"] == "held out"].groupby("gpu")["err"]
    # reported, not the 8% goal: out-of-sample medians 6.5-12% (20-48% too fast on the bf16 constants), no
    # bias beyond 6%; the rest is shape-dependent (per-tensor fp8 at n = 1024 runs slower than bf16)
    assert (held.apply(lambda e: e.abs().median()) <= 0.13).all() and (held.median().abs() <= 0.07).all()
    for cc in (90, 100):  # the constants in use are the refitted ones
        fitted, used = ac.fit_fp8(cc, ROOT), rl.ARCH_KERNELS[cc].fp8_gemm
        for i, name in enumerate(ac.gemm_names(cc)):
            assert used[i] == pytest.approx(fitted[name], rel=0.05, abs=0.1), (cc, name)


def test_fused_moe_is_fitted_per_capability_with_deepseek_and_other_dies_held_out():
    from simserve.profiling import arch_calibration as ac
    from simserve.profiling import roofline as rl

    moe = pv.load_moe(ROOT, dtype="fp8")
    assert (moe[moe["model"] == "deepseek-v3"]["set"] == "held out").all()
    for system in ("h200_sxm", "gb200", "gb300"):
        assert (moe[moe["system"] == system]["set"] == "held out").all()
    bf16 = pv.load_moe(ROOT, dtype="bf16")
    err = pv.predict_moe(bf16) / bf16["measured_ms"].to_numpy() - 1
    held = bf16.assign(err=err)[bf16["set"] == "held out"].groupby("gpu")["err"]
    # reported: held-out GPUs 10-13% at the median (21-27% too fast on the dense GEMM constants)
    assert (held.apply(lambda e: e.abs().median()) <= 0.14).all() and (held.median().abs() <= 0.06).all()
    fitted, used = ac.fit_moe(90, ROOT, "bf16"), rl.ARCH_KERNELS[90].moe_gemm
    for i, name in enumerate(ac.GEMM_NAMES):
        assert used[i] == pytest.approx(fitted[name], rel=0.05, abs=0.1), name


def test_every_gpu_meets_the_gemm_goal_on_the_rows_timed_in_servings_condition(gemms):
    # Rows whose collector loop cannot stay in L2 (perfdb_validation.condition): the condition of a decode
    # step that streams every layer's weights. Over all rows the L40S misses (8.1-8.7%, its L2-warm rows);
    # here every GPU, in- and out-of-sample, is within the 8% (worst ~7.0%, A100 out-of-sample).
    serving = gemms[pv.condition(gemms) == pv.SERVING]
    med = serving.groupby(["gpu", "set"])["ape"].median()
    assert len(med.index.get_level_values("gpu").unique()) == 9
    assert (med <= 8.0).all(), med.to_dict()
