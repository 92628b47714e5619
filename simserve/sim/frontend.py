"""The serving front end: what a client's latencies include beyond the engine's own (HTTP, request parsing and
tokenization on the way in; detokenization and the streamed chunk on the way out).

One calibratable constant, `--frontend-ms`, added to every request's TTFT and end-to-end latency as the client
sees them (sim/metrics.py, sim/bench_report.py); with a closed-loop client it also holds the request's slot
that much longer (sim/cluster.py: the next request reaches the engine that long after the engine finished the
previous one). A constant delay per streamed token shifts every token alike, so TBT / ITL / TPOT do not change;
what the front end cannot keep up with at very high token rates (one API-server process) is not modelled.

Default: 10.2 ms, vLLM's front end measured against its own engine. vllm-project/vllm#54628 ran `vllm bench
serve` (the `openai` completions backend, random 512-in / 128-out, concurrency 8) against `vllm serve` and
scraped the server's own `vllm:time_to_first_token_seconds` around each run: the client's mean TTFT was 8.4 ms
and 12.0 ms above the server's in two rounds (10.5–12.2 ms with the chat and responses backends); 10.2 ms is the
mean of the two completions rounds. The server's TTFT starts when the engine receives the request, so the
difference is the front end itself, not a fit to end-to-end results. That machine was an RTX 4070 laptop under
WSL2 with a 0.5B model: a server CPU may be faster, a chat template or a longer prompt slower; measure yours the
same way and pass --frontend-ms. `--paper-setup` runs without it (the paper's numbers are engine-side).
"""

from __future__ import annotations

import math

from simserve.errors import SimserveError

DEFAULT_FRONTEND_MS = 10.2


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
