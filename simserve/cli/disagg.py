"""`simserve run --prefill 2xTP2 --decode 1xTP4`: simulate a disaggregated deployment
(simserve/sim/disagg.py); print a summary with per-pool utilisation and KV-transfer percentiles, write the
tables and a Perfetto trace."""

from __future__ import annotations

import json
from pathlib import Path


def run_disaggregated(
    scenario,
    prefill: str | None,
    decode: str | None,
    kv_link: str | None,
    decode_router: str,
    qps: float,
    out: Path | None,
    force: bool,
    fmt: str,
    iterations: str,
) -> None:
    from dataclasses import replace

    from simserve.cli.console import console as make_console
    from simserve.cli.outputs import check_served, jsonable
    from simserve.errors import SimserveError
    from simserve.io import check_out_dir, output_dir
    from simserve.resolve import for_scenario
    from simserve.sim.disagg import transfer_summary
    from simserve.sim.disagg_scenario import DisaggScenario, PoolSpec, run_disagg
    from simserve.sim.metrics import summarize
    from simserve.sim.perfetto import write_disagg_trace
    from simserve.sim.writers import write_tables
    from simserve.tune.probe import scenario_fields

    if prefill is None or decode is None:
        raise SimserveError(
            "a disaggregated run needs both pools: pass --prefill and --decode (e.g. 2xTP2 and 1xTP4)"
        )
    given = [
        f"--{k} {v}"
        for k, v in (("tp", scenario.tp), ("pp", scenario.pp), ("replicas", scenario.num_replicas))
        if v != 1
    ]
    if given:
        raise SimserveError(
            f"{', '.join(given)} describe{'s' if len(given) == 1 else ''} an aggregated deployment; a "
            "disaggregated run takes each pool's replicas, TP and PP in --prefill/--decode (e.g. --prefill "
            f"2xTP2 --decode 1xTP4PP2): drop {', '.join(given)}"
        )
    ds = DisaggScenario.create(
        scenario,
        PoolSpec.parse(prefill, "--prefill"),
        PoolSpec.parse(decode, "--decode"),
        kv_link,
        decode_router,
    )
    ds.check()  # one line naming the pool that does not fit, or the missing link, before anything is written
    trace = Path(scenario.trace).name.split(".")[0]
    name = f"{Path(scenario.model).name}-disagg-{ds.label()}-{scenario.policy}-{trace}"
    out = check_out_dir(out or Path("runs") / f"{name}-qps{qps:g}-s{scenario.seed}", force)
    console = make_console()
    pools = []
    for s in (ds.prefill, ds.decode):
        s, generated = for_scenario(s)
        if generated:
            console.print(generated, highlight=False, soft_wrap=True)
        pools.append(s)
    ds = replace(ds, prefill=pools[0], decode=pools[1])
    run = run_disagg(ds, qps)
    summary = summarize(run.raw).as_dict()

    check_served(summary, ds.prefill)  # every request dropped: an error, before anything is written
    pools_doc = transfer_summary(run)
    from simserve.predictor.load import profile_label
    from simserve.sim.scenario import workload_drops, workload_notes

    profiles = {
        side: profile_label(s.deployment(), s.profiles_root)
        for side, s in (("prefill", ds.prefill), ("decode", ds.decode))
    }
    notes = workload_notes(ds.prefill) + [
        f"{side} op times from a {label} profile" for side, label in profiles.items()
    ]
    with output_dir(out, force) as tmp:
        write_tables(run.raw, tmp, fmt, iterations)
        write_disagg_trace(tmp / "trace.json", run.raw.log, run.num_prefill, run.transfers, run.link)
        _write_transfers(tmp / "transfers.csv", run)
        doc = {
            "prefill": scenario_fields(ds.prefill),
            "decode": scenario_fields(ds.decode),
            "layout": ds.label(),
            "qps": qps,
            "summary": summary,
            "disaggregation": pools_doc,
            "notes": notes,
            "trace_dropped": workload_drops(ds.prefill),
            "profiles": profiles,
            "step_parts": _step_parts(ds, run),
        }
        (tmp / "summary.json").write_text(json.dumps(jsonable(doc), indent=2, sort_keys=True) + "\n")
    _print(console, ds, qps, summary, pools_doc, out)
    from simserve.cli.console import note

    for line in notes:
        console.print(note(line))


def _step_parts(ds, run) -> dict:
    """Each pool's step breakdown (sim/step_parts.py): the prefill pool is replicas 0..num_prefill-1 of the
    log."""
    from simserve.sim.scenario import scenario_timer
    from simserve.sim.step_parts import breakdown

    n, total = run.num_prefill, len(run.raw.replicas)
    return {
        side: {
            "switches": s.step_parts(),
            **breakdown(
                run.raw.log, scenario_timer(s), s.deployment(), span, s.sim_config().kv_block_tokens()
            ),
        }
        for side, s, span in (("prefill", ds.prefill, (0, n)), ("decode", ds.decode, (n, total)))
    }


def _write_transfers(path: Path, run) -> None:
    """One row per request whose KV moved: which replicas, when it was prefilled, queued, started and
    arrived."""
    import numpy as np

    t, ids = run.transfers, run.raw.request_ids
    lines = ["request_id,prefill_replica,decode_replica,prefilled_at_s,queued_at_s,start_s,end_s,bytes"]
    for rid in np.flatnonzero(~np.isnan(t.end)).tolist():
        lines.append(
            f"{ids[rid]},{t.prefill_replica[rid]},{run.raw.reqs.replica[rid] - run.num_prefill},"
            f"{t.prefilled[rid]!r},{t.queued[rid]!r},{t.start[rid]!r},{t.end[rid]!r},{int(t.nbytes[rid])}"
        )
    path.write_text("\n".join(lines) + "\n")


def _print(console, ds, qps: float, s: dict, d: dict, out: Path) -> None:
    from rich.table import Table

    p, dec = ds.prefill, ds.decode
    table = Table(
        title=f"{p.policy} on {p.model}, disaggregated {ds.label()} ({p.gpu} prefill, {dec.gpu} decode), "
        f"{p.trace} at {qps:g} QPS"
    )
    for col in ("metric", "p50", "p90", "p99"):
        table.add_column(col, justify="right" if col != "metric" else "left")
    rows = [
        (label, [s[f"{key}_p{q}_s"] for q in (50, 90, 99)])
        for label, key in (
            ("TTFT (s)", "ttft"),
            ("TBT (s)", "tbt"),
            ("scheduling delay (s)", "scheduling_delay"),
            ("end-to-end (s)", "e2e"),
        )
    ]
    rows += [
        ("decode admission wait (s)", list(d["decode_admission_wait_s"].values())),
        ("KV link queue (s)", list(d["link_queue_s"].values())),
        ("KV transfer (s)", list(d["transfer_s"].values())),
    ]
    for label, values in rows:
        table.add_row(label, *(f"{v:.4g}" for v in values))
    console.print(table)
    from simserve.cli.console import styled

    status = (("OVERLOADED", "red"), " ") if s["overloaded"] else ()
    console.print(
        styled(
            *status,
            f"{s['completed']}/{s['num_requests']} completed, {s['ignored']} ignored, {s['preemptions']} "
            f"preemptions; {s['throughput_rps']:.3g} req/s, {s['throughput_tps']:.4g} tokens/s over "
            f"{s['duration_s']:.1f} s\nprefill busy {d['prefill_utilization']:.0%}, decode busy "
            f"{d['decode_utilization']:.0%}; KV blocks per replica: prefill "
            f"{d['prefill_kv_blocks_per_replica']}, decode {d['decode_kv_blocks_per_replica']}; "
            f"{d['transfers']} transfers, {d['kv_moved_gib']:.1f} GiB over {d['link']}\nTTFT includes the "
            "prefill, the decode admission wait, the transfer and the decode side's first step (vLLM's "
            f"proxy streams every token from the decode instance)\nwrote {out}/",
        )
    )
