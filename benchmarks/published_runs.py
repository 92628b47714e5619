"""The published end-to-end runs simserve is validated against: loading, regimes, the fit/report split, and
the engine each release ran (issue 30, item 4). A module, not a script: `published_e2e.py` and the tests
import it.

The runs are data, one `[[run]]` table each in `benchmarks/data/published_runs.toml` (that file's header lists
the fields). Each record stores its regime and its split; both are also computed here from the record alone
(the workload, the client, the published numbers — never a simulated one), and tests/test_published_runs.py
requires the stored values to equal the computed ones, so neither can be edited by hand after looking at a
simulation.

Regimes (`classify`), tested in this order; P and O are the workload's mean prompt and output tokens, C the
requests in flight (`in_flight`):

* short-request / front-end-bound: O <= 8 and P <= 256 — requests so short that the server's per-request work
  (HTTP, tokenization, scheduling a new request) is a large share of each one;
* prefill-heavy: P >= 2048 and O <= P / 8 — most of the GPU's work is prompt tokens;
* small-batch decode: C <= 8 — decode steps of at most 8 sequences, where the step reads the weights and
  little else (the KV of 8 short sequences is a few percent of the weights of every model here);
* loaded decode: everything else (tens to hundreds of sequences per decode step).

C is the client's concurrency limit if it has one, else every prompt for a burst (`qps = inf`), else Little's
law on the published numbers: the request rate times the published median end-to-end latency (or, without one,
the median TTFT plus (O - 1) x the median TPOT), capped at the number of prompts.

The split (`assign_splits`) is fixed before any simulation is compared. Runs of the same setup (GPU, model,
TP, dtype, engine, release, client, workload) published by different sources form one unit and stay on one
side, so a source's duplicate cannot leak a fitted value into the report half. Within each stratum (GPU x
regime) the units are taken in the order of the SHA-256 of their setup id, and each goes to the half that so
far has fewer runs in the (GPU, regime, metric family) cells the unit publishes; a tie goes to the half with
fewer runs in the stratum, and a remaining tie to the half named by the hash's lowest bit. So every cell with
at least two units has runs in both halves, and which run lands where depends on the data only.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path

import tomllib

RUNS_FILE = Path(__file__).resolve().parent / "data" / "published_runs.toml"
CONFIGS = Path(__file__).resolve().parent  # a model given as `configs/<name>/config.json` is relative to here

REGIMES = ("small-batch decode", "loaded decode", "prefill-heavy", "short-request")
SPLITS = ("fit", "report")
# metric -> (unit, family); a family is a column of the per-cell tables
METRICS = {
    "batch_latency_ms": ("ms", "E2E"),  # `vllm bench latency`: one batch, first arrival to last token
    "throughput_rps": ("req/s", "throughput"),
    "median_ttft_ms": ("ms", "TTFT"),
    "median_tpot_ms": ("ms", "TPOT"),
    "median_itl_ms": ("ms", "ITL"),
    "median_e2e_ms": ("ms", "E2E"),
}
FAMILIES = ("throughput", "TTFT", "TPOT", "ITL", "E2E")
ENGINES = ("vllm", "sglang")
CLIENTS = ("vllm bench latency", "vllm bench throughput", "benchmark_serving", "sglang.bench_serving")
OFFLINE_CLIENTS = ("vllm bench latency", "vllm bench throughput")  # the `LLM` class: no HTTP front end

# vLLM's ShareGPT pairs, all 1000 prompts of the full file counted with Llama-3.1-8B's tokenizer: 215,196
# prompt and 198,343 output tokens (vllm-project/vllm#14431; docs/workloads.md). Only the regime rule reads
# these, and no ShareGPT run comes near a threshold (P ~ 215 < 256 with O ~ 198 > 8; P < 2048).
SHAREGPT_MEAN_PROMPT = 215.2
SHAREGPT_MEAN_OUTPUT = 198.3

REQUIRED = (
    "key",
    "source",
    "where",
    "engine",
    "release",
    "gpu",
    "gpu_published",
    "model",
    "model_published",
    "tp",
    "flags",
    "client",
    "dataset",
    "num_prompts",
    "qps",
    "measured",
    "regime",
    "split",
)
OPTIONAL = {
    "dtype": "bf16",
    "node": None,
    "client_flags": "",
    "max_concurrency": None,
    "seed": 0,
    "multi_step": 0,
    "dummy_weights": False,
    "notes": "",
    "overrides": {},
}


@dataclass(frozen=True)
class Run:
    key: str
    source: str  # the address the numbers were read from
    where: str  # which table, comment or file on that page
    engine: str  # vllm | sglang
    release: str  # as the source states it ("0.8.2"; "not stated")
    gpu: str  # simserve's catalog name
    gpu_published: str  # the GPU as the source names it (SXM / PCIe / NVL, memory), or what it leaves open
    model: str  # catalog name, or configs/<name>/config.json under benchmarks/
    model_published: str
    tp: int
    flags: str  # the server's flags as published
    client: str  # CLIENTS
    dataset: str  # fixed:IN:OUT | sharegpt
    num_prompts: int
    qps: float  # math.inf: every request at t = 0
    measured: dict  # metric (METRICS) -> the published value
    regime: str  # stored; equals classify(run)
    split: str  # stored; equals assign_splits(runs)[key]
    dtype: str = "bf16"  # weights: bf16 | fp8
    node: str | None = (
        None  # simserve's node (interconnect) when the GPU's default box is not the one that ran
    )
    client_flags: str = ""  # the client's command line as published (the offline clients': in `flags`)
    max_concurrency: int | None = None
    seed: int = 0  # the client's sampler / arrival seed
    multi_step: int = 0  # vLLM --num-scheduler-steps; > 1 is not modelled: such runs are flagged
    dummy_weights: bool = False  # --load-format dummy (same shapes and work for dense models; see the docs)
    notes: str = ""
    overrides: dict = field(
        default_factory=dict
    )  # engine settings the published flags set (EngineSetup fields)

    @property
    def online(self) -> bool:
        return self.client not in OFFLINE_CLIENTS

    @property
    def flagged(self) -> str:
        """Why this run's numbers test something simserve does not model ('' when nothing)."""
        return (
            f"--num-scheduler-steps {self.multi_step} (multi-step scheduling, not modelled)"
            if self.multi_step > 1
            else ""
        )

    @property
    def families(self) -> tuple[str, ...]:
        return tuple(sorted({METRICS[m][1] for m in self.measured}))

    @property
    def model_path(self) -> str:
        return str(CONFIGS / self.model) if self.model.endswith(".json") else self.model


class RunDataError(ValueError):
    """A record that is not well formed: the message names the record and the field."""


def _record(raw: dict, where: str) -> Run:
    missing = [f for f in REQUIRED if f not in raw]
    unknown = sorted(set(raw) - set(REQUIRED) - set(OPTIONAL))
    if missing or unknown:
        raise RunDataError(f"{where}: missing {missing}, unknown {unknown}")
    values = {**OPTIONAL, **raw}
    values["qps"] = math.inf if raw["qps"] == "inf" else float(raw["qps"])
    run = Run(**values)
    problems = [
        (run.engine not in ENGINES, f"engine {run.engine!r}"),
        (run.client not in CLIENTS, f"client {run.client!r}"),
        (not run.source.startswith("https://"), "source is not an https address"),
        (not run.measured or set(run.measured) - set(METRICS), f"metrics {sorted(run.measured)}"),
        (any(not v > 0 for v in run.measured.values()), "a published value <= 0"),
        (run.regime not in REGIMES, f"regime {run.regime!r}"),
        (run.split not in SPLITS, f"split {run.split!r}"),
        (run.dtype not in ("bf16", "fp8"), f"dtype {run.dtype!r}"),
        (not (run.dataset == "sharegpt" or run.dataset.startswith("fixed:")), f"dataset {run.dataset!r}"),
    ]
    bad = [what for wrong, what in problems if wrong]
    if bad:
        raise RunDataError(f"{where} ({run.key}): {'; '.join(bad)}")
    return run


def load(path: Path = RUNS_FILE) -> tuple[Run, ...]:
    doc = tomllib.loads(path.read_text())
    runs = tuple(_record(raw, f"{path.name} run {i + 1}") for i, raw in enumerate(doc["run"]))
    keys = [r.key for r in runs]
    dupes = sorted({k for k in keys if keys.count(k) > 1})
    if dupes:
        raise RunDataError(f"{path.name}: duplicate keys {dupes}")
    return runs


def workload_means(run: Run) -> tuple[float, float]:
    """The workload's mean prompt and output tokens (P, O)."""
    if run.dataset == "sharegpt":
        return SHAREGPT_MEAN_PROMPT, SHAREGPT_MEAN_OUTPUT
    _, prompt, output = run.dataset.split(":")
    return float(prompt), float(output)


def in_flight(run: Run) -> float:
    """C: requests in flight (module docstring)."""
    if run.max_concurrency is not None:
        return min(run.max_concurrency, run.num_prompts)
    if math.isinf(run.qps):
        return run.num_prompts
    m = run.measured
    _, output = workload_means(run)
    if "median_e2e_ms" in m:
        e2e_ms = m["median_e2e_ms"]
    elif "median_ttft_ms" in m and "median_tpot_ms" in m:
        e2e_ms = m["median_ttft_ms"] + (output - 1) * m["median_tpot_ms"]
    else:
        return run.num_prompts
    return min(run.num_prompts, run.qps * e2e_ms / 1000)


def classify(run: Run) -> str:
    prompt, output = workload_means(run)
    if output <= 8 and prompt <= 256:
        return "short-request"
    if prompt >= 2048 and output <= prompt / 8:
        return "prefill-heavy"
    if in_flight(run) <= 8:
        return "small-batch decode"
    return "loaded decode"


def setup_id(run: Run) -> str:
    """What two sources must share to be the same setup (the split's unit; the 'disagreement' pairs)."""
    qps = "inf" if math.isinf(run.qps) else f"{run.qps:g}"
    return "|".join(
        map(
            str,
            (
                run.gpu,
                run.model,
                run.tp,
                run.dtype,
                run.engine,
                run.release,
                run.client,
                run.dataset,
                run.num_prompts,
                qps,
                run.max_concurrency,
            ),
        )
    )


def _digest(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def assign_splits(runs: tuple[Run, ...]) -> dict[str, str]:
    """key -> 'fit' | 'report' by the rule in the module docstring (from the records' data alone)."""
    units: dict[str, list[Run]] = {}
    for run in runs:
        units.setdefault(setup_id(run), []).append(run)
    strata: dict[tuple[str, str], list[str]] = {}
    for uid, members in units.items():
        strata.setdefault((members[0].gpu, classify(members[0])), []).append(uid)
    split: dict[str, str] = {}
    for _stratum, uids in sorted(strata.items()):
        cell_count = {(half, fam): 0 for half in SPLITS for fam in FAMILIES}
        stratum_count = dict.fromkeys(SPLITS, 0)
        for uid in sorted(uids, key=lambda u: (_digest(u), u)):
            members = units[uid]
            fams = sorted({f for r in members for f in r.families})
            fit, report = ((sum(cell_count[h, f] for f in fams), stratum_count[h]) for h in SPLITS)
            half = "fit" if fit < report else "report" if report < fit else SPLITS[_digest(uid) & 1]
            for r in members:
                split[r.key] = half
                stratum_count[half] += 1
                for f in r.families:
                    cell_count[half, f] += 1
    return split


def disagreements(runs: tuple[Run, ...]) -> list[list[Run]]:
    """Setups published by more than one source (or build): shown side by side in the docs."""
    units: dict[str, list[Run]] = {}
    for run in runs:
        units.setdefault(setup_id(run), []).append(run)
    return [members for members in units.values() if len(members) > 1]
