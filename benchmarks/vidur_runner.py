"""Drive Vidur (the `vidur` package from the package index) from simserve's Python, offline.

Vidur runs in its own virtual environment (`.venv-vidur/`, created on first use) because it pins a different
dependency stack (wandb, kaleido, huggingface_hub, ...). Nothing of Vidur is imported here: we write its
inputs, run `python -m vidur.main` as a subprocess and read its output CSVs back.

Inputs Vidur 0.0.26 needs, and how we give them (see /work/shared/notes/running-vidur.md):
* profiles: it downloads them as Hugging Face dataset snapshots. We place a snapshot in a hub-style cache
  folder (`datasets--local--<name>/refs/main` + `snapshots/<rev>/{config.json, *.csv.xz}`) and set
  HF_HUB_OFFLINE=1.
* requests: its `trace_replay` generator reads `Date, Time, PromptTokenCount, CompletionTokenCount` and keeps
  `Time` as the arrival time (times `time_scale_factor`), so it replays exactly simserve's arrivals and
  lengths.
* its predictor cache is keyed by the dataset *name*, the TP degree and the prediction range — not by the
  profile's bytes nor by the random-forest grid. We therefore give every (profile bytes, grid, range) its own
  cache folder, so a changed profile can never be served stale predictions.
"""

from __future__ import annotations

import hashlib
import json
import lzma
import os
import resource
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from simserve.errors import SimserveError

VIDUR_VERSION = "0.0.26"
# Vidur pins none of its dependencies; these are the versions this benchmark was verified with (2026-11-21).
# scikit-learn decides the random forests, pandas the CSV parsing, huggingface_hub the offline snapshot
# lookup.
VIDUR_REQUIREMENTS = (
    f"vidur=={VIDUR_VERSION}",
    "scikit-learn==1.9.1",
    "pandas==3.1.1",
    "numpy==2.4.6",
    "huggingface_hub==2.4.0",
)
ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv-vidur"
CACHE = ROOT / ".vidur-cache"
VIDUR_FILES = ("mlp.csv", "attention.csv", "all_reduce.csv", "send_recv.csv")
TRACE_DATE = "2023-08-21"  # the trace_replay generator keeps only rows of one `Date`; any fixed value works
REVISION = (
    "0" * 40
)  # a hub snapshot needs a 40-hex revision id; ours never changes (the folder is content-keyed)


@dataclass(frozen=True)
class RFGrid:
    """The random-forest grid search Vidur runs per op (GridSearchCV over these lists × k folds)."""

    num_estimators: tuple[int, ...]
    max_depth: tuple[int, ...]
    min_samples_split: tuple[int, ...]
    k_fold_cv_splits: int

    def describe(self) -> str:
        return (
            f"n_estimators {list(self.num_estimators)} × max_depth {list(self.max_depth)} × "
            f"min_samples_split {list(self.min_samples_split)}, {self.k_fold_cv_splits}-fold CV"
        )


# One setting, 2 folds: trains all models in seconds on 2 cores (the notes measured ~8 s).
REDUCED_GRID = RFGrid((250,), (32,), (2,), 2)
# Vidur's defaults: 27 settings × 10 folds, ~15 min on 2 cores before the first event.
DEFAULT_GRID = RFGrid((250, 500, 750), (8, 16, 32), (2, 5, 10), 10)


@dataclass(frozen=True)
class VidurSetup:
    """One replica as Vidur sees it; every field maps onto one Vidur flag."""

    model: str  # Hugging Face id Vidur knows, e.g. meta-llama/Llama-2-7b-hf
    device: str = "a100"
    network: str = "a100_pairwise_nvlink"
    tp: int = 1
    pp: int = 1
    policy: str = "sarathi"  # sarathi | vllm | orca
    batch_size_cap: int = 128
    token_budget: int = 512  # Sarathi chunk size; vLLM max tokens in a batch
    num_blocks: int | None = None  # KV blocks; None lets Vidur's own memory planner decide
    block_size: int = 16
    watermark_blocks_fraction: float = 0.01
    max_tokens: int = 4096  # max prompt + output per request (also Vidur's per-request KV reservation unit)
    prediction_max_tokens: int = 4096  # range of token counts Vidur pre-computes predictions for
    prediction_max_prefill_chunk: int = 4096
    grid: RFGrid = REDUCED_GRID
    seed: int = 42


@dataclass(frozen=True)
class StagedProfile:
    cache_dir: Path
    compute_dataset: str
    network_dataset: str


@dataclass(frozen=True)
class VidurResult:
    requests: (
        pd.DataFrame
    )  # one row per request: arrived_at_s, scheduled_at_s, first_token_at_s, completed_at_s
    tbt_quantiles: (
        pd.Series
    )  # TBT (s) at quantiles 0.00..1.00 (Vidur keeps a DDSketch, 0.1 % relative accuracy)
    wall_s: float  # the whole subprocess: interpreter start, predictor training/loading, simulation, output
    setup_s: float  # config, request generation and the execution-time predictor (training on a cold cache)
    sim_s: float  # the event loop alone
    num_blocks: int  # KV blocks Vidur ran with (its own planner's count when VidurSetup.num_blocks is None)
    out_dir: Path
    cpu_s: float = float("nan")  # CPU (user + system) of the whole subprocess
    sim_cpu_s: float = float("nan")  # CPU of the event loop alone


def ensure_venv(venv: Path = VENV) -> Path:
    """Create `venv` with Vidur in it once; later calls only check the marker. Returns its python."""
    python = venv / "bin" / "python"
    marker = venv / ".simserve-vidur"
    wanted = " ".join(VIDUR_REQUIREMENTS)
    if marker.exists() and marker.read_text().strip() == wanted and python.exists():
        return python
    print(
        f"[vidur] creating {venv} and installing vidur=={VIDUR_VERSION} (one time, a few minutes)", flush=True
    )
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", *VIDUR_REQUIREMENTS], capture_output=True, text=True
    )
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise SimserveError(
            f"installing vidur=={VIDUR_VERSION} into {venv} failed: {tail[0]}; check network to PyPI"
        )
    marker.write_text(wanted + "\n")
    return python


def find_vidur_files(src: Path) -> dict[str, Path]:
    """Vidur's four CSVs under `src`: flat, or in the data/profiling tree `simserve vidur export` writes."""
    found = {}
    for name in VIDUR_FILES:
        hits = sorted(Path(src).rglob(name))
        if len(hits) != 1:
            what = "no" if not hits else f"{len(hits)}"
            raise SimserveError(f"{src} holds {what} {name}; export one profile with `simserve vidur export`")
        found[name] = hits[0]
    return found


def _files_hash(files: dict[str, Path]) -> str:
    h = hashlib.sha256()
    for name in VIDUR_FILES:
        h.update(name.encode())
        h.update(files[name].read_bytes())
    return h.hexdigest()


def _write_snapshot(repo_dir: Path, config: dict, csvs: dict[str, Path]) -> None:
    snap = repo_dir / "snapshots" / REVISION
    snap.mkdir(parents=True, exist_ok=True)
    for name, path in csvs.items():
        with lzma.open(snap / f"{name}.xz", "wb") as out:
            out.write(path.read_bytes())
    (snap / "config.json").write_text(json.dumps(config))
    (repo_dir / "refs").mkdir(exist_ok=True)
    (repo_dir / "refs" / "main").write_text(REVISION)


def stage_profile(src: Path, setup: VidurSetup, cache_root: Path = CACHE) -> StagedProfile:
    """Put a Vidur-format profile into a hub-style cache keyed by its bytes, the RF grid and the range."""
    files = find_vidur_files(src)
    key_src = json.dumps(
        [
            _files_hash(files),
            setup.model,
            setup.device,
            setup.network,
            asdict(setup.grid),
            setup.prediction_max_tokens,
            setup.prediction_max_prefill_chunk,
        ],
        sort_keys=True,
    )
    key = hashlib.sha256(key_src.encode()).hexdigest()[:16]
    cache_dir = cache_root / key
    compute, network = f"simserve-{key}", f"simserve-net-{key}"
    ready = cache_dir / "staged.json"
    if not ready.exists():
        _write_snapshot(
            cache_dir / "profiling_data" / "compute" / f"datasets--local--{compute}",
            {"model": setup.model, "device_sku": setup.device},
            {n: files[n] for n in ("mlp.csv", "attention.csv")},
        )
        _write_snapshot(
            cache_dir / "profiling_data" / "network" / f"datasets--local--{network}",
            {"sku": setup.network},
            {n: files[n] for n in ("all_reduce.csv", "send_recv.csv")},
        )
        ready.write_text(key_src + "\n")
    return StagedProfile(cache_dir, f"local/{compute}", f"local/{network}")


def write_replay_trace(path: Path, arrived_at: np.ndarray, prompt: np.ndarray, output: np.ndarray) -> Path:
    """The exact request list in Vidur's trace_replay format (arrivals in seconds, repr-exact floats)."""
    pd.DataFrame(
        {
            "Date": TRACE_DATE,
            "Time": np.asarray(arrived_at, dtype=np.float64),
            "PromptTokenCount": np.asarray(prompt, dtype=np.int64),
            "CompletionTokenCount": np.asarray(output, dtype=np.int64),
        }
    ).to_csv(path, index=False, float_format="%.17g")
    return path


def vidur_args(setup: VidurSetup, staged: StagedProfile, trace_csv: Path, out_dir: Path) -> list[str]:
    rf = "--random_forrest_execution_time_predictor_config_"
    g = setup.grid
    args = [
        "--seed",
        str(setup.seed),
        "--replica_config_model_name",
        setup.model,
        "--replica_config_device",
        setup.device,
        "--replica_config_network_device",
        setup.network,
        "--replica_config_tensor_parallel_size",
        str(setup.tp),
        "--replica_config_num_pipeline_stages",
        str(setup.pp),
        "--cluster_config_num_replicas",
        "1",
        "--cache_config_block_size",
        str(setup.block_size),
        "--cache_config_watermark_blocks_fraction",
        str(setup.watermark_blocks_fraction),
        "--request_generator_config_type",
        "trace_replay",
        "--trace_request_generator_config_trace_file",
        str(trace_csv),
        "--trace_request_generator_config_date",
        TRACE_DATE,
        "--trace_request_generator_config_prefill_scale_factor",
        "1",
        "--trace_request_generator_config_decode_scale_factor",
        "1",
        "--trace_request_generator_config_time_scale_factor",
        "1",
        "--trace_request_generator_config_max_tokens",
        str(setup.max_tokens),
        "--replica_scheduler_config_type",
        setup.policy,
        f"--{setup.policy}_scheduler_config_batch_size_cap",
        str(setup.batch_size_cap),
        "--execution_time_predictor_config_type",
        "random_forrest",
        f"{rf}model_profiling_dataset",
        staged.compute_dataset,
        f"{rf}network_profiling_dataset",
        staged.network_dataset,
        f"{rf}cache_dir",
        str(staged.cache_dir),
        f"{rf}prediction_max_tokens_per_request",
        str(setup.prediction_max_tokens),
        f"{rf}prediction_max_prefill_chunk_size",
        str(setup.prediction_max_prefill_chunk),
        f"{rf}k_fold_cv_splits",
        str(g.k_fold_cv_splits),
        f"{rf}num_estimators",
        *map(str, g.num_estimators),
        f"{rf}max_depth",
        *map(str, g.max_depth),
        f"{rf}min_samples_split",
        *map(str, g.min_samples_split),
        "--metrics_config_output_dir",
        str(out_dir),
        "--metrics_config_store_token_completion_metrics",
        "--no-metrics_config_store_plots",
        "--no-metrics_config_store_operation_metrics",
        "--no-metrics_config_store_utilization_metrics",
        "--no-metrics_config_enable_chrome_trace",
        "--no-metrics_config_write_json_trace",
    ]
    if setup.num_blocks is not None:
        args += ["--cache_config_num_blocks", str(setup.num_blocks)]
    if setup.policy == "sarathi":
        args += ["--sarathi_scheduler_config_chunk_size", str(setup.token_budget)]
    elif setup.policy == "vllm":
        args += ["--vllm_scheduler_config_max_tokens_in_batch", str(setup.token_budget)]
    elif setup.policy != "orca":
        raise SimserveError(f"Vidur has no policy {setup.policy!r} here; use sarathi, vllm or orca")
    return args


# Runs inside Vidur's interpreter: vidur.main's three lines, with the phases timed apart. Writing the metrics
# (Simulator._write_output) is timed on its own so that "simulation" means the event loop only.
_DRIVER = """
import json, sys, time
from vidur.config import SimulationConfig
from vidur.simulator import Simulator
from vidur.utils.random import set_seeds
t0 = time.perf_counter()
c0 = time.process_time()
config = SimulationConfig.create_from_cli_args()
set_seeds(config.seed)
sim = Simulator(config)
t1 = time.perf_counter()
c1 = time.process_time()
write = sim._write_output
sim._write_output = lambda: None
sim.run()
t2 = time.perf_counter()
c2 = time.process_time()
write()
t3 = time.perf_counter()
out = config.metrics_config.output_dir
blocks = config.cluster_config.cache_config.num_blocks  # set by the replica scheduler when not given
json.dump({"setup_s": t1 - t0, "sim_s": t2 - t1, "write_s": t3 - t2, "num_blocks": blocks, "out": out,
           "sim_cpu_s": c2 - c1},
          open(out + "/timing.json", "w"))
"""


def run_vidur(
    python: Path,
    setup: VidurSetup,
    staged: StagedProfile,
    trace_csv: Path,
    out_dir: Path,
    prelude: str = "",
    epilogue: str = "",
) -> VidurResult:
    """Run one simulation in Vidur's venv; its outputs land in a timestamped folder under out_dir.

    `prelude` runs in Vidur's interpreter before the simulator is built (to patch or instrument it),
    `epilogue` after its outputs are written (it sees `sim`, `config` and `out`, the run's output folder).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}
    env.pop("PYTHONPATH", None)  # keep simserve's site-packages out of Vidur's interpreter
    driver = "\n".join((prelude, _DRIVER, epilogue))
    cmd = [str(python), "-c", driver, *vidur_args(setup, staged, trace_csv, out_dir)]
    t0 = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=out_dir)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = time.perf_counter() - t0
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    log = done.stdout + done.stderr
    (out_dir / "vidur.log").write_text(" ".join(cmd[3:]) + "\n\n" + log)
    runs = sorted(p for p in out_dir.iterdir() if (p / "timing.json").exists())
    if done.returncode != 0 or not runs:
        last = [ln for ln in log.strip().splitlines() if ln.strip()][-1:] or ["(no output)"]
        raise SimserveError(
            f"vidur failed (exit {done.returncode}): {last[0]}; full log in {out_dir / 'vidur.log'}"
        )
    timing = json.loads((runs[-1] / "timing.json").read_text())
    return VidurResult(
        _read_requests(runs[-1], trace_csv),
        _read_tbt(runs[-1]),
        wall,
        timing["setup_s"],
        timing["sim_s"],
        int(timing["num_blocks"]),
        runs[-1],
        cpu,
        timing.get("sim_cpu_s", float("nan")),
    )


def _read_requests(run: Path, trace_csv: Path) -> pd.DataFrame:
    """Per-request times in simserve's column names. Vidur numbers requests 0.. in arrival order."""
    m = pd.read_csv(run / "request_metrics.csv").sort_values("Request Id").reset_index(drop=True)
    trace = pd.read_csv(trace_csv)
    if len(m) != len(trace):
        raise SimserveError(f"vidur reported {len(m)} requests for a {len(trace)}-request trace; see {run}")
    arrived = trace["Time"].to_numpy()
    return pd.DataFrame(
        {
            "arrived_at_s": arrived,
            "scheduled_at_s": arrived + m["request_scheduling_delay"].to_numpy(),
            "first_token_at_s": arrived + m["prefill_e2e_time"].to_numpy(),
            "completed_at_s": arrived + m["request_e2e_time"].to_numpy(),
            "prompt_tokens": m["request_num_prefill_tokens"].to_numpy(),
            "output_tokens": m["request_num_decode_tokens"].to_numpy(),
            "num_restarts": m["request_num_restarts"].to_numpy(),
        }
    )


def _read_tbt(run: Path) -> pd.Series:
    f = run / "plots" / "decode_token_execution_plus_preemption_time.csv"
    if not f.exists():
        return pd.Series(dtype=float)
    df = pd.read_csv(f)
    return pd.Series(df["decode_token_execution_plus_preemption_time"].to_numpy(), index=df["cdf"].round(2))


# Vidur's own execution-time predictor on given batches (one stage): builds it exactly as its simulator does,
# from the same flags, and returns total_time (seconds) per batch. Used to separate predictor disagreement
# from scheduling disagreement.
_PROBE = """
import json, os, sys
from vidur.config import SimulationConfig
from vidur.entities import Batch
from vidur.execution_time_predictor import ExecutionTimePredictorRegistry
from vidur.types import ReplicaId
config = SimulationConfig.create_from_cli_args()
pred = ExecutionTimePredictorRegistry.get(
    config.execution_time_predictor_config.get_type(),
    predictor_config=config.execution_time_predictor_config,
    replica_config=config.cluster_config.replica_config,
    cache_config=config.cluster_config.cache_config,
)
batches = json.load(open(os.environ["SIMSERVE_PROBE_IN"]))
out = []
for q, kv in batches:
    et = pred.get_execution_time(Batch(ReplicaId(0), [None] * len(q), q, kv), 0)
    out.append({"total_s": et.total_time, "decode_attn_ms": et.attention_decode_execution_time,
                "prefill_attn_ms": et.attention_prefill_execution_time, "layers": et.num_layers})
json.dump(out, open(os.environ["SIMSERVE_PROBE_OUT"], "w"))
"""


def vidur_batch_times(
    python: Path,
    setup: VidurSetup,
    staged: StagedProfile,
    trace_csv: Path,
    batches: list[tuple[list, list]],
    work: Path,
) -> pd.DataFrame:
    """Vidur's predicted time of each batch, given as (q tokens per request, kv tokens incl. q per
    request)."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "probe_in.json").write_text(json.dumps(batches))
    env = {
        **os.environ,
        "WANDB_MODE": "disabled",
        "HF_HUB_OFFLINE": "1",
        "SIMSERVE_PROBE_IN": str(work / "probe_in.json"),
        "SIMSERVE_PROBE_OUT": str(work / "probe_out.json"),
    }
    env.pop("PYTHONPATH", None)
    cmd = [str(python), "-c", _PROBE, *vidur_args(setup, staged, trace_csv, work)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=work)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise SimserveError(f"vidur batch-time probe failed: {tail[0]}")
    return pd.DataFrame(json.loads((work / "probe_out.json").read_text()))
