"""What a plan prints besides its Pareto rows: the best disaggregated row and what became of disaggregation,
the noise line, and tables that stay whole when piped (issue 33: items 16, 17, 18, 24)."""

from __future__ import annotations

import pandas as pd

from simserve.catalog.prices import PriceSpec
from simserve.cli import main
from simserve.plan.report import disagg_story, noise_lines, table_rows
from simserve.plan.search import PlanResult, PlanSpec, pareto_mask
from simserve.plan.ties import requests_to_resolve
from simserve.tune.capacity import SLO

PRICES = {"H200": PriceSpec("H200", 4.0, "t", "2026", gpus_per_rental=8)}
SPEC = PlanSpec("llama-2-70b", ("h200",), slo=SLO(0.2), layouts=("agg", "disagg"), num_requests=1024)


def _row(layout: str, tp: int, pp: int, replicas: int, qps: float, usd_h: float) -> dict:
    return {
        "gpu": "H200",
        "tp": tp,
        "pp": pp,
        "ep": 1,
        "replicas": replicas,
        "gpus": 8,
        "gpus_rented": 8,
        "budget": 256,
        "capacity_qps": qps,
        "usd_per_hour": usd_h,
        "usd_per_million_output_tokens": usd_h / (qps * 400 * 3600) * 1e6,
        "layout": layout,
    }


def _search(layout: str, status: str, start: float, seed: int = 0) -> dict:
    return {
        "gpu": "H200",
        "tp": 2,
        "pp": 1,
        "ep": 1,
        "seed": seed,
        "budget": 2048,
        "capacity_qps": 0.0,
        "status": status,
        "start_qps": start,
        "layout": layout,
    }


def _result(rows: list[dict], searches: list[dict], spec: PlanSpec = SPEC) -> PlanResult:
    df = pd.DataFrame(rows)
    df["pareto"] = pareto_mask(df)
    return PlanResult(spec, pd.DataFrame(searches), df, PRICES, [], 400.0, {})


def test_the_best_disaggregated_row_is_printed_off_the_front_and_said_so() -> None:
    result = _result(
        [_row("agg", 1, 2, 4, 14.8, 32.0), _row("2xTP2P+1xTP4D", 2, 1, 1, 10.6, 32.0)],
        [_search("2xTP2P+1xTP4D", "searched", 10.8), _search("1xTP4P+1xTP4D", "pruned", 14.8)],
    )
    assert list(result.rows["pareto"]) == [True, False]  # the same cost for less capacity: dominated
    shown = table_rows(result)
    assert list(shown["layout"]) == ["agg", "2xTP2P+1xTP4D"]
    (line,) = disagg_story(result)
    assert line.startswith("disaggregated: best 1×(H200 2xTP2P+1xTP4D), 10.6 qps") and "+39.6%" in line
    assert "off the Pareto front" in line
    assert table_rows(result, all_rows=True).shape[0] == 2


def test_without_a_disaggregated_row_the_plan_says_why() -> None:
    result = _result(
        [_row("agg", 1, 2, 4, 14.8, 32.0)],
        [
            _search("1xTP4P+1xTP4D", "pruned", 15.15),
            _search("1xTP4P+2xTP2D", "pruned", 15.15),
            _search("2xTP2P+1xTP4D", "below floor", 1.0),
        ],
    )
    (line,) = disagg_story(result)
    assert line.startswith("disaggregated: no layout has a row: ")
    assert "1xTP4P+1xTP4D, 1xTP4P+2xTP2D failed their one probe at 15.2 qps" in line
    assert "2xTP2P+1xTP4D stayed below --min-qps 0.125" in line
    none = _result([_row("agg", 1, 2, 4, 14.8, 32.0)], [_search("agg", "searched", 1.0)])
    assert disagg_story(none) == [
        "disaggregated: no layout was searched (see the notes below: the screen found none to try)"
    ]
    agg_only = _result([_row("agg", 1, 2, 4, 14.8, 32.0)], [], PlanSpec("llama-2-70b", ("h200",)))
    assert disagg_story(agg_only) == []


def test_a_spread_wider_than_the_first_gap_is_said_before_the_table() -> None:
    rows = [_row("agg", 1, 2, 4, 14.8, 32.0), _row("agg", 2, 1, 4, 13.73, 32.0)]
    searches = [
        dict(_search("agg", "searched", 1.0, seed), tp=1, pp=2, budget=256, capacity_qps=c, layout="agg")
        for seed, c in ((0, 3.71), (1, 3.65), (2, 3.35))
    ]
    result = _result(rows, searches)
    (line,) = noise_lines(result)
    # spread (3.71 − 3.35) / 3.57 = 10.1% against a 7.8% gap: spread ∝ 1 / requests, so about 1.3 × 1024 →
    # 2048
    assert "up to 10.1% at 1024 requests" in line and "7.8% between the first two" in line
    assert line.endswith("about --requests 2,048 would separate them (ties below)")
    assert requests_to_resolve(1024, 0.101, 0.078) == 2048 and requests_to_resolve(1024, 0.05, 0.1) == 1024
    narrow = _result(rows, [dict(s, capacity_qps=3.7) for s in searches])
    assert noise_lines(narrow) == []


def test_piped_plan_prints_whole_cells_tpot_and_the_disaggregated_answer(
    tmp_path, capsys, monkeypatch
) -> None:
    # capsys: stdout is not a terminal, as in a pipe or a CI log; before, every cell was cut to fit 80 columns
    monkeypatch.setenv("SIMSERVE_CACHE", str(tmp_path / "cache"))
    main(
        [
            "plan",
            "--model",
            "mistral-7b",
            "--gpus",
            "h100",
            "--max-gpus",
            "2",
            "--slo",
            "0.1",
            "--budgets",
            "512",
            "--requests",
            "32",
            "--layouts",
            "agg,disagg",
            "--tie-seeds",
            "0",
            "--executor",
            "serial",
            "--no-plots",
            "--out",
            str(tmp_path / "out"),
        ]
    )
    out = capsys.readouterr().out
    table = [line for line in out.splitlines() if line.startswith(("┃", "│"))]
    assert table and not any("…" in line for line in table)
    assert "TPOT ms" in out and "tok/s/user" in out and "H100-SXM 1xTP1P+1xTP1D" in out
    assert any(line.startswith("disaggregated: ") for line in out.splitlines())
    plan = pd.read_csv(tmp_path / "out" / "plan.csv")
    assert (plan["tpot_mean_s"] > 0).all()  # plan.csv keeps 6 significant digits
    assert ((plan["user_tokens_per_s"] * plan["tpot_mean_s"] - 1).abs() < 1e-5).all()
