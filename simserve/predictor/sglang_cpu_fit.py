"""Fitting the SGLang CPU constants of predictor/sglang_cpu.py to the measured files in
profiles/engine/sglang-0.5.23/.

`python tools/sglang_cpu_fit.py DIR` prints the fitted block and the error tables; tests/test_sglang_cpu.py
refits and checks the module's constants against the committed data. Plain csv + numpy + simserve's own NNLS
(nnls.py), so the same files give the same constants everywhere. The conventions are engine_cpu_fit.py's:
per-block medians, each block brought to a reference host speed by the reference workload run around it, least
squares on relative error with non-negative coefficients, error = median and largest |prediction / measured
median − 1| over the configurations.
"""

from __future__ import annotations

import statistics
from collections import defaultdict

import numpy as np

from simserve.predictor.engine_cpu import MEASURING_HOST as VLLM_HOST
from simserve.predictor.engine_cpu_fit import per_config_error, read_rows  # noqa: F401  (re-exported)
from simserve.predictor.nnls import nnls

# Every figure is brought to the speed at which the vLLM 0.33.0 figures were fitted
# (engine_cpu.MEASURING_HOST), on the same host, so that one `host_speed` serves both modules.
REFERENCE_US = VLLM_HOST["python_us"]
SCHEDULER = ("recv", "schedule", "launch", "result")  # the scheduler's timed calls, per step
COLUMN = {
    "recv": "recv_us",
    "schedule": "schedule_us",
    "launch": "launch_us",
    "result": "result_us",
    "detokenize": "detok_us",
    "tm_output": "tm_output_us",
    "tm_stream": "tm_stream_us",
    "tm_add": "tm_add_us",
}
SHAPE = ("num_reqs", "num_tokens", "decoding", "held", "new_reqs", "new_tokens", "streamed")
SERVER_ROLES = ("tokenizer_manager", "detokenizer")
BACKEND_ENDPOINT = {"sglang": "generate", "sglang-oai": "completions", "sglang-oai-chat": "chat"}


def speed_factor(row: dict) -> float:
    """How much faster than the reference speed the shared host ran while this row was measured: its costs are
    multiplied by this (a neighbour's load slows every component of a block alike)."""
    return REFERENCE_US / float(row["ref_us"])


def block_medians(rows: list[dict]) -> list[dict]:
    """Per (configuration, mode, repeat): the median over its steps of each cost and of the step's shape, at
    the reference speed."""
    groups: dict[tuple[str, str, str], list[dict]] = defaultdict(list)
    for r in rows:
        groups[(r["config"], r["mode"], r["rep"])].append(r)
    out = []
    for (config, mode, rep), rs in groups.items():
        f = speed_factor(rs[0])
        med = {"config": config, "mode": mode, "rep": int(rep), "steps": len(rs)}
        for col in SHAPE:
            med[col] = statistics.median(float(r[col]) for r in rs)
        for name, col in COLUMN.items():
            med[name] = f * statistics.median(float(r[col]) for r in rs)
        out.append(med)
    return out


def _fit(x: np.ndarray, y: np.ndarray) -> tuple[float, ...]:
    return nnls(x, y, 1.0 / y**2)  # least squares on relative error, coefficients ≥ 0


def _fit_and_error(meds: list[dict], name: str, columns: tuple[str, ...]) -> tuple[float, ...]:
    """(coefficients for [1, *columns]..., median %, max %) of `name` over `meds`."""
    x = np.array([[1.0, *(m[c] for c in columns)] for m in meds])
    y = np.array([m[name] for m in meds])
    coef = _fit(x, y)
    pred = x @ np.array(coef)
    keyed = [{"config": f"{m['config']}/{m['mode']}", name: m[name]} for m in meds]
    med, worst = per_config_error(keyed, name, pred)
    return (*coef, med, worst)


# The scheduler's per-step costs as predictor/overhead.py charges them: a + b·num_reqs + c·num_tokens +
# d·prefill_chunks, one formula over decode and extend steps (the simulator's step knows no more). Left out:
# the running requests an extend step leaves waiting (`held`: PrefillAdder walks them), which the simulator's
# step does not carry; the error below includes what that costs.
STEP_COLUMNS = ("num_reqs", "num_tokens", "chunks")


def _with_chunks(meds: list[dict]) -> list[dict]:
    return [{**m, "chunks": m["num_reqs"] - m["decoding"]} for m in meds]


def fit_steps(rows: list[dict]) -> dict[str, tuple[float, ...]]:
    """component -> (a, per request, per token, per prefill chunk µs at the reference speed, median %, max %),
    over every (configuration, step kind)'s block medians, for the scheduler's calls (`recv` included: it runs
    once per iteration, and its per-request part lands on the step that takes the new request)."""
    meds = _with_chunks(block_medians(rows))
    return {name: _fit_and_error(meds, name, STEP_COLUMNS) for name in SCHEDULER}


def fit_frontend(rows: list[dict]) -> dict[str, tuple[float, float, float, float]]:
    """The other processes' per-step work: component -> (a, per streamed request µs, median %, max %) over the
    steps that stream something. `tokenizer_manager` is `tm_output` + `tm_stream`: the split between the
    tokenizer manager's output handler and its request tasks depends on where the asyncio loop's turn is cut
    (some blocks give one a negative share), their sum does not."""
    meds = [m for m in block_medians(rows) if m["streamed"] > 0]
    meds = [{**m, "tokenizer_manager": m["tm_output"] + m["tm_stream"]} for m in meds]
    return {name: _fit_and_error(meds, name, ("streamed",)) for name in ("detokenize", "tokenizer_manager")}


def fit_tm_add(rows: list[dict]) -> tuple[float, ...]:
    """(per request, per prompt token µs, median %, max %) of the tokenizer manager's `generate_request` up to
    sending a request whose token ids are given (no tokenization: the server runs hold that)."""
    meds = [m for m in block_medians(rows) if m["new_reqs"] > 0]
    x = np.array([[m["new_reqs"], m["new_tokens"]] for m in meds])
    y = np.array([m["tm_add"] for m in meds])
    coef = _fit(x, y)
    med, worst = per_config_error(
        [{"config": m["config"], "y": m["tm_add"]} for m in meds], "y", x @ np.array(coef)
    )
    return (*coef, med, worst)


def server_runs(rows: list[dict], idle: dict | None = None) -> list[dict]:
    """One record per server process per run: CPU per completed request, the idle rate over the run
    subtracted, at the reference speed."""
    runs = []
    for r in rows:
        cpu = float(r["cpu_s"]) - (float((idle or {}).get(r["role"], 0.0)) * float(r["bench_s"]))
        n = int(r["completed"])
        runs.append(
            {
                **r,
                "cpu_per_req_us": 1e6 * cpu / n * speed_factor(r),
                "in": int(r["input_tokens"]) / n,
                "out": int(r["output_tokens"]) / n,
            }
        )
    return runs


def fit_server(rows: list[dict], idle: dict | None, role: str) -> dict[str, tuple[float, ...]]:
    """endpoint -> (per request, per prompt token, per output token µs, median %, max %) of one server process
    (`role`), per streamed request of SGLang's bench_serving, at the reference speed."""
    runs = [r for r in server_runs(rows, idle) if r["role"] == role]
    out = {}
    for backend, endpoint in BACKEND_ENDPOINT.items():
        rs = [r for r in runs if r["backend"] == backend]
        if not rs:
            continue
        x = np.array([[1.0, r["in"], r["out"]] for r in rs])
        y = np.array([r["cpu_per_req_us"] for r in rs])
        coef = _fit(x, y)
        meds = [{"config": f"{r['input_len']}/{r['output_len']}", "y": r["cpu_per_req_us"]} for r in rs]
        med, worst = per_config_error(meds, "y", x @ np.array(coef))
        out[endpoint] = (*coef, med, worst)
    return out


def predicted_scheduler_us(r: dict, steps: dict) -> float:
    """What the per-step fits predict for the scheduler's timed work over one server run (its step counters:
    without mixed chunking an extend step holds only prefill chunks, a decode step only decodes)."""
    total = 0.0
    n_dec, n_ext = int(r["decode_steps"]), int(r["extend_steps"])
    dec, ext, ext_tok = int(r["decode_reqs"]), int(r["extend_reqs"]), int(r["extend_tokens"])
    for a, b, c, d, *_ in steps.values():
        total += a * (n_dec + n_ext) + b * (dec + ext) + c * (dec + ext_tok) + d * ext
    return total


def fit_scheduler_rest(rows: list[dict], steps: dict) -> tuple[float, float, float, float]:
    """(per step µs, per request µs, median %, max %) of the scheduler process's CPU that the timed calls
    leave out, from the server runs: its measured CPU less what the per-step fits predict for the same steps
    and requests. What is left is the process's own machinery: the loop's iterations that find no batch while
    the GPU is busy, its periodic logging of batches (`Prefill batch`/`Decode batch` lines, on by default),
    the watchdog and load-publishing threads, ZMQ's I/O thread, and this host's stand-in for the GPU (a few µs
    per step)."""
    xs, ys, names = [], [], []
    for r in rows:
        if r["role"] != "scheduler":
            continue
        measured = float(r["cpu_s"]) * 1e6 * speed_factor(r)
        xs.append([int(r["decode_steps"]) + int(r["extend_steps"]), int(r["completed"])])
        ys.append(measured - predicted_scheduler_us(r, steps))
        names.append(f"{r['backend']} {r['input_len']}/{r['output_len']}")
    x, y = np.array(xs, dtype=float), np.array(ys)
    coef = nnls(x, y, 1.0 / np.maximum(np.abs(y), 1.0) ** 2)
    med, worst = per_config_error(
        [{"config": k, "y": v} for k, v in zip(names, y, strict=True)], "y", x @ np.array(coef)
    )
    return (*coef, med, worst)
