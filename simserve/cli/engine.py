"""`simserve sweep --engine vllm`: the flag search's printed table and recommended command line."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from simserve.errors import SimserveError

HEADERS = {  # the flags' names are too long for a table's columns
    "max-num-batched-tokens": "batched tokens",
    "max-num-seqs": "seqs",
    "long-prefill-token-threshold": "long threshold",
    "long-prefill-token-threshold-adaptive": "adaptive",
    "capacity_qps": "capacity",
    "capacity_std": "± std",
}


def engine_sweep(
    engine: str,
    grid_text: str | None,
    base: Any,
    slos: tuple,
    seed: int,
    seeds: int,
    tolerance: float,
    start_qps: float,
    out: Path,
    run: Callable[[Any], Any],
    search: str = "simserve",
) -> None:
    from simserve.tune.engine import (
        VLLM_GPU_MEMORY_UTILIZATION,
        VLLM_RELEASE,
        check_engine_scenario,
        check_grid,
        command_comment,
        parse_grid,
        run_engine_sweep,
        write_engine_outputs,
    )
    from simserve.tune.sweep import SweepSpec, scenario_fields

    if hasattr(base, "record"):
        parse_grid(engine, grid_text)  # bad flags fail first, before anything runs
        raise SimserveError("--engine needs the simulator; drop --toy")
    from simserve.catalog import GPUSpec

    gpu = GPUSpec.from_name(base.gpu)
    grid = parse_grid(engine, grid_text, gpu.memory_gib, gpu.name)  # bad flags fail here, before anything runs
    check_grid(grid, base.max_len)  # ... and combinations the release refuses to start with
    check_engine_scenario(base)
    # The printed command leaves --gpu-memory-utilization at the release's default: simulate that pool.
    # ... and as the release's worker runs: its memory profile and CUDA graphs (simserve/vllm_worker.py).
    base = replace(base, memory_utilization=VLLM_GPU_MEMORY_UTILIZATION, vllm_worker=True)

    def make_spec(overrides: dict, budgets: tuple[int, ...], max_batches: tuple[int, ...]) -> SweepSpec:
        if any(b < 1 for b in (*budgets, *max_batches)):
            raise SimserveError("--max-num-batched-tokens and --max-num-seqs values must be at least 1")
        return SweepSpec(
            replace(base, **overrides),
            policies=("vllm-v1",),
            budgets=budgets,
            max_batches=max_batches,
            seeds=tuple(range(seed, seed + seeds)),
            slos=slos,
            tolerance=tolerance,
            start_qps=start_qps,
            search=search,
        )

    result = run_engine_sweep(engine, grid, make_spec, run)
    written = write_engine_outputs(result, out, scenario_fields(base))
    console = Console(soft_wrap=True)
    table = Table(title=f"{VLLM_RELEASE} flags: capacity (QPS) within the SLO")
    for col in result.rows.columns:
        table.add_column(HEADERS.get(col, col), justify="left" if col == "message" else "right")
    for _, row in result.rows.iterrows():
        table.add_row(*(f"{v:.3g}" if isinstance(v, float) else str(v) for v in row))
    console.print(table)
    console.print(f"best: {result.capacity_qps:.3g} QPS at the {slos[0].tbt_s:g} s SLO with")
    console.print(command_comment(), highlight=False)
    console.print(result.command, highlight=False)
    console.print(f"wrote {', '.join(p.name for p in written)} to {out}/")
