"""`simserve run --autoscale MIN:MAX`: the autoscaler's configuration and what it writes (its options are in
run.py: a warm run without --autoscale imports no other command module).

The policies and the controller are sim/autoscale.py and sim/scale_policies.py; a replica's cold start is
sim/cold_start.py; replicas.csv, summary.json's `autoscale` section and replicas.png are
sim/scale_report.py's. The autoscaler's configuration from the flags, with the slo policy's per-replica
capacity, is tune/autoscaling.py's (`plan`'s day plan uses it too).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path


def check_flags(autoscale: str | None, disaggregated: bool, given: dict[str, bool]) -> None:
    """The autoscaler's flags need --autoscale, and it cannot scale a disaggregated run: one line, before
    work."""
    from simserve.errors import SimserveError

    if autoscale is None:
        flag = next((f for f, set_ in given.items() if set_), None)
        if flag:
            raise SimserveError(
                f"{flag} belongs to the autoscaler: add --autoscale MIN:MAX (e.g. 1:8), or drop it"
            )
        return
    if disaggregated:
        raise SimserveError(
            "--autoscale scales aggregated replicas; a disaggregated run (--prefill/--decode) is not "
            "modelled with it: drop --autoscale, or --prefill and --decode"
        )


def write_outputs(
    tmp: Path, raw, scenario, dep, parts, ttft_slo: float, tpot_slo: float, plots: bool
) -> dict:
    """replicas.csv (and replicas.png) into the run's folder; returns summary.json's `autoscale` section."""
    from simserve.sim.scale_report import plot_replicas, scaling_summary, write_replicas_csv

    section = scaling_summary(raw, dep.num_gpus, ttft_slo, tpot_slo)
    section["cold_start"] = (
        parts.as_dict() if parts is not None else {"total_s": scenario.autoscale.cold_start_s, "given": True}
    )
    write_replicas_csv(tmp / "replicas.csv", raw)
    if plots:
        plot_replicas(tmp / "replicas.png", raw, section)
    return section


def describe(section: dict) -> str:
    """The run's printed line about its autoscaler."""
    cold = section["cold_start"]
    how = (
        "given"
        if cold.get("given")
        else f"weights {cold['weights_s']:.1f} s from {cold['storage']} + compile "
        f"{cold['compile_s']:.1f} + CUDA graphs {cold['capture_s']:.1f} + engine {cold['engine_s']:.1f}"
    )
    cap = section["replica_capacity_qps"]
    return (
        f"autoscaler: --scale-policy {section['policy']} "
        f"{section['min_replicas']}:{section['max_replicas']}, every {section['interval_s']:g} s"
        + (f", {cap:.3g} qps per replica" if cap else "")
        + f"; cold start {cold['total_s']:.1f} s ({how}); {section['scale_events']} changes; "
        f"{section['gpu_hours']:.3g} GPU-h vs {section['static_peak_gpu_hours']:.3g} static at the peak "
        f"({section['gpu_hours_saved']:.0%} saved); SLO (TTFT <= {section['slo']['ttft_s']:g} s, TPOT <= "
        f"{section['slo']['tpot_s']:g} s) met by {section['slo_attainment']:.1%} of requests"
    )


def scenario_echo(fields: dict) -> dict:
    """summary.json's scenario with the autoscaler's configuration as a plain mapping."""
    if fields.get("autoscale") is not None:
        fields = {**fields, "autoscale": asdict(fields["autoscale"])}
    return fields
