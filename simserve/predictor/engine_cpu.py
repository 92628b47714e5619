"""vLLM 0.33.0's CPU time per engine step and per request, measured by running vLLM's own code on a CPU host.

What a vLLM 0.33.0 serving step spends on the CPU besides its kernels, per component, with the process and
thread it runs in and whether async scheduling hides it behind the GPU step (docs/step-anatomy.md has the
figures, the commands and the host):

- EngineCore process, busy-loop thread: `AsyncScheduler.schedule` and `update_from_output`
  (vllm/v1/core/sched/); input thread: turning each new request into a `Request` (prefix-caching block hashes
  over the prompt) and `add_request`; output thread: msgpack-encoding the step's `EngineCoreOutputs` for the
  front end. The threads share one GIL, so their CPU adds up on one core.
- The model runner (Model Runner V2 in 0.33.0: input preparation as Triton kernels, sampling, the sampled ids'
  copy back) also runs in the EngineCore process at TP 1 — not measured here (it needs a GPU); see
  `MODEL_RUNNER_UNMEASURED`.
- API-server process: per step, decoding the engine's outputs and `OutputProcessor.process_outputs`
  (incremental detokenization, one `RequestOutput` per request); per request, HTTP, parsing, chat template,
  tokenization and the streamed SSE chunks (`API_SERVER`).

Each per-step component is `a + b·num_reqs + c·num_tokens` microseconds of CPU on the measuring host (num_reqs
scheduled in the step, num_tokens scheduled in the step), fitted by non-negative least squares on relative
error (simserve/predictor/nnls.py) to the per-configuration medians in profiles/engine/vllm-0.33.0/steps.csv;
its measured error (median and largest |relative error| over those medians) is stored beside it. What the
timed functions leave out of the EngineCore process (ZMQ, msgpack of requests, queues, wake-ups) is
ENGINE_CORE_REST, from the real server's process CPU. `host_speed` divides every cost: the serving host's
single-thread speed relative to the measuring host, MEASURING_HOST["python_us"] /
tools/engine_cpu_refbench.py's python_us on the serving host; 1.0 means "as measured".

Overlap (vllm/v1/engine/core.py `EngineCore.step_with_batch_queue`, batch queue of 2 with async scheduling):
step k+1 is scheduled and launched before step k's output is processed, so all of the EngineCore's per-step
CPU runs while the GPU works; the GPU waits only when that CPU exceeds the GPU step: period = max(GPU, CPU).
Without async scheduling (`EngineCore.step`) it is serial: period = GPU + CPU. The API server is another
process: it adds latency to each token and caps throughput when it saturates, but never delays the engine's
step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

RELEASE = "vLLM 0.33.0"
DATA = "engine/vllm-0.33.0"  # under the shipped profiles (simserve/shipped.py)


@dataclass(frozen=True)
class StepCost:
    """`a + b·num_reqs + c·num_tokens` µs of CPU per step on the measuring host, and where it runs."""

    process: str  # "engine_core" or "api_server"
    thread: str
    source: str  # the vLLM 0.33.0 function timed
    a_us: float
    per_req_us: float
    per_token_us: float
    error_pct: tuple[float, float]  # median and largest |relative error| over the measured configurations

    def us(self, num_reqs: int, num_tokens: int) -> float:
        return self.a_us + self.per_req_us * num_reqs + self.per_token_us * num_tokens


@dataclass(frozen=True)
class RequestCost:
    """`per_request + per_prompt_token·prompt (+ per_output_token·output)` µs of CPU on the measuring host."""

    process: str
    source: str
    per_request_us: float
    per_prompt_token_us: float
    per_output_token_us: float
    error_pct: tuple[float, float]

    def us(self, prompt_tokens: int, output_tokens: int = 0) -> float:
        return (
            self.per_request_us
            + self.per_prompt_token_us * prompt_tokens
            + self.per_output_token_us * output_tokens
        )


# --- fitted constants: `python tools/engine_cpu_fit.py profiles/engine/vllm-0.33.0` prints them ---
STEP = {
    "schedule": StepCost(
        "engine_core", "busy loop", "AsyncScheduler.schedule", 55.0131, 16.5532, 0.180343, (6.83148, 41.6912)
    ),
    "update": StepCost(
        "engine_core",
        "busy loop",
        "Scheduler.update_from_output",
        30.4859,
        11.2644,
        0.0563911,
        (6.44728, 36.3705),
    ),
    "encode": StepCost(
        "engine_core",
        "output thread",
        "MsgpackEncoder.encode(EngineCoreOutputs)",
        5.33334,
        0.372971,
        0.00149409,
        (11.5343, 58.4272),
    ),
    # its per-token term is the detokenizer's prompt prefill: the first output of a request decodes its whole
    # prompt (FastIncrementalDetokenizer's DecodeStream(ids=prompt), vllm/v1/engine/detokenizer.py), charged
    # per prefill token
    "frontend_output": StepCost(
        "api_server",
        "asyncio loop",
        "MsgpackDecoder.decode + OutputProcessor.process_outputs",
        27.2959,
        14.2134,
        0.912344,
        (5.78588, 26.4794),
    ),
}
ADD_REQUEST = RequestCost(
    "engine_core",
    "Request.from_engine_core_request (sha256 block hashes) + add_request",
    32.3819,
    0.182762,
    0.0,
    (8.10971, 49.6125),
)
# The EngineCore process's CPU beyond the timed functions, from the real server runs (fit_engine_core_rest)
ENGINE_CORE_REST = RequestCost(
    "engine_core",
    "ZMQ + msgpack of requests, busy-loop futures and queues, output hand-off",
    596.099,
    0.0,
    0.0,
    (7.82748, 32.8285),
)
ENGINE_CORE_REST_PER_STEP_US = 365.157
API_SERVER = {
    "completions": RequestCost(
        "api_server", "vllm serve, /v1/completions, streamed", 2785.02, 5.35852, 84.9175, (4.28023, 5.23319)
    ),
    "chat": RequestCost(
        "api_server",
        "vllm serve, /v1/chat/completions, streamed",
        3407.58,
        5.82366,
        102.084,
        (9.12325, 12.4802),
    ),
}
# With two API servers (`--api-server-count 2`, completions, 128-token prompts): all servers' CPU per request
# over one server's, at 2 and at 64 output tokens (server_count_ratio). Requests split evenly between the two;
# each server pays the per-step costs on its half of the engine's outputs, and on this 2-core host they share
# cores.
TWO_API_SERVERS_CPU_RATIO = {"completions 128/2": 1.1542, "completions 128/64": 1.41549}
# The measuring host's speed while the steps were measured: the median of tools/engine_cpu_refbench.py's
# python_us run around every block of steps (every figure above is at this speed; the host ran it in 9.7-27.8
# ms as its neighbours' load came and went). clock_ghz: the same tool's dependent-add chain (refbench.json,
# same shared host).
MEASURING_HOST = {
    "cpu": "Intel Xeon (family 6 model 207: Emerald Rapids), 2 vCPU KVM guest",
    "python": "3.11",
    "python_us": 16123.9,
    "clock_ghz": 2.5584,
}
# --- end of the fitted block ---

ENGINE_CORE_STEP = ("schedule", "update", "encode")
# The model runner's CPU per step is not measured here: Vidur's Sarathi-Serve figures (predictor/overhead.py:
# prepare inputs + sampler, A100, CodeLlama-34B TP2) stand in, flagged as such, until a GPU run replaces them.
MODEL_RUNNER_UNMEASURED = StepCost(
    "engine_core",
    "busy loop",
    "not measured: Vidur's prepare_inputs + sampler (Sarathi-Serve engine, 2024)",
    144.9 + 604.5,
    0.99 + 3.17,
    0.0,
    (math.nan, math.nan),
)


# The serving host's single-thread speed relative to the measuring host when none is given (`--host-speed`),
# from sources, not fitted to any end-to-end result. This host's uncontended floor of
# tools/engine_cpu_refbench.py is 9.7-9.9 ms a round (the least loaded rounds: 9.7 ms beside the step
# measurements, refbench.json's 10.35, 9.86 when the calibration began), with its core at 2.4-2.56 GHz
# (the same tool's dependent-add chain); the medians the figures were measured at (16.1 ms) carry the shared
# host's contention. A DGX H100/H200 host runs Intel Xeon Platinum 8480C (Sapphire Rapids: the same Golden
# Cove-class core as this Emerald Rapids; NVIDIA's DGX H100 user guide: 2.0 GHz base, 3.0 GHz all-core turbo,
# 3.8 GHz max turbo), so at its all-core turbo a round takes about 9.8 x 2.5 / 3.0 = 8.2 ms there: 16.12 / 8.2
# = 1.97, rounded to 2.0 (2.5 at the max turbo, 1.65 at this host's clock without contention). A100 hosts (DGX
# A100: AMD EPYC 7742, Zen 2) and other vendors' boxes are not separated: one factor for every GPU host, with
# that uncertainty (docs/step-anatomy.md § Scaling).
SERVING_HOST_SPEED = 2.0


def _check_speed(host_speed: float) -> None:
    from simserve.errors import SimserveError

    if not (math.isfinite(host_speed) and host_speed > 0):
        raise SimserveError(
            "--host-speed must be a positive number (the serving host's single-thread speed, 1.0 = the "
            f"measuring host), got {host_speed}"
        )


def step_us(component: str, num_reqs: int, num_tokens: int, host_speed: float = 1.0) -> float:
    """CPU µs of one per-step component (a key of STEP) for a step of num_reqs requests and num_tokens
    tokens."""
    _check_speed(host_speed)
    return STEP[component].us(num_reqs, num_tokens) / host_speed


def engine_core_step_us(
    num_reqs: int,
    num_tokens: int,
    new_reqs: int = 0,
    new_prompt_tokens: int = 0,
    host_speed: float = 1.0,
    model_runner: StepCost | None = None,
) -> float:
    """The EngineCore process's CPU µs for one step: schedule, update, encode, the step's new requests (taken
    in by the input thread, and their share of the process's machinery), the per-step machinery, and a model
    runner's if one is given (MODEL_RUNNER_UNMEASURED, or a measured one). All of it shares one GIL: it adds
    up on one core."""
    _check_speed(host_speed)
    total = sum(STEP[c].us(num_reqs, num_tokens) for c in ENGINE_CORE_STEP) + ENGINE_CORE_REST_PER_STEP_US
    total += new_reqs * (ADD_REQUEST.per_request_us + ENGINE_CORE_REST.per_request_us)
    total += new_prompt_tokens * ADD_REQUEST.per_prompt_token_us
    if model_runner is not None:
        total += model_runner.us(num_reqs, num_tokens)
    return total / host_speed


def step_period_us(gpu_us: float, engine_cpu_us: float, async_scheduling: bool) -> float:
    """Time from one step's start to the next's on the GPU: the CPU hides behind the GPU with async scheduling
    (batch queue of 2) and adds to it without."""
    return max(gpu_us, engine_cpu_us) if async_scheduling else gpu_us + engine_cpu_us


def api_server_request_us(
    endpoint: str, prompt_tokens: int, output_tokens: int, host_speed: float = 1.0
) -> float:
    """One API-server process's CPU µs for one streamed request ("completions" or "chat"), from receipt to the
    last chunk: HTTP, parsing, template, tokenization, and per output token the engine output's processing and
    the SSE chunk."""
    from simserve.errors import SimserveError

    if endpoint not in API_SERVER:
        raise SimserveError(f"unknown API endpoint {endpoint!r}; known: {', '.join(API_SERVER)}")
    _check_speed(host_speed)
    return API_SERVER[endpoint].us(prompt_tokens, output_tokens) / host_speed


def api_server_count(requested: int | None = None, data_parallel_size: int = 1) -> int:
    """How many API-server processes `vllm serve` 0.33.0 starts (vllm/entrypoints/cli/serve.py
    `ServeSubcommand.cmd`): `--api-server-count` when given, else the data-parallel size (internal load
    balancing; 1 without DP). Requests are spread over them by the kernel: each binds the same port with
    SO_REUSEPORT (`setup_server(args, reuse_port=num_api_servers > 1)`), which hashes each new connection to
    one listener."""
    from simserve.errors import SimserveError

    if requested is not None and requested < 1:
        raise SimserveError(f"--api-server-count must be at least 1 here, got {requested}")
    return requested if requested is not None else max(1, data_parallel_size)


def components(host_speed: float = SERVING_HOST_SPEED) -> tuple:
    """vLLM 0.33.0's per-step engine CPU as predictor/overhead.py Components (ms at `host_speed`), for
    `--engine vllm`. Measured (STEP, ADD_REQUEST, ENGINE_CORE_REST, divided by host_speed):
      - schedule (busy loop, first stage), update_from_output (busy loop, last stage) and the EngineCore's
        other per-step machinery (ENGINE_CORE_REST_PER_STEP_US, first stage): with async scheduling they
        overlap the GPU (step_with_batch_queue); without it the busy loop runs them between GPU steps: serial;
      - encode (output thread) and admitting new requests (input thread: ZMQ + msgpack decode, Request with
        its sha256 block hashes, add_request; ADD_REQUEST + ENGINE_CORE_REST per request, charged per prefill
        chunk of the step, and per prompt token per token of the step): other threads of the EngineCore, which
        run while the busy loop waits for the GPU in either loop: overlap.
    Not measured (MODEL_RUNNER_UNMEASURED): the model runner's CPU and the sampler. Vidur's Sarathi-Serve
    prepare_inputs (overlap with async scheduling, serial without) and sampler (the GPU stream after the
    forward pass with async scheduling, serial without) stand in, unscaled (measured on a datacenter A100
    host) and flagged as such, as predictor/overhead.py charges them. The sampler term is also the only
    stand-in for the LM head's GEMM, which the kernel tables leave out (simserve.ops: the layers only).

    Charging admission per prefill chunk over-charges a prompt split into k chunks by (k - 1) x 0.31 ms at
    host speed 2, against the seconds its chunks take on the GPU; a prefix-cache hit still counts its
    request."""
    from simserve.predictor.overhead import MODEL_RUNNER_STAND_INS, Component

    _check_speed(host_speed)
    k = 1e-3 / host_speed  # measured µs -> ms at the serving host

    def measured(cost: StepCost, stage: str, sync: str) -> Component:
        return Component(
            cost.a_us * k,
            cost.per_req_us * k,
            cost.per_token_us * k,
            stage=stage,
            role_async="overlap",
            role_sync=sync,
        )

    admit_us = ADD_REQUEST.per_request_us + ENGINE_CORE_REST.per_request_us
    return (
        ("schedule", measured(STEP["schedule"], "first", "serial")),
        (
            "engine_core_rest",
            Component(
                ENGINE_CORE_REST_PER_STEP_US * k, stage="first", role_async="overlap", role_sync="serial"
            ),
        ),
        ("update", measured(STEP["update"], "last", "serial")),
        ("encode", measured(STEP["encode"], "last", "overlap")),
        (
            "admit",
            Component(
                0.0,
                0.0,
                ADD_REQUEST.per_prompt_token_us * k,
                stage="first",
                role_async="overlap",
                d_ms=admit_us * k,
                role_sync="overlap",
            ),
        ),
        *MODEL_RUNNER_STAND_INS,
    )
