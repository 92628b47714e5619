"""What one simulation needs besides the workload and the timer: the policy and its limits, the cluster.

One frozen dataclass, one level deep; every field is a `simserve run` option. Defaults follow the paper.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simserve.errors import SimserveError

ADAPTIVE_POLICIES = ("slo-aware", "pressure", "equal-cost")  # the prefill budget changes per iteration
POLICY_NAMES = (
    "fcfs",
    "orca",
    "vllm",
    "sarathi",
    "chunked",
    "hybrid",
    *ADAPTIVE_POLICIES,
    "vllm-v1",
    "sglang",
)
# `budget` caps prefill chunks
CHUNKING_POLICIES = ("sarathi", "chunked", *ADAPTIVE_POLICIES, "vllm-v1", "sglang")
# sim/routers.py: round robin, least outstanding requests, least KV usage, llm-d's prefix-aware profile
ROUTER_NAMES = ("rr", "lor", "kv", "prefix-aware")
# prefix-aware: llm-d's default scorer weights, queue, KV usage, prefix (pkg/epp/config/loader/defaults.go)
DEFAULT_ROUTER_WEIGHTS = (2.0, 2.0, 3.0)
RESERVING_POLICIES = ("fcfs", "orca")  # reserve max_model_len of KV at admission; never preempt
DEFAULT_CHUNK = 512  # Sarathi-Serve's default chunk_size
# The adaptive policies' largest chunk when --budget is not given: they pick smaller ones per iteration.
DEFAULT_ADAPTIVE_CAP = 2048
# vLLM v1's defaults for `vllm serve` on an A100-class GPU: --max-num-batched-tokens 2048, --max-num-seqs 256.
# (`simserve sweep --engine vllm` uses the pinned release's per-GPU defaults: simserve/tune/engine.py.)
VLLM_V1_TOKENS = 2048
VLLM_V1_SEQS = 256
# vLLM 0.33.0's SchedulerConfig.watermark default: V1 keeps no free blocks back at admission.
VLLM_V1_WATERMARK = 0.0
# sglang (simserve/sim/sglang.py): the pinned release's --chunked-prefill-size on an 80 GB GPU (A100-80GB,
# H100), for `simserve run`; `sweep --engine sglang` uses its per-GPU defaults (simserve/tune/sglang.py).
SGLANG_CHUNK = 8192
SGLANG_SCHEDULE_POLICIES = ("fcfs", "lof", "lpm")  # the --schedule-policy values simserve models
# The most requests one simulation takes (--requests of run, sweep, plan; trace stats of a bench dataset). A
# 100,000-request `simserve run` (Mistral-7B/A100, sharegpt at 2 qps) peaked at 129 MB of memory and wrote 48
# MB (/usr/bin/time): a million is ~1.3 GB and ~0.5 GB, and minutes of CPU near capacity. Past it a
# typo (--requests 99999999999999999999) ran for minutes before failing, or filled the memory.
MAX_REQUESTS = 1_000_000


def check_requests(n: int, option: str = "--requests") -> int:
    """A number of requests for one simulation: 1 to MAX_REQUESTS, else one line saying so."""
    if not 1 <= n <= MAX_REQUESTS:
        raise SimserveError(
            f"{option} must be between 1 and {MAX_REQUESTS:,} requests per simulation, got {n:,}; give a "
            "number in that range (a million take ~1.3 GB of memory and minutes of CPU)"
        )
    return n


@dataclass(frozen=True)
class SimConfig:
    policy: str = "sarathi"
    # sarathi/chunked: prefill tokens per iteration (default 512); vllm: tokens per prefill batch and the
    # longest admissible prompt (default max_model_len); hybrid: fixed at max_model_len; orca/fcfs: unused.
    budget: int | None = None
    # most resident requests per replica; default 128, or for orca/fcfs 16 (8 with pipeline parallelism)
    max_batch: int | None = None
    max_model_len: int = 8192
    num_replicas: int = 1
    router: str = "rr"  # ROUTER_NAMES (sim/routers.py): rr, lor, kv, prefix-aware
    # prefix-aware: queue, KV usage, prefix
    router_weights: tuple[float, float, float] = DEFAULT_ROUTER_WEIGHTS
    block_size: int = 16
    watermark: float = 0.01  # fraction of KV blocks admission keeps free (vllm/sarathi/chunked/hybrid)
    # NOTE: no effect any more. It switched the SimPy model's decode-stretch fast paths, which are gone
    # (the compiled core is the fast model now, one event per iteration as the reference); kept so saved
    # scenarios, probe cache keys and `--exact` stay valid.
    stretch: bool = True
    sched_delay_slo_s: float = 2.0  # the capacity criterion's median scheduling delay bound
    overload_wait_s: float = 60.0  # stop when the oldest waiting request has waited this long
    check_period_s: float = 1.0  # how often (simulated seconds) the overload rule is evaluated
    stop_when_overloaded: bool = True  # False: note the overload, but serve every request to the end
    # (limit s, quantile): stop once that TBT quantile must exceed the limit however the run goes on (for
    # capacity probes: a probe that surely fails its TBT SLO need not run to the end). None: never.
    stop_tbt: tuple[float, float] | None = None
    # The paper's trial cap (Sarathi-Serve's benchmark `time_limit`, 30 min): the run ends at the first
    # overload check at or after this many simulated seconds, whatever is unfinished; metrics then cover the
    # requests completed by then (RawRun.capped says it happened). None: no cap.
    time_limit_s: float | None = None
    # slo-aware / pressure: the predicted iteration time (summed over pipeline stages) to stay under
    tbt_target_s: float = 0.1
    # pressure: the smallest budget it shrinks to (default: a quarter of its cap)
    min_budget: int | None = None
    # vllm-v1 (vLLM's flag of the same name; 0 means off, as in vLLM)
    long_prefill_token_threshold: int = 0
    # vllm-v1: floor the threshold at budget / (running + waiting requests) (vLLM's flag of the same name)
    long_prefill_token_threshold_adaptive: bool = False
    # vllm-v1: automatic prefix caching (vLLM V1's default; sim/prefix_cache.py), `--enable-prefix-caching`
    prefix_caching: bool = False
    # vllm-v1: a waiting request is admitted only if the KV blocks of its whole sequence fit (vLLM 0.33.0's
    # `scheduler_reserve_full_isl`, default True; vllm-project/vllm#37307, 2026). False: as vLLM before that
    # option (0.8.2's scheduler.py), if its first chunk's blocks fit, so a long prompt admitted into a nearly
    # full pool is preempted (recompute) when the running requests need its blocks, and admitted again.
    reserve_full_isl: bool = True
    # vllm-v1 with prefix caching: vLLM's CPU KV tier (`--kv-offloading-size`, sim/kv_offload.py): its size in
    # blocks (0: none) and the seconds one block takes over the GPU's PCIe link (Scenario.kv_offload_gb sets
    # both)
    kv_offload_blocks: int = 0
    kv_offload_block_s: float = 0.0
    # NOTE: vLLM V0's flags, removed in vLLM 0.27 (PR #49244). Kept so saved scenarios load; anything but 1
    # is refused (validate), because the V1 scheduler simserve models has no such limit.
    max_num_partial_prefills: int = 1
    max_long_partial_prefills: int = 1
    # sglang (SGLang's flags of these names; simserve/sim/sglang.py): decodes ride along with a prefill batch
    # (--enable-mixed-chunk); the waiting queue's order (--schedule-policy); how much of running requests'
    # future output admission holds back (--schedule-conservativeness); KV page size in tokens (--page-size);
    # the prefill batch's token cap (--max-prefill-tokens); and whether the client sends ignore_eos with
    # max_new_tokens = the output length (`python -m sglang.bench_serving`'s default), so admission reserves
    # every running request's whole remaining output, or not (then SGLang's new_token_ratio estimate).
    enable_mixed_chunk: bool = False
    schedule_policy: str = "fcfs"
    schedule_conservativeness: float = 1.0
    page_size: int = 1
    max_prefill_tokens: int = 16384
    ignore_eos: bool = True
    # A closed-loop client (`vllm bench serve --max-concurrency N`): at most N requests in flight; request i
    # is sent at its arrival time or when the (i − N + 1)-th request finishes, whichever is later. None: open
    # loop.
    max_concurrency: int | None = None
    # The front end's latency (sim/frontend.py): added to what a client sees; 0: engine-side latencies only.
    frontend_s: float = 0.0
    # The API server as a server (sim/api_server.py): this many processes, each a FIFO queue of CPU work, with
    # these costs per request, per prompt token and per streamed token. 0: no API-server model (engine-side,
    # plus `frontend_s` if set).
    api_servers: int = 0
    api_request_s: float = 0.0
    api_prompt_token_s: float = 0.0
    api_token_s: float = 0.0
    # Attention data parallelism (sim/lockstep.py): each run of this many consecutive replicas is one
    # deployment's DP ranks, which step together (vLLM's DP engine cores in lockstep). 1: independent
    # replicas.
    dp_attention: int = 1
    # vllm-v1 with speculative decoding (simserve/speculative.py; 0: off): vLLM's num_speculative_tokens, its
    # num_lookahead_tokens, the cumulative acceptance per position and the seed of the per-request draws; a
    # draft pass's cost as a fraction of the target's step, the passes per step, and the drafter's CPU per
    # request
    spec_k: int = 0
    spec_lookahead: int = 0
    spec_acceptance: tuple[float, ...] = ()
    spec_seed: int = 0
    spec_fraction: float = 0.0
    spec_passes: int = 0
    spec_cpu_s: float = 0.0

    def validate(self) -> SimConfig:
        if self.policy not in POLICY_NAMES:
            raise SimserveError(f"unknown policy {self.policy!r}; choose one of {', '.join(POLICY_NAMES)}")
        if self.router not in ROUTER_NAMES:
            raise SimserveError(f"unknown router {self.router!r}; choose one of {', '.join(ROUTER_NAMES)}")
        w = self.router_weights
        if len(w) != 3 or not all(isinstance(x, (int, float)) and 0 <= x < math.inf for x in w):
            raise SimserveError(
                "--router-weights takes three finite non-negative numbers QUEUE,KV,PREFIX (llm-d's default "
                f"is {','.join(f'{x:g}' for x in DEFAULT_ROUTER_WEIGHTS)}), got {','.join(str(x) for x in w)}"
            )
        if self.budget is not None and self.budget < 1:
            raise SimserveError(f"--budget must be at least 1 token, got {self.budget}")
        if self.max_batch is not None and self.max_batch < 1:
            raise SimserveError(f"--max-batch must be at least 1, got {self.max_batch}")
        if self.dp_attention < 1:  # before the replica count, which counts DP ranks (replicas x dp_attention)
            raise SimserveError(
                "--dp-attention must be at least 1 (1: no attention data parallelism), got "
                f"{self.dp_attention}"
            )
        if self.num_replicas < 1:
            raise SimserveError(f"--replicas must be at least 1, got {self.num_replicas}")
        if self.num_replicas % self.dp_attention:
            raise SimserveError(
                f"--dp-attention {self.dp_attention} must be at least 1 and divide the "
                f"{self.num_replicas} simulated ranks"
            )
        if self.max_model_len < 1:
            raise SimserveError(f"max model length must be at least 1, got {self.max_model_len}")
        if not self.sched_delay_slo_s > 0:
            raise SimserveError(
                f"the scheduling-delay SLO must be positive seconds, got {self.sched_delay_slo_s}"
            )
        if not self.overload_wait_s > 0 or not self.check_period_s > 0:
            raise SimserveError("the overload wait and check period must be positive")
        if self.stop_tbt is not None and not (self.stop_tbt[0] > 0 and 0 < self.stop_tbt[1] < 1):
            raise SimserveError(
                f"stop_tbt needs a positive limit and a quantile in (0, 1), got {self.stop_tbt}"
            )
        if self.time_limit_s is not None and not (self.time_limit_s > 0 and math.isfinite(self.time_limit_s)):
            raise SimserveError(f"the trial time limit must be positive seconds, got {self.time_limit_s}")
        if not self.tbt_target_s > 0:
            raise SimserveError(f"--tbt-target must be positive seconds, got {self.tbt_target_s}")
        if self.min_budget is not None and self.min_budget < 1:
            raise SimserveError(f"--min-budget must be at least 1 token, got {self.min_budget}")
        if self.long_prefill_token_threshold < 0:
            raise SimserveError(
                "--long-prefill-token-threshold must be 0 (off) or positive, got "
                f"{self.long_prefill_token_threshold}"
            )
        if self.schedule_policy not in SGLANG_SCHEDULE_POLICIES:
            raise SimserveError(
                f"--schedule-policy {self.schedule_policy!r} is not modelled; choose one of "
                f"{', '.join(SGLANG_SCHEDULE_POLICIES)} (docs/engines.md, SGLang)"
            )
        if not self.schedule_conservativeness > 0:
            raise SimserveError(
                f"--schedule-conservativeness must be positive, got {self.schedule_conservativeness}"
            )
        for flag, value in (
            ("--page-size", self.page_size),
            ("--max-prefill-tokens", self.max_prefill_tokens),
        ):
            if value < 1:
                raise SimserveError(f"{flag} must be at least 1 token, got {value}")
        if self.policy == "sglang" and self.token_budget() % self.page_size:
            raise SimserveError(  # SGLang's own words (arg_groups/validation_hook.py), then the fix
                f"chunked_prefill_size must be divisible by page_size ({self.token_budget()} % "
                f"{self.page_size}): choose a multiple of --page-size"
            )
        if self.policy == "sglang" and self.token_budget() // self.dp_attention < self.page_size:
            # each DP rank's chunk is chunked_prefill_size // D (arg_groups/parallel_hook.py)
            raise SimserveError(
                f"--chunked-prefill-size {self.token_budget()} over {self.dp_attention} attention-DP ranks "
                f"leaves each rank less than a page: use at least {self.dp_attention * self.page_size}"
            )
        if not (math.isfinite(self.frontend_s) and self.frontend_s >= 0):
            raise SimserveError(
                f"--frontend-ms must be a non-negative number of milliseconds, got {self.frontend_s * 1000}"
            )
        if self.api_servers < 0:
            raise SimserveError(f"--api-server-count must be at least 1, got {self.api_servers}")
        for name, value in (
            ("request", self.api_request_s),
            ("prompt-token", self.api_prompt_token_s),
            ("output-token", self.api_token_s),
        ):
            if not (math.isfinite(value) and value >= 0):
                raise SimserveError(
                    f"the API server's {name} CPU cost must be a non-negative number of seconds, got {value}"
                )
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise SimserveError(
                f"--max-concurrency must be at least 1 (vLLM: greater than 0), got {self.max_concurrency}"
            )
        for flag, value in (
            ("--max-num-partial-prefills", self.max_num_partial_prefills),
            ("--max-long-partial-prefills", self.max_long_partial_prefills),
        ):
            if value != 1:
                raise SimserveError(
                    f"vllm serve: error: unrecognized arguments: {flag} (removed in vLLM 0.27, PR #49244; "
                    "the V1 scheduler admits every prefill that fits the token budget): drop it"
                )
        if self.kv_offload_blocks and (self.policy != "vllm-v1" or not self.prefix_caching):
            raise SimserveError(
                "--kv-offload-gb is vLLM's CPU offloading of prefix-cached KV blocks; use it with --policy "
                "vllm-v1 (or --engine vllm) and prefix caching on (got --policy "
                f"{self.policy}{'' if self.prefix_caching else ', prefix caching off'})"
            )
        if self.prefix_caching and self.policy not in ("vllm-v1", "sglang"):
            raise SimserveError(
                f"prefix caching is modelled as vLLM V1 and SGLang do it; use --policy vllm-v1 or sglang, or "
                f"--no-prefix-caching "
                f"(got --policy {self.policy})"
            )
        if self.spec_k:
            self._check_speculation()
        return self

    def _check_speculation(self) -> None:
        """What simserve models of speculative decoding (docs/speculative.md): vLLM's V1 scheduler or SGLang's
        (EAGLE), one engine per replica, no pipeline stages, no prefix caching (vLLM's EAGLE block drop and
        lookahead hashes, SGLang's radix cache under speculation: not modelled yet)."""
        if self.policy not in ("vllm-v1", "sglang"):
            raise SimserveError(
                f"--speculative is modelled for vLLM's V1 scheduler and SGLang's: use --policy vllm-v1 "
                f"or sglang (or --engine vllm|sglang), not {self.policy}"
            )
        if self.policy == "sglang" and self.prefix_caching:
            raise SimserveError(
                "--speculative on sglang with its radix cache is not modelled yet (what a verification "
                "step caches): add --no-prefix-caching (SGLang's --disable-radix-cache)"
            )
        if self.policy == "sglang" and self.enable_mixed_chunk:
            raise SimserveError(
                "--enable-mixed-chunk with --speculative on sglang is not modelled yet (SGLang 0.5.23 "
                "runs the running requests as one-token decodes in a mixed step): drop "
                "--enable-mixed-chunk"
            )
        if self.prefix_caching:
            raise SimserveError(
                "--speculative with prefix caching is not modelled yet (vLLM's EAGLE block drop and "
                "lookahead block hashes): add --no-prefix-caching"
            )
        if self.dp_attention > 1:
            raise SimserveError("--speculative with --dp-attention is not modelled yet: drop one of them")
        if len(self.spec_acceptance) != self.spec_k:
            raise SimserveError(
                f"{len(self.spec_acceptance)} acceptance rates for {self.spec_k} speculative tokens"
            )

    def kv_watermark(self) -> float:
        """Fraction of KV blocks admission keeps free: none for orca/fcfs (they reserve max length) and for
        vllm-v1 (vLLM 0.33.0's default); `watermark` otherwise (Sarathi-Serve's 0.01)."""
        if self.policy in ("vllm-v1", "sglang"):  # SGLang: admission checks its own token budget instead
            return VLLM_V1_WATERMARK
        return 0.0 if self.reserves_max_len else self.watermark

    def token_budget(self) -> int:
        """Tokens one iteration may carry. sarathi and vllm-v1 count the batch's decodes (a token each) and
        its prefill chunks together (Sarathi's chunk size; vLLM's --max-num-batched-tokens); chunked
        (prefill-only turns), the adaptive policies (their cap) and sglang (--chunked-prefill-size) count
        prefill tokens only; vllm: the sum of whole prompts in a prefill-only batch, at most the max model
        length; hybrid: the max model length; orca and fcfs: no limit."""
        if self.policy in ("sarathi", "chunked"):
            return self.budget or DEFAULT_CHUNK
        if self.policy in ADAPTIVE_POLICIES:
            return self.budget or DEFAULT_ADAPTIVE_CAP
        if self.policy == "vllm-v1":  # --max-num-batched-tokens: decodes and prefill chunks together
            return self.budget or VLLM_V1_TOKENS
        if self.policy == "sglang":  # --chunked-prefill-size
            return self.budget or SGLANG_CHUNK
        if self.policy == "vllm":
            return min(self.budget or self.max_model_len, self.max_model_len)
        if self.policy == "hybrid":
            return self.max_model_len
        return math.inf  # type: ignore[return-value]  # orca/fcfs: no token limit

    def batch_limit(self, pp: int) -> int:
        if self.max_batch is not None:
            return self.max_batch
        if self.policy in RESERVING_POLICIES:
            # The paper's Orca setting: its max-length activation profile leaves no room for more.
            return 8 if pp > 1 else 16
        return VLLM_V1_SEQS if self.policy == "vllm-v1" else 128

    def kv_block_tokens(self) -> int:
        """Tokens per KV block as the replicas count them (the iterations' kv_blocks_used): SGLang's pages."""
        return self.page_size if self.policy == "sglang" else self.block_size

    def prompt_limit(self) -> int:
        """Longer requests are ignored (Sarathi-Serve: max_model_len; its vLLM: max tokens per batch)."""
        return self.token_budget() if self.policy == "vllm" else self.max_model_len

    @property
    def reserves_max_len(self) -> bool:
        return self.policy in RESERVING_POLICIES

    @property
    def memory_budget(self) -> int | None:
        """The budget `simserve.memory.profile_tokens` sizes the activation peak with."""
        return self.token_budget() if self.policy in (*CHUNKING_POLICIES, "hybrid") else self.budget

    def pressure_floor(self) -> int:
        """pressure: the budget with no queue and the smallest it shrinks to."""
        return min(self.min_budget or max(self.token_budget() // 4, 1), self.token_budget())
