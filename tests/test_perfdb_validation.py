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
    assert (gemms[gemms["system"] == "h200_sxm"]["set"] == "held out").all()
    cal = gemms[gemms["set"] == "calibration"]
    assert ((cal["n"] & (cal["n"] - 1)) == 0).all() and ((cal["k"] & (cal["k"] - 1)) == 0).all()
    assert gemms["m"].max() <= 4096 and gemms["n"].min() >= 1024


def test_out_of_sample_gemm_errors_per_gpu(gemms):
    held = gemms[gemms["set"] == "held out"].groupby("gpu")["ape"].median()
    assert {"A100-80GB", "H100-SXM", "H200", "L40S", "B200"} <= set(held.index)
    # Goal 8%: met by A100 and B200; L40S at ~8%; Hopper at ~9% because the database and Vidur's H100 disagree
    # by 13% and Hopper is fitted on both (was 26-27% too slow before the per-architecture calibration).
    assert held["A100-80GB"] <= 8.0 and held["B200"] <= 8.0, held.to_dict()
    assert held["L40S"] <= 9.0 and held["H100-SXM"] <= 10.0 and held["H200"] <= 10.0, held.to_dict()


def test_unknown_system_has_no_table(tmp_path):
    assert pv.gemm_file(tmp_path, "h100_sxm") is None
    assert pv.load_gemm(tmp_path).empty


def test_attention_rows_of_every_gpu_are_predicted():
    att = pv.load_attention(ROOT)
    assert {"A100-80GB", "H100-SXM", "H200", "L40S", "B200"} <= set(att["gpu"])
    assert set(att["phase"]) == {"prefill", "decode"} and (att["kv_heads"] <= att["q_heads"]).all()
    err = v.with_errors(att, pv.predict_attention(att))
    assert err["predicted_ms"].gt(0).all() and len(err) == len(att)
    # reported, not a target: decode on the Hopper GPUs stays within 20% at the median
    dec = err[err["phase"] == "decode"].groupby("gpu")["ape"].median()
    assert dec["H100-SXM"] <= 20.0 and dec["H200"] <= 20.0, dec.to_dict()
