"""A closed-form stand-in for the simulator: queueing-theory latencies in microseconds of compute, no events.

It exists so the search, the sweep machinery (executors, cache, Ray) and the plots can be tested in
milliseconds and without profiles. It is NOT a model of any real deployment: its numbers only have the right
shape (latency grows as 1/(1 − ρ) towards saturation; bigger budgets raise throughput and TBT; vLLM's
prefill-only batches stall decodes). Use `simserve.sim.scenario.Scenario` for real answers.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import numpy as np

TOY_POLICIES = ("fcfs", "orca", "vllm", "sarathi", "chunked", "hybrid")


@dataclass(frozen=True)
class ToyScenario:
    """Field names match the simulator's Scenario where they overlap, so a sweep can vary them alike."""

    policy: str = "sarathi"
    budget: int | None = 512
    max_batch: int = 128
    seed: int = 0
    num_requests: int = 256
    max_model_len: int = 8192
    decode_s: float = 0.02  # one decode iteration of a lightly loaded batch
    prefill_s_per_token: float = 40e-6  # one prompt token's share of an iteration
    saturation_qps: float = 4.0  # the rate at which a budget-512 Sarathi server saturates (ρ = 1)
    seed_noise: float = 0.03  # relative spread of the saturation rate between seeds

    def _budget(self) -> int:
        return self.max_model_len if self.budget is None or self.policy == "hybrid" else self.budget

    def service_qps(self) -> float:
        """The saturation rate: larger chunks amortise weight reads; small batches cap throughput."""
        budget = self._budget()
        # Tile quantisation: a budget just past a multiple of 128 pays for a whole extra tile.
        tiles = math.ceil(budget / 128) * 128
        efficiency = budget / tiles * (1 - 64 / (budget + 256))
        batch_cap = min(1.0, self.max_batch / 64)
        factor = {"fcfs": 0.45, "orca": 0.7, "vllm": 1.0, "sarathi": 1.0, "chunked": 0.8, "hybrid": 1.0}
        rate = self.saturation_qps * efficiency / (1 - 64 / (512 + 256)) * batch_cap * factor[self.policy]
        jitter = random.Random(self.seed).uniform(-1, 1) * self.seed_noise
        return rate * (1 + jitter)

    def quantile(self, metric: str, q: float, qps: float) -> float:
        mu = self.service_qps()
        rho = qps / mu
        if rho >= 1:
            return math.inf
        tail = -math.log(1 - q)  # exponential quantile: light-tailed service, M/M/1-like waiting
        wait = tail * rho / (mu * (1 - rho))
        prefill = self.prefill_s_per_token * 2000
        if metric == "scheduling_delay":
            return wait
        if metric == "ttft":
            return wait + prefill
        # TBT (and TPOT, a request's mean gap, modelled alike): a decode iteration, plus the prefill work that
        # shares (Sarathi) or stalls (vLLM) it.
        chunk = min(self._budget(), 2000) * self.prefill_s_per_token
        stall = {"vllm": prefill, "orca": prefill, "fcfs": 0.0}.get(self.policy, chunk)
        busy = min(1.0, rho * (1 + tail / 4))  # the chance a token shares an iteration with prefill work
        return self.decode_s * (1 + rho) + stall * busy

    def record(self, qps: float, quantiles: tuple[float, ...], cdf_grid: tuple[float, ...]) -> dict:
        """The probe record the sweep caches: summary metrics plus quantile curves for CDF plots."""
        overloaded = qps >= self.service_qps() * 0.98
        metrics: dict[str, float] = {"overloaded": float(overloaded), "qps": qps}
        for family in ("tbt", "scheduling_delay", "ttft", "tpot"):
            for q in quantiles:
                value = math.nan if overloaded else self.quantile(family, q, qps)
                metrics[f"{family}_p{100 * q:.10g}_s"] = value
        metrics["throughput_rps"] = math.nan if overloaded else qps
        metrics["completed"] = 0.0 if overloaded else float(self.num_requests)
        grid = np.clip(np.asarray(cdf_grid), 0.0, 0.9999)
        cdf = {
            family: [math.nan if overloaded else self.quantile(family, float(q), qps) for q in grid]
            for family in ("tbt", "ttft", "scheduling_delay")
        }
        return {"metrics": metrics, "cdf": cdf}
