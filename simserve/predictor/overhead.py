"""The per-iteration CPU overhead of the serving engine, as a function of the number of requests in the batch.

Every iteration the engine's driver process schedules the batch, prepares the model inputs (token ids,
positions, block tables), and after the forward pass samples the next tokens and processes the outputs
(detokenisation, stop checks, bookkeeping). Each step does a fixed amount of work plus work per request, so
each is modelled as `a + b · batch_size` milliseconds.

Calibration: Vidur's measured overheads of the Sarathi-Serve engine on A100 (CodeLlama-34B, TP2, batch
8..128; `reference/vidur/profiling/legacy/a100/cpu_overheads.csv`, MIT), `*_median` columns, fitted by least
squares on relative error (weights 1/y). Measured error of these constants against that file (mean / max
absolute percentage error over its 13 rows): schedule 1.6 / 3.7 %, prepare inputs 5.5 / 15.9 %, sampler
1.8 / 4.3 %, process outputs 3.8 / 9.1 %, their sum 2.4 / 5.5 %; `tests/test_predictor_overhead.py` recomputes them.

`ray_comm_time_mean` is left out by default. In that file it is not a measured operation but a residual:
wall time per step minus the five timed operations (schedule, prepare inputs, model execution, sampler,
process outputs), so it lumps the driver → worker Ray RPCs of Sarathi's engine together with any untimed Python
work and garbage collection, and it exists only as a mean (skewed by prefill steps). It is also specific to
a Ray-actor engine architecture; engines that run the TP workers as plain processes with shared-memory broadcast
do not pay it. It is 2.5–6.5 ms per iteration, comparable to a whole decode step of a 7B model, so guessing it
in silently would move every latency: enable it with `CpuOverhead(include_ray_comm=True)` to model that engine
(a + b·batch fitted the same way: 2.30 ms + 0.0325 ms per request, 1.7 % mean / 5.2 % max error).

Async scheduling (vLLM V1's `--async-scheduling`, on by default in 0.33.0 without pipeline parallelism): the
engine core schedules step n+1 and prepares its inputs while step n runs on the GPU, and processes step n's
outputs while step n+1 runs (`EngineCore.step_with_batch_queue`, vllm/v1/engine/core.py; `AsyncScheduler`,
vllm/v1/core/sched/async_scheduler.py). Schedule, prepare inputs and process outputs then leave the iteration's
critical path; the sampler, GPU work, stays on it. `CpuOverhead(async_scheduling=True)` charges only the
sampler. This assumes the hidden CPU work fits in the GPU step it overlaps (at 256 requests it is about 1.1 ms
of schedule and inputs and 7.6 ms of output processing, against 20-60 ms for a 7B model's decode step on an A100).

The sampler's time includes its GPU work over the vocabulary, and the constants come from one model at TP2:
they are an approximation for other models and TP degrees (documented in docs/predictor.md).
"""

from __future__ import annotations

from dataclasses import dataclass

# (intercept ms, ms per request in the batch), fitted as described above.
SCHEDULE = (0.0197, 0.00269)
PREPARE_INPUTS = (0.1449, 0.00099)
SAMPLER = (0.6045, 0.00317)
PROCESS_OUTPUTS = (0.0928, 0.02941)
RAY_COMM = (2.3048, 0.03253)

COMPONENTS = {
    "schedule": SCHEDULE,
    "prepare_inputs": PREPARE_INPUTS,
    "sampler": SAMPLER,
    "process_outputs": PROCESS_OUTPUTS,
}


@dataclass(frozen=True)
class CpuOverhead:
    """Per-iteration CPU time, charged to pipeline stages.

    Under PP the driver schedules and prepares inputs before stage 0 can start, so those delay stage 0's
    micro-batch; sampling needs the last stage's logits and output processing follows it, so those delay the
    last stage (and with it the token's emission). With PP 1 everything lands on the one stage. The optional Ray
    communication is charged with the inputs' hand-off, on stage 0.
    """

    include_ray_comm: bool = False
    scale: float = 1.0  # a faster or slower host CPU than the calibration machine
    async_scheduling: bool = False  # vLLM's async scheduling: only the sampler stays on the critical path

    def __repr__(self) -> str:  # NOTE: as before the async flag existed while it is off (timer cache keys)
        flag = ", async_scheduling=True" if self.async_scheduling else ""
        return f"CpuOverhead(include_ray_comm={self.include_ray_comm!r}, scale={self.scale!r}{flag})"

    def ms(self, component: str, batch_size: int) -> float:
        a, b = RAY_COMM if component == "ray_comm" else COMPONENTS[component]
        return self.scale * (a + b * batch_size)

    def total_ms(self, batch_size: int) -> float:
        return sum(self.ms(c, batch_size) for c in self.components())

    def components(self) -> tuple[str, ...]:
        """The components on the iteration's critical path."""
        if self.async_scheduling:
            return ("sampler",)
        return (*COMPONENTS, "ray_comm") if self.include_ray_comm else tuple(COMPONENTS)

    def stage_components(self, stage: int, num_stages: int) -> tuple[str, ...]:
        names: list[str] = []
        if stage == 0 and not self.async_scheduling:
            names += ["schedule", "prepare_inputs"] + (["ray_comm"] if self.include_ray_comm else [])
        if stage == num_stages - 1:
            names += ["sampler"] if self.async_scheduling else ["sampler", "process_outputs"]
        return tuple(names)

    def stage_coefficients(self, stage: int, num_stages: int) -> tuple[float, float]:
        """(a, b) in seconds such that stage `stage` is charged a + b·batch_size per iteration."""
        parts = [
            RAY_COMM if c == "ray_comm" else COMPONENTS[c] for c in self.stage_components(stage, num_stages)
        ]
        a = sum(p[0] for p in parts) * self.scale * 1e-3
        b = sum(p[1] for p in parts) * self.scale * 1e-3
        return a, b
