"""`simserve sweep --engine vllm`: the flag search's printed table and recommended command line."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.table import Table

from simserve.errors import SimserveError

HEADERS = {  # the flags' names are too long for a table's columns
    "max-num-batched-tokens": "batched tokens",
    "max-num-seqs": "seqs",
    "long-prefill-token-threshold": "long threshold",
    "long-prefill-token-threshold-adaptive": "adaptive",
    "chunked-prefill-size": "chunk",
    "max-running-requests": "running",
    "enable-mixed-chunk": "mixed",
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
        ENGINE_POLICY,
        RELEASES,
        VLLM_GPU_MEMORY_UTILIZATION,
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
    if engine == "sglang":
        grid, memory_for = _sglang_grid(grid_text, base, gpu)
        # ... run as the release does: its overlap scheduler is on by default (Scenario.scheduling_is_async)
        base = replace(base, policy="sglang", overlap_schedule=True)
    else:
        # bad flags fail here, before anything runs
        grid = parse_grid(engine, grid_text, gpu.memory_gib, gpu.name)
        check_grid(grid, base.max_len)  # ... and combinations the release refuses to start with
        check_engine_scenario(base)
        # The printed command leaves --gpu-memory-utilization at the release's default: simulate that pool.
        # ... and as the release's worker runs: its memory profile and CUDA graphs (simserve/vllm_worker.py).
        base = replace(base, memory_utilization=VLLM_GPU_MEMORY_UTILIZATION, vllm_worker=True)

    def make_spec(overrides: dict, budgets: tuple[int, ...], max_batches: tuple[int, ...]) -> SweepSpec:
        if any(b < 1 for b in (*budgets, *max_batches)):
            raise SimserveError("--max-num-batched-tokens and --max-num-seqs values must be at least 1")
        spec_base = replace(base, **overrides)
        if engine == "sglang":  # one chunk size per sweep: its default memory fraction (tune/sglang.py)
            spec_base = replace(spec_base, memory_utilization=memory_for(budgets[0]))
        return SweepSpec(
            spec_base,
            policies=(ENGINE_POLICY[engine],),
            budgets=budgets,
            max_batches=max_batches,
            seeds=tuple(range(seed, seed + seeds)),
            slos=slos,
            tolerance=tolerance,
            start_qps=start_qps,
            search=search,
        )

    result = run_engine_sweep(engine, grid, make_spec, run)
    if engine == "sglang":  # echo what the recommended point simulated (its chunk's memory fraction)
        chunk = result.best["chunked-prefill-size"]
        base = replace(base, policy="sglang", budget=chunk, memory_utilization=memory_for(chunk))
    written = write_engine_outputs(result, out, scenario_fields(base), engine)
    table = Table(title=f"{RELEASES[engine]} flags: capacity (QPS) within the SLO")
    for col in result.rows.columns:
        table.add_column(HEADERS.get(col, col), justify="left" if col == "message" else "right")
    for _, row in result.rows.iterrows():
        table.add_row(*(f"{v:.3g}" if isinstance(v, float) else str(v) for v in row))
    from simserve.cli.console import table_console

    console = table_console(table)
    console.print(table)
    console.print(f"best: {result.capacity_qps:.3g} QPS at the {slos[0].tbt_s:g} s SLO with")
    console.print(command_comment(engine), highlight=False)
    console.print(result.command, highlight=False)
    console.print(f"wrote {', '.join(p.name for p in written)} to {out}/")


def _sglang_grid(grid_text: str | None, base: Any, gpu: Any) -> tuple[dict, Callable[[int], float]]:
    """SGLang's grid for this deployment and, per --chunked-prefill-size, the --mem-fraction-static its
    default gives (the simulated KV pool follows it). The --max-running-requests default comes from the KV
    pool of the default chunk size."""
    from simserve.catalog import ModelSpec
    from simserve.deployment import BLOCK_SIZE
    from simserve.sim.scenario import check_scenario
    from simserve.sim.sglang import default_max_running_requests
    from simserve.tune.engine import parse_grid
    from simserve.tune.sglang import check_sglang_flags, check_sglang_scenario, sglang_defaults

    parse_grid("sglang", grid_text, gpu.memory_gib)  # bad flags fail first, before anything is sized
    check_sglang_scenario(base)
    hf_id = ModelSpec.from_name(base.model).hf_id
    dp = getattr(base, "dp_attention", 1)

    def memory_for(chunk: int) -> float:
        return sglang_defaults(gpu.memory_gib, base.tp, base.pp, hf_id, chunk, dp).mem_fraction_static

    chunk = sglang_defaults(gpu.memory_gib, base.tp, base.pp, hf_id, dp=dp).chunked_prefill_size
    sized = replace(base, policy="sglang", budget=chunk, memory_utilization=memory_for(chunk))
    running = default_max_running_requests(check_scenario(sized) * BLOCK_SIZE, base.max_len)
    grid = parse_grid("sglang", grid_text, gpu.memory_gib, gpu.name, running)
    for c in grid["chunked-prefill-size"]:
        for m in grid["max-running-requests"]:
            check_sglang_flags(c, m, getattr(base, "page_size", 1))
    return grid, memory_for
