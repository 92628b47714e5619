"""An autoscaled scenario from its settings: the autoscaler's configuration with its cold start, and the slo
policy's per-replica capacity — simserve's own capacity search on one replica of the run's deployment at the
run's SLO (tune/capacity.py), its probes cached as a sweep's are (`simserve cache`), unless given. `run
--autoscale` (cli/autoscale.py) and the day plan (plan/day.py) both configure it here.
"""

from __future__ import annotations

from dataclasses import replace


def check_slos(ttft_slo: float, tpot_slo: float) -> None:
    """The per-request SLOs an autoscaled run (and a day plan) is judged by: positive seconds."""
    from simserve.errors import SimserveError

    for flag, v in (("--ttft-slo", ttft_slo), ("--tpot-slo", tpot_slo)):
        if not v > 0:
            raise SimserveError(f"{flag} must be a positive number of seconds, got {v}")


def configure(
    scenario,
    autoscale: str,
    policy: str,
    interval: float | None,
    target: float | None,
    cold_start_s: float | None,
    weights_from: str,
    capacity: float | None,
    ttft_slo: float,
    tpot_slo: float,
):
    """The scenario with its AutoscaleConfig, and the cold start's parts (None when --cold-start-s gave
    it)."""
    from simserve.errors import SimserveError
    from simserve.sim.autoscale import AutoscaleConfig, parse_autoscale
    from simserve.sim.cold_start import cold_start

    lo, hi = parse_autoscale(autoscale)
    if capacity is not None and policy != "slo":
        raise SimserveError(
            f"--replica-capacity is the slo policy's; --scale-policy {policy} does not read it: "
            "drop it, or use --scale-policy slo"
        )
    check_slos(ttft_slo, tpot_slo)
    parts = None
    if cold_start_s is None:
        parts = cold_start(scenario, weights_from)
        cold_start_s = parts.total_s
    cfg = AutoscaleConfig(lo, hi, policy, scenario.num_replicas, interval, cold_start_s, target, capacity)
    if policy != "slo" or capacity is not None:
        return replace(scenario, autoscale=cfg.validate()), parts
    replace(cfg, capacity_qps=1.0).validate()  # the rest before the search, so a bad flag costs nothing
    cfg = replace(cfg, capacity_qps=replica_capacity(scenario, ttft_slo, tpot_slo))
    return replace(scenario, autoscale=cfg.validate()), parts


def replica_capacity(scenario, ttft_slo: float, tpot_slo: float) -> float:
    """One replica's capacity (requests/s) at P99 TTFT <= ttft_slo and P99 TPOT <= tpot_slo, on the run's
    model, GPU, engine and trace with Poisson arrivals: simserve's capacity search, its probes in the
    cache."""
    from simserve.cachedir import cache_root
    from simserve.errors import SimserveError
    from simserve.tune.jobs import CapacityTask, solve
    from simserve.tune.probe import ProbeCache
    from simserve.tune.slo import SLO

    one = replace(
        scenario,
        num_replicas=1,
        autoscale=None,
        arrival="poisson",
        time_scale=1.0,
        cv=1.0,
        stop_when_overloaded=True,
        num_requests=min(scenario.num_requests, 2048),
    )
    slo = SLO(tbt_s=None, scheduling_delay_s=None, ttft_s=ttft_slo, tpot_s=tpot_slo)
    result = solve(CapacityTask(one, slo), ProbeCache(cache_root() / "probes"))
    if not result.capacity_qps > 0:
        raise SimserveError(
            f"one replica meets {slo.describe()} at no rate ({result.message or result.limited_by}); "
            "loosen --ttft-slo/--tpot-slo, or give --replica-capacity"
        )
    return float(result.capacity_qps)
