"""What one simulation needs besides the workload and the timer: the policy and its limits, the cluster.

One frozen dataclass, one level deep; every field is a `simserve run` option. Defaults follow the paper.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simserve.errors import SimserveError

POLICY_NAMES = ("fcfs", "orca", "vllm", "sarathi", "chunked", "hybrid")
ROUTER_NAMES = ("rr", "lor")
RESERVING_POLICIES = ("fcfs", "orca")  # reserve max_model_len of KV at admission; never preempt
DEFAULT_CHUNK = 512  # Sarathi-Serve's default chunk_size


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
    router: str = "rr"  # rr: round robin; lor: least outstanding requests
    block_size: int = 16
    watermark: float = 0.01  # fraction of KV blocks admission keeps free (vllm/sarathi/chunked/hybrid)
    stretch: bool = True  # advance steady decode stretches in one step (False: one event per iteration)
    sched_delay_slo_s: float = 2.0  # the capacity criterion's median scheduling delay bound
    overload_wait_s: float = 60.0  # stop when the oldest waiting request has waited this long
    check_period_s: float = 1.0  # how often (simulated seconds) the overload rule is evaluated

    def validate(self) -> SimConfig:
        if self.policy not in POLICY_NAMES:
            raise SimserveError(f"unknown policy {self.policy!r}; choose one of {', '.join(POLICY_NAMES)}")
        if self.router not in ROUTER_NAMES:
            raise SimserveError(f"unknown router {self.router!r}; choose one of {', '.join(ROUTER_NAMES)}")
        if self.budget is not None and self.budget < 1:
            raise SimserveError(f"--budget must be at least 1 token, got {self.budget}")
        if self.max_batch is not None and self.max_batch < 1:
            raise SimserveError(f"--max-batch must be at least 1, got {self.max_batch}")
        if self.num_replicas < 1:
            raise SimserveError(f"--replicas must be at least 1, got {self.num_replicas}")
        if self.max_model_len < 1:
            raise SimserveError(f"max model length must be at least 1, got {self.max_model_len}")
        if not self.sched_delay_slo_s > 0:
            raise SimserveError(
                f"the scheduling-delay SLO must be positive seconds, got {self.sched_delay_slo_s}"
            )
        if not self.overload_wait_s > 0 or not self.check_period_s > 0:
            raise SimserveError("the overload wait and check period must be positive")
        return self

    def token_budget(self) -> int:
        """Prefill tokens one iteration may carry (vLLM: the sum of whole prompts in a prefill batch)."""
        if self.policy in ("sarathi", "chunked"):
            return self.budget or DEFAULT_CHUNK
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
        return 128

    def prompt_limit(self) -> int:
        """Longer requests are ignored (Sarathi-Serve: max_model_len; its vLLM: max tokens per batch)."""
        return self.token_budget() if self.policy == "vllm" else self.max_model_len

    @property
    def reserves_max_len(self) -> bool:
        return self.policy in RESERVING_POLICIES

    @property
    def memory_budget(self) -> int | None:
        """The budget `simserve.memory.profile_tokens` sizes the activation peak with."""
        return self.token_budget() if self.policy in ("sarathi", "chunked", "hybrid") else self.budget
