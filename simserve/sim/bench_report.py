"""A finished run reported as `vllm bench serve` reports one, so the two can be read side by side.

The metrics and their definitions are vLLM 0.33.0's (`vllm/benchmarks/serve.py`, `calculate_metrics` and the
printout in `benchmark`): the benchmark clock starts before the first request is sent (simulated t = 0) and
stops when the last one finishes; latencies are measured from when the client sends a request (after
`--max-concurrency`'s semaphore: a closed-loop request's arrival time here); TPOT = (E2EL − TTFT) / (output −
1) per request with more than one output token; ITL is every gap between consecutive streamed tokens (one
token a chunk). Percentiles interpolate linearly as `np.percentile` does (simserve.numerics). Two differences:
the ITL median and P99 come from the run's TBT histogram (within 0.1%; the mean is exact), and requests
simserve ignored as too long count as failed (vLLM's server refuses them). The front end's latency
(sim/frontend.py, `cfg.frontend_s`) is added to TTFT and E2EL and to the benchmark's end, as a client sees
them. With the API-server model (sim/api_server.py) every time is the client's: sent, each token as the API
server streamed it (ITL from the client's own gap histogram), the last one; the benchmark ends when the last
answer is out.
"""

from __future__ import annotations

import math

import numpy as np

from simserve import numerics
from simserve.sim.cluster import RawRun
from simserve.sim.request import DONE, IGNORED

METRICS = (  # attribute, name, vLLM's header
    ("ttft", "TTFT", "Time to First Token"),
    ("tpot", "TPOT", "Time per Output Token (excl. 1st token)"),
    ("itl", "ITL", "Inter-token Latency"),
    ("e2el", "E2EL", "End-to-end Latency"),
)


def _mean(x: np.ndarray) -> float:
    return math.fsum(x.tolist()) / len(x) if len(x) else 0.0  # vLLM: np.mean(values or 0)


def _stats(x: np.ndarray) -> tuple[float, float, float]:
    """(mean, median, P99) in ms; 0 for no values, as vLLM's `values or 0`."""
    if not len(x):
        return 0.0, 0.0, 0.0
    median, p99 = numerics.percentiles(x, (50, 99))
    return _mean(x) * 1000, median * 1000, p99 * 1000


def bench_metrics(run: RawRun, qps: float) -> dict:
    """The numbers `vllm bench serve` prints, from a finished run (keys as in its result JSON)."""
    r = run.reqs
    done = r.status == DONE
    sent, first, end = r.arrived[done], r.first_token[done], r.completed[done]
    out, prompt = r.output[done], r.prompt[done]
    front = run.cfg.frontend_s
    last, hist = float(run.end_time), run.tbt
    if run.api is not None:  # the client's clock (api_server.py)
        api = run.api
        sent, first, end = api.sent[done], api.first[done], api.done[done]
        last, hist = max(last, float(np.nanmax(api.done, initial=last))), api.itl
    duration = max(last + front, 1e-12)  # from t = 0, when vLLM's benchmark clock starts
    many = out > 1
    tpot = (end[many] - first[many]) / (out[many] - 1)
    gaps = int((out[many] - 1).sum())
    itl_mean = math.fsum((end[many] - first[many]).tolist()) / gaps if gaps else 0.0
    itl = (itl_mean * 1000, hist.quantile(0.5) * 1000, hist.quantile(0.99) * 1000) if gaps else (0.0,) * 3
    total_in, total_out = int(prompt.sum()), int(out.sum())
    doc = {
        "completed": int(done.sum()),
        "failed": int((r.status == IGNORED).sum()),
        "unfinished": int(r.n - done.sum() - (r.status == IGNORED).sum()),
        "max_concurrency": run.cfg.max_concurrency,
        "request_rate": qps if math.isfinite(qps) else "inf",
        "duration": duration,
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": float(done.sum()) / duration,
        "output_throughput": total_out / duration,
        "total_token_throughput": (total_in + total_out) / duration,
        "frontend_ms": front * 1000,
    }
    if run.api is not None:
        doc["api_server_count"] = run.api.count
    for key, values in (("ttft", first - sent + front), ("tpot", tpot), ("e2el", end - sent + front)):
        doc[f"mean_{key}_ms"], doc[f"median_{key}_ms"], doc[f"p99_{key}_ms"] = _stats(values)
    doc["mean_itl_ms"], doc["median_itl_ms"], doc["p99_itl_ms"] = itl
    return doc


def format_bench(m: dict) -> str:
    """vLLM's printout, line for line (the lines that apply to a simulation)."""
    line = "{:<40} {:<10}".format
    num = "{:<40} {:<10.2f}".format
    rows = ["{s:{c}^{n}}".format(s=" Serving Benchmark Result (simulated) ", n=50, c="=")]
    rows.append(line("Successful requests:", m["completed"]))
    rows.append(line("Failed requests:", m["failed"]))
    if m["unfinished"]:
        rows.append(line("Unfinished (run stopped):", m["unfinished"]))
    if m["max_concurrency"] is not None:
        rows.append(line("Maximum request concurrency:", m["max_concurrency"]))
    if m["request_rate"] != "inf":
        rows.append(num("Request rate configured (RPS):", m["request_rate"]))
    rows.append(num("Benchmark duration (s):", m["duration"]))
    rows.append(line("Total input tokens:", m["total_input_tokens"]))
    rows.append(line("Total generated tokens:", m["total_output_tokens"]))
    rows.append(num("Request throughput (req/s):", m["request_throughput"]))
    rows.append(num("Output token throughput (tok/s):", m["output_throughput"]))
    rows.append(num("Total token throughput (tok/s):", m["total_token_throughput"]))
    for key, name, header in METRICS:
        rows.append("{s:{c}^{n}}".format(s=header, n=50, c="-"))
        rows.append(num(f"Mean {name} (ms):", m[f"mean_{key}_ms"]))
        rows.append(num(f"Median {name} (ms):", m[f"median_{key}_ms"]))
        rows.append(num(f"P99 {name} (ms):", m[f"p99_{key}_ms"]))
    rows.append("=" * 50)
    return "\n".join(rows)
