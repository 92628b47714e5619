"""`simserve sweep --engine vllm`: search a real engine's scheduler flags instead of a research budget.

The flags map onto the `vllm-v1` policy (simserve/sim/budgets.py): --max-num-batched-tokens is its token
budget, --max-num-seqs its max batch, the other three its SimConfig fields of the same names. The grid is
a product of flag values; each point is a capacity search of the ordinary sweep (run once per combination
of the flags the sweep grid does not know, usually one). The recommendation is the point with the highest
capacity under the primary SLO; ties go to the earlier grid point (smaller values first), because smaller
budgets and batches need less activation memory.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from simserve.errors import SimserveError
from simserve.io import atomic_path
from simserve.tune.sweep import SweepSpec

# flag → (Scenario field, default values). The default grid is 5 × 2 = 10 searches.
VLLM_FLAGS: dict[str, tuple[str, tuple[int, ...]]] = {
    "max-num-batched-tokens": ("budget", (512, 1024, 2048, 4096, 8192)),
    "max-num-seqs": ("max_batch", (128, 256)),
    "long-prefill-token-threshold": ("long_prefill_token_threshold", (0,)),
    "max-num-partial-prefills": ("max_num_partial_prefills", (1,)),
    "max-long-partial-prefills": ("max_long_partial_prefills", (1,)),
}
ENGINES = {"vllm": VLLM_FLAGS}
SWEPT = ("max-num-batched-tokens", "max-num-seqs")  # the sweep grid's budget and max batch axes


def engine_flags(engine: str) -> dict[str, tuple[str, tuple[int, ...]]]:
    if engine not in ENGINES:
        raise SimserveError(f"unknown --engine {engine!r}; choose one of {', '.join(ENGINES)}")
    return ENGINES[engine]


def parse_grid(engine: str, text: str | None) -> dict[str, tuple[int, ...]]:
    """'max-num-batched-tokens=1024,2048;max-num-seqs=128' over the engine's default grid."""
    flags = engine_flags(engine)
    grid = {flag: values for flag, (_, values) in flags.items()}
    for part in (text or "").split(";"):
        if not part.strip():
            continue
        name, sep, values = part.partition("=")
        name = name.strip().removeprefix("--")
        if name not in flags:
            raise SimserveError(
                f"unknown {engine} flag {name!r} in --engine-grid; known flags: {', '.join(flags)}"
            )
        try:
            parsed = tuple(int(v) for v in values.split(",") if v.strip())
        except ValueError:
            parsed = ()
        if not sep or not parsed or any(v < 0 for v in parsed):
            raise SimserveError(
                f"--engine-grid {name} needs non-negative integers, e.g. {name}={','.join(map(str, grid[name]))}"
            )
        grid[name] = parsed
    return grid


@dataclass(frozen=True)
class EngineResult:
    rows: pd.DataFrame  # one row per (flags, SLO): the content of engine.csv
    best: dict[str, int]  # the recommended flags
    capacity_qps: float
    command: str


def run_engine_sweep(
    engine: str,
    grid: dict[str, tuple[int, ...]],
    make_spec: Callable[..., SweepSpec],
    run: Callable[[SweepSpec], Any],
) -> EngineResult:
    """`make_spec(base_overrides, budgets, max_batches)` builds the sweep for one combination of the other
    flags; `run(spec)` runs it (the CLI's executor and cache). Returns every point and the recommendation."""
    flags = engine_flags(engine)
    others = [f for f in flags if f not in SWEPT]
    frames = []
    spec = None
    for combo in itertools.product(*(grid[f] for f in others)):
        fixed = dict(zip(others, combo, strict=True))
        spec = make_spec({flags[f][0]: v for f, v in fixed.items()}, grid[SWEPT[0]], grid[SWEPT[1]])
        rows = run(spec).rows
        rows = rows.assign(**{f: v for f, v in fixed.items()})
        frames.append(rows)
    table = pd.concat(frames, ignore_index=True)
    table = table.rename(columns={"budget": SWEPT[0], "max_batch": SWEPT[1]})
    table[SWEPT[0]] = table[SWEPT[0]].astype(int)
    cols = [*flags, "slo_s", "capacity_qps", "capacity_std", "seeds", "message"]
    table = table[[c for c in cols if c in table.columns]]
    assert spec is not None
    best = recommend(table, spec.slos[0].tbt_s, list(flags))
    base = spec.base
    return EngineResult(table, best["flags"], best["capacity_qps"], vllm_command(base, best["flags"]))


def recommend(table: pd.DataFrame, slo_s: float, flags: list[str]) -> dict[str, Any]:
    at = table[table.slo_s == slo_s].sort_values(flags, kind="stable")
    top = at.loc[at.capacity_qps.idxmax()] if len(at) else None
    if top is None or not top.capacity_qps > 0:
        raise SimserveError(
            f"no flag combination serves any load within the {slo_s:g} s SLO; relax --slo or widen --engine-grid"
        )
    return {"flags": {f: int(top[f]) for f in flags}, "capacity_qps": float(top.capacity_qps)}


def vllm_command(base: Any, best: dict[str, int]) -> str:
    """The `vllm serve` line; flags at vLLM's defaults (threshold 0, one partial prefill) are left out."""
    from simserve.catalog import ModelSpec

    parts = ["vllm serve", ModelSpec.from_name(base.model).hf_id]
    for flag, value in best.items():
        if flag in SWEPT or (flag == "long-prefill-token-threshold" and value) or value > 1:
            parts.append(f"--{flag} {value}")
    if base.tp > 1:
        parts.append(f"--tensor-parallel-size {base.tp}")
    if base.pp > 1:
        parts.append(f"--pipeline-parallel-size {base.pp}")
    parts.append(f"--max-model-len {base.max_len}")
    # precision and expert parallelism (getattr: scenarios pinned before these fields existed lack them)
    if getattr(base, "dtype", "bf16") == "fp8":
        parts.append("--quantization fp8")  # an fp8 checkpoint is detected by itself; a bf16 one is quantised
    if getattr(base, "kv_dtype", "bf16") == "fp8":
        parts.append("--kv-cache-dtype fp8")
    if getattr(base, "ep", 1) > 1:
        parts.append("--enable-expert-parallel")
    return " ".join(parts)


def check_engine_scenario(base: Any) -> None:
    """What vLLM cannot be told: EP other than 1 or TP (its --enable-expert-parallel spans the TP group)."""
    ep = getattr(base, "ep", 1)
    if ep not in (1, base.tp):
        raise SimserveError(
            f"vLLM runs experts TP-sharded (EP 1) or over the whole TP group (--enable-expert-parallel, EP = TP "
            f"{base.tp}); --ep {ep} has no vLLM flag: use --ep 1 or --ep {base.tp}"
        )


def write_engine_outputs(result: EngineResult, out: Path, scenario: dict[str, Any]) -> list[Path]:
    with atomic_path(out) as tmp:
        tmp.mkdir()
        result.rows.to_csv(tmp / "engine.csv", index=False)
        doc = {
            "engine": "vllm",
            "flags": result.best,
            "capacity_qps": result.capacity_qps,
            "command": result.command,
            "scenario": scenario,
        }
        (tmp / "recommendation.json").write_text(
            json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n"
        )
    return [out / "engine.csv", out / "recommendation.json"]
