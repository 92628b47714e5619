"""`simserve plan --arrival replay / --autoscale`: the day plan (plan/day.py): static vs autoscaled GPU-hours
and dollars per day, per router and KV tier, on a trace's recorded arrivals; and its bad input refused before
work."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from cli_runner import cli


def bursty_trace(path, quiet_qps: float = 0.3, burst_qps: float = 5.0, seed: int = 0) -> str:
    """A quiet 5 minutes, a 3-minute burst at 17x the rate, a quiet 5 minutes: the shape a fleet sized for its
    peak idles through."""
    rng = np.random.default_rng(seed)
    times, t = [], 0.0
    for until, rate in ((300.0, quiet_qps), (480.0, burst_qps), (780.0, quiet_qps)):
        while True:
            t += rng.exponential(1 / rate)
            if t >= until:
                t = until
                break
            times.append(t)
    n = len(times)
    pd.DataFrame(
        {
            "arrived_at": np.round(times, 6),
            "num_prefill_tokens": rng.integers(1000, 3000, n),
            "num_decode_tokens": rng.integers(100, 400, n),
        }
    ).to_csv(path, index=False)
    return str(path)


def plan(capsys, *args: str) -> tuple[int, str, str]:
    return cli(capsys, "plan", *args)


# a small steady plan: Mistral-7B on one A100 (its shipped profile), one budget, one seed
SMALL = [
    "--model",
    "mistral-7b",
    "--gpus",
    "a100",
    "--max-gpus",
    "4",
    "--budgets",
    "512",
    "--requests",
    "64",
    "--tie-seeds",
    "0",
    "--executor",
    "serial",
    "--no-plots",
    "--slo",
    "0.2",
]


@pytest.fixture
def trace(tmp_path):
    return bursty_trace(tmp_path / "bursty.csv")


def test_a_day_plan_autoscales_below_static_provisioning_and_writes_its_table(
    capsys, tmp_path, trace, monkeypatch
):
    monkeypatch.setenv("SIMSERVE_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "o"
    code, stdout, err = plan(
        capsys,
        *SMALL,
        "--trace",
        trace,
        "--arrival",
        "replay",
        "--routers",
        "rr",
        "--scale-policy",
        "queue",
        "--day-deployments",
        "1",
        "--out",
        str(out),
    )
    assert code == 0, err
    day = pd.read_csv(out / "day.csv")
    assert {
        "provisioning",
        "router",
        "kv_offload_gb",
        "gpu_hours_per_day",
        "usd_per_day",
        "slo_attainment",
        "meets_slo",
        "status",
    } <= set(day.columns)
    static = day[day["provisioning"] == "static"].iloc[0]
    scaled = day[day["provisioning"] == "autoscaled queue"].set_index("replicas")
    # the static count is the fewest replicas that meet the SLO: the burst needs more than one
    peak = int(static["replicas"])
    assert bool(static["meets_slo"]) and peak > 1
    assert static["gpu_hours_per_day"] == pytest.approx(24.0 * peak)
    # the autoscaler asked for (1:the peak) follows the burst: fewer GPU-hours than the peak held all day
    wide = scaled.loc[f"1:{peak}"]
    assert 0 < wide["gpu_hours_per_day"] < static["gpu_hours_per_day"] and wide["scale_events"] > 0
    # the autoscaled row at the SLO (MIN raised where 1 missed it) costs no more than the static fleet
    at_slo = scaled[scaled["meets_slo"].astype(bool)]
    assert len(at_slo) == 1 and at_slo["gpu_hours_per_day"].iloc[0] <= static["gpu_hours_per_day"] + 1e-9
    doc = json.loads((out / "plan.json").read_text())
    assert doc["day"]["slo"] == {"ttft_s": 0.5, "tpot_s": 0.05, "attainment": 0.99}
    assert doc["day"]["winner"]["meets_slo"] and doc["day"]["commands"][0].startswith(
        "simserve run --model mistral-7b --gpu A100-80GB"
    )
    text = " ".join(stdout.split())
    for words in (
        "a day: static vs autoscaled",
        "GPU-h/day",
        "$/day",
        "scaled from each replay's span to 24 h",
        "day winner:",
        "--arrival replay --engine vllm",
    ):
        assert words in text, words


def test_a_day_plan_is_deterministic(capsys, tmp_path, trace, monkeypatch):
    monkeypatch.setenv("SIMSERVE_CACHE", str(tmp_path / "cache"))
    args = [
        *SMALL,
        "--trace",
        trace,
        "--autoscale",
        "1:3",
        "--routers",
        "rr,prefix-aware",
        "--day-deployments",
        "1",
        "--replay-requests",
        "200",
    ]
    for name in ("a", "b"):
        code, _, err = plan(capsys, *args, "--out", str(tmp_path / name))
        assert code == 0, err
    a, b = (pd.read_csv(tmp_path / n / "day.csv") for n in ("a", "b"))
    pd.testing.assert_frame_equal(a, b)
    scaled = a["replicas"][a["provisioning"] != "static"]
    assert (
        set(a["router"]) == {"rr", "prefix-aware"}
        and "1:3" in set(scaled)
        and scaled.str.endswith(":3").all()
    )


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--trace", "sharegpt", "--arrival", "replay"], "has none"),  # no timestamps
        (["--autoscale", "4:2"], "minimum exceeds the maximum"),
        (["--autoscale", "1:2", "--replay-requests", "5"], "cold start"),  # 5 requests span seconds
        (["--autoscale", "1:2", "--routers", "rr,magic"], "unknown router 'magic'"),
        (["--autoscale", "1:2", "--scale-policy", "magic"], "unknown --scale-policy"),
        (["--autoscale", "1:2", "--attainment", "1.5"], "--attainment"),
        (["--routers", "rr"], "belongs to a day plan"),
        (["--arrival", "gamma"], "poisson"),
    ],
)
def test_bad_day_input_is_one_line_exit_2_and_writes_nothing(capsys, tmp_path, trace, args, words):
    given = ["--trace", trace] if "--trace" not in args else []
    code, _, err = plan(capsys, *SMALL, *given, *args, "--out", str(tmp_path / "o"))
    assert code == 2, err
    assert err.count("\n") == 1 and words in err and "Traceback" not in err, err
    assert not (tmp_path / "o").exists()
