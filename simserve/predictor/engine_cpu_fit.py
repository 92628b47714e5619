"""Fitting the engine-CPU constants of predictor/engine_cpu.py to the measured files in
profiles/engine/vllm-0.33.0/.

`python tools/engine_cpu_fit.py DIR` prints the fitted block and the error tables; tests/test_engine_cpu.py
refits and checks the module's constants against the committed data. Plain csv + numpy + simserve's own NNLS
(nnls.py), so the same files give the same constants everywhere.
"""

from __future__ import annotations

import csv
import statistics
from collections import defaultdict
from pathlib import Path

import numpy as np

from simserve.predictor.nnls import nnls

STEP_COLUMNS = ("schedule", "update", "encode", "frontend_output")
ENGINE_STEP = ("schedule", "update", "encode")  # the EngineCore process's share


def read_rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _config_shape(name: str) -> tuple[int, int]:
    """(requests added per step, their prompt tokens) from a configuration's name
    (tools/engine_cpu_steps.py)."""
    kind, *rest = name.split("-")
    if kind == "mixed":
        return 1, int(rest[1])
    if kind == "newreqs":
        k, p = rest[1].split("x")
        return int(k), int(p)
    if kind == "chunked":
        return 1, int(rest[1])
    return 0, 0


def reference_us(rows: list[dict]) -> float:
    """The measuring host's reference speed over a run: the median `ref_us` (tools/engine_cpu_refbench.py's
    python_us, measured around each block of steps or each server run)."""
    return statistics.median(float(r["ref_us"]) for r in rows)


def speed_factor(row: dict, ref: float) -> float:
    """How much faster than its median the shared host was while this row was measured: its costs are
    multiplied by this, so that every figure is at the run's median speed (a neighbour's load slows all
    components alike)."""
    return ref / float(row["ref_us"])


def step_medians(rows: list[dict]) -> list[dict]:
    """Per (configuration, repeat): the median over its steps of each component and of the step's shape, at
    the run's median host speed."""
    ref = reference_us(rows)
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in rows:
        groups[(r["config"], r["rep"])].append(r)
    out = []
    for (config, rep), rs in groups.items():
        f = speed_factor(rs[0], ref)
        med = {"config": config, "kind": rs[0]["kind"], "rep": int(rep), "speed": f}
        for col in ("num_reqs", "num_tokens", "num_outputs"):
            med[col] = statistics.median(float(r[col]) for r in rs)
        for col in ("schedule_us", "update_us", "encode_us"):
            med[col] = f * statistics.median(float(r[col]) for r in rs)
        med["frontend_output_us"] = f * statistics.median(
            float(r["fe_decode_us"]) + float(r["fe_process_us"]) for r in rs
        )
        out.append(med)
    return out


def _fit(x: np.ndarray, y: np.ndarray) -> tuple[tuple[float, ...], np.ndarray]:
    coef = nnls(x, y, 1.0 / y**2)  # least squares on relative error, coefficients ≥ 0
    return coef, x @ np.array(coef) / y - 1


def per_config_error(meds: list[dict], col: str, pred: np.ndarray) -> tuple[float, float]:
    """Median and largest |relative error| of the prediction against each configuration's median over
    repeats."""
    by: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for m, p in zip(meds, pred, strict=True):
        by[m["config"]].append((m[col], p))
    errs = [
        abs(statistics.median(p for _, p in v) / statistics.median(y for y, _ in v) - 1) for v in by.values()
    ]
    return 100 * statistics.median(errs), 100 * max(errs)


def fit_steps(rows: list[dict]) -> dict[str, tuple[float, float, float, float, float]]:
    """component -> (a, per request, per token, median |err| %, max |err| %), on the step's scheduled requests
    and tokens (the outputs update, encode and the front end handle are one per request whose prompt is
    done)."""
    meds = step_medians(rows)
    out = {}
    for name in STEP_COLUMNS:
        col = f"{name}_us"
        keep = [m for m in meds if m[col] > 0]
        x = np.array([[1.0, m["num_reqs"], m["num_tokens"]] for m in keep])
        y = np.array([m[col] for m in keep])
        coef, _ = _fit(x, y)
        pred = x @ np.array(coef)
        med, worst = per_config_error(keep, col, pred)
        out[name] = (*coef, med, worst)
    return out


def fit_add_request(rows: list[dict]) -> tuple[float, float, float, float]:
    """(per request µs, per prompt token µs, median, max |err| %) of the EngineCore's work to take in new
    requests, from the steps that added some."""
    xs, ys, names = [], [], []
    ref = reference_us(rows)
    for r in rows:
        us = float(r["add_engine_us"]) * speed_factor(r, ref)
        if us <= 0:
            continue
        k, p = _config_shape(r["config"])
        xs.append([k, k * p])
        ys.append(us)
        names.append(r["config"])
    x, y = np.array(xs, dtype=float), np.array(ys)
    coef, _ = _fit(x, y)
    pred = x @ np.array(coef)
    meds = [{"config": n, "y": v} for n, v in zip(names, y, strict=True)]
    med, worst = per_config_error(meds, "y", pred)
    return (*coef, med, worst)


def server_runs(rows: list[dict], idle: dict | None = None, ref: float | None = None) -> list[dict]:
    """One record per API-server run: CPU per completed request, with the idle rate over the run subtracted,
    at reference speed `ref` (default: the server runs' own median)."""
    ref = ref if ref is not None else reference_us(rows)
    runs = []
    for r in rows:
        if r["role"] != "api_server":
            continue
        cpu = float(r["cpu_s"])
        if idle:
            cpu -= float(idle.get(r["api_server_count"], {}).get("api_server", 0.0)) * float(r["bench_s"])
        n = int(r["completed"])
        runs.append(
            {
                **r,
                "cpu_per_req_us": 1e6 * cpu / n * speed_factor(r, ref),
                "in": int(r["input_tokens"]) / n,
                "out": int(r["output_tokens"]) / n,
                "chunks_per_req": int(r["chunks"]) / n,
            }
        )
    return runs


def fit_server(
    rows: list[dict], idle: dict | None = None, api_server_count: str = "1", ref: float | None = None
) -> dict:
    """endpoint -> (per request, per prompt token, per output token µs, median, max |err| %), on one
    API-server process (runs with `api_server_count` servers; their CPU summed over the servers), at reference
    speed `ref` (the steps' median, so that all constants share one host speed)."""
    runs = server_runs(rows, idle, ref)
    per_run: dict[tuple, dict] = {}
    for r in runs:  # several API servers: add their CPU up, per run
        if r["api_server_count"] != api_server_count:
            continue
        key = (r["rep"], r["endpoint"], r["input_len"], r["output_len"])
        if key in per_run:
            per_run[key]["cpu_per_req_us"] += r["cpu_per_req_us"]
        else:
            per_run[key] = dict(r)
    out = {}
    for endpoint in sorted({k[1] for k in per_run}):
        rs = [r for k, r in per_run.items() if k[1] == endpoint]
        x = np.array([[1.0, r["in"], r["out"]] for r in rs])
        y = np.array([r["cpu_per_req_us"] for r in rs])
        coef, _ = _fit(x, y)
        pred = x @ np.array(coef)
        meds = [{"config": f"{r['input_len']}/{r['output_len']}", "y": r["cpu_per_req_us"]} for r in rs]
        med, worst = per_config_error(meds, "y", pred)
        out[endpoint] = (*coef, med, worst)
    return out


def fit_engine_core_rest(
    rows: list[dict], steps: dict, add: tuple, ref: float
) -> tuple[float, float, float, float]:
    """(per step µs, per request µs, median, max |err| %) of the EngineCore process's CPU that the timed
    functions leave out, from the server runs (rows of server.csv, at reference speed `ref`): its measured CPU
    less what `steps` and `add` (fit_steps, fit_add_request) predict for the same steps and requests. What is
    left is the process's own machinery: ZMQ receive and msgpack decode of each request, the busy loop's
    futures and queues, the output thread's hand-off and send, thread wake-ups (and this host's fake worker, a
    few µs per step)."""
    xs, ys, names = [], [], []
    for r in rows:
        if r["role"] != "engine_core" or r["api_server_count"] != "1":
            continue
        n_steps, reqs, toks = int(r["engine_steps"]), int(r["engine_step_reqs"]), int(r["engine_step_tokens"])
        n, n_in = int(r["completed"]), int(r["input_tokens"])
        predicted = sum(steps[c][0] * n_steps + steps[c][1] * reqs + steps[c][2] * toks for c in ENGINE_STEP)
        predicted += add[0] * n + add[1] * n_in
        measured = float(r["cpu_s"]) * 1e6 * speed_factor(r, ref)
        xs.append([n_steps, n])
        ys.append(measured - predicted)
        names.append(f"{r['endpoint']} {r['input_len']}/{r['output_len']}")
    x, y = np.array(xs, dtype=float), np.array(ys)
    coef = nnls(x, y, 1.0 / np.maximum(np.abs(y), 1.0) ** 2)
    pred = x @ np.array(coef)
    med, worst = per_config_error([{"config": k, "y": v} for k, v in zip(names, y, strict=True)], "y", pred)
    return (*coef, med, worst)


def server_count_ratio(rows: list[dict], ref: float, count: str) -> dict[str, float]:
    """workload -> the median (over repeats) of all API servers' CPU per request with `count` servers, over
    the same with one server, for the workloads measured both ways."""
    per_run: dict[tuple, float] = defaultdict(float)
    for r in server_runs(rows, None, ref):
        per_run[(r["api_server_count"], r["rep"], f"{r['endpoint']} {r['input_len']}/{r['output_len']}")] += (
            r["cpu_per_req_us"]
        )
    out = {}
    for w in sorted({k[2] for k in per_run if k[0] == count}):
        one = statistics.median(v for k, v in per_run.items() if k[0] == "1" and k[2] == w)
        many = statistics.median(v for k, v in per_run.items() if k[0] == count and k[2] == w)
        out[w] = many / one
    return out
