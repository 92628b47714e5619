"""The serving front end: what a client's latencies include beyond the engine's own (HTTP, request parsing and
tokenization on the way in; detokenization and the streamed chunk on the way out).

Three ways to run it (`simserve run --frontend`):
  - `server` (`run`'s default, except SGLang and disaggregated runs): the API server as a server
    (sim/api_server.py): `--api-server-count` processes, each a FIFO queue of CPU work, vLLM 0.33.0's measured
    CPU per request, prompt token and streamed token (`api_server_cpu`, scaled by `--host-speed`); it delays
    what the engine receives and what clients see, and caps throughput when requests are short.
    `--frontend-ms` is then the rest: network, HTTP transport and the client, added to TTFT and end-to-end as
    below.
  - `constant`: only `--frontend-ms`, added to every request's TTFT and end-to-end latency as the client sees
    them (sim/metrics.py, sim/bench_report.py); with a closed-loop client it also holds the request's slot
    that much longer (sim/cluster.py: the next request reaches the engine that long after the engine finished
    the previous one). A constant delay per streamed token shifts every token alike, so TBT / ITL / TPOT do
    not change. (This was `run`'s default before the server model.)
  - `off`: engine-side latencies only (`--paper-setup`; `sweep` and `plan` unless given `--frontend-ms`).

Default: 10.2 ms, vLLM's front end measured against its own engine. vllm-project/vllm#54628 ran `vllm bench
serve` (the `openai` completions backend, random 512-in / 128-out, concurrency 8) against `vllm serve` and
scraped the server's own `vllm:time_to_first_token_seconds` around each run: the client's mean TTFT was 8.4 ms
and 12.0 ms above the server's in two rounds (10.5–12.2 ms with the chat and responses backends); 10.2 ms is
the mean of the two completions rounds. The server's TTFT starts when the engine receives the request, so the
difference is the front end itself, not a fit to end-to-end results. That machine was an RTX 4070 laptop under
WSL2 with a 0.5B model: a server CPU may be faster, a chat template or a longer prompt slower; measure yours
the same way and pass --frontend-ms. `--paper-setup` runs without it (the paper's numbers are engine-side).

What the 10.2 ms covers, beside the server model: vLLM's server-side TTFT starts when `render_cmpl_async`
starts (vllm/renderers/base.py, `arrival_time = time.time()`) and ends when the output handler receives the
step's outputs (vllm/v1/metrics/stats.py, `iteration_timestamp`), so client − server holds the network both
ways, the HTTP parsing and validation before rendering, the first token's output processing and SSE write, and
the client's own parsing. The server model counts the API server's CPU among these too (HTTP parsing is in the
measured per-request cost, the first chunk in the per-token cost): ≈ 0.1 ms per token plus the pre-render
share of the request cost, below the 8.4–12.0 ms spread of the measurement's own two rounds, on another
machine. It is not subtracted: `--frontend-ms` keeps the measurement as taken, and says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simserve.errors import SimserveError

DEFAULT_FRONTEND_MS = 10.2
FRONTENDS = ("server", "constant", "off")


@dataclass(frozen=True)
class ApiServerCpu:
    """CPU seconds of one API-server process per request (parse, render, tokenize, hand to the engine, close),
    per prompt token (tokenization beyond the fixed part) and per streamed output token (detokenize, SSE
    chunk)."""

    request_s: float
    prompt_token_s: float
    token_s: float
    source: str


def api_server_cpu(endpoint: str = "completions", host_speed: float | None = None) -> ApiServerCpu:
    """vLLM 0.33.0's API-server CPU per streamed request, measured by running `vllm serve` under `vllm bench
    serve` here (predictor/engine_cpu.py API_SERVER: /v1/completions or /v1/chat/completions,
    docs/step-anatomy.md § The API server), divided by the serving host's speed (None:
    engine_cpu.SERVING_HOST_SPEED)."""
    from simserve.predictor import engine_cpu

    if endpoint not in engine_cpu.API_SERVER:
        raise SimserveError(
            f"unknown --api-endpoint {endpoint!r}; choose {' or '.join(engine_cpu.API_SERVER)}"
        )
    speed = engine_cpu.SERVING_HOST_SPEED if host_speed is None else host_speed
    engine_cpu._check_speed(speed)
    c = engine_cpu.API_SERVER[endpoint]
    k = 1e-6 / speed
    return ApiServerCpu(
        c.per_request_us * k,
        c.per_prompt_token_us * k,
        c.per_output_token_us * k,
        f"vLLM 0.33.0 {c.source} (engine_cpu.API_SERVER), host speed {speed:g}",
    )


# The default: completions (what `vllm bench serve` sends with its default backend) at the default host speed.
API_SERVER_CPU = api_server_cpu()


def check_api_server_count(value: int) -> int:
    if value < 1:
        raise SimserveError(
            f"--api-server-count must be at least 1 API-server process, got {value}; "
            "--frontend off for engine-side latencies"
        )
    return value


def check_frontend_ms(value: float) -> float:
    if not (math.isfinite(value) and value >= 0):
        raise SimserveError(f"--frontend-ms must be a non-negative number of milliseconds, got {value}")
    return value


def frontend_line(frontend_ms: float, where: str) -> str:
    """The note `sweep` and `plan` print when their TTFT is the client's (`--frontend-ms`)."""
    return (
        f"TTFT ({where}) includes {frontend_ms:g} ms of serving front end (HTTP, tokenization, streaming; "
        "--frontend-ms); TBT and scheduling delay are engine-side"
    )
