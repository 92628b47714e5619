"""Everything one simulation needs, by name, and `run_scenario(scenario, qps)`: the seam the CLI and the
capacity search use. A Scenario is a picklable frozen dataclass; loading the trace, the predictor and the
memory plan is cached per process, so a search that calls `run_scenario` many times pays for them once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from simserve.deployment import Deployment
from simserve.errors import SimserveError
from simserve.sim.autoscale import AutoscaleConfig
from simserve.sim.cluster import RawRun, simulate
from simserve.sim.config import DEFAULT_ROUTER_WEIGHTS, VLLM_V1_TOKENS, SimConfig, check_requests
from simserve.sim.metrics import SimResult, build_result

if TYPE_CHECKING:
    from simserve.sim.replica import BatchTimer

# engine_cpu.API_SERVER's keys: vLLM's /v1/completions, /v1/chat/completions
API_ENDPOINTS = ("completions", "chat")
# The paper's max_seq_len per trace (Sarathi-Serve capacity_search config); other traces get 8192.
MAX_MODEL_LEN = {"sharegpt": 8192, "chat": 8192, "arxiv": 16384, "arxiv_summarization": 16384}


@dataclass(frozen=True)
class Scenario:
    model: str = "mistral-7b"
    gpu: str = "a100"
    tp: int = 1
    pp: int = 1
    node: str | None = None
    network: str | None = None
    trace: str = "sharegpt"  # a shipped trace name or a trace file path
    num_requests: int = 2048
    arrival: str = "poisson"  # poisson | poisson-clipped | gamma | vllm-bench | replay
    cv: float = 1.0  # gamma arrivals' coefficient of variation
    policy: str = "sarathi"
    budget: int | None = None
    max_batch: int | None = None
    num_replicas: int = 1
    router: str = "rr"
    seed: int = 0
    max_model_len: int | None = None  # None: 8192 for sharegpt, 16384 for arxiv
    memory_utilization: float = 0.85
    profiles_root: str | None = None
    time_scale: float = 1.0  # replay arrivals: multiply recorded times by this
    stretch: bool = True
    sched_delay_slo_s: float = (
        2.0  # the overload rule stops a run once its median scheduling delay must exceed this
    )
    # A capacity probe stops at the first sign of overload; a user's `simserve run` runs to the end.
    stop_when_overloaded: bool = True
    cpu_overhead: bool = True  # the engine's per-iteration CPU work (schedule, inputs, sampler, outputs)
    ray_comm: bool = False  # plus the driver → worker Ray round trip of a Ray-actor engine
    stop_tbt: tuple[float, float] | None = None  # SimConfig.stop_tbt: capacity probes stop a sure TBT miss
    # the adaptive policies and vllm-v1 (SimConfig documents them)
    tbt_target_s: float = 0.1
    min_budget: int | None = None
    long_prefill_token_threshold: int = 0
    max_num_partial_prefills: int = 1
    max_long_partial_prefills: int = 1
    # SimConfig.long_prefill_token_threshold_adaptive (vLLM 0.33.0's flag); added after outputs were pinned
    long_prefill_token_threshold_adaptive: bool = field(default=False, metadata={"omit_at_default": True})
    # SimConfig.time_limit_s (the paper's 30-minute trial cap). Added after run outputs and probe caches were
    # pinned: left out of echoes and cache keys while unset (probe.scenario_fields), so those stay as they
    # were.
    time_limit_s: float | None = field(default=None, metadata={"omit_at_default": True})
    # Precision and expert parallelism (simserve/precision.py, Deployment.ep / moe_skew), and whether a max
    # length beyond the model's context limit is allowed (the paper ran its 8k traces on 4k models).
    dtype: str = field(default="bf16", metadata={"omit_at_default": True})
    kv_dtype: str = field(default="bf16", metadata={"omit_at_default": True})
    ep: int = field(default=1, metadata={"omit_at_default": True})
    moe_skew: float = field(default=0.0, metadata={"omit_at_default": True})
    # Attention data parallelism (Deployment.dp): each of the dp ranks is simulated as a replica of its own
    # (requests, scheduler, KV cache), so a run has num_replicas x dp_attention of them.
    dp_attention: int = field(default=1, metadata={"omit_at_default": True})
    all2all_backend: str = field(default="allgather_reducescatter", metadata={"omit_at_default": True})
    allow_long_context: bool = field(default=False, metadata={"omit_at_default": True})
    # the prefix-aware router's scorer weights, queue, KV usage, prefix (SimConfig.router_weights,
    # sim/routers.py)
    router_weights: tuple[float, float, float] = field(
        default=DEFAULT_ROUTER_WEIGHTS, metadata={"omit_at_default": True}
    )
    # sglang (SimConfig documents them; SGLang's flags of these names)
    enable_mixed_chunk: bool = field(default=False, metadata={"omit_at_default": True})
    schedule_policy: str = field(default="fcfs", metadata={"omit_at_default": True})
    schedule_conservativeness: float = field(default=1.0, metadata={"omit_at_default": True})
    page_size: int = field(default=1, metadata={"omit_at_default": True})
    max_prefill_tokens: int = field(default=16384, metadata={"omit_at_default": True})
    ignore_eos: bool = field(default=True, metadata={"omit_at_default": True})
    # `vllm bench serve --max-concurrency N`: a closed-loop client (SimConfig.max_concurrency). None: open
    # loop.
    max_concurrency: int | None = field(default=None, metadata={"omit_at_default": True})
    # vLLM 0.33.0's GPU worker (`--engine vllm`, simserve/vllm_worker.py): its memory profile and, unless
    # enforce_eager, CUDA-graph padding of every batch of at most the largest captured size. vllm-v1 only.
    vllm_worker: bool = field(default=False, metadata={"omit_at_default": True})
    enforce_eager: bool = field(default=False, metadata={"omit_at_default": True})
    # vLLM's --async-scheduling (with vllm_worker): None is the release's default, on unless PP > 1
    async_scheduling: bool | None = field(default=None, metadata={"omit_at_default": True})
    # The step's parts (predictor/step.py): kernel launch gaps by launch mode (vLLM's worker only; None: on
    # with it) and GEMMs at the GPU's sustained rate under its power limit (None: on where the catalog has the
    # rate).
    launch_gaps: bool | None = field(default=None, metadata={"omit_at_default": True})
    sustained_clock: bool | None = field(default=None, metadata={"omit_at_default": True})
    # SGLang's overlap scheduler (`--engine sglang`; off with SGLang's --disable-overlap-schedule): the CPU
    # work of a step hidden behind the GPU's, as vLLM's async scheduling (scheduling_is_async).
    overlap_schedule: bool = field(default=False, metadata={"omit_at_default": True})
    # The front end's latency in ms (sim/frontend.py). 0 here (capacity searches: engine-side); `simserve run`
    # defaults to the published measurement.
    frontend_ms: float = field(default=0.0, metadata={"omit_at_default": True})
    # The API server as a server (sim/api_server.py): vLLM's --api-server-count processes per deployment, each
    # a FIFO queue of CPU work (frontend.api_server_cpu: vLLM 0.33.0's, measured). 0: no API-server model
    # (capacity searches; `run --frontend constant|off`). `frontend_ms` is then the network and client beside
    # it.
    api_server_count: int = field(default=0, metadata={"omit_at_default": True})
    # vllm-v1: automatic prefix caching (SimConfig.prefix_caching); on by default for `--engine vllm` and
    # `run --policy vllm-v1`, as in vLLM V1. Added after outputs were pinned: omitted while off.
    prefix_caching: bool = field(default=False, metadata={"omit_at_default": True})
    # The serving host's single-thread speed relative to the host vLLM 0.33.0's CPU costs were measured on
    # (predictor/engine_cpu.py): divides the engine's measured per-step CPU (`--engine vllm`) and the API
    # server's. None: engine_cpu.SERVING_HOST_SPEED, from the DGX hosts' published clocks.
    host_speed: float | None = field(default=None, metadata={"omit_at_default": True})
    # vllm-v1: SimConfig.reserve_full_isl (vLLM 0.33.0's admission rule; False: vLLM 0.8.2's, for the
    # published runs of that release, benchmarks/published_e2e.py)
    reserve_full_isl: bool = field(default=True, metadata={"omit_at_default": True})
    # vLLM's CPU KV tier, GiB per replica (`--kv-offloading-size`, summed over its GPUs): sim/kv_offload.py
    kv_offload_gb: float = field(default=0.0, metadata={"omit_at_default": True})
    # The API server's endpoint (`vllm bench serve --backend openai|vllm`: completions; `openai-chat`: chat)
    api_endpoint: str = field(default="completions", metadata={"omit_at_default": True})
    # A load curve file (workload/load_curve.py): rate multipliers over time, warping synthetic arrivals or
    # thinning/duplicating replayed ones. None: the process's constant rate.
    load_curve: str | None = field(default=None, metadata={"omit_at_default": True})
    # The autoscaler (`--autoscale MIN:MAX`, sim/autoscale.py): the cluster then has its maximum of replicas,
    # `num_replicas` of them active at the start. None: a fixed count, as before.
    autoscale: AutoscaleConfig | None = field(default=None, metadata={"omit_at_default": True})
    # Speculative decoding (vllm-v1; simserve/speculative.py): vLLM's method and num_speculative_tokens (None:
    # MTP's n_predict), and the acceptance file (None: the catalog's published table for the model and trace)
    speculative: str | None = field(default=None, metadata={"omit_at_default": True})
    num_speculative_tokens: int | None = field(default=None, metadata={"omit_at_default": True})
    acceptance: str | None = field(default=None, metadata={"omit_at_default": True})

    @property
    def max_len(self) -> int:
        """The engine's max model length: --max-model-len, else the trace's default capped at the model's
        context limit (requests longer than it are dropped from the trace, as an engine would refuse them)."""
        if self.max_model_len is not None and self.max_model_len < 1:
            raise SimserveError(
                f"--max-model-len must be a positive number of tokens, got {self.max_model_len}; "
                f"leave it out for the trace's default"
            )
        limit = context_limit(self.model)
        if self.max_model_len is not None:
            if self.max_model_len > limit and not self.allow_long_context:
                raise SimserveError(
                    f"--max-model-len {self.max_model_len} exceeds {self.model}'s context limit of {limit} "
                    "tokens (max_position_embeddings); lower it, or pass --allow-long-context to simulate "
                    "past the limit"
                )
            return self.max_model_len
        default = MAX_MODEL_LEN.get(self.trace, 8192)
        return default if self.allow_long_context else min(default, limit)

    @property
    def capped_by_model(self) -> bool:
        """Whether the model's context limit, not the trace's default, set the max length."""
        return self.max_model_len is None and self.max_len < MAX_MODEL_LEN.get(self.trace, 8192)

    @property
    def replicas_in_model(self) -> int:
        """The replicas the cluster holds: `num_replicas`, or the autoscaler's maximum (each with its API
        servers: an approximation, the servers of replicas not running are idle, not absent)."""
        return self.num_replicas if self.autoscale is None else self.autoscale.max_replicas

    def speculation(self):
        """The run's speculative decoding (speculative.Speculation), checked as vLLM 0.33.0 checks it; None:
        off."""
        if self.speculative is None:
            if self.num_speculative_tokens is not None or self.acceptance is not None:
                raise SimserveError(
                    "--num-speculative-tokens and --acceptance configure speculative decoding: add "
                    "--speculative eagle|eagle3|mtp|ngram, or drop them"
                )
            return None
        if self.pp > 1:
            raise SimserveError(
                "--speculative is modelled without pipeline parallelism (vLLM's drafter after the "
                "last stage is not): use --pp 1"
            )
        # vllm-v1's --max-num-batched-tokens (others are refused later)
        budget = self.budget or VLLM_V1_TOKENS
        engine = "sglang" if self.policy == "sglang" else "vllm"  # whose refusals: SGLang's on its scheduler
        return _speculation(
            self.speculative,
            self.num_speculative_tokens,
            self.model,
            self.trace,
            budget,
            self.acceptance,
            engine,
        )

    def sim_config(self) -> SimConfig:
        return SimConfig(
            policy=self.policy,
            budget=self.budget,
            max_batch=self.max_batch,
            max_model_len=self.max_len,
            num_replicas=self.replicas_in_model * self.dp_attention,
            router=self.router,
            router_weights=tuple(float(w) for w in self.router_weights),
            stretch=self.stretch,
            sched_delay_slo_s=self.sched_delay_slo_s,
            stop_when_overloaded=self.stop_when_overloaded,
            stop_tbt=None if self.stop_tbt is None else (float(self.stop_tbt[0]), float(self.stop_tbt[1])),
            tbt_target_s=self.tbt_target_s,
            min_budget=self.min_budget,
            long_prefill_token_threshold=self.long_prefill_token_threshold,
            long_prefill_token_threshold_adaptive=bool(self.long_prefill_token_threshold_adaptive),
            prefix_caching=bool(self.prefix_caching),
            reserve_full_isl=bool(self.reserve_full_isl),
            max_num_partial_prefills=self.max_num_partial_prefills,
            max_long_partial_prefills=self.max_long_partial_prefills,
            time_limit_s=self.time_limit_s,
            enable_mixed_chunk=bool(self.enable_mixed_chunk),
            schedule_policy=self.schedule_policy,
            schedule_conservativeness=self.schedule_conservativeness,
            page_size=self.page_size,
            max_prefill_tokens=self.max_prefill_tokens,
            ignore_eos=bool(self.ignore_eos),
            max_concurrency=self.max_concurrency,
            frontend_s=self.frontend_ms / 1000.0,
            dp_attention=self.dp_attention,
            **self._api_servers(),
            **self._kv_offload(),
            **self._speculation_fields(),
        ).validate()

    def _kv_offload(self) -> dict:
        """SimConfig's CPU-tier fields: its blocks (vLLM's CPUOffloadingSpec arithmetic) and one block's load
        time over the catalog's PCIe link (each GPU loads its own shard over its own link)."""
        gb = self.kv_offload_gb
        if not gb:
            return {}
        return kv_offload_config(self.deployment(), gb, self.pp, self.dp_attention)

    def _speculation_fields(self) -> dict:
        spec = self.speculation()
        if spec is None:
            return {}
        from simserve.speculative import NGRAM_CPU_S, draft_fraction

        model = resolve_model_spec(self.model)
        return dict(
            spec_k=spec.k,
            spec_lookahead=spec.lookahead,
            spec_acceptance=spec.acceptance,
            spec_seed=self.seed,
            spec_fraction=draft_fraction(spec.method, model),
            spec_passes=0 if spec.method == "ngram" else spec.k,
            spec_cpu_s=NGRAM_CPU_S if spec.method == "ngram" else 0.0,
        )

    def _api_servers(self) -> dict:
        """SimConfig's API-server fields: the processes of every deployment, at vLLM 0.33.0's measured costs
        for the endpoint (frontend.api_server_cpu) on this host speed."""
        if not self.api_server_count:
            return {}
        from simserve.sim.frontend import api_server_cpu, check_api_server_count

        cpu = api_server_cpu(self.api_endpoint, self.serving_host_speed())
        return dict(
            api_servers=check_api_server_count(self.api_server_count) * self.replicas_in_model,
            api_request_s=cpu.request_s,
            api_prompt_token_s=cpu.prompt_token_s,
            api_token_s=cpu.token_s,
        )

    def cudagraph_sizes(self) -> tuple[int, ...]:
        """The batch sizes (tokens) vLLM captures CUDA graphs for; () when it runs eagerly or is not
        modelled."""
        if not self.vllm_worker or self.enforce_eager:
            return ()
        from simserve.catalog import GPUSpec
        from simserve.vllm_worker import capture_sizes

        cfg = self.sim_config()
        return capture_sizes(
            cfg.batch_limit(self.pp), cfg.token_budget(), GPUSpec.from_name(self.gpu).compute_capability
        )

    def scheduling_is_async(self) -> bool:
        """Whether the engine schedules step n+1 while step n runs (vLLM 0.33.0's default: yes, also with PP >
        1 under its default Model Runner V2; not on its Ray executor: vllm/config/vllm.py). SGLang 0.5.23's
        overlap scheduler does the same (`Scheduler.event_loop_overlap`: the next batch is scheduled and its
        inputs prepared while the GPU runs the current one, whose results are processed after the next is
        launched; on by default, `--disable-overlap-schedule`, refused with PP as `arg_groups/overrides.py`
        `_pipeline_parallel_overlap_disable` does)."""
        if self.overlap_schedule:
            if self.policy != "sglang":
                raise SimserveError("the overlap scheduler is SGLang's: use it with --engine sglang")
            return True
        if not self.vllm_worker:
            if self.async_scheduling:
                raise SimserveError(
                    "--async-scheduling is vLLM's flag: add --engine vllm (and --policy vllm-v1)"
                )
            return False
        # vLLM 0.33.0 runs Model Runner V2 by default (config/vllm.py `use_v2_model_runner`), which keeps
        # async scheduling on with pipeline parallelism (`max_concurrent_batches` = PP + 1; only the V1 runner
        # turns it off with PP). Its Ray executor does not support it (`supports_async_scheduling` is the
        # abstract executor's False): off by default with --ray-comm, refused there in vLLM's words.
        if self.async_scheduling and self.ray_comm:
            raise SimserveError(
                "ValueError: `ray` does not support async scheduling yet (vLLM 0.33.0): drop "
                "--async-scheduling or --ray-comm"
            )
        return not self.ray_comm if self.async_scheduling is None else self.async_scheduling

    def serving_host_speed(self) -> float:
        """--host-speed, else engine_cpu.SERVING_HOST_SPEED; refused where nothing measured on vLLM's or
        SGLang's code runs."""
        from simserve.predictor.engine_cpu import SERVING_HOST_SPEED, _check_speed

        if self.host_speed is None:
            return SERVING_HOST_SPEED
        _check_speed(self.host_speed)
        if not (self.vllm_worker or self.api_server_count or self.policy == "sglang"):
            raise SimserveError(
                "--host-speed scales the measured CPU costs of vLLM 0.33.0 (its engine with --engine vllm, "
                "its API server with --frontend server) and SGLang 0.5.23 (--engine sglang); this run has "
                "none: drop --host-speed"
            )
        return self.host_speed

    def cpu_components(self) -> tuple:
        """The per-step engine CPU the timer charges (predictor/overhead.py Components): vLLM 0.33.0's
        measured costs for its worker (`--engine vllm`), SGLang 0.5.23's for `--policy sglang`
        (predictor/sglang_cpu.py; SGLang 0.3/0.4 runs too: no older release was measured), Vidur's
        Sarathi-Serve constants for the research policies (the engine they model)."""
        from simserve.predictor.overhead import VIDUR

        if self.vllm_worker:
            from simserve.predictor.engine_cpu import components

            return components(self.serving_host_speed())
        if self.policy == "sglang":
            from simserve.predictor import sglang_cpu

            return sglang_cpu.components(self.serving_host_speed())
        return VIDUR

    def launch_gaps_on(self) -> bool:
        """Whether steps pay vLLM's launch gaps (predictor/step.py): its worker's default; refused without
        it."""
        if self.launch_gaps and not self.vllm_worker:
            raise SimserveError(
                "--launch-gaps models vLLM 0.33.0's CUDA-graph dispatch: add --engine vllm, or drop it"
            )
        return self.vllm_worker if self.launch_gaps is None else self.launch_gaps

    def sustained_clock_on(self) -> bool:
        """Whether GEMMs run at the GPU's sustained rate (predictor/step.py); refused for a GPU without
        one."""
        from simserve.catalog import GPUSpec

        known = GPUSpec.from_name(self.gpu).sustained_tflops > 0
        if self.sustained_clock and not known:
            raise SimserveError(
                "--sustained-clock needs the GPU's sustained GEMM rate, which the catalog lacks for "
                f"{self.gpu} (sustained_tflops); drop --sustained-clock"
            )
        return known if self.sustained_clock is None else self.sustained_clock

    def step_parts(self) -> dict:
        """Which parts a step is composed of (summary.json `step_parts`; docs/execution-model.md)."""
        return {
            "cpu_overhead": bool(self.cpu_overhead),
            "async_scheduling": self.scheduling_is_async(),
            "launch_gaps": self.launch_gaps_on(),
            "sustained_clock": self.sustained_clock_on(),
        }

    def worker_memory(self):
        """vLLM's memory profile of this deployment (vllm_worker.WorkerMemory); None when not modelled."""
        if not self.vllm_worker:
            return None
        cfg = self.sim_config()
        return _worker_memory(
            self.deployment(), cfg.token_budget(), cfg.batch_limit(self.pp), self.cudagraph_sizes()
        )

    def deployment(self) -> Deployment:
        return _deployment(
            self.model,
            self.gpu,
            self.tp,
            self.pp,
            self.node,
            self.network,
            self.memory_utilization,
            self.max_len,
            self.dtype,
            self.kv_dtype,
            self.ep,
            self.moe_skew,
            self.dp_attention,
            self.all2all_backend,
        )


# The paper's trial cap: Sarathi-Serve's capacity search runs each trial with `--time-limit 30` (minutes).
PAPER_TIME_LIMIT_S = 1800.0


def scenario_fields(scenario: Any) -> dict[str, Any]:
    """A scenario's fields by name, less those marked `omit_at_default` while at their default (fields added
    after outputs and cache keys were pinned: a scenario that does not use them keys and echoes as before).
    Any scenario dataclass (a disaggregated one's too); here, not in tune/probe.py, so that `simserve run`
    echoes its scenario without importing the capacity search."""
    return {
        f.name: getattr(scenario, f.name)
        for f in fields(scenario)
        if not (f.metadata.get("omit_at_default") and getattr(scenario, f.name) == f.default)
    }


def paper_setup(s: Scenario) -> Scenario:
    """`s` as the paper's runs were made (docs/paper-reproduction.md, "Paper-comparable mode"): Poisson gaps
    clipped at 3/qps, the engine's Ray round trip each iteration, a 30-minute trial cap with latencies over
    the requests completed by then, and full trials (no overload stop, no early TBT stop).

    SimserveError when `s` asks for something the paper's runs could not have had."""
    if s.arrival not in ("poisson", "poisson-clipped"):
        raise SimserveError(
            f"--paper-setup uses the paper's clipped Poisson arrivals; drop --arrival {s.arrival}"
        )
    if not s.cpu_overhead:
        raise SimserveError(
            "--paper-setup charges the engine's CPU overhead and Ray round trip; drop --no-cpu-overhead"
        )
    return replace(
        s,
        allow_long_context=True,  # the paper ran its 8k/16k traces on 4k-context models (Llama-2-70B, Yi-34B)
        arrival="poisson-clipped",
        ray_comm=True,
        time_limit_s=PAPER_TIME_LIMIT_S,
        stop_when_overloaded=False,
        stop_tbt=None,
        frontend_ms=0.0,  # the paper reports engine-side latencies
        api_server_count=0,
    )


def check_scenario(s: Scenario) -> int:
    """Validate a scenario without simulating; returns its KV blocks per replica (SimserveError if it
    does not fit, names an unknown policy/model/GPU, or has no requests)."""
    cfg = s.sim_config()
    check_requests(s.num_requests)
    if cfg.policy == "sglang" and s.pp > 1:
        raise SimserveError(
            "--policy sglang models SGLang without pipeline parallelism (its PP micro-batching is not "
            "modelled): use --pp 1"
        )
    dep = s.deployment()
    if cfg.policy != "sglang":  # what the pinned vLLM release refuses to load (SGLang has its own loader)
        from simserve.vllm_loader import check

        check(dep)
    s.step_parts()  # refuses --async-scheduling, --launch-gaps and --sustained-clock where they cannot apply
    s.serving_host_speed()  # refuses a bad --host-speed, or one with nothing to scale
    if s.api_endpoint not in API_ENDPOINTS:
        raise SimserveError(f"unknown --api-endpoint {s.api_endpoint!r}; choose {' or '.join(API_ENDPOINTS)}")
    if s.api_endpoint != "completions" and not s.api_server_count:
        raise SimserveError(
            "--api-endpoint picks the API server's measured costs; this run has no API server: "
            "add --frontend server, or drop --api-endpoint"
        )
    if s.vllm_worker:
        if cfg.policy != "vllm-v1":
            raise SimserveError(
                f"--engine vllm simulates vLLM's V1 scheduler: use --policy vllm-v1, not {cfg.policy}"
            )
        from simserve.vllm_flags import check_vllm_flags

        # what `vllm serve` would refuse to start with (--max-num-batched-tokens below --max-num-seqs, ...)
        check_vllm_flags(
            cfg.token_budget(),
            cfg.batch_limit(s.pp),
            cfg.long_prefill_token_threshold,
            s.max_len,
            fix="raise --budget or lower --max-batch",
        )
        return _spec_blocks(s, dep, s.worker_memory().num_blocks)
    return _spec_blocks(s, dep, _num_blocks(dep, cfg.policy, cfg.memory_budget, cfg.batch_limit(dep.pp)))


def run_scenario(s: Scenario, qps: float, timer: BatchTimer | None = None, progress=None) -> SimResult:
    """Simulate `s` at `qps` requests per second; `timer` overrides the profiled predictor.

    `progress(done, total)`, if given, is called every simulated second (see cluster.simulate).
    """
    return build_result(*simulate_scenario(s, qps, timer, progress))


def simulate_scenario(
    s: Scenario, qps: float, timer: BatchTimer | None = None, progress=None
) -> tuple[RawRun, Deployment]:
    """The raw run (no tables built yet) and its deployment: `simserve run` streams the tables from it."""
    if np.isnan(qps) or qps <= 0:
        raise SimserveError(
            f"--qps must be a positive request rate (or inf: every request at t = 0), got {qps}"
        )
    num_blocks = check_scenario(s)
    cfg, dep = s.sim_config(), s.deployment()
    if s.ray_comm and not s.cpu_overhead:
        raise SimserveError(
            "--ray-comm is part of the engine's CPU overhead; drop --no-cpu-overhead to add it"
        )
    if timer is None:
        timer = scenario_timer(s)
    if timer.num_stages != dep.pp:
        raise SimserveError(f"the timer has {timer.num_stages} stages but the deployment has PP {dep.pp}")
    prompt, output, recorded, prefix = _workload(
        s.trace, s.max_len, s.num_requests, s.seed, s.arrival in ("replay", "conversation")
    )
    from simserve.workload import arrival_times

    follows = None
    if s.arrival == "conversation":
        from simserve.sim.conversation import parents

        # block ids say what is shared, not who follows whom
        if prefix is None or recorded is None or len(prefix) > 2:
            raise SimserveError(
                "--arrival conversation needs a multi-turn trace (conversation_id and round columns, "
                f"recorded arrivals); {s.trace} has none (build one with `simserve trace build "
                "sharegpt-multiturn`)"
            )
        follows = parents(prefix[0], prompt, output)
    if s.arrival == "replay" and recorded is None:
        raise SimserveError(
            f"--arrival replay needs recorded arrival times, but trace {s.trace!r} has none (no arrived_at "
            "or timestamp column); use a trace with arrival times (e.g. --trace azure-conv-2023) or a "
            "synthetic --arrival such as poisson (which --load-curve shapes too)"
        )
    arrived = arrival_times(len(prompt), qps, s.arrival, s.seed, s.cv, recorded, s.time_scale)
    if s.load_curve is not None:
        prompt, output, arrived, prefix = _shaped(s, prompt, output, arrived, prefix)
    autoscale = s.autoscale if s.autoscale is None else replace(s.autoscale, initial=s.num_replicas)
    return simulate(
        prompt, output, arrived, timer, num_blocks, cfg, progress, prefix, follows, autoscale=autoscale
    ), dep


def _shaped(s: Scenario, prompt, output, arrived, prefix):
    """The workload under --load-curve: synthetic arrivals warped in time, replayed ones thinned or
    duplicated."""
    from simserve.workload.load_curve import load_curve
    from simserve.workload.trace import take_rows

    curve = load_curve(s.load_curve)
    if s.arrival == "conversation":
        raise SimserveError(
            "--load-curve cannot reshape --arrival conversation (its rounds follow their answers); "
            "use --arrival replay, or a synthetic --arrival"
        )
    if s.arrival != "replay":
        return prompt, output, curve.warp(arrived), prefix
    rows, arrived = curve.thin(arrived, s.seed)
    if not len(rows):
        raise SimserveError(f"--load-curve {s.load_curve} thinned every request away; raise its multipliers")
    if prefix is not None:
        prefix = (
            prefix[0][rows],
            prefix[1][rows],
            *(take_rows(prefix[2], prefix[3], rows) if len(prefix) > 2 else ()),
        )
    return prompt[rows], output[rows], arrived, prefix


@lru_cache(maxsize=16)
def _deployment(
    model,
    gpu,
    tp,
    pp,
    node,
    network,
    util,
    max_len,
    dtype,
    kv_dtype,
    ep,
    moe_skew,
    dp=1,
    all2all="allgather_reducescatter",
) -> Deployment:
    return Deployment.create(
        model, gpu, tp, pp, node, network, util, max_len, dtype, kv_dtype, ep, moe_skew, dp, all2all
    )


@lru_cache(maxsize=16)
def _speculation(method, k, model, trace, budget, acceptance, engine="vllm"):
    from simserve.speculative import resolve

    return resolve(method, k, model, acceptance_dataset(trace), budget, acceptance, engine)


def acceptance_dataset(trace: str) -> str:
    """The dataset name a trace's acceptance rates are published for: a shipped trace's name, a bench
    dataset's kind (random:…), a file's stem."""
    from pathlib import Path

    return Path(trace.split(":", 1)[0]).name.split(".", 1)[0]


def resolve_model_spec(model: str):
    from simserve.catalog.models import resolve_model

    return resolve_model(model)


def _spec_blocks(s: Scenario, dep: Deployment, num_blocks: int) -> int:
    """KV blocks once the draft's weights and KV layers are in (speculative.draft_blocks); vLLM's refusal when
    one max-length request no longer fits."""
    spec = s.speculation()
    if spec is None:
        return num_blocks
    from simserve.memory import kv_bytes_per_block
    from simserve.speculative import draft_blocks

    blocks = draft_blocks(
        num_blocks,
        kv_bytes_per_block(dep),
        dep.layers_per_stage,
        spec.method,
        dep.model,
        dep.tp,
        dep.weight_bytes,
    )
    if blocks * dep.block_size < dep.max_model_len:
        raise SimserveError(
            f"{dep.describe()}: with the {spec.method} draft's weights and KV, vLLM's KV cache ({blocks} "
            f"blocks) cannot hold one {dep.max_model_len}-token request; raise --memory-utilization, lower "
            "--max-model-len, or use more GPUs"
        )
    return blocks


@lru_cache(maxsize=64)
def kv_offload_config(dep: Deployment, gb: float, pp: int, dp: int) -> dict:
    """--kv-offload-gb checked and turned into SimConfig's kv_offload_blocks and kv_offload_block_s."""
    from simserve.memory import kv_bytes_per_block
    from simserve.sim.kv_offload import tier_blocks

    if not math.isfinite(gb) or gb < 0:
        raise SimserveError(
            f"--kv-offload-gb must be a finite number of GiB >= 0, got {gb}; 0 or leaving it out: no CPU tier"
        )
    if pp > 1 or dp > 1:
        raise SimserveError(
            f"--kv-offload-gb is modelled for one pipeline stage and no attention DP (got --pp {pp}, "
            f"--dp-attention {dp}); drop it or use --pp 1"
        )
    if dep.node is None:
        raise SimserveError(
            f"the catalog has no node (and so no PCIe link) for {dep.gpu.name}; pass --node for "
            "--kv-offload-gb"
        )
    per_gpu = kv_bytes_per_block(dep)
    blocks = tier_blocks(gb, per_gpu, dep.tp)
    if blocks < 1:
        raise SimserveError(
            f"--kv-offload-gb {gb} holds no KV block ({per_gpu * dep.tp} bytes each); raise it or drop it"
        )
    return dict(kv_offload_blocks=blocks, kv_offload_block_s=per_gpu / (dep.node.pcie_gbps * 1e9))


def context_limit(model: str) -> int:
    """The model's max_position_embeddings (a catalog name or a config.json path)."""
    from simserve.catalog.models import resolve_model

    return resolve_model(model).max_position


@lru_cache(maxsize=64)
def _num_blocks(dep: Deployment, policy: str, budget: int | None, max_batch: int) -> int:
    from simserve.memory import plan_memory, profile_tokens

    return plan_memory(dep, profile_tokens(policy, dep.max_model_len, budget, max_batch)).num_blocks


@lru_cache(maxsize=8)
def _timer(
    dep: Deployment,
    profiles_root: str | None,
    cpu_overhead: bool,
    ray_comm: bool,
    cudagraph_sizes: tuple = (),
    async_scheduling: bool = False,
    launch_gaps: bool = False,
    sustained_clock: bool = False,
    components: tuple | None = None,
) -> BatchTimer:
    from simserve.predictor import load_timer
    from simserve.predictor.step import launch_costs, with_launch_costs, with_sustained_clock

    timer = load_timer(
        dep, profiles_root, overhead=_overhead(cpu_overhead, ray_comm, async_scheduling, components)
    )
    # GEMMs no faster than the GPU sustains at its power limit (before padding: padded tokens
    if sustained_clock:
        timer = with_sustained_clock(timer, dep)  # are computed too)
    if cudagraph_sizes:  # vLLM's CUDA graphs: batches padded to the next captured size (vllm_worker.py)
        from simserve.vllm_worker import padded_timer

        timer = padded_timer(timer, cudagraph_sizes)
    if launch_gaps:
        timer = with_launch_costs(timer, launch_costs(dep, cudagraph_sizes))
    return timer


def scenario_timer(s) -> BatchTimer:
    """The compiled timer a scenario (or a disaggregated pool's scenario) runs on, with every step part."""
    return _timer(
        s.deployment(),
        s.profiles_root,
        s.cpu_overhead,
        s.ray_comm,
        s.cudagraph_sizes(),
        s.scheduling_is_async(),
        s.launch_gaps_on(),
        s.sustained_clock_on(),
        s.cpu_components(),
    )


def _overhead(
    cpu_overhead: bool, ray_comm: bool, async_scheduling: bool = False, components: tuple | None = None
):
    from simserve.predictor import CpuOverhead
    from simserve.predictor.overhead import VIDUR

    return CpuOverhead(
        include_ray_comm=ray_comm,
        scale=1.0 if cpu_overhead else 0.0,
        async_scheduling=async_scheduling,
        components=VIDUR if components is None else components,
    )


def timer_cached(s: Scenario) -> bool:
    """Is the scenario's compiled timer in the on-disk timer cache already?"""
    from simserve.predictor.load import timer_cached as cached

    overhead = _overhead(s.cpu_overhead, s.ray_comm, s.scheduling_is_async(), s.cpu_components())
    return cached(s.deployment(), s.profiles_root, overhead)


def build_timers(scenarios: list[Scenario]) -> None:
    """Fit and compile each scenario's timer into the on-disk cache (a job: `plan` hands the deployments that
    share a profile to one worker, which then fits each shared model once). A scenario that cannot run is
    skipped: its probes report why, as without this."""
    for s in scenarios:
        try:
            scenario_timer(s)
        except SimserveError:
            continue


@lru_cache(maxsize=16)
def _worker_memory(dep: Deployment, max_num_batched_tokens: int, max_num_seqs: int, sizes: tuple):
    from simserve.vllm_worker import worker_memory

    mem = worker_memory(dep, max_num_batched_tokens, max_num_seqs, sizes)
    need = -(-dep.max_model_len // dep.block_size)
    # vLLM refuses to start (vllm/v1/core/kv_cache_planning.py: "To serve at least one…")
    if mem.num_blocks < need:
        raise SimserveError(
            f"{dep.describe()}: vLLM's KV cache ({mem.describe()}) cannot hold one {dep.max_model_len}-token "
            f"request; raise --memory-utilization, lower --max-model-len, or use more GPUs"
        )
    return mem


@lru_cache(maxsize=4)
def _usable(trace: str, max_len: int):
    """The trace's requests that fit in max_len tokens (read once per process)."""
    from simserve.workload import load_trace

    return load_trace(trace, max_total_tokens=max_len)


def whole_trace(s: Scenario) -> Scenario:
    """The scenario with every usable request of its trace (replay and conversation runs without --requests: a
    recorded day is replayed whole, as `vllm bench serve` replays a dataset file); at most MAX_REQUESTS."""
    from simserve.sim.config import MAX_REQUESTS
    from simserve.workload import bench_datasets

    if bench_datasets.is_spec(s.trace):  # generated, not recorded: _workload says why it cannot be replayed
        return s
    return replace(s, num_requests=max(1, min(len(_usable(s.trace, s.max_len)), MAX_REQUESTS)))


@lru_cache(maxsize=16)
def _workload(trace: str, max_len: int, n: int, seed: int, replay: bool):
    """(prompt, output, recorded arrivals or None, (prefix group, prefix tokens) or None) of the first n
    (replay) or n sampled requests. A trace of conversations with recorded arrivals (a multi-turn trace) is
    taken in file order whatever the arrival process: shuffled, a turn would come before the turn it follows.
    A bench dataset (workload/bench_datasets.py) gives its n requests in the order vLLM's client sends
    them."""
    from simserve.workload import bench_datasets

    if bench_datasets.is_spec(trace):
        if replay:
            raise SimserveError(
                f"--trace {trace} has no recorded arrival times; pick another --arrival than replay"
            )
        prompt, output = bench_datasets.lengths(bench_datasets.parse(trace), n, seed)
        for a in (prompt, output):
            a.setflags(write=False)
        return prompt, output, None, None
    t = _usable(trace, max_len)
    if not len(t):
        raise SimserveError(f"trace {trace!r} has no requests; pick a trace with at least one request")
    t = t.head(n) if replay or t.in_order else t.sample(n, seed)
    prefix = t.prefix
    for a in (t.prompt_tokens, t.output_tokens, t.arrived_at, *(prefix or ())):
        if a is not None:
            a.setflags(write=False)  # cached: shared by every later call in this process
    return t.prompt_tokens, t.output_tokens, t.arrived_at, prefix


def workload_drops(s: Scenario) -> dict:
    """Trace rows dropped before the run because prompt + output exceeds the max length (for summary.json)."""
    from simserve.workload import bench_datasets

    if bench_datasets.is_spec(s.trace):  # generated, not read: nothing dropped (too-long prompts are ignored)
        return {
            "too_long": 0,
            "trace_rows": s.num_requests,
            "max_model_len": s.max_len,
            "model_context_limit": context_limit(s.model),
        }
    t = _usable(s.trace, s.max_len)
    return {
        "too_long": int(t.too_long),
        "trace_rows": int(t.too_long + len(t)),
        "max_model_len": s.max_len,
        "model_context_limit": context_limit(s.model),
    }


def workload_notes(s: Scenario) -> list[str]:
    """What the workload did to the trace that a user should know: rows dropped, requests repeated."""
    from simserve.workload import bench_datasets

    if bench_datasets.is_spec(s.trace):
        return [
            f"requests drawn as `vllm bench serve` draws its {bench_datasets.parse(s.trace).label} dataset "
            f"(seed {s.seed}), in its send order"
        ]
    t = _usable(s.trace, s.max_len)
    notes = []
    if t.too_long and s.capped_by_model:
        notes.append(
            f"{t.too_long} trace rows dropped: prompt + output exceeds {s.model}'s context limit of "
            f"{s.max_len} tokens (--allow-long-context --max-model-len N simulates past it, as the paper did)"
        )
    elif t.too_long:
        notes.append(
            f"{t.too_long} trace rows dropped: prompt + output exceeds the max model length {s.max_len} "
            f"(raise --max-model-len to keep them)"
        )
    if s.allow_long_context and s.max_len > context_limit(s.model):
        notes.append(
            f"max model length {s.max_len} exceeds {s.model}'s context limit of {context_limit(s.model)} "
            "tokens: simulated anyway (--allow-long-context / --paper-setup, as the paper ran its traces)"
        )
    if s.load_curve is not None:
        how = (
            "each recorded request sent floor(m) or ceil(m) times (thinned or duplicated with the seed)"
            if s.arrival == "replay"
            else "arrival times warped so the rate at t is the process's times m(t)"
        )
        notes.append(f"--load-curve {s.load_curve}: the rate multiplied by its m(t): {how}")
    in_order = s.arrival in ("replay", "conversation") or t.in_order
    if not in_order and s.num_requests > len(t):
        notes.append(
            f"the trace has {len(t)} usable requests, so {s.num_requests - len(t)} of the {s.num_requests} "
            f"are repeats (fresh shuffles of the same rows)"
        )
    if in_order and s.num_requests > len(t):
        how = (
            s.arrival if s.arrival in ("replay", "conversation") else "a multi-turn trace is served in order"
        )
        notes.append(f"{how}: the trace has only {len(t)} usable requests, so only {len(t)} were simulated")
    return notes
