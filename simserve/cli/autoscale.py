"""`simserve run --autoscale MIN:MAX`: the autoscaler's configuration and what it writes (its options are in
run.py: a warm run without --autoscale imports no other command module).

The policies and the controller are sim/autoscale.py and sim/scale_policies.py; a replica's cold start is
sim/cold_start.py; replicas.csv, summary.json's `autoscale` section and replicas.png are sim/scale_report.py's.
The slo policy's per-replica capacity is simserve's own capacity search on one replica of the run's deployment
at the run's SLO (tune/capacity.py), its probes cached as a sweep's are (`simserve cache`), unless given.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path


def check_flags(autoscale: str | None, disaggregated: bool, given: dict[str, bool]) -> None:
    """The autoscaler's flags need --autoscale, and it cannot scale a disaggregated run: one line, before work."""
    from simserve.errors import SimserveError

    if autoscale is None:
        flag = next((f for f, set_ in given.items() if set_), None)
        if flag:
            raise SimserveError(
                f"{flag} belongs to the autoscaler: add --autoscale MIN:MAX (e.g. 1:8), or drop it"
            )
        return
    if disaggregated:
        raise SimserveError("--autoscale scales aggregated replicas; a disaggregated run (--prefill/--decode) is not "
                            "modelled with it: drop --autoscale, or --prefill and --decode")  # fmt: skip


def configure(scenario, autoscale: str, policy: str, interval: float | None, target: float | None,
              cold_start_s: float | None, weights_from: str, capacity: float | None, ttft_slo: float,
              tpot_slo: float):  # fmt: skip
    """The scenario with its AutoscaleConfig, and the cold start's parts (None when --cold-start-s gave it)."""
    from simserve.errors import SimserveError
    from simserve.sim.autoscale import AutoscaleConfig, parse_autoscale
    from simserve.sim.cold_start import cold_start

    lo, hi = parse_autoscale(autoscale)
    if capacity is not None and policy != "slo":
        raise SimserveError(f"--replica-capacity is the slo policy's; --scale-policy {policy} does not read it: "
                            "drop it, or use --scale-policy slo")  # fmt: skip
    for flag, v in (("--ttft-slo", ttft_slo), ("--tpot-slo", tpot_slo)):
        if not v > 0:
            raise SimserveError(f"{flag} must be a positive number of seconds, got {v}")
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
    """One replica's capacity (requests/s) at P99 TTFT <= ttft_slo and P99 TPOT <= tpot_slo, on the run's model,
    GPU, engine and trace with Poisson arrivals: simserve's capacity search, its probes in the cache."""
    from simserve.cachedir import cache_root
    from simserve.errors import SimserveError
    from simserve.tune.jobs import CapacityTask, solve
    from simserve.tune.probe import ProbeCache
    from simserve.tune.slo import SLO

    one = replace(scenario, num_replicas=1, autoscale=None, arrival="poisson", time_scale=1.0, cv=1.0,
                  stop_when_overloaded=True, num_requests=min(scenario.num_requests, 2048))  # fmt: skip
    slo = SLO(tbt_s=None, scheduling_delay_s=None, ttft_s=ttft_slo, tpot_s=tpot_slo)
    result = solve(CapacityTask(one, slo), ProbeCache(cache_root() / "probes"))
    if not result.capacity_qps > 0:
        raise SimserveError(f"one replica meets {slo.describe()} at no rate ({result.message or result.limited_by}); "
                            "loosen --ttft-slo/--tpot-slo, or give --replica-capacity")  # fmt: skip
    return float(result.capacity_qps)


def write_outputs(
    tmp: Path, raw, scenario, dep, parts, ttft_slo: float, tpot_slo: float, plots: bool
) -> dict:
    """replicas.csv (and replicas.png) into the run's folder; returns summary.json's `autoscale` section."""
    from simserve.sim.scale_report import plot_replicas, scaling_summary, write_replicas_csv

    section = scaling_summary(raw, dep.num_gpus, ttft_slo, tpot_slo)
    section["cold_start"] = parts.as_dict() if parts is not None else {"total_s": scenario.autoscale.cold_start_s,
                                                                        "given": True}  # fmt: skip
    write_replicas_csv(tmp / "replicas.csv", raw)
    if plots:
        plot_replicas(tmp / "replicas.png", raw, section)
    return section


def describe(section: dict) -> str:
    """The run's printed line about its autoscaler."""
    cold = section["cold_start"]
    how = ("given" if cold.get("given") else f"weights {cold['weights_s']:.1f} s from {cold['storage']} + compile "
           f"{cold['compile_s']:.1f} + CUDA graphs {cold['capture_s']:.1f} + engine {cold['engine_s']:.1f}")  # fmt: skip
    cap = section["replica_capacity_qps"]
    return (f"autoscaler: --scale-policy {section['policy']} {section['min_replicas']}:{section['max_replicas']}, "
            f"every {section['interval_s']:g} s" + (f", {cap:.3g} qps per replica" if cap else "")
            + f"; cold start {cold['total_s']:.1f} s ({how}); {section['scale_events']} changes; "
            f"{section['gpu_hours']:.3g} GPU-h vs {section['static_peak_gpu_hours']:.3g} static at the peak "
            f"({section['gpu_hours_saved']:.0%} saved); SLO (TTFT <= {section['slo']['ttft_s']:g} s, TPOT <= "
            f"{section['slo']['tpot_s']:g} s) met by {section['slo_attainment']:.1%} of requests")  # fmt: skip


def scenario_echo(fields: dict) -> dict:
    """summary.json's scenario with the autoscaler's configuration as a plain mapping."""
    if fields.get("autoscale") is not None:
        fields = {**fields, "autoscale": asdict(fields["autoscale"])}
    return fields
