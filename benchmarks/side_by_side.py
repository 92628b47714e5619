"""simserve and Vidur on identical inputs, as a library for benchmarks/vs_vidur.py, bench_sim.py and
vidur_residual.py (no `__main__`): the setup (Bench), the same seeded workload for both, one run of each side
reduced to the same latency statistics (Side), and a markdown table of them.

What is identical, and how: benchmarks/vs_vidur.py's docstring.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import vidur_runner as vr
from common import markdown_table

from simserve.catalog import NODES
from simserve.deployment import Deployment
from simserve.memory import plan_memory, profile_tokens
from simserve.predictor.load import load_timer
from simserve.predictor.overhead import CpuOverhead
from simserve.profiling.schema import profile_dir, read_profile
from simserve.profiling.vidur import export_vidur
from simserve.sim.cluster import simulate
from simserve.sim.config import SimConfig
from simserve.sim.metrics import build_result
from simserve.workload.arrivals import arrival_times
from simserve.workload.trace import load_trace

METRICS = ("ttft", "tbt", "scheduling_delay", "e2e")
NEVER = 1e12  # disables simserve's overload stop: Vidur always runs every request to completion


@dataclass(frozen=True)
class Bench:
    model: str = "llama-2-7b"
    gpu: str = "a100"
    node: str = "a100-pairwise-nvlink"
    max_model_len: int = 4096  # Vidur's Llama-2-7B config; the arXiv trace is cut to prompt + output <= this
    trace: str = "arxiv"
    num_requests: int = 2000
    seed: int = 0
    policies: tuple[str, ...] = ("sarathi", "vllm")
    qps: tuple[float, ...] = (
        1.0,
        2.0,
    )  # light load, and near Sarathi's capacity (vLLM is past its own there)
    budget: int = 512  # Sarathi chunk size; vLLM uses max_model_len
    max_batch: int = 128
    grid: vr.RFGrid = vr.REDUCED_GRID


@dataclass(frozen=True)
class Side:
    """One simulator's run: latency percentiles, its speed, and its request table."""

    stats: dict[str, float]
    wall_s: float
    setup_s: float
    sim_s: float
    num_blocks: int
    cpu_s: float = float("nan")  # CPU (user + system) of the whole run, and of the simulation alone
    sim_cpu_s: float = float("nan")


def workload(b: Bench, qps: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    trace = load_trace(b.trace, max_total_tokens=b.max_model_len).sample(b.num_requests, seed=b.seed)
    arrived = arrival_times(b.num_requests, qps, "poisson", seed=b.seed)
    return trace.prompt_tokens, trace.output_tokens, arrived


def latency_stats(req: pd.DataFrame, tbt_p50: float, tbt_p99: float) -> dict[str, float]:
    a = req["arrived_at_s"].to_numpy()
    cols = {
        "ttft": req["first_token_at_s"].to_numpy() - a,
        "scheduling_delay": req["scheduled_at_s"].to_numpy() - a,
        "e2e": req["completed_at_s"].to_numpy() - a,
    }
    out = {f"{k}_p{q}": float(np.percentile(v, q)) for k, v in cols.items() for q in (50, 99)}
    out |= {"tbt_p50": tbt_p50, "tbt_p99": tbt_p99, "makespan": float(req["completed_at_s"].max() - a.min())}
    return out


def sim_config(b: Bench, policy: str) -> SimConfig:
    budget = b.budget if policy == "sarathi" else b.max_model_len
    return SimConfig(
        policy=policy,
        budget=budget,
        max_batch=b.max_batch,
        max_model_len=b.max_model_len,
        sched_delay_slo_s=NEVER,
        overload_wait_s=NEVER,
    )


def run_simserve(dep: Deployment, cfg: SimConfig, work, overhead: CpuOverhead | None = None) -> Side:
    prompt, output, arrived = work
    t0, c0 = time.perf_counter(), time.process_time()
    timer = load_timer(dep, overhead=overhead)  # fitted predictor is cached by profile hash
    blocks = plan_memory(
        dep, profile_tokens(cfg.policy, cfg.max_model_len, cfg.memory_budget, cfg.batch_limit(dep.pp))
    )
    t1, c1 = time.perf_counter(), time.process_time()
    res = build_result(simulate(prompt, output, arrived, timer, blocks.num_blocks, cfg), dep)
    t2, c2 = time.perf_counter(), time.process_time()
    done = res.requests[res.requests.status == "completed"]
    if len(done) != len(prompt):
        raise RuntimeError(f"simserve completed {len(done)} of {len(prompt)} requests")
    stats = latency_stats(done, res.summary.tbt_p50_s, res.summary.tbt_p99_s)
    return Side(stats, t2 - t0, t1 - t0, t2 - t1, blocks.num_blocks, c2 - c0, c2 - c1)


def vidur_setup(b: Bench, policy: str, num_blocks: int | None) -> vr.VidurSetup:
    budget = b.budget if policy == "sarathi" else b.max_model_len
    return vr.VidurSetup(
        model=dep_for(b).model.hf_id,
        policy=policy,
        batch_size_cap=b.max_batch,
        token_budget=budget,
        num_blocks=num_blocks,
        max_tokens=b.max_model_len,
        prediction_max_tokens=b.max_model_len,
        prediction_max_prefill_chunk=b.max_model_len,
        grid=b.grid,
        seed=b.seed,
    )


def run_vidur(
    python: Path, export: Path, setup: vr.VidurSetup, work, out: Path
) -> tuple[Side, vr.VidurResult]:
    staged = vr.stage_profile(export, setup)
    trace_csv = vr.write_replay_trace(out / "requests.csv", work[2], work[0], work[1])
    res = vr.run_vidur(python, setup, staged, trace_csv, out / "vidur")
    if not np.allclose(res.requests["arrived_at_s"], work[2], rtol=0, atol=1e-9):
        raise RuntimeError("Vidur's arrivals differ from the replayed ones")
    q = res.tbt_quantiles
    stats = latency_stats(res.requests, float(q.loc[0.5]), float(q.loc[0.99]))
    return Side(stats, res.wall_s, res.setup_s, res.sim_s, res.num_blocks, res.cpu_s, res.sim_cpu_s), res


def dep_for(b: Bench) -> Deployment:
    return Deployment.create(b.model, b.gpu, tp=1, node=NODES.get(b.node), max_model_len=b.max_model_len)


def export_profile(b: Bench, dest: Path) -> Path:
    dep = dep_for(b)
    prof = read_profile(profile_dir(Path(vr.ROOT, "profiles"), dep.gpu.name, dep.model.name))
    export_vidur(prof, dest, dep.model, dep.gpu, dep.node)
    return dest


def _cell(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def md_table(df: pd.DataFrame) -> str:
    """A GitHub markdown table, floats to 4 significant digits."""
    return markdown_table(df, _cell)
