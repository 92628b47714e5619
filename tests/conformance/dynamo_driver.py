"""Replay a recorded sequence of autoscaler observations on Dynamo 1.6.1's own planner (PlannerScalingState).

Runs in the Dynamo environment (tools/dynamo_env.sh), not simserve's: reads the sequence as JSON on stdin and
writes one replica target per step (null: no decision) as JSON on stdout. `--version` prints the version and
exits (the environment script's import check).

Input: {"policy": "queue" | "slo", "min": MIN, "max": MAX, "context_length": L, "capacity_rps": C,
        "steps": [{"queued": [queued prompt tokens of each ready replica], "starting": n, "draining": n,
                   "arrivals": n, "elapsed_s": s}, ...]}

- queue: the load-based planner in prefill mode, easy "throughput" target (`_advance_load_single` ->
  `_prefill_easy_decision`), one ForwardPassMetrics per ready replica, through `advance_load` (which bounds
  decisions during startup to reductions, `_startup_reduction`).
- slo: throughput scaling in aggregated mode (`_throughput_agg`) through `advance_throughput_from_prediction`,
  the prediction from Dynamo's ConstantPredictor fed each interval's request count, one replica's capacity
  fixed at `capacity_rps` (an engine perf model whose `find_engine_capacity_rps` answers it).

The replica inventory is what Dynamo's Kubernetes connector reports (connectors/kubernetes.py,
`_get_worker_inventory_sync`; connectors/clients/kubernetes_api.py, `pending_startup_replicas`): a terminating
(draining) pod makes the deployment unstable and hides pending startups; otherwise starting pods are pending
startup capacity; with neither the deployment is stable (expected == ready).

Only the planner's scaling state runs: the package __init__ files that would import its Kubernetes client,
runtime and plugins are bypassed (each package is registered with its path and no code run), and the modules
the planner core imports but never calls on these paths are empty placeholders: dynamo.runtime.logging
(a compiled runtime), the engine perf model (aisimulate, sklearn) and the forecasting libraries of the other
predictors (numpy, pandas, pmdarima, filterpy, prophet).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import sys
import types
from pathlib import Path


def _package(name: str, path: Path) -> None:
    module = types.ModuleType(name)
    module.__path__ = [str(path)]
    sys.modules[name] = module


def _placeholder(name: str, **attrs) -> None:
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    sys.modules[name] = module


def load_planner():
    spec = importlib.util.find_spec("dynamo")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("no dynamo package here: build the environment with `bash tools/dynamo_env.sh`")
    root = Path(next(iter(spec.submodule_search_locations)))
    for name in (
        "dynamo",
        "dynamo.planner",
        "dynamo.planner.core",
        "dynamo.planner.plugins",
        "dynamo.planner.plugins.registry",
        "dynamo.planner.core.load",
    ):
        _package(name, root.joinpath(*name.split(".")[1:]))
    _placeholder("dynamo.runtime")
    _placeholder("dynamo.runtime.logging", configure_dynamo_logging=lambda *a, **k: None)
    _placeholder("dynamo.planner.core.perf_model", PlannerEnginePerfModel=lambda **kwargs: None)
    for name in ("pandas", "pmdarima", "filterpy", "filterpy.kalman", "prophet"):
        _placeholder(name, KalmanFilter=None, Prophet=None)
    if importlib.util.find_spec("numpy") is None:
        _placeholder("numpy")
    from dynamo.planner.config.planner_config import PlannerConfig
    from dynamo.planner.core import types as t
    from dynamo.planner.core.load.predictors import ConstantPredictor
    from dynamo.planner.core.state_machine import PlannerScalingState

    return PlannerConfig, t, ConstantPredictor, PlannerScalingState


class FixedCapacity:
    """An engine perf model that answers one capacity, met within the SLO (PlannerEngineCapacity's fields)."""

    def __init__(self, rps: float):
        self.rps = rps

    def find_engine_capacity_rps(self, **_):
        return types.SimpleNamespace(rps=self.rps, ttft_ms=0.0, itl_ms=0.0, eligible=True)


def inventory(t, step: dict, role: str):
    ready, starting, draining = len(step["queued"]), step["starting"], step["draining"]
    stable = not (starting or draining)
    pending = starting if not draining else 0
    return t.WorkerCounts(
        **{
            f"ready_num_{role}": ready,
            f"expected_num_{role}": ready if stable else None,
            f"{role}_scaling_in_progress": not stable,
            f"pending_num_{role}": pending,
        }
    )


def fpm(i: int, queued: int):
    """What `_prefill_easy_decision` reads of a ForwardPassMetrics (dynamo.common.forward_pass_metrics)."""
    return types.SimpleNamespace(
        worker_id=f"w{i}",
        dp_rank=0,
        queued_requests=types.SimpleNamespace(sum_prefill_tokens=queued, sum_decode_kv_tokens=0),
    )


def replay(w: dict) -> list:
    PlannerConfig, t, ConstantPredictor, PlannerScalingState = load_planner()
    common = dict(environment="virtual", backend="vllm", min_endpoint=w["min"], max_gpu_budget=w["max"])
    out: list = []
    if w["policy"] == "queue":
        config = PlannerConfig(
            mode="prefill",
            optimization_target="throughput",
            enable_load_scaling=True,
            enable_throughput_scaling=False,
            **common,
        )
        caps = t.WorkerCapabilities(
            prefill=t.EngineCapabilities(num_gpu=1, context_length=w["context_length"])
        )
        state = PlannerScalingState(config, caps)
        for step in w["steps"]:
            state.begin_tick()
            state.observe_worker_counts(inventory(t, step, "prefill"))
            obs = t.FpmObservations(prefill={(f"w{i}", 0): fpm(i, q) for i, q in enumerate(step["queued"])})
            decision = state.advance_load(obs)
            out.append(None if decision is None else decision.num_prefill)
        return out
    config = PlannerConfig(
        mode="agg",
        optimization_target="sla",
        enable_load_scaling=False,
        enable_throughput_scaling=True,
        load_predictor="constant",
        **common,
    )
    caps = t.WorkerCapabilities(decode=t.EngineCapabilities(num_gpu=1, max_num_batched_tokens=8192))
    state = PlannerScalingState(config, caps)
    state.install_regressions(agg=FixedCapacity(w["capacity_rps"]))
    predictor = ConstantPredictor(config)
    for step in w["steps"]:
        state.begin_tick()
        state.observe_worker_counts(inventory(t, step, "decode"))
        predictor.add_data_point(float(step["arrivals"]))
        traffic = t.TrafficObservation(
            duration_s=step["elapsed_s"], num_req=step["arrivals"], isl=1.0, osl=1.0
        )
        decision = state.advance_throughput_from_prediction(
            traffic,
            predicted_num_req=predictor.predict_next(),
            predicted_isl=1.0,
            predicted_osl=1.0,
            predicted_kv_hit_rate=None,
        )
        out.append(None if decision is None else decision.num_decode)
    return out


if __name__ == "__main__":
    logging.disable(logging.CRITICAL)
    if sys.argv[1:] == ["--version"]:
        load_planner()
        from importlib.metadata import version

        print("ai-dynamo", version("ai-dynamo"))
    else:
        json.dump(replay(json.load(sys.stdin)), sys.stdout)
