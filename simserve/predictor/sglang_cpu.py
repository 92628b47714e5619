"""SGLang 0.5.23's CPU time per engine step, measured by running SGLang's own code on a CPU host.

What an SGLang serving step spends on the CPU besides its kernels, per component, with the process it runs in
(docs/step-anatomy.md § SGLang has the figures, the commands and the host):

- Scheduler process (`sglang::scheduler`, one thread at TP 1): `recv_requests` + `process_input_requests`
  (`recv`), `get_next_batch_to_run` (`schedule`: PrefillAdder admission, `ScheduleBatch.prepare_for_extend` or
  `update_running_batch` + `prepare_for_decode`), `run_batch` without the model (`launch`: the batch's copy,
  the worker batch) and `process_batch_result` (`result`: token bookkeeping, finish checks, radix-cache
  updates, `stream_output`), timed in tools/sglang_cpu_steps.py; what those calls leave out of the process
  (its ZMQ and logging, idle passes of its loop) is SCHEDULER_REST, from the real server's process CPU
  (tools/sglang_cpu_server.py).
- The GPU worker's CPU (`ForwardBatch.init_new`, attention metadata, CUDA-graph replay, sampling) also runs in
  the scheduler process: not measured here (it needs a GPU); Vidur's stand-ins, as for vLLM's model runner.
- Detokenizer process and the tokenizer manager (the HTTP server's process): per step, the step's streamed
  requests' incremental detokenization and their chunks (FRONTEND). Other processes: they never delay the
  engine's step (see `components`).

Each per-step scheduler component is `a + b·num_reqs + c·num_tokens + d·prefill_chunks` µs of CPU on the
measuring host, one formula over decode and extend steps, fitted by non-negative least squares on relative
error (simserve/predictor/sglang_cpu_fit.py) to the per-block medians in
profiles/engine/sglang-0.5.23/steps.csv, each block brought to engine_cpu.MEASURING_HOST's speed by the
reference workload run around it, so one `host_speed` (engine_cpu.SERVING_HOST_SPEED) serves both engines. Its
measured error (median and largest
|relative error| over the configurations) is stored beside it.
"""

from __future__ import annotations

from dataclasses import dataclass

from simserve.predictor.engine_cpu import SERVING_HOST_SPEED, _check_speed

RELEASE = "SGLang 0.5.23"
DATA = "engine/sglang-0.5.23"  # under the shipped profiles (simserve/shipped.py)


@dataclass(frozen=True)
class StepCost:
    """`a + b·num_reqs + c·num_tokens + d·prefill_chunks` µs of CPU per step on the measuring host."""

    source: str  # the SGLang 0.5.23 function timed
    a_us: float
    per_req_us: float
    per_token_us: float
    per_chunk_us: float
    error_pct: tuple[float, float]  # median and largest |relative error| over the measured configurations

    def us(self, num_reqs: int, num_tokens: int, prefill_chunks: int = 0) -> float:
        return (
            self.a_us
            + self.per_req_us * num_reqs
            + self.per_token_us * num_tokens
            + self.per_chunk_us * prefill_chunks
        )


# --- fitted constants: `python tools/sglang_cpu_fit.py profiles/engine/sglang-0.5.23` prints them ---
STEP = {
    "recv": StepCost(
        "Scheduler.recv_requests + process_input_requests",
        114.123,
        0.0174328,
        0.017272,
        87.4489,
        (15.854, 150.284),
    ),
    "schedule": StepCost(
        "Scheduler.get_next_batch_to_run", 382.657, 2.94915, 0.0629978, 146.579, (26.9477, 95.9505)
    ),
    "launch": StepCost(
        "Scheduler.run_batch (model stubbed) + the batch copy",
        345.261,
        0.130461,
        0.00276461,
        7.15388,
        (7.79945, 45.2188),
    ),
    "result": StepCost(
        "Scheduler.process_batch_result (stream_output included)",
        251.266,
        18.3067,
        0.0458192,
        160.41,
        (12.4471, 94.0747),
    ),
}
# per streamed request of the step: a + b·streamed, c = d = 0
FRONTEND = {
    "detokenizer": StepCost(
        "DetokenizerManager.handle_batch_token_id_out (+ recv, send)",
        271.977,
        17.7485,
        0.0,
        0.0,
        (5.53284, 42.2245),
    ),
    "tokenizer_manager": StepCost(
        "TokenizerManager._handle_batch_output + the request tasks' turn",
        535.267,
        17.1518,
        0.0,
        0.0,
        (13.8162, 90.4952),
    ),
}
# --- end of the fitted block ---

SCHEDULER = ("recv", "schedule", "launch", "result")
STAGE = {"recv": "first", "schedule": "first", "launch": "first", "result": "last"}


def scheduler_step_us(
    num_reqs: int, num_tokens: int, prefill_chunks: int = 0, host_speed: float = 1.0
) -> float:
    """The scheduler's timed CPU µs for one step (every component of SCHEDULER)."""
    _check_speed(host_speed)
    return sum(STEP[c].us(num_reqs, num_tokens, prefill_chunks) for c in SCHEDULER) / host_speed


def frontend_step_us(process: str, streamed: int, host_speed: float = 1.0) -> float:
    """The detokenizer's or the tokenizer manager's CPU µs for one step that streams `streamed` requests."""
    _check_speed(host_speed)
    return FRONTEND[process].us(streamed, 0) / host_speed


def components(host_speed: float = SERVING_HOST_SPEED) -> tuple:
    """SGLang 0.5.23's per-step engine CPU as predictor/overhead.py Components (ms at `host_speed`), for
    `--engine sglang`. Measured (STEP, divided by host_speed):
      - recv, schedule, launch (first stage) and result (last stage): with the overlap scheduler
        (`Scheduler.event_loop_overlap`, managers/scheduler.py) step k+1 is received, scheduled and launched,
        and step k's result processed, while the GPU runs step k: overlap. With `--disable-overlap-schedule`
        (`event_loop_normal`) the loop runs them between GPU steps: serial.
    Not charged: the detokenizer and the tokenizer manager (FRONTEND). They are other processes, each on its
    own core, so they delay the step only if one's per-step CPU exceeds the step; in every measured
    configuration each is below the scheduler's own (tests/test_sglang_cpu.py), so the scheduler's is the
    binding one and leaving them out is exact under the overlap model (adding them as "overlap" would sum
    three processes' CPU on one core). Not measured: the GPU worker's CPU and sampling. Vidur's Sarathi-Serve
    prepare_inputs (overlap with the overlap scheduler, serial without) and sampler (the GPU stream after the
    forward pass with overlap, serial without) stand in, unscaled and flagged, as engine_cpu.components
    charges them for vLLM."""
    from simserve.predictor.overhead import MODEL_RUNNER_STAND_INS, Component

    _check_speed(host_speed)
    k = 1e-3 / host_speed  # measured µs -> ms at the serving host

    def measured(name: str) -> Component:
        c = STEP[name]
        return Component(
            c.a_us * k,
            c.per_req_us * k,
            c.per_token_us * k,
            stage=STAGE[name],
            role_async="overlap",
            d_ms=c.per_chunk_us * k,
            role_sync="serial",
        )

    return (
        *((name, measured(name)) for name in SCHEDULER),
        *MODEL_RUNNER_STAND_INS,
    )
