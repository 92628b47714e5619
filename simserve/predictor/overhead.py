"""The per-iteration CPU overhead of the serving engine, as a function of the number of requests in the batch.

Every iteration the engine's driver process schedules the batch, prepares the model inputs (token ids,
positions, block tables), and after the forward pass samples the next tokens and processes the outputs
(detokenisation, stop checks, bookkeeping). Each step does a fixed amount of work plus work per request, so
each is modelled as `a + b · batch_size` milliseconds.

Calibration: Vidur's measured overheads of the Sarathi-Serve engine on A100 (CodeLlama-34B, TP2, batch 8..128;
`reference/vidur/profiling/legacy/a100/cpu_overheads.csv`, MIT), `*_median` columns, fitted by least squares
on relative error (weights 1/y). Measured error of these constants against that file (mean / max absolute
percentage error over its 13 rows): schedule 1.6 / 3.7 %, prepare inputs 5.5 / 15.9 %, sampler 1.8 / 4.3 %,
process outputs 3.8 / 9.1 %, their sum 2.4 / 5.5 %; `tests/test_predictor_overhead.py` recomputes them.

`ray_comm_time_mean` is left out by default. In that file it is not a measured operation but a residual: wall
time per step minus the five timed operations (schedule, prepare inputs, model execution, sampler, process
outputs), so it lumps the driver → worker Ray RPCs of Sarathi's engine together with any untimed Python work
and garbage collection, and it exists only as a mean (skewed by prefill steps). It is also specific to a
Ray-actor engine architecture; engines that run the TP workers as plain processes with shared-memory broadcast
do not pay it. It is 2.5–6.5 ms per iteration, comparable to a whole decode step of a 7B model, so guessing it
in silently would move every latency: enable it with `CpuOverhead(include_ray_comm=True)` to model that engine
(a + b·batch fitted the same way: 2.30 ms + 0.0325 ms per request, 1.7 % mean / 5.2 % max error).

Async scheduling (vLLM V1's `--async-scheduling`, on by default in 0.33.0 without pipeline parallelism):
`EngineCore.step_with_batch_queue` (vllm/v1/engine/core.py) keeps a batch queue of two. Each pass of its loop
schedules step n+1, prepares its inputs and launches its kernels and its sampler (`execute_model` and
`sample_tokens` with `non_block=True`), and only then waits for step n's sampled tokens and processes them
(`update_from_output`). Step n+1's input ids come from step n's sampled tokens on the GPU (`AsyncScheduler`,
vllm/v1/core/sched/async_scheduler.py; `GPUModelRunner._prepare_input_ids`), so nothing in that loop waits for
the GPU before it launches. In steady state the GPU is idle only when the CPU's pass is longer than the GPU's
step: a step takes max(GPU work, CPU work that overlaps it) + CPU work that cannot overlap
(`predictor/step.py`). At TP 1 the whole pass is one thread (`UniProcExecutor`: schedule, inputs, launches and
output processing add up); at TP > 1 the workers prepare inputs and launch in their own processes, and the sum
is an upper bound. Without async scheduling (`EngineCore.step`) the engine schedules, prepares, launches,
waits for the GPU, then processes: only the kernel launches overlap the GPU.

Each component below says what it is under async scheduling (`Component.role_async`): "overlap" (schedule,
prepare inputs, process outputs), "gpu" (the sampler: its measured time is mostly its GPU work over the
vocabulary, queued behind the forward pass), or "serial". Without async scheduling every one of Vidur's
components is serial, as it was before the overlap model existed, so those results are unchanged (`role_sync`
below).

Every component is `a + b·num_reqs + c·num_tokens + d·num_prefill_chunks` milliseconds. The defaults are
Vidur's 2024 constants above (c = d = 0: that file has no token-count column); `CpuOverhead(components=...)`
takes another set: vLLM 0.33.0's own, measured (predictor/engine_cpu.py `components`), for `--engine vllm`. A
component also says what it is without async scheduling (`role_sync`): "serial" for Vidur's (the engine did it
all in one thread); vLLM V1's EngineCore receives requests and sends outputs on their own threads, which run
while the busy loop waits for the GPU even in the synchronous loop, so those are "overlap" there too.

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

ROLES = ("overlap", "gpu", "serial")


@dataclass(frozen=True)
class Component:
    """One piece of a step's engine CPU work: a + b·num_reqs + c·num_tokens + d·num_prefill_chunks ms, charged
    on the first stage (before the forward pass) or the last (after it), and what it is with async scheduling
    (`role_async`) and without (`role_sync`) (ROLES)."""

    a_ms: float
    b_ms: float = 0.0  # per request in the batch
    c_ms: float = 0.0  # per token in the batch
    stage: str = "first"  # first | last
    role_async: str = "serial"
    d_ms: float = 0.0  # per prefill chunk in the batch (a new request's admission: engine_cpu.components)
    role_sync: str = "serial"

    def __post_init__(self):
        if self.stage not in ("first", "last") or self.role_async not in ROLES or self.role_sync not in ROLES:
            raise ValueError(
                f"bad component: stage {self.stage!r}, roles {self.role_async!r} / {self.role_sync!r}"
            )


VIDUR = (
    ("schedule", Component(*SCHEDULE, stage="first", role_async="overlap")),
    ("prepare_inputs", Component(*PREPARE_INPUTS, stage="first", role_async="overlap")),
    ("sampler", Component(*SAMPLER, stage="last", role_async="gpu")),
    ("process_outputs", Component(*PROCESS_OUTPUTS, stage="last", role_async="overlap")),
)
RAY = Component(*RAY_COMM, stage="first", role_async="serial")  # the driver → worker RPC: never hidden
# The model runner's CPU where no engine's was measured (it needs a GPU): Vidur's prepare_inputs and sampler,
# serial in a synchronous loop; engine_cpu.components (vLLM) and sglang_cpu.components (SGLang) end with
# these.
MODEL_RUNNER_STAND_INS = (
    ("prepare_inputs", Component(*PREPARE_INPUTS, stage="first", role_async="overlap", role_sync="serial")),
    ("sampler", Component(*SAMPLER, stage="last", role_async="gpu", role_sync="serial")),
)
COMPONENTS = {name: (c.a_ms, c.b_ms) for name, c in VIDUR}  # the fitted (a, b) pairs, by name


@dataclass(frozen=True)
class Coefficients:
    """Seconds charged to one stage per step, each `a + b·num_reqs + c·num_tokens`, by role: `gpu` runs on the
    GPU's stream after the kernels, `overlap` runs on the CPU beside them, `serial` adds to the step; and per
    prefill chunk in the step, `prefill` = (gpu, overlap, serial) seconds."""

    gpu: tuple[float, float, float] = (0.0, 0.0, 0.0)
    overlap: tuple[float, float, float] = (0.0, 0.0, 0.0)
    serial: tuple[float, float, float] = (0.0, 0.0, 0.0)
    prefill: tuple[float, float, float] = (0.0, 0.0, 0.0)


@dataclass(frozen=True)
class CpuOverhead:
    """Per-iteration CPU time, charged to pipeline stages.

    Under PP the driver schedules and prepares inputs before stage 0 can start, so those delay stage 0's
    micro-batch; sampling needs the last stage's logits and output processing follows it, so those delay the
    last stage (and with it the token's emission). With PP 1 everything lands on the one stage. The optional
    Ray communication is charged with the inputs' hand-off, on stage 0.
    """

    include_ray_comm: bool = False
    scale: float = 1.0  # a faster or slower host CPU than the calibration machine
    async_scheduling: bool = False  # vLLM's async scheduling: the overlap model of the module docstring
    components: tuple[tuple[str, Component], ...] = VIDUR

    def __repr__(self) -> str:  # NOTE: as before the async flag existed while it is off (timer cache keys)
        flag = ", async_scheduling=True" if self.async_scheduling else ""
        own = "" if self.components == VIDUR else f", components={self.components!r}"
        return f"CpuOverhead(include_ray_comm={self.include_ray_comm!r}, scale={self.scale!r}{flag}{own})"

    def _all(self) -> dict[str, Component]:
        out = dict(self.components)
        if self.include_ray_comm:
            out["ray_comm"] = RAY
        return out

    def role(self, component: str) -> str:
        c = self._all()[component]
        return c.role_async if self.async_scheduling else c.role_sync

    def ms(self, component: str, batch_size: int, num_tokens: int = 0, num_prefills: int = 0) -> float:
        c = RAY if component == "ray_comm" else dict(self.components)[component]
        return self.scale * (c.a_ms + c.b_ms * batch_size + c.c_ms * num_tokens + c.d_ms * num_prefills)

    def total_ms(self, batch_size: int, num_tokens: int = 0, num_prefills: int = 0) -> float:
        """Every component's time, hidden or not (what the engine's CPU spends per step)."""
        return sum(self.ms(c, batch_size, num_tokens, num_prefills) for c in self._all())

    def components_of(self, role: str) -> tuple[str, ...]:
        return tuple(name for name in self._all() if self.role(name) == role)

    def stage_components(self, stage: int, num_stages: int) -> tuple[str, ...]:
        """The components charged to `stage`, in the order they are summed (first-stage ones, then last)."""
        comps = self._all()
        first = [n for n, c in comps.items() if c.stage == "first" and n != "ray_comm"]
        first += ["ray_comm"] if "ray_comm" in comps else []
        last = [n for n, c in comps.items() if c.stage == "last"]
        return tuple((first if stage == 0 else []) + (last if stage == num_stages - 1 else []))

    def stage_coefficients(self, stage: int, num_stages: int) -> Coefficients:
        """The stage's per-step charges in seconds, by role (see Coefficients)."""
        comps = self._all()
        by_role: dict[str, list[Component]] = {role: [] for role in ROLES}
        for name in self.stage_components(stage, num_stages):
            by_role[self.role(name)].append(comps[name])
        # NOTE: Python's sum from 0 in stage_components' order, then × scale × 1e-3, as before roles existed:
        # the serial coefficients keep their last bits (golden files)
        per_step = {
            role: tuple(
                sum(getattr(c, f) for c in parts) * self.scale * 1e-3 for f in ("a_ms", "b_ms", "c_ms")
            )
            for role, parts in by_role.items()
        }
        # NOTE: (gpu, overlap, serial), the order the timer and the core read it in, not ROLES' order
        prefill = tuple(
            sum(c.d_ms for c in by_role[role]) * self.scale * 1e-3 for role in ("gpu", "overlap", "serial")
        )
        return Coefficients(**per_step, prefill=prefill)
