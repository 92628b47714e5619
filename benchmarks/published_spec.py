"""Published speculative-decoding results beside simserve's simulation of the same setup (issue 32 item 4).

The results are data (benchmarks/published_spec.json; reading notes in docs/speculative-sources.md). For each
entry simserve can represent (the model in the catalog or as a config, the GPU in the catalog, a modelled
method, K and a chain stated, an acceptance published), every published point is simulated twice at the
published batch size, speculation off and on, and the simulated speedup (spec / no-spec output tokens/s) is
set beside the published one. Entries it cannot represent are listed with the reason. For the batch-size
tables the sweep also runs past the published batches and reports where each speedup crosses 1.0x. Nothing is
fitted or tuned: the published numbers are comparison targets only, and the acceptance is the one the source
reports for its setup (its mean accepted length when it gives one, else the acceptance.csv row its
`acceptance_key` names).

    python benchmarks/published_spec.py
        # every entry, the table and the crossings
    python benchmarks/published_spec.py --only ID,ID                     # some entries
    python benchmarks/published_spec.py --json out.json
    python benchmarks/published_spec.py --parts ID:BATCH                 # one point's decode step, off and on
    python benchmarks/published_spec.py --trace mt-bench=fixed:128:1024
        # another assumed workload (sensitivity)

A batch size is a closed-loop client of that many requests in flight (`vllm bench serve --max-concurrency`,
SimConfig.max_concurrency: a finished request's slot takes the next), all requests sent at t = 0.
docs/speculative.md § Validation reads the output.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from simserve.errors import SimserveError

SPEC_FILE = Path(__file__).resolve().parent / "published_spec.json"
# models not in the catalog: configs/<family>/config.json
CONFIGS = Path(__file__).resolve().parent / "configs"
SEED = 0
# Requests per simulated point: this many waves of the batch (at least MIN_REQUESTS), so the first wave's
# prefills and the last wave's tail are a small part of the span.
WAVES = 8
MIN_REQUESTS = 32
# Batch sizes simulated besides the published points, to say where simserve's speedup crosses 1.0: past a
# batch table's largest batch (BEYOND), or over the whole range for an entry with one or two published points
# (SWEEP).
BEYOND = (96, 128, 192, 256)
SWEEP = (1, 2, 4, 8, 16, 32, 64, 128, 256)
# What the sources do not state, assumed the same for every entry on that dataset and for both runs of a point
# (never varied to match): prompt and output tokens per request. MT-Bench and GSM8K: short questions (~100
# tokens with the chat template) and the 256 output tokens of vLLM's acceptance test (the calibration row's
# setup, docs/speculative-sources.md); ShareGPT: vLLM's own sampler over the shipped pairs (`sharegpt-bench`).
TRACES = {"mt-bench": "fixed:128:256", "gsm8k": "fixed:128:256", "sharegpt": "sharegpt-bench"}
# Mean accepted length per step (bonus token included) a source reports for its setup, read from the entry's
# acceptance_reported text (tests/test_published_spec.py checks the text holds the number).
REPORTED_TAU = {"specdecode-bench-sglang-chain-vs-tree-qwen3-8b-gsm8k": 2.25}
# Published results stated in an entry's note rather than as its points: (entry id, dataset, batch a, batch b,
# published change of the speedup from a to b). SpecDecode-Bench: "a 4.3% (8B) ... drop in EAGLE's ShareGPT
# speedup from batch 1 to 32".
NOTE_CHECKS = (("specdecode-bench-eagle-llama31-8b-gsm8k", "sharegpt", 1, 32, -0.043),)


@dataclass(frozen=True)
class Setup:
    """What one entry runs on in simserve: model, GPU, TP, engine stand-in, K, acceptance and where it came
    from."""

    model: str
    gpu: str
    tp: int
    method: str
    k: int
    acceptance: tuple[float, ...]
    acceptance_source: str
    # "vllm 0.10.1", "sglang 0.4.4": simulated as vllm-v1 either way (speculation is modelled there)
    engine: str


def load(path: Path = SPEC_FILE) -> list[dict]:
    return json.loads(path.read_text())["results"]


def model_of(family: str) -> str:
    """The catalog name of a model family, else its config under benchmarks/configs; SimserveError when
    neither."""
    from simserve.catalog.models import resolve_model

    config = CONFIGS / family / "config.json"
    name = str(config) if config.is_file() else family
    resolve_model(name)  # raises naming the family when neither knows it
    return name


def geometric(tau: float, k: int) -> tuple[float, ...]:
    """The cumulative acceptance r, r^2, ..., r^k whose mean accepted length 1 + r + ... + r^k is tau: one
    conditional rate at every position (a source that reports only tau at one K fixes no more than that; the
    mean tokens per step, which sets throughput, is tau whatever the shape)."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        r = (lo + hi) / 2
        lo, hi = (r, hi) if sum(r**i for i in range(1, k + 1)) < tau - 1 else (lo, r)
    return tuple(round(((lo + hi) / 2) ** i, 6) for i in range(1, k + 1))


def setup_of(entry: dict) -> Setup | str:
    """The entry's simserve setup, or why simserve cannot represent it (one line)."""
    from simserve.catalog import GPUSpec
    from simserve.catalog import acceptance as published
    from simserve.speculative import METHODS

    if entry["method"] not in METHODS:
        return f"method {entry['method']} (a separate draft model) is not modelled"
    if entry["gpu"] is None or entry["tp"] is None:
        return "no deployment stated (GPU, GPU count, batch size)"
    if entry["num_speculative_tokens"] is None:
        return "num_speculative_tokens (K) not stated"
    if entry["load_kind"] != "batch_size":
        return f"load given as {entry['load_kind']} with the high value not stated"
    try:
        gpu = GPUSpec.from_name(entry["gpu"].replace(" 80GB", "")).name
    except SimserveError:
        return f"GPU {entry['gpu']} is not in simserve's catalog"
    try:
        model = model_of(entry["model_family"])
    except SimserveError:
        return f"model {entry['model_family']} is neither in the catalog nor in benchmarks/configs"
    k = entry["num_speculative_tokens"]
    if entry["id"] in REPORTED_TAU:
        tau = REPORTED_TAU[entry["id"]]
        acc, source = (
            geometric(tau, k),
            f"reported mean accepted length {tau:g} at K={k} (one conditional rate)",
        )
    elif entry["acceptance_key"]:
        found = published.curve(*entry["acceptance_key"])
        acc = found.acceptance[:k]
        source = (
            f"acceptance.csv {'/'.join(entry['acceptance_key'])} (tau {found.mean_accepted_length(k):.2f})"
        )
    else:
        return f"no published acceptance for this drafter and setup ({entry['acceptance_key_note']})"
    return Setup(
        model,
        gpu,
        entry["tp"],
        entry["method"],
        k,
        acc,
        source,
        f"{entry['engine']} {entry['engine_version']}",
    )


def scenario_of(s: Setup, batch: int, trace: str, speculative: bool, acceptance_file: str):
    """The closed-loop Scenario of one point: the vLLM V1 scheduler with its worker (CUDA graphs, measured CPU
    costs), no prefix caching (speculation is modelled without it), `batch` requests in flight.

    The engine's overlap of CPU and GPU follows the engine as published: vLLM 0.10.1 had no async scheduling
    by default (off for both runs); SGLang overlaps by default but turns the overlap off for EAGLE and EAGLE-3
    ("Overlap scheduler is disabled because of using eagle3 or standalone speculative decoding",
    server_args.py in 0.4 to 0.5.x without SGLANG_ENABLE_SPEC_V2): on without speculation, off with."""
    from simserve.sim.scenario import Scenario

    overlap = s.engine.startswith("sglang") and not speculative
    spec = (
        dict(speculative=s.method, num_speculative_tokens=s.k, acceptance=acceptance_file)
        if speculative
        else {}
    )
    return Scenario(
        model=s.model,
        gpu=s.gpu,
        tp=s.tp,
        trace=trace,
        num_requests=max(MIN_REQUESTS, WAVES * batch),
        policy="vllm-v1",
        budget=8192,  # vLLM's --max-num-batched-tokens on an H100 (`vllm serve`); every point is decode-bound
        max_batch=1024,
        seed=SEED,
        max_model_len=4096,  # above every request here; the KV pool does not bind at these batches
        memory_utilization=0.9,
        stop_when_overloaded=False,
        max_concurrency=batch,
        vllm_worker=True,
        async_scheduling=overlap,
        **spec,
    )


def throughput(s: Setup, batch: int, trace: str, speculative: bool, acceptance_file: str) -> dict:
    """Output tokens/s of one closed-loop run (output tokens over the span from t = 0 to the last completion),
    with its median TPOT, simulated steps and the profile it ran on."""
    from simserve.predictor.load import profile_label
    from simserve.resolve import for_scenario
    from simserve.sim.bench_report import bench_metrics
    from simserve.sim.request import DONE
    from simserve.sim.scenario import simulate_scenario

    scenario, _ = for_scenario(scenario_of(s, batch, trace, speculative, acceptance_file))
    raw, dep = simulate_scenario(scenario, math.inf)
    if not (raw.reqs.status == DONE).all():
        raise SimserveError(f"{int((raw.reqs.status != DONE).sum())} requests not served at batch {batch}")
    b = bench_metrics(raw, math.inf)
    return {
        "tokens_per_s": b["output_throughput"],
        "tpot_ms": b["median_tpot_ms"],
        "steps": len(raw.log),
        "profile": profile_label(dep, scenario.profiles_root),
    }


def speedup_at(s: Setup, batch: int, trace: str, acceptance_file: str) -> dict:
    off = throughput(s, batch, trace, False, acceptance_file)
    on = throughput(s, batch, trace, True, acceptance_file)
    return {"batch_size": batch, "off": off, "on": on, "speedup": on["tokens_per_s"] / off["tokens_per_s"]}


def crossing(points: list[tuple[int, float]]) -> str:
    """Where a speedup first falls below 1.0 along increasing batch: between which batches (linear
    interpolation between them), or that it does not within them."""
    pts = sorted(points)
    if len(pts) == 1:
        return f"{'above' if pts[0][1] >= 1.0 else 'below'} 1.0 at batch {pts[0][0]}"
    for (b0, s0), (b1, s1) in zip(pts, pts[1:], strict=False):
        if s0 >= 1.0 > s1:
            at = b0 + (s0 - 1.0) / (s0 - s1) * (b1 - b0)
            return f"{b0}-{b1} (~{at:.0f})"
    if pts and pts[0][1] < 1.0:
        return f"below 1.0 from batch {pts[0][0]}"
    return f"none up to {pts[-1][0]}" if pts else "-"


def is_table(entry: dict) -> bool:
    """A batch-size table: enough published batches to say where the published speedup crosses 1.0."""
    return len({p["batch_size"] for p in entry["points"]}) > 2


def published_crossing(entry: dict) -> str:
    """A table's crossing computed from its points; else the source's own statement (the entry's
    `crossing`)."""
    if not is_table(entry):
        return entry["crossing"] or "-"
    return crossing(
        [(p["batch_size"], p["speedup"]) for p in entry["points"] if "tree" not in p.get("variant", "")]
    )


def error_pct(simulated: float, published: float) -> float:
    return 100.0 * (simulated - published) / published


def reproduce(entry: dict, beyond: tuple[int, ...] = BEYOND, sweep: tuple[int, ...] = SWEEP) -> dict:
    """One entry simulated at its published points (a tree variant is skipped: chains only) and at the batches
    that locate simserve's crossing of 1.0 (`beyond` a table's largest batch, else `sweep`), beside the
    published crossing."""
    setup = setup_of(entry)
    if isinstance(setup, str):
        return {"id": entry["id"], "skipped": setup}
    trace = TRACES.get(entry["dataset"])
    if trace is None:
        return {"id": entry["id"], "skipped": f"no workload assumed for dataset {entry['dataset']}"}
    rows, skipped = [], []
    with tempfile.TemporaryDirectory() as tmp:
        acc_file = str(Path(tmp) / "acceptance.json")
        Path(acc_file).write_text(json.dumps(list(setup.acceptance)))
        for p in entry["points"]:
            if "tree" in p.get("variant", ""):
                skipped.append(f"batch {p['batch_size']} {p['variant']}: tree drafting is not modelled")
                continue
            got = speedup_at(setup, p["batch_size"], trace, acc_file)
            rows.append(
                {**got, "published": p["speedup"], "error_pct": error_pct(got["speedup"], p["speedup"])}
            )
        done = {r["batch_size"] for r in rows}
        more = (
            [b for b in beyond if b > max(done, default=0)]
            if is_table(entry)
            else [b for b in sweep if b not in done]
        )
        extra = [speedup_at(setup, b, trace, acc_file) for b in more]
    simulated = sorted((r["batch_size"], r["speedup"]) for r in rows + extra)
    profiles = sorted({r[half]["profile"] for r in rows + extra for half in ("off", "on")})
    return {
        "id": entry["id"],
        "setup": {**setup.__dict__, "acceptance": list(setup.acceptance)},
        "trace": trace,
        "profiles": profiles,
        "rows": rows,
        "sweep": extra,
        "skipped_points": skipped,
        "published_crossing": published_crossing(entry),
        "simulated_crossing": crossing(simulated),
        "simulated_crossing_in_range": crossing([(r["batch_size"], r["speedup"]) for r in rows]),
    }


def note_check(entry: dict, dataset: str, a: int, b: int, published: float) -> dict:
    """A published change of the speedup between two batches (from an entry's note) on another dataset."""
    setup = setup_of(entry)
    if isinstance(setup, str):
        return {"id": entry["id"], "skipped": setup}
    from simserve.catalog import acceptance as published_table

    key = (entry["acceptance_key"][0], entry["acceptance_key"][1], dataset)
    found = published_table.curve(*key)
    setup = replace(
        setup,
        acceptance=found.acceptance[: setup.k],
        acceptance_source=f"acceptance.csv {'/'.join(key)} (tau {found.mean_accepted_length(setup.k):.2f})",
    )
    with tempfile.TemporaryDirectory() as tmp:
        acc_file = str(Path(tmp) / "acceptance.json")
        Path(acc_file).write_text(json.dumps(list(setup.acceptance)))
        lo, hi = (speedup_at(setup, n, TRACES[dataset], acc_file) for n in (a, b))
    change = hi["speedup"] / lo["speedup"] - 1.0
    return {
        "id": entry["id"],
        "dataset": dataset,
        "batches": [a, b],
        "acceptance_source": setup.acceptance_source,
        "speedups": [lo["speedup"], hi["speedup"]],
        "published_change": published,
        "simulated_change": change,
    }


def baseline_checks(entry: dict) -> list[dict]:
    """The entry's published tokens/s without speculation (points with baseline_tokens_per_s) beside
    simserve's for the same model, GPU and engine: a check of the step speculation is compared with."""
    return [
        baseline_check(entry, p["batch_size"], p["baseline_tokens_per_s"])
        for p in entry["points"]
        if "baseline_tokens_per_s" in p and entry["gpu"] and entry["tp"]
    ]


def baseline_check(entry: dict, batch: int, published: float) -> dict:
    """A published tokens/s without speculation beside simserve's for the same model, GPU and engine."""
    from simserve.catalog import GPUSpec

    s = Setup(
        model_of(entry["model_family"]),
        GPUSpec.from_name(entry["gpu"]).name,
        entry["tp"],
        "eagle3",
        1,
        (0.0,),
        "-",
        entry["engine"] or "",
    )
    got = throughput(s, batch, TRACES[entry["dataset"]], False, "")
    return {
        "id": entry["id"],
        "batch_size": batch,
        "published_tokens_per_s": published,
        "simulated_tokens_per_s": got["tokens_per_s"],
        "tpot_ms": got["tpot_ms"],
        "error_pct": error_pct(got["tokens_per_s"], published),
    }


def step_parts(entry: dict, batch: int) -> dict:
    """Why a point misses: the mean decode step's parts (sim/step_parts.breakdown, ms) without and with
    speculation at `batch` (the drafter's passes are added to the step after these parts: speculative.md §
    Costs)."""
    from simserve.resolve import for_scenario
    from simserve.sim.scenario import scenario_timer, simulate_scenario
    from simserve.sim.step_parts import breakdown

    setup = setup_of(entry)
    if isinstance(setup, str):
        raise SimserveError(f"{entry['id']}: not simulated: {setup}")
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        acc_file = str(Path(tmp) / "acceptance.json")
        Path(acc_file).write_text(json.dumps(list(setup.acceptance)))
        for name, on in (("off", False), ("on", True)):
            s, _ = for_scenario(scenario_of(setup, batch, TRACES[entry["dataset"]], on, acc_file))
            raw, dep = simulate_scenario(s, math.inf)
            step = breakdown(raw.log, scenario_timer(s), dep, block_tokens=s.sim_config().kv_block_tokens())
            d = step["decode_only"]
            out[name] = {
                "steps": d["steps"],
                "mean_ms": d["mean_step_s"] * 1e3,
                **{k: v * 1e3 for k, v in d["parts_s"].items() if v},
            }
    return out


def run_all(entries: list[dict]) -> dict:
    by_id = {e["id"]: e for e in entries}
    results = [reproduce(e) for e in entries]
    notes = [note_check(by_id[i], *rest) for i, *rest in NOTE_CHECKS if i in by_id]
    baselines = [check for e in entries for check in baseline_checks(e)]
    errors = [abs(r["error_pct"]) for res in results for r in res.get("rows", [])]
    summary = {
        "points": len(errors),
        "median_abs_error_pct": statistics.median(errors) if errors else None,
        "max_abs_error_pct": max(errors) if errors else None,
    }
    return {"results": results, "note_checks": notes, "baseline_checks": baselines, "summary": summary}


def markdown(doc: dict) -> str:
    """The tables docs/speculative.md § Validation shows."""
    lines = [
        "| entry | engine (simulated as) | GPU | method, K | acceptance input | batch | published | simserve "
        "| error | simserve TPOT off → on, ms |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    skipped, sweeps, cross, profiles = [], [], [], set()
    for res in doc["results"]:
        if "skipped" in res:
            skipped.append(f"| {res['id']} | {res['skipped']} |")
            continue
        s = res["setup"]
        profiles.update(res["profiles"])
        for i, r in enumerate(res["rows"]):
            head = (
                (
                    f"{res['id']} | {s['engine']} (vllm-v1) | {s['gpu']} | {s['method']}, {s['k']} | "
                    f"{s['acceptance_source']}"
                )
                if i == 0
                else " | | | |"
            )
            lines.append(
                f"| {head} | {r['batch_size']} | {r['published']:.2f} | {r['speedup']:.2f} | "
                f"{r['error_pct']:+.0f}% | {r['off']['tpot_ms']:.2f} → {r['on']['tpot_ms']:.2f} |"
            )
        every = sorted(res["rows"] + res["sweep"], key=lambda r: r["batch_size"])
        sweeps.append(
            f"| {res['id']} | " + ", ".join(f"{r['batch_size']}: {r['speedup']:.2f}" for r in every) + " |"
        )
        cross.append(
            f"| {res['id']} | {res['published_crossing']} | {res['simulated_crossing_in_range']} | "
            f"{res['simulated_crossing']} |"
        )
        for p in res["skipped_points"]:
            skipped.append(f"| {res['id']} ({p.split(':')[0]}) | {p.split(': ', 1)[1]} |")
    out = "\n".join(lines)
    sm = doc["summary"]
    if sm["points"]:
        out += (
            f"\n\n{sm['points']} published points: median |error| {sm['median_abs_error_pct']:.0f}%, "
            f"max {sm['max_abs_error_pct']:.0f}%. Profiles: {'; '.join(sorted(profiles))}."
        )
    if cross:
        out += (
            "\n\n| entry | published crossing of 1.0x | simserve at the published batches | simserve over "
            "its sweep |\n|---|---|---|---|\n" + "\n".join(cross)
        )
        out += "\n\n| entry | simserve speedup by batch size (published points and sweep) |\n|---|---|\n"
        out += "\n".join(sweeps)
    notes = [n for n in doc["note_checks"] if "skipped" not in n]
    if notes:
        out += (
            "\n\n| result from an entry's note | batches | acceptance input | simserve speedups | published "
            "change | simserve change |\n|---|---|---|---|---|---|"
        )
        for n in notes:
            out += (
                f"\n| {n['id']}: {n['dataset']} | {n['batches'][0]} → {n['batches'][1]} | "
                f"{n['acceptance_source']} | {n['speedups'][0]:.2f} → {n['speedups'][1]:.2f} | "
                f"{100 * n['published_change']:+.1f}% | {100 * n['simulated_change']:+.1f}% |"
            )
    if doc["baseline_checks"]:
        out += (
            "\n\n| baseline without speculation | batch | published tokens/s | simserve tokens/s | error | "
            "simserve TPOT, ms |\n|---|---|---|---|---|---|"
        )
        for b in doc["baseline_checks"]:
            out += (
                f"\n| {b['id']} | {b['batch_size']} | {b['published_tokens_per_s']:.1f} | "
                f"{b['simulated_tokens_per_s']:.1f} | {b['error_pct']:+.0f}% | {b['tpot_ms']:.2f} |"
            )
    if skipped:
        out += "\n\n| not simulated | why |\n|---|---|\n" + "\n".join(skipped)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="Comma-separated entry ids (default: every entry).")
    ap.add_argument("--json", type=Path, default=None, help="Also write the results here.")
    ap.add_argument(
        "--trace",
        action="append",
        default=[],
        metavar="DATASET=TRACE",
        help="Another assumed workload for a dataset (e.g. mt-bench=fixed:128:1024): a sensitivity run.",
    )
    ap.add_argument(
        "--parts",
        default="",
        metavar="ID:BATCH",
        help="Print one point's mean decode step parts without and with speculation (why it misses).",
    )
    args = ap.parse_args(argv)
    try:
        if args.parts:
            key, _, batch = args.parts.partition(":")
            by_id = {e["id"]: e for e in load()}
            if key not in by_id or not batch.isdigit():
                raise SimserveError(f"--parts {args.parts!r}: give ID:BATCH with an id of {SPEC_FILE.name}")
            for name, parts in step_parts(by_id[key], int(batch)).items():
                print(
                    f"{name}: "
                    + ", ".join(
                        f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in parts.items()
                    )
                )
            return 0
        for item in args.trace:
            dataset, sep, trace = item.partition("=")
            if not sep or dataset not in TRACES:
                raise SimserveError(
                    f"--trace {item!r}: give DATASET=TRACE with DATASET one of {', '.join(TRACES)}"
                )
            TRACES[dataset] = trace
        entries = load()
        keys = [k for k in args.only.split(",") if k]
        unknown = sorted(set(keys) - {e["id"] for e in entries})
        if unknown:
            raise SimserveError(f"unknown entry {unknown}; see {SPEC_FILE.name} for the ids")
        doc = run_all([e for e in entries if not keys or e["id"] in keys])
    except (SimserveError, OSError, ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(markdown(doc))
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
