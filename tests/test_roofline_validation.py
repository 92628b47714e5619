"""The roofline backend against measured A100 kernels (Vidur's profiles in ../shared/reference)."""

from pathlib import Path

import pytest

from simserve.profiling import roofline as rl
from simserve.profiling import roofline_validation as v

REF = v.reference_root(Path(__file__))
pytestmark = pytest.mark.skipif(
    not REF.is_dir(), reason=f"measured reference data not found at {REF} (../shared beside the checkout)"
)


@pytest.fixture(scope="module")
def mlp():
    df = v.load_mlp(REF)
    return v.with_errors(df, v.predict_mlp(df))


def test_linear_ops_within_8_percent_per_op(mlp):
    lin = mlp[(mlp["kind"] == "linear") & mlp["model"].isin(v.TARGET_MODELS)]
    assert set(lin["tp"]) == {1, 2, 4, 8}
    per_op = lin.groupby("op")["ape"].median()
    assert len(per_op) == 4
    assert (per_op <= 8.0).all(), per_op.to_dict()


def test_linear_ops_transfer_to_held_out_models(mlp):
    held = mlp[(mlp["kind"] == "linear") & ~mlp["model"].isin(v.CALIBRATION_MODELS)]
    assert {"CodeLlama-34B", "Llama-3-8B", "internlm-20b", "Qwen-72B"} <= set(held["model"])
    per_model = held.groupby("model")["ape"].median()
    assert (per_model <= 8.0).all(), per_model.to_dict()


def test_measured_tile_step_is_predicted(mlp):
    lin = mlp[(mlp["kind"] == "linear") & (mlp["model"] == "Llama-3-8B") & (mlp["tp"] == 1)]
    total = lin.groupby("num_tokens")[["measured_ms", "predicted_ms"]].sum()
    measured = total.loc[264] / total.loc[256] - 1
    assert measured["measured_ms"] > 0.15  # the step is real in the measurements
    assert abs(measured["predicted_ms"] - measured["measured_ms"]) < 0.15


def test_elementwise_ops_are_in_range(mlp):
    # No hard target; a guard against regressions (measured medians: 4-10%).
    per_op = mlp[mlp["kind"] == "elementwise"].groupby("op")["ape"].median()
    assert (per_op <= 15.0).all(), per_op.to_dict()


def test_decode_attention_within_15_percent():
    att = v.load_attention(REF)
    att = v.with_errors(att, v.predict_attention(att))
    per_phase = att.groupby("phase")["ape"].median()
    assert per_phase["decode"] <= 15.0
    assert per_phase["prefill"] <= 15.0  # no hard target; measured ~5%
    point = att[(att["phase"] == "decode") & (att["batch_size"] == 32) & (att["kv_len"] == 4032)]
    assert point["predicted_ms"].iloc[0] == pytest.approx(point["measured_ms"].iloc[0], rel=0.15)


def test_constants_in_use_are_the_calibrated_ones():
    # The module's rounded constants must be what `calibrate` refits from the measurements (traceability).
    fitted = v.calibrate(REF)
    used = rl.constants_dict()
    for name, value in fitted.items():
        if name == "elementwise_cost":
            for op, (t0, eff) in value.items():
                assert used[name][op]["min_us"] == pytest.approx(t0, rel=0.1, abs=0.15)
                assert used[name][op]["bw_eff"] == pytest.approx(eff, rel=0.03)
        else:
            assert used[name] == pytest.approx(value, rel=0.05), name


# --------------------------------------------------------------- every GPU folder, per-architecture constants


@pytest.fixture(scope="module")
def per_gpu():
    from simserve.profiling import roofline_validation as rv

    frames = []
    for folder in ("a40", "h100"):
        df = rv.load_mlp(REF, folder=folder)
        frames.append(rv.with_errors(df, rv.predict_mlp(df)))
    import pandas as pd

    return pd.concat(frames, ignore_index=True)


def test_every_reference_gpu_folder_is_read():
    assert {"a100", "a40", "h100"} <= set(v.reference_gpus(REF))
    assert set(v.reference_models(REF, "a40")) == {"CodeLlama-34B", "internlm-20b", "Qwen-72B", "phi-2"}


def test_a40_and_h100_kernels_out_of_sample(per_gpu):
    held = per_gpu[per_gpu["set"] == "held out"]
    assert set(held["model"]) == {"CodeLlama-34B", "phi-2"}  # the split: two models per GPU never fitted
    lin = held[held["kind"] == "linear"].groupby("gpu")["ape"].median()
    ew = held[held["kind"] == "elementwise"].groupby("gpu")["ape"].median()
    assert lin["A40-48GB"] <= 8.0 and ew["A40-48GB"] <= 15.0, (lin, ew)
    # H100: Vidur's GEMMs (an older cuBLAS) run 13% slower than the database's at the same shapes
    # (docs/kernel-validation.md), and Hopper's GEMMs are fitted on the database alone: the roofline predicts
    # Vidur's H100 GEMMs too fast by about that offset, never too slow at the median.
    bias = (held["predicted_ms"] / held["measured_ms"] - 1)[
        (held["kind"] == "linear") & (held["gpu"] == "H100-SXM")
    ]
    assert lin["H100-SXM"] <= 18.0 and bias.median() < 0 and ew["H100-SXM"] <= 15.0, (lin, ew)


def test_per_architecture_constants_are_the_refitted_ones():
    from simserve.profiling import arch_calibration as ac
    from simserve.profiling import perfdb_validation as pv

    db_root = pv.data_root()
    ccs = [86, 90] if db_root is not None else [86]  # sm90's GEMM fit also reads the database
    for cc in ccs:
        fitted, used = ac.fit(cc, REF, db_root), rl.constants_dict(rl.ARCH_KERNELS[cc])
        for name in ac.gemm_names(cc):
            assert used[name] == pytest.approx(fitted[name], rel=0.05, abs=0.1), (cc, name)
        for op, (t0, eff) in fitted["elementwise_cost"].items():
            assert used["elementwise_cost"][op]["min_us"] == pytest.approx(t0, rel=0.1, abs=0.15), (cc, op)
            assert used["elementwise_cost"][op]["bw_eff"] == pytest.approx(eff, rel=0.03), (cc, op)
