"""`simserve sweep --engine vllm`: search a real engine's scheduler flags instead of a research budget.

`--engine vllm` is one pinned release, vLLM 0.33.0's V1 engine (`VLLM_RELEASE`), named in every output. Its
flags map onto the `vllm-v1` policy (simserve/sim/vllm_v1.py): --max-num-batched-tokens is its token budget,
--max-num-seqs its max batch, --long-prefill-token-threshold(-adaptive) the SimConfig fields of those names.
Only flags that release's `vllm serve` accepts are searched or printed (--max-num-partial-prefills and
--max-long-partial-prefills were removed in vLLM 0.27, PR #49244), and a grid point it would refuse to start
with is refused here with its own message (`check_vllm_flags`, after `SchedulerConfig.verify_max_model_len`
in vllm/config/scheduler.py). The default grid spans the release's per-GPU server defaults (`vllm_defaults`).

The grid is a product of flag values; each point is a capacity search of the ordinary sweep (run once per
combination of the flags the sweep grid does not know, usually one). The recommendation is the point with
the highest capacity under the primary SLO; ties go to the earlier grid point (smaller values first),
because smaller budgets and batches need less activation memory.
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
from simserve.tune.sglang import (
    SGLANG_FLAGS,
    SGLANG_RELEASE,
    SGLANG_SWITCHES,
    sglang_command,
)
from simserve.tune.sweep import SweepSpec
from simserve.vllm_flags import check_vllm_flags

VLLM_RELEASE = "vLLM 0.33.0 (V1 engine)"

# vLLM's CacheConfig.gpu_memory_utilization default in 0.33.0 (vllm/config/cache.py: `Field(default=0.92)`).
# NOTE: older releases default to 0.9; the pinned release's source says 0.92, and the printed command
# leaves the flag out, so the simulated KV pool must use what that release does by itself.
VLLM_GPU_MEMORY_UTILIZATION = 0.92

# flag → (Scenario field, default values). The defaults of the two swept flags depend on the GPU
# (`vllm_defaults`); the values here are the A100 tier's. The default grid is 5 × 2 = 10 searches.
VLLM_FLAGS: dict[str, tuple[str, tuple[int, ...]]] = {
    "max-num-batched-tokens": ("budget", (512, 1024, 2048, 4096, 8192)),
    "max-num-seqs": ("max_batch", (128, 256)),
    "long-prefill-token-threshold": ("long_prefill_token_threshold", (0,)),
    # a switch (0 off, 1 on): floors the threshold at the budget's fair share
    "long-prefill-token-threshold-adaptive": ("long_prefill_token_threshold_adaptive", (0,)),
}
SWITCHES = ("long-prefill-token-threshold-adaptive",)  # printed as a bare flag when 1, left out when 0
# Flags earlier vLLM releases had and 0.33.0's `vllm serve` parser refuses ("unrecognized arguments").
VLLM_REMOVED = {
    "max-num-partial-prefills": "removed in vLLM 0.27 (PR #49244)",
    "max-long-partial-prefills": "removed in vLLM 0.27 (PR #49244)",
}
SWEPT = ("max-num-batched-tokens", "max-num-seqs")  # the sweep grid's budget and max batch axes
ENGINES = {"vllm": VLLM_FLAGS, "sglang": SGLANG_FLAGS}
RELEASES = {"vllm": VLLM_RELEASE, "sglang": SGLANG_RELEASE}
ENGINE_SWITCHES = {"vllm": SWITCHES, "sglang": SGLANG_SWITCHES}
# Flags searched inside one capacity sweep (its budget and max batch axes); the others are one sweep per
# value. NOTE: SGLang's default --mem-fraction-static follows --chunked-prefill-size
# (tune/sglang.sglang_defaults), so each chunk size is its own sweep with its own KV pool, and only
# --max-running-requests is a sweep axis.
ENGINE_SWEPT = {"vllm": SWEPT, "sglang": (None, "max-running-requests")}
ENGINE_POLICY = {"vllm": "vllm-v1", "sglang": "sglang"}
GIB = 2**30


def vllm_defaults(memory_gib: float, name: str) -> tuple[int, int]:
    """vLLM 0.33.0's `vllm serve` defaults (max_num_batched_tokens, max_num_seqs) on one GPU.

    From vllm/engine/arg_utils.py, `EngineArgs.get_batch_defaults`, UsageContext.OPENAI_API_SERVER: ≥ 160 GiB
    of device memory (B200, B300): 16384 / 1024; ≥ 70 GiB and not an A100 (H100, H200): 8192 / 1024;
    otherwise (A100, A40, ...): 2048 / 256. `memory_gib` is what torch reports (GPUSpec.memory_gib)."""
    if memory_gib >= 160:
        return 16384, 1024
    if memory_gib >= 70 and "a100" not in name.lower():
        return 8192, 1024
    return 2048, 256


def default_grid(memory_gib: float | None = None, name: str = "") -> dict[str, tuple[int, ...]]:
    """The default search around the GPU's server defaults: the default batched tokens with two halvings
    and two doublings (A100: 512 ... 8192; H100: 2048 ... 32768), and max-num-seqs at its default and one
    smaller value (A100: 128 and 256; H100: 256 and 1024). Every point satisfies vLLM's
    max_num_batched_tokens >= max_num_seqs. Without a GPU: the A100 tier."""
    if memory_gib is None:
        return {flag: values for flag, (_, values) in VLLM_FLAGS.items()}
    tokens, seqs = vllm_defaults(memory_gib, name)
    grid = {flag: values for flag, (_, values) in VLLM_FLAGS.items()}
    grid["max-num-batched-tokens"] = tuple(tokens * 2**k // 4 for k in range(5))
    grid["max-num-seqs"] = (128, 256) if seqs == 256 else (256, seqs)
    return grid


def engine_flags(engine: str) -> dict[str, tuple[str, tuple[int, ...]]]:
    if engine not in ENGINES:
        raise SimserveError(f"unknown --engine {engine!r}; choose one of {', '.join(ENGINES)}")
    return ENGINES[engine]


def parse_grid(
    engine: str,
    text: str | None,
    memory_gib: float | None = None,
    gpu_name: str = "",
    max_running_default: int | None = None,
) -> dict[str, tuple[int, ...]]:
    """'max-num-batched-tokens=1024,2048;max-num-seqs=128' over the engine's default grid for the GPU
    (sglang: `max_running_default`, its --max-running-requests default for the KV pool)."""
    flags = engine_flags(engine)
    if engine == "sglang":
        from simserve.tune.sglang import default_grid as sglang_grid

        grid = sglang_grid(memory_gib, max_running_default)
    else:
        grid = default_grid(memory_gib, gpu_name)
    for part in (text or "").split(";"):
        if not part.strip():
            continue
        name, sep, values = part.partition("=")
        name = name.strip().removeprefix("--")
        if engine == "vllm" and name in VLLM_REMOVED:  # what `vllm serve` itself answers, then why
            raise SimserveError(
                f"vllm serve: error: unrecognized arguments: --{name} ({VLLM_REMOVED[name]}; {VLLM_RELEASE} "
                "schedules every prefill that fits the token budget): drop it from --engine-grid"
            )
        if name not in flags:
            raise SimserveError(
                f"unknown {engine} flag {name!r} in --engine-grid; known flags: {', '.join(flags)}"
            )
        try:
            parsed = tuple(int(v) for v in values.split(",") if v.strip())
        except ValueError:
            parsed = ()
        if name in ENGINE_SWITCHES[engine] and not set(parsed) <= {0, 1}:
            raise SimserveError(f"--engine-grid {name} is a switch: 0 (off), 1 (on) or both, e.g. {name}=0,1")
        if not sep or not parsed or any(v < 0 for v in parsed):
            raise SimserveError(
                f"--engine-grid {name} needs non-negative integers, e.g. "
                f"{name}={','.join(map(str, grid[name]))}"
            )
        grid[name] = parsed
    return grid


def check_grid(grid: dict[str, tuple[int, ...]], max_model_len: int) -> None:
    """Every point of the grid must be one vLLM starts with: the first it refuses fails the sweep."""
    for tokens, seqs, thr in itertools.product(
        grid["max-num-batched-tokens"], grid["max-num-seqs"], grid["long-prefill-token-threshold"]
    ):
        check_vllm_flags(tokens, seqs, thr, max_model_len)


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
    swept, switches = ENGINE_SWEPT[engine], ENGINE_SWITCHES[engine]
    others = [f for f in flags if f not in swept]
    frames = []
    spec = None
    for combo in itertools.product(*(grid[f] for f in others)):
        fixed = dict(zip(others, combo, strict=True))
        overrides = {flags[f][0]: bool(v) if f in switches else v for f, v in fixed.items()}
        budgets = grid[swept[0]] if swept[0] else (overrides.pop("budget"),)
        spec = make_spec(overrides, budgets, grid[swept[1]])
        rows = run(spec).rows
        rows = rows.assign(**{f: v for f, v in fixed.items() if flags[f][0] != "budget"})
        frames.append(rows)
    table = pd.concat(frames, ignore_index=True)
    budget_flag = next(f for f, (field, _) in flags.items() if field == "budget")
    table = table.rename(columns={"budget": budget_flag, "max_batch": swept[1]})
    table[budget_flag] = table[budget_flag].astype(int)
    cols = [*flags, "slo_s", "capacity_qps", "capacity_std", "seeds", "message"]
    table = table[[c for c in cols if c in table.columns]]
    assert spec is not None
    best = recommend(table, spec.slos[0].tbt_s, list(flags))
    base = spec.base
    command = sglang_command(base, best["flags"]) if engine == "sglang" else vllm_command(base, best["flags"])
    return EngineResult(table, best["flags"], best["capacity_qps"], command)


def recommend(table: pd.DataFrame, slo_s: float, flags: list[str]) -> dict[str, Any]:
    at = table[table.slo_s == slo_s].sort_values(flags, kind="stable")
    top = at.loc[at.capacity_qps.idxmax()] if len(at) else None
    if top is None or not top.capacity_qps > 0:
        raise SimserveError(
            f"no flag combination serves any load within the {slo_s:g} s SLO; relax --slo or widen "
            "--engine-grid"
        )
    return {"flags": {f: int(top[f]) for f in flags}, "capacity_qps": float(top.capacity_qps)}


def vllm_command(base: Any, best: dict[str, int]) -> str:
    """The `vllm serve` line for VLLM_RELEASE; a threshold at its default (0, off) is left out, and so is
    --gpu-memory-utilization (the simulation used the release's default, VLLM_GPU_MEMORY_UTILIZATION)."""
    from simserve.catalog import ModelSpec

    parts = ["vllm serve", ModelSpec.from_name(base.model).hf_id]
    for flag, value in best.items():
        if flag in VLLM_REMOVED:
            continue  # NOTE: never printed: the pinned release's parser refuses them
        if flag in SWITCHES:
            if value:
                parts.append(f"--{flag}")
        elif flag in SWEPT or (flag == "long-prefill-token-threshold" and value):
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
    if getattr(base, "dp_attention", 1) > 1:  # attention DP: one engine per rank, experts over all of them
        parts.append(f"--data-parallel-size {base.dp_attention}")
    if getattr(base, "ep", 1) > 1:
        parts.append("--enable-expert-parallel")
    if getattr(base, "all2all_backend", "allgather_reducescatter") != "allgather_reducescatter":
        parts.append(f"--all2all-backend {base.all2all_backend}")
    if not getattr(base, "prefix_caching", True):
        parts.append("--no-enable-prefix-caching")  # on by default in the V1 engine
    if getattr(base, "kv_offload_gb", 0.0):  # vLLM's native CPU offloading (sim/kv_offload.py)
        parts.append(f"--kv-offloading-size {base.kv_offload_gb:g} --kv-offloading-backend native")
    if getattr(base, "speculative", None):  # the K the sweep ran (Scenario.speculation: checked, K resolved)
        from simserve.speculative import serve_config

        parts.append(f"--speculative-config '{serve_config(base.speculative, base.speculation().k)}'")
    return " ".join(parts)


def command_comment(engine: str = "vllm") -> str:
    """The line printed above the command: which release it is for."""
    if engine == "sglang":
        from simserve.tune.sglang import SGLANG_VERSION

        return f"# for {SGLANG_RELEASE}: `pip install sglang=={SGLANG_VERSION}`"
    return f"# for {VLLM_RELEASE}: `pip install vllm==0.33.0`"


def check_engine_scenario(base: Any) -> None:
    """What vLLM cannot be told: EP other than 1 or TP (its --enable-expert-parallel spans the TP group)."""
    ep, dp = getattr(base, "ep", 1), getattr(base, "dp_attention", 1)
    if dp > 1 and ep == dp * base.tp:  # --data-parallel-size with --enable-expert-parallel
        return
    if ep not in (1, base.tp):
        raise SimserveError(
            "vLLM runs experts TP-sharded (EP 1) or over the whole TP group (--enable-expert-parallel, EP = "
            f"TP {base.tp}); --ep {ep} has no vLLM flag: use --ep 1 or --ep {base.tp}"
        )


def write_engine_outputs(
    result: EngineResult, out: Path, scenario: dict[str, Any], engine: str = "vllm"
) -> list[Path]:
    with atomic_path(out) as tmp:
        tmp.mkdir()
        result.rows.to_csv(tmp / "engine.csv", index=False)
        doc = {
            "engine": engine,
            "release": RELEASES[engine],
            "flags": result.best,
            "capacity_qps": result.capacity_qps,
            "command": result.command,
            "scenario": scenario,
        }
        (tmp / "recommendation.json").write_text(
            json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n"
        )
    return [out / "engine.csv", out / "recommendation.json"]
