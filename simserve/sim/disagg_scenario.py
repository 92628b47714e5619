"""A disaggregated deployment by name: two pools written `2xTP2` (replicas × TP, optional `PP<n>` and `@gpu`),
the workload and policy of one Scenario, and `run_disagg(scenario, qps)`, the seam the CLI and the planner
use.

Each pool is a Scenario of its own (its GPU, node, TP, PP, replicas and router; the rest shared), so the
memory plan, profile and timer of a pool are those an aggregated run of the same deployment gets.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from simserve.errors import SimserveError
from simserve.sim.disagg import CHUNKING, ROUTERS, DisaggRun, Pool, simulate_disagg
from simserve.sim.kvlink import KVLink, kv_bytes_per_prompt_token, resolve_link
from simserve.sim.scenario import Scenario, _workload, check_scenario, scenario_timer

_POOL = re.compile(r"^(\d+)\s*[x×]\s*TP(\d+)(?:\s*PP(\d+))?(?:\s*EP(\d+))?(?:@([\w.\-]+))?$", re.IGNORECASE)


@dataclass(frozen=True)
class PoolSpec:
    replicas: int
    tp: int
    pp: int = 1
    gpu: str | None = None  # None: the run's --gpu
    # an MoE model's expert parallelism in this pool; None: the run's --ep (plan labels: TP2EP2)
    ep: int | None = None

    @classmethod
    def parse(cls, text: str, flag: str) -> PoolSpec:
        m = _POOL.match(text.strip())
        if not m or int(m.group(1)) < 1:
            raise SimserveError(
                f"{flag} {text!r} is not a pool; write replicas x TP, e.g. 2xTP2, 1xTP4PP2, 2xTP2EP2 or "
                "2xTP2@h100"
            )
        ep = int(m.group(4)) if m.group(4) else None
        for name, value in (("TP", int(m.group(2))), ("PP", int(m.group(3) or 1)), ("EP", ep or 1)):
            if value < 1:
                raise SimserveError(
                    f"{flag} {text!r}: {name} must be at least 1, got {value}; e.g. 2xTP2, 1xTP4PP2"
                )
        return cls(int(m.group(1)), int(m.group(2)), int(m.group(3) or 1), m.group(5), ep)

    def label(self) -> str:
        pp = f"PP{self.pp}" if self.pp > 1 else ""
        ep = f"EP{self.ep}" if self.ep and self.ep > 1 else ""
        return f"{self.replicas}xTP{self.tp}{pp}{ep}" + (f"@{self.gpu}" if self.gpu else "")


@dataclass(frozen=True)
class DisaggScenario:
    # the workload, policy and limits are the prefill scenario's; the decode one shares them
    prefill: Scenario
    decode: Scenario
    # nvlink | pcie | a catalog network; None: the node's fabric when both fit in one
    kv_link: str | None = None
    decode_router: str = "kv"  # rr | lor | kv (the most free KV blocks); the prefill router is prefill.router

    @classmethod
    def create(
        cls,
        base: Scenario,
        prefill: PoolSpec,
        decode: PoolSpec,
        kv_link: str | None = None,
        decode_router: str = "kv",
    ) -> DisaggScenario:
        def pool(spec: PoolSpec, router: str) -> Scenario:
            gpu = spec.gpu or base.gpu
            node = base.node if gpu == base.gpu else None
            ep = base.ep if spec.ep is None else spec.ep
            return replace(
                base,
                gpu=gpu,
                node=node,
                tp=spec.tp,
                pp=spec.pp,
                ep=ep,
                num_replicas=spec.replicas,
                router=router,
            )

        if decode_router not in ROUTERS["decode"]:
            raise SimserveError(
                f"unknown --decode-router {decode_router!r}; choose one of {', '.join(ROUTERS['decode'])}"
            )
        return cls(pool(prefill, base.router), pool(decode, "rr"), kv_link, decode_router)

    @property
    def num_gpus(self) -> int:
        return sum(s.tp * s.pp * s.num_replicas for s in (self.prefill, self.decode))

    def label(self) -> str:
        def one(s: Scenario, tag: str) -> str:
            pp = f"PP{s.pp}" if s.pp > 1 else ""
            ep = f"EP{s.ep}" if s.ep > 1 else ""
            return f"{s.num_replicas}xTP{s.tp}{pp}{ep}{tag}"

        return f"{one(self.prefill, 'P')}+{one(self.decode, 'D')}"

    def check(self) -> tuple[int, int, KVLink]:
        """KV blocks per prefill and decode replica, and the link; SimserveError naming the pool that does not
        fit or the missing link."""
        s = self.prefill
        # Mechanisms the aggregated model has and the pools do not (yet): refused, never silently left out.
        for on, what, fix in (
            (s.prefix_caching, "prefix caching", "add --no-prefix-caching"),
            (s.max_concurrency is not None, "a closed-loop client", "drop --max-concurrency"),
            (s.arrival == "conversation", "answer-driven conversations", "pick another --arrival"),
            (s.vllm_worker, "vLLM's worker model (CUDA graphs, memory)", "drop --engine vllm"),
            (
                s.dp_attention > 1,
                "attention data parallelism (ranks in lockstep)",
                "drop --dp-attention (--ep alone shards the experts)",
            ),
        ):
            if on:
                raise SimserveError(
                    f"disaggregated serving does not model {what} yet; {fix}, or run aggregated"
                )
        if self.prefill.policy not in CHUNKING:
            raise SimserveError(
                f"disaggregated serving runs a chunked-prefill policy ({', '.join(CHUNKING)}); --policy "
                f"{self.prefill.policy} never schedules the last prompt token of a request whose KV arrived "
                "by transfer"
            )
        blocks = []
        for side, s in (("prefill", self.prefill), ("decode", self.decode)):
            try:
                blocks.append(check_scenario(s))
            except SimserveError as exc:
                raise SimserveError(f"{side} pool: {exc}") from None
        p, d = self.prefill.deployment(), self.decode.deployment()
        link = resolve_link(p, self.prefill.num_replicas, d, self.decode.num_replicas, self.kv_link)
        return blocks[0], blocks[1], link


def run_disagg(
    ds: DisaggScenario,
    qps: float,
    timers: tuple | None = None,
    link: KVLink | None = None,
) -> DisaggRun:
    """Simulate `ds` at `qps`; `timers` (prefill, decode) override the profiled predictors, `link` the
    catalog's."""
    import numpy as np

    from simserve.workload import arrival_times

    if np.isinf(qps):  # not one of the disaggregated cases checked against the reference: refused, said why
        raise SimserveError(
            "a disaggregated run takes a finite --qps (--qps inf, every request at t = 0, is not modelled "
            "for it yet); give a rate, or run aggregated"
        )
    if np.isnan(qps) or qps <= 0:
        raise SimserveError(f"--qps must be a positive request rate, got {qps}")
    pb, db, resolved = ds.check()
    s = ds.prefill
    if timers is None:
        timers = tuple(scenario_timer(x) for x in (ds.prefill, ds.decode))
    prompt, output, recorded, _ = _workload(s.trace, s.max_len, s.num_requests, s.seed, s.arrival == "replay")
    arrived = arrival_times(len(prompt), qps, s.arrival, s.seed, s.cv, recorded, s.time_scale)
    prefill = Pool(s.num_replicas, timers[0], pb, s.router)
    decode = Pool(ds.decode.num_replicas, timers[1], db, ds.decode_router, ds.decode.sim_config())
    kv = kv_bytes_per_prompt_token(s.deployment())
    return simulate_disagg(prompt, output, arrived, s.sim_config(), prefill, decode, link or resolved, kv)
