"""The deployment planner: candidates, prices, the cost arithmetic, the Pareto set, profiles, CLI errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from simserve.catalog import GPU, MODELS
from simserve.catalog.files import load_catalog_file
from simserve.catalog.prices import PRICES, PriceSpec, price_of
from simserve.cli import main
from simserve.errors import SimserveError
from simserve.plan.candidates import enumerate_candidates, parallelisms
from simserve.plan.prune import budget_order, front_threshold
from simserve.plan.report import pareto_plot, recommendation, write_outputs
from simserve.plan.search import (
    PlanSpec,
    best_budgets,
    halvings_to_floor,
    pareto_mask,
    plan_rows,
    prepare,
    run_plan,
)
from simserve.tune.capacity import SLO

LLAMA70 = MODELS.get("llama-2-70b")
PRICE = {g: PriceSpec(g, p, "test", "2026-01-01") for g, p in (("A100-80GB", 2.0), ("H100-SXM", 4.0))}


def run(*args: str) -> None:
    try:
        main(["plan", *args])
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise


def failing(capsys, *args: str) -> str:
    with pytest.raises(SystemExit) as exc:
        run(*args)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err
    return err


def test_parallelisms_are_power_of_two_tp_and_pp_dividing_the_layers() -> None:
    # LLaMA2-70B: 64 heads, 80 layers. Within 8 GPUs: TP 1,2,4,8 and PP 1,2,4,5,8 with TP·PP ≤ 8.
    pairs = parallelisms(LLAMA70, 8)
    assert (1, 5) in pairs and (2, 4) in pairs and (8, 1) in pairs
    assert (1, 3) not in pairs and (2, 5) not in pairs and (16, 1) not in pairs
    assert len(pairs) == 11


def test_only_deployments_that_fit_in_memory_are_candidates() -> None:
    # 128 GiB of weights: one H200 (119 GiB usable at 0.85) cannot hold them, two can; an A100 needs ≥ 2.
    gpus = [GPU.get("h200"), GPU.get("a100")]
    cands, rejected = enumerate_candidates(LLAMA70, gpus, 8, (512, 2048), 128, 8192)
    have = {(c.deployment.gpu.name, c.deployment.tp, c.deployment.pp) for c in cands}
    assert ("H200", 1, 1) not in have and ("H200", 2, 1) in have and ("H200", 1, 2) in have
    assert ("A100-80GB", 1, 1) not in have and ("A100-80GB", 4, 1) in have
    # TP 8 spans more than the 4-GPU A100 pairs box: it runs in the NVSwitch DGX A100, which holds 8
    assert ("A100-80GB", 8, 1) in have and not any("A100-80GB TP8" in r for r in rejected)
    # a box the catalog lacks is refused in one line: TP 16 fits no A100 box
    cands16, rejected16 = enumerate_candidates(LLAMA70, [GPU.get("a100")], 16, (512,), 128, 8192)
    assert any("A100-80GB TP16 PP1" in r and "spans more GPUs than one dgx-a100" in r for r in rejected16)
    # two A100s hold the weights with little room left: fewer KV blocks than two H200s, but one request's
    # worth
    blocks = {(c.deployment.gpu.name, c.deployment.tp, c.deployment.pp): c.kv_blocks for c in cands}
    assert 8192 // 16 <= blocks[("A100-80GB", 2, 1)] < blocks[("H200", 2, 1)]


def test_cost_per_million_output_tokens_by_hand() -> None:
    searches = pd.DataFrame(
        [
            # A100 TP2: 1 qps per replica at budget 512 (the 1024 run is worse); H100 TP1: 3 qps
            {
                "gpu": "A100-80GB",
                "tp": 2,
                "pp": 1,
                "gpus_per_replica": 2,
                "budget": 512,
                "capacity_qps": 1.0,
                "profile": "p",
            },
            {
                "gpu": "A100-80GB",
                "tp": 2,
                "pp": 1,
                "gpus_per_replica": 2,
                "budget": 1024,
                "capacity_qps": 0.5,
                "profile": "p",
            },
            {
                "gpu": "H100-SXM",
                "tp": 1,
                "pp": 1,
                "gpus_per_replica": 1,
                "budget": 1024,
                "capacity_qps": 3.0,
                "profile": "p",
            },
            {
                "gpu": "H100-SXM",
                "tp": 1,
                "pp": 1,
                "gpus_per_replica": 1,
                "budget": 2048,
                "capacity_qps": 3.0,
                "profile": "p",
            },
        ]
    )
    best = best_budgets(searches)
    assert sorted(zip(best["gpu"], best["budget"], strict=True)) == [("A100-80GB", 512), ("H100-SXM", 1024)]
    rows = plan_rows(searches, PRICE, max_gpus=4, out_tokens=100.0)
    # A100 TP2 × 1, 2 replicas; H100 × 1..4
    assert len(rows) == 2 + 4
    a = rows[(rows["gpu"] == "A100-80GB") & (rows["replicas"] == 2)].iloc[0]
    # 2 replicas × 1 qps = 2 qps on 4 GPUs at $2 = $8/h; 2 qps × 100 tokens × 3600 s = 720,000 tokens/h
    assert a["capacity_qps"] == 2.0 and a["capacity_per_gpu_qps"] == 0.5 and a["usd_per_hour"] == 8.0
    assert a["usd_per_million_output_tokens"] == pytest.approx(8.0 / 0.72)
    h = rows[(rows["gpu"] == "H100-SXM") & (rows["replicas"] == 1)].iloc[0]
    assert h["usd_per_million_output_tokens"] == pytest.approx(4.0 / 1.08)
    # every H100 row beats every A100 row (more qps for less money), so only H100 rows are Pareto-optimal
    assert set(rows[rows["pareto"]]["gpu"]) == {"H100-SXM"} and rows["pareto"].sum() == 4
    # with a target load: the fewest replicas that carry it, or none within the GPU budget
    target = plan_rows(searches, PRICE, max_gpus=4, out_tokens=100.0, target_qps=5.0)
    assert list(zip(target["gpu"], target["replicas"], strict=True)) == [("H100-SXM", 2)]
    # a target below one replica's capacity still needs one replica
    small = plan_rows(searches, PRICE, max_gpus=4, out_tokens=100.0, target_qps=1e-12)
    assert (small["replicas"] == 1).all() and len(small) == 2


def test_pareto_mask_keeps_ties_and_drops_dominated() -> None:
    df = pd.DataFrame({"capacity_qps": [1.0, 2.0, 2.0, 1.5, 3.0], "usd_per_hour": [1.0, 2.0, 3.0, 2.0, 2.5]})
    # row 2 (same qps as row 1, dearer) and row 3 (less qps than row 1 at the same price) are dominated
    assert pareto_mask(df) == [True, True, False, False, True]


def test_price_table_without_a_needed_gpu_fails_before_simulating() -> None:
    with pytest.raises(SimserveError, match=r"no price for A40-48GB .* --catalog file"):
        price_of(GPU.get("a40"))
    with pytest.raises(SimserveError, match="no price for A40-48GB"):
        prepare(PlanSpec("mistral-7b", ("a100", "a40")))


def test_catalog_file_overrides_a_price_by_gpu_alias(tmp_path: Path) -> None:
    before = PRICES.get("H100-SXM")
    f = tmp_path / "prices.yaml"
    f.write_text("prices:\n  - {name: h100, usd_per_gpu_hour: 9.5, source: my quote, date: 2026-02-01}\n")
    try:
        load_catalog_file(f)
        p = price_of(GPU.get("h100-sxm5"))
        assert (p.name, p.usd_per_gpu_hour, p.date) == ("H100-SXM", 9.5, "2026-02-01")
    finally:
        PRICES.add(before)
    bad = tmp_path / "bad.yaml"
    bad.write_text("prices:\n  - {name: tpu-v9, usd_per_gpu_hour: 1, source: x, date: 2026-01-01}\n")
    with pytest.raises(SimserveError, match=r"prices\[0\]: unknown GPU 'tpu-v9'"):
        load_catalog_file(bad)
    undated = tmp_path / "undated.yaml"
    undated.write_text("prices:\n  - {name: a100, usd_per_gpu_hour: 1, source: x}\n")
    with pytest.raises(SimserveError, match="missing field.*date"):
        load_catalog_file(undated)


def test_the_shipped_aws_example_loads() -> None:
    before = {g: PRICES.get(g) for g in PRICES.names()}
    try:
        added = load_catalog_file(Path(__file__).parents[1] / "docs/examples/prices-aws.yaml")
        assert added and all(price_of(GPU.get(g)).source.startswith("AWS") for g in added)
    finally:
        for spec in before.values():
            PRICES.add(spec)


SMALL = PlanSpec("mistral-7b", ("a100", "h100"), max_gpus=2, slo=SLO(0.1), budgets=(512,), num_requests=32)


def test_small_plan_end_to_end_is_deterministic_and_labels_generated_profiles(tmp_path, monkeypatch) -> None:
    from simserve.profiling import measured

    monkeypatch.setenv("SIMSERVE_CACHE", str(tmp_path / "cache"))
    # only the A100 profile in the profiles root: the planner must write the H100 one itself
    shutil.copytree(
        Path(__file__).parents[1] / "profiles/a100-80gb/mistral-7b", tmp_path / "p/a100-80gb/mistral-7b"
    )
    monkeypatch.setenv("SIMSERVE_PROFILES", str(tmp_path / "p"))
    first = run_plan(SMALL, executor="serial")
    # Mistral-7B on A100 has a profile; on H100 the planner writes a measured one (NVIDIA's tables) into the
    # cache, or, without the package, a roofline one whose label says so
    labels = dict(zip(first.searches["gpu"], first.searches["profile"], strict=False))
    assert labels["A100-80GB"].startswith("shipped")
    if measured.installed():
        assert labels["H100-SXM"] == "generated measured"
    else:
        assert labels["H100-SXM"] == "generated roofline (analytic); not measured: measured tables need " + (
            measured.INSTALL_HINT
        )
    assert (tmp_path / "cache/plan-profiles/dgx-h100/h100-sxm/mistral-7b/linear.csv").is_file()
    # TP×PP within 2 GPUs: (1,1), (2,1), (1,2) on each GPU, all fit: each searched, or pruned after one probe
    main = first.searches[first.searches["seed"] == 0]
    assert len(main) == 6 and set(main["status"]) <= {"searched", "pruned"}
    assert (first.searches[~first.searches["status"].eq("pruned")]["capacity_qps"] > 0).all()
    # the three cheapest deployments searched again at seeds 1 and 2, at their best budget: the seed spread
    again = first.searches[first.searches["seed"] != 0]
    assert (
        len(again) == 6
        and set(again["seed"]) == {1, 2}
        and again["status"].str.startswith("seed spread").all()
    )
    assert len(best_budgets(first.searches)) == 6  # the other seeds never pick a deployment's budget
    second = run_plan(SMALL, executor="serial")
    pd.testing.assert_frame_equal(first.rows, second.rows)
    best = recommendation(first)
    assert (
        best is not None
        and best["usd_per_million_output_tokens"] == first.rows["usd_per_million_output_tokens"].min()
    )
    out = write_outputs(first, tmp_path / "out")
    doc = json.loads((tmp_path / "out/plan.json").read_text())
    assert doc["prices"]["H100-SXM"]["date"] and "approximation" in doc
    assert {p.name for p in out} == {"plan.csv", "searches.csv", "plan.json", "pareto.png"}
    assert pareto_plot(first.rows).axes


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpus", "a100,b9000"], "unknown GPU 'b9000'"),
        (["--gpus", "a40"], "no price for A40-48GB"),
        (["--gpus", "a100", "--max-gpus", "1"], "no deployment of LLaMA2-70B (128 GiB of weights) fits"),
        (["--budgets", "512,x"], "--budgets takes a comma-separated list"),
        (["--max-gpus", "0"], "--max-gpus must be at least 1"),
        (["--slo", "0"], "give at least one latency SLO"),
        (["--ttft-slo", "1", "--ttft-quantile", "1.5"], "the TTFT quantile must be in (0, 1)"),
        (["--tie-seeds", "-1"], "--tie-seeds must be 0 or more"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys, args, message) -> None:
    out = tmp_path / "out"
    err = failing(capsys, "--model", "llama-2-70b", *args, "--out", str(out), "--no-cache")
    assert message in err
    assert not out.exists()


def test_an_impossible_slo_is_one_error_line_not_a_crash(tmp_path, capsys, monkeypatch) -> None:
    """Every search ends at capacity 0 (the SLO is below one decode iteration): exit 2 with the reason, after
    the progress bar, and no output (this once reached the Pareto plot with no rows and raised KeyError)."""
    monkeypatch.setenv("SIMSERVE_CACHE", str(tmp_path / "cache"))
    args = [
        "--model",
        "mistral-7b",
        "--gpus",
        "a100",
        "--max-gpus",
        "1",
        "--slo",
        "1e-6",
        "--budgets",
        "512",
        "--requests",
        "32",
        "--executor",
        "serial",
        "--no-cache",
        "--out",
        str(tmp_path / "o"),
    ]
    with pytest.raises(SystemExit) as exc:
        run(*args)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert exc.value.code == 2 and "Traceback" not in err
    assert (
        lines[-1].startswith("error: below the plan's floor")
        and "P99 TBT" in lines[-1]
        and "--slo" in lines[-1]
    )
    assert not (tmp_path / "o").exists()


def test_out_holding_other_files_is_refused_before_work_and_kept(tmp_path, capsys) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    err = failing(capsys, "--model", "mistral-7b", "--gpus", "a100", "--out", str(out), "--no-cache")
    assert "holds files simserve did not write" in err and "--force" in err
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


def test_cli_small_plan_writes_outputs_and_replays_from_cache(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("SIMSERVE_CACHE", str(tmp_path / "cache"))
    args = [
        "--model",
        "mistral-7b",
        "--gpus",
        "a100",
        "--max-gpus",
        "1",
        "--slo",
        "0.1",
        "--budgets",
        "512",
        "--requests",
        "32",
        "--executor",
        "serial",
        "--cache",
        str(tmp_path / "probes"),
        "--out",
        str(tmp_path / "o"),
    ]
    run(*args)
    first = capsys.readouterr().out
    assert "buy: 1×(A100-80GB TP1 PP1) at budget 512" in first and "(0 from cache" in first
    # the engine command of the chosen deployment, with only flags vLLM 0.33 accepts
    assert (
        "CUDA_VISIBLE_DEVICES=0 vllm serve mistralai/Mistral-7B-v0.1 --max-num-batched-tokens 512 "
        "--max-num-seqs 128 --gpu-memory-utilization 0.85 --max-model-len 8192 --port 8000"
    ) in first
    assert "partial-prefills" not in first
    # its seed spread, measured at seeds 1 and 2 (3 searches: the plan's and two more)
    assert "seed spread A100-80GB TP1 PP1: " in first and "at seeds 0, 1, 2" in first
    run(*args)
    assert "(3 from cache, 0 simulations)" in capsys.readouterr().out
    assert pd.read_csv(tmp_path / "o/plan.csv")["replicas"].tolist() == [1]


def test_notebook_section_shows_a_saved_plan(tmp_path: Path, monkeypatch) -> None:
    """The notebook's "Which deployment to buy" cells, run alone on a saved plan directory."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("SIMSERVE_CACHE", str(tmp_path / "cache"))
    tiny = PlanSpec("mistral-7b", ("a100",), max_gpus=2, slo=SLO(0.1), budgets=(512,), num_requests=32)
    write_outputs(run_plan(tiny, executor="serial"), tmp_path / "plan", plots=False)
    nb = nbformat.read(Path(__file__).parents[1] / "notebooks/capacity_plots.ipynb", as_version=4)
    start = next(i for i, c in enumerate(nb.cells) if c.source.startswith("# Which deployment to buy"))
    nb.cells = nb.cells[start:]
    monkeypatch.setenv("SIMSERVE_PLAN_DIR", str(tmp_path / "plan"))
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    assert sum("image/png" in o.get("data", {}) for o in outputs) == 1
    assert any("A100-80GB" in o.get("data", {}).get("text/plain", "") for o in outputs)


def test_budget_order_starts_at_512_and_walks_outwards() -> None:
    assert budget_order((256, 512, 1024, 2048)) == [512, 1024, 2048, 256]
    assert budget_order((2048, 128, 256)) == [256, 2048, 128]  # the closest to 512 first (ties: the smaller)
    assert budget_order((4096,)) == [4096]


def test_front_threshold_by_hand() -> None:
    # found rows: 10 qps for $4/h and 30 qps for $10/h. A $3/GPU-h deployment of 2 GPUs within 8 GPUs has rows
    # r = 1..4 at $6, $12, $18, $24/h: for ≤ $6 the front offers 10 qps, ≤ $12+ offers 30. Its capacity per
    # replica must beat min(10/1, 30/2, 30/3, 30/4) = 7.5 for any row to be undominated.
    rows = [(10.0, 4.0), (30.0, 10.0)]
    assert front_threshold(rows, [6.0, 12.0, 18.0, 24.0]) == pytest.approx(7.5)
    assert front_threshold(rows, [1.0 * r for r in range(1, 9)]) == pytest.approx(
        0.0
    )  # $1/h: none that cheap
    assert front_threshold([], [6.0, 12.0]) == 0.0
    # rented by the 8-GPU node at $3/GPU-h: 1 to 4 replicas all cost $24/h, so 4 replicas must beat 30 qps
    node = PriceSpec("H200", 3.0, "test", "2026-01-01", gpus_per_rental=8)
    assert front_threshold(rows, [node.usd_per_hour(2, r) for r in range(1, 5)]) == pytest.approx(7.5)


def test_a_node_rented_whole_is_paid_whole() -> None:
    node = PriceSpec("H200", 4.0, "test", "2026-01-01", gpus_per_rental=8)
    # replicas packed into whole nodes: 1 to 4 TP2 replicas fill one node, a fifth needs a second
    assert [node.gpus_rented(2, r) for r in (1, 4, 5)] == [8, 8, 16]
    # a 5-GPU replica is never split across nodes: three of them take three nodes, not two
    assert node.gpus_rented(5, 3) == 24 and node.gpus_rented(16, 1) == 16 and node.gpus_rented(12, 1) == 16
    assert node.usd_per_hour(2, 1) == 32.0 and PRICE["A100-80GB"].usd_per_hour(2, 3) == 12.0
    searches = pd.DataFrame(
        [
            {
                "gpu": "H200",
                "tp": 2,
                "pp": 1,
                "gpus_per_replica": 2,
                "budget": 512,
                "capacity_qps": 1.0,
                "profile": "p",
            }
        ]
    )
    rows = plan_rows(searches, {"H200": node}, max_gpus=8, out_tokens=100.0)
    # every row pays one node; only 4 replicas (the most capacity for it) is on the front
    assert rows["usd_per_hour"].tolist() == [32.0] * 4 and rows["gpus_rented"].tolist() == [8] * 4
    assert rows[rows["pareto"]]["replicas"].tolist() == [4]
    assert rows["goodput_tokens_per_s_per_gpu"].tolist() == pytest.approx(
        [4 * 100 / 8, 3 * 100 / 8, 2 * 100 / 8, 100 / 8]
    )
    with pytest.raises(ValueError, match="range"):
        PriceSpec("H200", 4.0, "test", "2026-01-01", low_usd_per_gpu_hour=4.5)


def test_floor_is_reached_from_any_start() -> None:
    # A search from 8 qps needs 6 halvings to reach 0.125 (8/64); from 1 qps, 3. A start above --start-qps
    # with the halvings of --start-qps would call capacities in (0.125, 1) zero.
    assert halvings_to_floor(8.0, 0.125) == 6 and halvings_to_floor(1.0, 0.125) == 3
    assert halvings_to_floor(0.1, 0.125) == 0 and halvings_to_floor(3.0, 0.125) == 5
    task = PlanSpec("mistral-7b", ("a100",), start_qps=4.0, min_qps=0.3).task(None)
    assert task.start_qps / 2**task.max_halvings <= 0.3 < task.start_qps / 2 ** (task.max_halvings - 1)


PRUNE_CASE = PlanSpec(
    "mistral-7b",
    ("a100", "h100"),
    max_gpus=2,
    slo=SLO(0.1),
    budgets=(256, 512, 1024),
    num_requests=256,
    tie_seeds=0,  # the seed spread's searches are the same with and without pruning
)


def test_pruned_plan_has_the_unpruned_pareto_front(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SIMSERVE_CACHE", str(tmp_path / "cache"))
    fast = run_plan(PRUNE_CASE, executor="serial")
    full = run_plan(PRUNE_CASE, executor="serial", prune=False)
    assert (fast.searches["status"] == "pruned").sum() > 0 and (full.searches["status"] == "searched").all()
    assert fast.stats["probes_simulated"] < full.stats["probes_simulated"]
    cols = ["gpu", "tp", "pp", "replicas", "budget"]
    a, b = (r.rows[r.rows["pareto"]].sort_values(cols).reset_index(drop=True) for r in (fast, full))
    pd.testing.assert_frame_equal(a[cols], b[cols])
    # the searches start at other rates, so capacities agree to the bisection's tolerance, not bit for bit
    assert a["capacity_qps"].to_numpy() == pytest.approx(
        b["capacity_qps"].to_numpy(), rel=PRUNE_CASE.tolerance
    )
    # every pruned search failed its first probe, at a rate that some searched row beats
    pruned = fast.searches[fast.searches["status"] == "pruned"]
    assert (pruned["probes"] == 1).all() and (pruned["capacity_qps"] == 0).all()
    # a rerun gives the same plan (the order of searches does not depend on timing or worker count)
    again = run_plan(PRUNE_CASE, executor="local", workers=2)
    pd.testing.assert_frame_equal(fast.rows, again.rows)


def test_replica_benchmark_compares_the_rule_with_a_simulated_cluster() -> None:
    """benchmarks/plan_replicas.py's core on a tiny case: R × one replica against R replicas behind the
    router."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from plan_replicas import replica_error

    from simserve.sim.scenario import Scenario

    scenario = Scenario(model="mistral-7b", gpu="a100", num_requests=64, policy="sarathi", budget=512)
    row = replica_error(scenario, 2, SLO(0.2), tolerance=0.05)
    assert row["rule_qps"] == pytest.approx(2 * row["single_qps"]) and row["single_qps"] > 0
    # two replicas carry about twice one replica's load: far more than one, not more than a few times two
    assert 1.5 * row["single_qps"] < row["cluster_qps"] < 3 * row["single_qps"]
    assert row["error"] == pytest.approx((row["rule_qps"] - row["cluster_qps"]) / row["cluster_qps"])


def test_replica_benchmark_runs_each_case_in_the_box_the_plan_picks() -> None:
    """The replica-rule table measures deployments a plan makes: LLaMA2-70B TP4 on A100 in the NVSwitch DGX
    A100 (best_box), as the plan's candidates run it — not the default NVLink-pairs box, whose TP-4 all-reduce
    crosses PCIe (a 512-token chunk's iteration then sits at the 0.2 s TBT SLO, and capacity fell 15x:
    docs/planner.md)."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from plan_replicas import plan_scenario

    from simserve.catalog import GPU
    from simserve.catalog.models import resolve_model
    from simserve.plan.candidates import enumerate_candidates

    fits, _ = enumerate_candidates(resolve_model("llama-2-70b"), [GPU.get("a100")], 8, (512,), 128, 4096)
    planned = {(c.deployment.tp, c.deployment.pp): c.deployment.node.name for c in fits}
    dep = plan_scenario("llama-2-70b", "a100", 4, 64, 512, 0, SLO(0.2)).deployment()
    assert dep.node.name == planned[(4, 1)] == "dgx-a100"
    assert dep.tp_link == "nvlink"
    # TP1 stays in the GPU's default box (the paper's testbed), where the shipped profiles are
    tp1 = plan_scenario("mistral-7b", "a100", 1, 64, 512, 0, SLO(0.2)).deployment()
    assert tp1.node.name == "a100-pairwise-nvlink"


def test_a_plan_and_a_sweep_of_the_same_point_share_probes() -> None:
    """The probe key ignores the planner's code and the spelling of names, so `simserve sweep --gpu a100` and
    a plan (which names the catalog's A100-80GB) replay each other's simulations."""
    from simserve.cli.sweep import base_scenario
    from simserve.resolve import resolve_profiles
    from simserve.tune.probe import probe_key, quantiles_for
    from simserve.tune.sweep import SweepSpec

    slo = SLO(0.2)
    spec = PlanSpec("mistral-7b", ("a100",), max_gpus=1, slo=slo, budgets=(512,), num_requests=1024)
    cand = prepare(spec)[0][0]
    planned = spec.scenario(cand, 512, resolve_profiles([cand.deployment])[cand.deployment])
    sweep = SweepSpec(
        base_scenario(model="mistral-7b", gpu="a100", trace="sharegpt", num_requests=1024),
        policies=("sarathi",),
        budgets=(512,),
        slos=(slo,),
    )
    swept = sweep.search_scenario("sarathi", 512, 128, 0, slo)
    q = quantiles_for(slo)
    assert probe_key(planned, 3.0, q) == probe_key(swept, 3.0, q)
    assert probe_key(planned, 3.0, q) != probe_key(swept, 3.5, q)


def test_editing_the_planner_keeps_the_probe_cache(tmp_path: Path) -> None:
    """The probe key's source digest leaves plan/ out (it only picks scenarios); a simulator edit changes
    it."""
    import shutil
    import subprocess
    import sys

    import simserve

    def digest(tree: Path) -> str:
        code = "from simserve.tune.probe import source_digest; print(source_digest())"
        env = {"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"}
        # cwd: not the checkout, whose simserve/ would come first on sys.path
        run = subprocess.run([sys.executable, "-c", code], env=env, cwd=tree, capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
        return run.stdout

    tree = tmp_path / "src"
    shutil.copytree(
        Path(simserve.__file__).parent, tree / "simserve", ignore=shutil.ignore_patterns("__pycache__")
    )
    before = digest(tree)
    with (tree / "simserve/plan/search.py").open("a") as f:
        f.write("\n# an edit to the planner\n")
    assert digest(tree) == before
    with (tree / "simserve/sim/cluster.py").open("a") as f:
        f.write("\n# an edit to the simulator\n")
    assert digest(tree) != before


def test_plan_regenerates_a_cached_roofline_profile_written_for_another_box(tmp_path, monkeypatch) -> None:
    """The collective tables come from the node and network specs: a cached generated profile written when the
    catalog's box (or network) said something else is stale, as one written for another GPU spec is."""
    from simserve.deployment import Deployment
    from simserve.profiling.generated import generated_root
    from simserve.resolve import resolve_profiles

    monkeypatch.setenv("SIMSERVE_CACHE", str(tmp_path))
    # B200: no shipped profile; generated measured with the package installed, roofline without: both are
    # stale
    dep = Deployment.create("mistral-7b", "b200", 2, 1)
    resolve_profiles([dep])
    prov_file = generated_root(dep.node) / "b200" / "mistral-7b" / "provenance.json"
    prov = json.loads(prov_file.read_text())
    assert prov["node_spec"]["name"] == dep.node.name and prov["network_spec"]["name"] == "ethernet-100g"
    for field, edited in (("node_spec", "nvlink_bus_gbps"), ("network_spec", "latency_us")):
        stale = json.loads(prov_file.read_text())
        stale[field][edited] *= 2
        prov_file.write_text(json.dumps(stale))
        resolve_profiles([dep])
        assert json.loads(prov_file.read_text()) == prov  # rewritten from the catalog as it is now


def test_each_replica_runs_in_the_box_with_the_best_links_for_it() -> None:
    from simserve.plan.candidates import best_box

    a100, h200 = GPU.get("a100"), GPU.get("h200")
    # the NVLink pairs box (the GPU's default) serves 1 and 2 GPUs as well as the NVSwitch box does
    assert (
        best_box(a100, 1, 1).name == "a100-pairwise-nvlink"
        and best_box(a100, 2, 1).name == "a100-pairwise-nvlink"
    )
    # 4 and 8 GPUs reach each other over NVLink only in the DGX A100
    assert best_box(a100, 8, 1).name == "dgx-a100" and best_box(a100, 2, 2).name == "dgx-a100"
    assert best_box(h200, 8, 1).name == "hgx-h200"
    cands, _ = enumerate_candidates(LLAMA70, [a100], 8, (512,), 128, 8192)
    boxes = {(c.deployment.tp, c.deployment.pp): c.deployment.node.name for c in cands}
    assert (
        boxes[(8, 1)] == "dgx-a100"
        and boxes[(2, 2)] == "dgx-a100"
        and boxes[(2, 1)] == "a100-pairwise-nvlink"
    )
    # 16 GPUs: no box holds the replica; TP8 fits the DGX A100 only, and the replica spans two of them
    dep = next(
        c.deployment
        for c in enumerate_candidates(LLAMA70, [a100], 16, (512,), 128, 8192)[0]
        if (c.deployment.tp, c.deployment.pp) == (8, 2)
    )
    assert dep.node.name == "dgx-a100" and dep.num_nodes == 2


def _rows(*specs) -> pd.DataFrame:
    """Plan rows from (gpu, tp, pp, replicas, gpus, $/M) by hand."""
    return pd.DataFrame(
        [
            {
                "gpu": g,
                "tp": t,
                "pp": p,
                "replicas": r,
                "gpus": n,
                "usd_per_hour": 1.0,
                "usd_per_million_output_tokens": m,
            }
            for g, t, p, r, n, m in specs
        ]
    )


def test_rows_closer_than_what_the_plan_can_resolve_are_ties_with_what_breaks_them() -> None:
    from simserve.plan.ties import find_ties

    prices = {
        "H200": PriceSpec(
            "H200", 4.0, "t", "2026", gpus_per_rental=8, low_usd_per_gpu_hour=3.5, high_usd_per_gpu_hour=4.5
        ),
        "A100-80GB": PriceSpec(
            "A100-80GB", 1.3, "t", "2026", low_usd_per_gpu_hour=1.1, high_usd_per_gpu_hour=1.5
        ),
    }
    rows = _rows(
        ("H200", 2, 1, 4, 8, 2.472),
        ("A100-80GB", 2, 2, 2, 8, 2.499),
        ("H200", 4, 1, 2, 8, 2.60),
        ("H200", 1, 2, 4, 8, 3.5),
        ("A100-80GB", 2, 2, 1, 4, 2.51),
    )
    best = rows.iloc[0]
    kw = dict(objective="usd_per_million_output_tokens", prices=prices, requests=1024)
    # no seed spread measured: the A100 row (+1.1%) is within the 2.5% tolerance and the price ranges; the
    # H200 TP4 row (+5.2%) is the same GPU (price cannot reorder it) and beyond the tolerance; its second row
    # is not a contender (one row per deployment: its cheapest)
    ties = find_ties(rows, best, tolerance=0.025, spread={}, **kw)
    assert [t.label for t in ties] == ["2×(A100-80GB TP2 PP2)"]
    t = ties[0]
    assert t.gap == pytest.approx(0.027 / 2.472)
    assert "search tolerance" in t.reasons[0] and "--tolerance 0.005" in t.breakers[0]
    # the price where it breaks even: 1.3 × 2.472 / 2.499 = 1.286 for the A100, 4 × 2.499 / 2.472 for the H200
    assert (
        "price ranges" in t.reasons[1]
        and "below $1.29/GPU-h" in t.breakers[1]
        and "above $4.04" in t.breakers[1]
    )
    # a measured seed spread of 10% ties the H200 TP4 row too, and says what would shrink it
    ties = find_ties(rows, best, tolerance=0.025, spread={("H200", 2, 1): 0.1}, **kw)
    assert [t.label for t in ties] == ["2×(A100-80GB TP2 PP2)", "2×(H200 TP4 PP1)"]
    assert ties[1].reasons == ("within the seed spread (10.0%, measured over 1 deployments)",)
    # spread 10% against a gap of 5.2%: about twice the requests (spread ∝ 1 / requests, ties.SPREAD_EXPONENT)
    assert ties[1].breakers == ("a plan over more requests per simulation (about --requests 2048)",)
    # a tight search and no spread: only the price range keeps the A100 row tied
    ties = find_ties(rows, best, tolerance=0.001, spread={}, **kw)
    assert len(ties) == 1 and len(ties[0].reasons) == 1 and "price ranges" in ties[0].reasons[0]


def test_seed_spread_is_max_minus_min_over_the_mean_at_the_best_budget() -> None:
    from simserve.plan.ties import seed_spread

    searches = pd.DataFrame(
        [
            {"gpu": "H200", "tp": 2, "pp": 1, "seed": s, "budget": b, "capacity_qps": c}
            for s, b, c in ((0, 512, 2.0), (0, 1024, 2.5), (1, 1024, 2.0), (2, 1024, 3.0), (1, 512, 9.0))
        ]
        + [{"gpu": "A100-80GB", "tp": 2, "pp": 2, "seed": 0, "budget": 512, "capacity_qps": 1.0}]
    )
    # at the best budget of seed 0 (1024): 2.5, 2.0, 3.0 → (3 − 2) / 2.5; the A100 was searched at one seed
    # only
    assert seed_spread(searches, 0) == {("H200", 2, 1): pytest.approx(0.4)}


def test_engine_commands_one_per_replica_on_its_own_gpus_and_port() -> None:
    from simserve.plan.command import replica_commands

    lines = replica_commands("llama-2-70b", 2, 1, 5, 1024, 128, 8192, 0.85, gpus_per_node=8)
    assert len(lines) == 5
    assert lines[0].endswith(
        "CUDA_VISIBLE_DEVICES=0,1 vllm serve meta-llama/Llama-2-70b-hf --tensor-parallel-size 2 "
        "--max-num-batched-tokens 1024 --max-num-seqs 128 --gpu-memory-utilization 0.85 --max-model-len 8192 "
        "--port 8000"
    )
    assert "CUDA_VISIBLE_DEVICES=6,7 " in lines[3] and "--port 8003" in lines[3]
    assert "node 2" in lines[4] and "CUDA_VISIBLE_DEVICES=0,1 " in lines[4] and "--port 8000" in lines[4]
    # a replica larger than a node: vLLM's multi-node serving on Ray, started from the head node
    (big,) = replica_commands("llama-2-70b", 8, 2, 1, 512, 128, 8192, 0.85, gpus_per_node=8)
    assert "--pipeline-parallel-size 2" in big and "--distributed-executor-backend ray" in big
    assert "CUDA_VISIBLE_DEVICES" not in big and "partial-prefills" not in big
    # fp8 weights and KV cache, experts over the TP group: the flags `sweep --engine vllm` prints for them
    (moe,) = replica_commands("mixtral-8x7b", 2, 1, 1, 512, 128, 8192, 0.85, 8, "fp8", "fp8", ep=2)
    assert moe.endswith("--quantization fp8 --kv-cache-dtype fp8 --enable-expert-parallel --port 8000")


def test_ttft_and_tbt_slos_at_chosen_quantiles_bound_the_capacity(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("SIMSERVE_CACHE", str(tmp_path / "cache"))
    base = [
        "--model",
        "mistral-7b",
        "--gpus",
        "a100",
        "--max-gpus",
        "1",
        "--budgets",
        "512",
        "--requests",
        "64",
        "--executor",
        "serial",
        "--no-cache",
        "--tie-seeds",
        "0",
    ]
    caps = {}
    for name, slo in (
        ("tbt", ["--slo", "0.1"]),
        ("tbt+ttft", ["--slo", "0.1", "--tbt-quantile", "0.9", "--ttft-slo", "1", "--ttft-quantile", "0.9"]),
    ):
        run(*base, *slo, "--out", str(tmp_path / name))
        doc = json.loads((tmp_path / name / "plan.json").read_text())
        caps[name] = doc["recommendation"]["capacity_qps"]
        assert doc["commands"] and doc["recommendation"]["goodput_tokens_per_s_per_gpu"] > 0
    assert doc["slo"] == "P90 TBT ≤ 0.1 s and P50 scheduling delay ≤ 2 s and P90 TTFT ≤ 1 s"
    assert "seed spread" not in capsys.readouterr().out  # --tie-seeds 0: not measured, not quoted
    # a P90 TTFT of 1 s binds before the TBT bound does (at low load it is already 0.43 s: long prompts)
    assert 0 < caps["tbt+ttft"] < caps["tbt"]


def test_a_gpu_without_a_box_in_the_catalog_is_one_error_naming_it() -> None:
    from dataclasses import replace

    orphan = replace(GPU.get("h100"), name="X100-NOBOX", aliases=())
    with pytest.raises(
        SimserveError, match="no box \\(node\\) that holds X100-NOBOX; add one under 'nodes:'"
    ):
        enumerate_candidates(LLAMA70, [orphan], 8, (512,), 128, 8192)


def test_aiconfigurator_gets_the_catalogs_model_config(tmp_path: Path) -> None:
    """benchmarks/vs_aiconfigurator.py hands AIConfigurator a config.json built from simserve's catalog."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from vs_aiconfigurator import hf_config

    cfg = json.loads((hf_config("llama-2-70b", tmp_path / "m") / "config.json").read_text())
    published = {
        "num_hidden_layers": 80,
        "hidden_size": 8192,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "intermediate_size": 28672,
        "vocab_size": 32000,
        "head_dim": 128,
    }
    assert {k: cfg[k] for k in published} == published


def test_with_a_target_load_only_equal_costs_and_price_ranges_tie() -> None:
    from simserve.plan.ties import find_ties

    prices = {
        "H200": PriceSpec("H200", 4.0, "t", "2026", low_usd_per_gpu_hour=3.5, high_usd_per_gpu_hour=4.5)
    }
    rows = _rows(("H200", 2, 1, 4, 8, 9.0), ("H200", 1, 2, 4, 8, 8.0), ("H200", 4, 1, 4, 16, 9.0))
    rows["usd_per_hour"] = [32.0, 32.0, 64.0]
    ties = find_ties(
        rows, rows.iloc[0], "usd_per_hour", prices, 0.025, {("H200", 2, 1): 0.5}, 1024, capacity_based=False
    )
    # the same $/h ties (whatever the seed spread); twice the $/h on the same GPU does not
    assert [(t.label, t.reasons) for t in ties] == [("4×(H200 TP1 PP2)", ("the same cost per hour",))]
