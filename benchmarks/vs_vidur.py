"""simserve beside Vidur on identical inputs: the same profile, requests, arrivals, deployment, policy and
QPS.

    python benchmarks/vs_vidur.py --quick  # 300 arXiv requests, Sarathi 512, one QPS (~1 min warm)
    python benchmarks/vs_vidur.py          # 2000 requests, Sarathi 512 and vLLM, two QPS + experiments

What is identical, and how:
* profile: simserve's shipped profile (profiles/a100-80gb/llama-2-7b) exported with `simserve vidur export`;
  simserve fits its predictor on the same tables.
* requests: one seeded sample of the trace (prompt + output <= max model length, so neither simulator clips)
  with seeded Poisson arrivals from simserve.workload.arrivals; Vidur replays that exact list through its
  `trace_replay` generator (Time = arrival in seconds), not its own length shuffler and Poisson generator.
* deployment and policy: Llama-2-7B, one A100-80GB, TP1, block 16, max batch 128, Sarathi chunk / vLLM token
  budget, 1 % watermark; KV blocks = simserve's plan_memory, passed to Vidur as --cache_config_num_blocks
  (Vidur's own planner gives a different count: the `memory` experiment shows how many and what it changes).
* metrics: computed the same way from each side's per-request times (TTFT = first token - arrival, scheduling
  delay = first scheduled - arrival, e2e = completion - arrival; numpy percentiles); TBT from each side's
  0.1 %-accurate sketch of every gap between a request's consecutive output tokens.

Heavy one-time steps are cached: the venv (.venv-vidur/) and Vidur's trained predictors (.vidur-cache/<key>/,
keyed by the exported profile's bytes, the RF grid and the prediction range). Results go to
.vidur-cache/results/.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
import vidur_runner as vr  # noqa: E402
from side_by_side import (  # noqa: E402
    METRICS,
    Bench,
    Side,
    dep_for,
    export_profile,
    md_table,
    run_simserve,
    run_vidur,
    sim_config,
    vidur_setup,
    workload,
)

from simserve.deployment import Deployment  # noqa: E402
from simserve.predictor.load import load_timer  # noqa: E402
from simserve.predictor.overhead import CpuOverhead  # noqa: E402
from simserve.profiling.schema import profile_dir, read_profile  # noqa: E402
from simserve.workload.arrivals import arrival_times  # noqa: E402
from simserve.workload.trace import load_trace  # noqa: E402


def compare_table(ours: Side, theirs: Side) -> pd.DataFrame:
    rows = []
    for key in [f"{m}_p{q}" for m in METRICS for q in (50, 99)] + ["makespan"]:
        s, v = ours.stats[key], theirs.stats[key]
        rows.append(
            {"metric": key, "simserve_s": s, "vidur_s": v, "diff_pct": 100 * (s - v) / v if v else np.nan}
        )
    return pd.DataFrame(rows)


def speed_table(n: int, ours: Side, theirs: Side) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "simulator": name,
                "wall_s": s.wall_s,
                "setup_s": s.setup_s,
                "sim_s": s.sim_s,
                "req_per_s_sim": n / s.sim_s,
                "req_per_s_wall": n / s.wall_s,
            }
            for name, s in (("simserve", ours), ("vidur", theirs))
        ]
    )


# -- targeted experiments: where the two disagree, which one is right ----------------------------------------


def probe_batches(max_len: int) -> list[tuple[str, list[tuple[int, int]], list[int]]]:
    """(label, prefills as (chunk, prefix), decode context lengths): points of the profile's own grid."""
    out = [(f"decode b={b} L={L}", [], [L] * b) for b in (1, 8, 32, 128) for L in (448, 1472, 3632)]
    pre = [
        (128, 0),
        (256, 0),
        (257, 0),
        (512, 0),
        (2048, 0),
        (4096, 0),
        (512, 1088),
        (512, 2688),
        (128, 3632),
        (2048, 1984),
    ]
    out += [(f"prefill c={c} p={p}", [(c, p)], []) for c, p in pre if c + p <= max_len]
    out += [(f"mixed {b} decodes L=1472 + c=384 p=1088", [(384, 1088)], [1472] * b) for b in (32, 128)]
    return out


def profile_truth(dep: Deployment, prefills, decodes, attention_only: bool = False) -> float:
    """The batch time the profile itself states, summed as simserve.ops does (NaN off the profile's grid)."""
    prof = read_profile(profile_dir(Path(vr.ROOT, "profiles"), dep.gpu.name, dep.model.name))
    from simserve.ops import elementwise_ops

    t = sum(c for c, _ in prefills) + len(decodes)
    ops = pd.concat([prof.linear, prof.elementwise])
    at_t = ops[(ops.tp == dep.tp) & (ops.num_tokens == t)].groupby("op").time_ms.median()
    counts = {op.name: op.count for op in elementwise_ops(dep)}
    if len(at_t) < 9:
        return np.nan
    ms = 0.0 if attention_only else sum(v * counts.get(op, 1) for op, v in at_t.items())
    att = prof.attention[prof.attention.tp == dep.tp]
    for c, p in prefills:
        hit = att[(att.phase == "prefill") & (att.chunk == c) & (att.kv_len == p)].time_ms
        ms += hit.median() if len(hit) else np.nan
    if decodes:
        hit = att[
            (att.phase == "decode") & (att.batch_size == len(decodes)) & (att.kv_len == decodes[0])
        ].time_ms
        ms += hit.median() if len(hit) else np.nan
    return ms if attention_only else ms * dep.layers_per_stage / 1e3


def predictor_experiment(b: Bench, dep: Deployment, python: Path, export: Path, out: Path) -> pd.DataFrame:
    """Iteration time of the same batches: profile, simserve (with and without CPU overhead), Vidur."""
    setup = vidur_setup(b, "sarathi", None)
    staged = vr.stage_profile(export, setup)
    batches = probe_batches(b.max_model_len)

    # Vidur's batch: q tokens and kv tokens *including* this step's (num_processed_tokens + q), as its
    # scheduler builds them; a decode over L cached tokens therefore has kv = L + 1. The counterfactual
    # `vidur_prefix_key` looks prefill attention up at the prefix alone, which is what the profile's
    # kv_cache_size column means (Vidur's profiler: processed_len) and what Vidur's GitHub code uses.
    def vidur_batches(prefill_kv):
        return [
            ([c for c, _ in pre] + [1] * len(dec), [prefill_kv(c, p) for c, p in pre] + [L + 1 for L in dec])
            for _, pre, dec in batches
        ]

    trace = vr.write_replay_trace(out / "probe-trace.csv", np.array([0.0]), np.array([16]), np.array([2]))
    vid = vr.vidur_batch_times(python, setup, staged, trace, vidur_batches(lambda c, p: p + c), out / "probe")
    fixed = vr.vidur_batch_times(
        python, setup, staged, trace, vidur_batches(lambda c, p: p), out / "probe-fixed"
    )
    bare, full = load_timer(dep, overhead=CpuOverhead(scale=0.0)), load_timer(dep)
    rows = []
    for (label, pre, dec), v, f, fa in zip(
        batches, vid.total_s, fixed.total_s, fixed.prefill_attn_ms + fixed.decode_attn_ms, strict=True
    ):
        truth = profile_truth(dep, pre, dec)
        rows.append(
            {
                "batch": label,
                "profile_ms": 1e3 * truth,
                "simserve_gpu_ms": 1e3 * bare(pre, dec),
                "simserve_ms": 1e3 * full(pre, dec),
                "vidur_ms": 1e3 * v,
                "vidur_prefix_key_ms": 1e3 * f,
                # one layer's attention: the profile's row vs Vidur's random forest at the same key
                "attn_profile_ms": profile_truth(dep, pre, dec, attention_only=True),
                "attn_vidur_rf_ms": fa,
            }
        )
    df = pd.DataFrame(rows)
    for col in ("simserve_gpu_ms", "vidur_ms", "vidur_prefix_key_ms"):
        df[col.replace("_ms", "_err_pct")] = 100 * (df[col] - df.profile_ms) / df.profile_ms
    df["attn_vidur_rf_err_pct"] = 100 * (df.attn_vidur_rf_ms - df.attn_profile_ms) / df.attn_profile_ms
    return df


def run_all_experiments(b: Bench, dep: Deployment, python: Path, export: Path, out: Path, base: dict) -> dict:
    res: dict = {}
    print("\n## experiment: iteration time of fixed batches (profile = truth both try to reproduce)")
    pred = predictor_experiment(b, dep, python, export, out)
    print(md_table(pred), flush=True)
    res["predictor"] = pred.to_dict("records")

    policy, qps = b.policies[0], b.qps[-1]
    work, (ours, theirs) = workload(b, qps), base[(policy, qps)]
    cfg = sim_config(b, policy)
    print(f"\n## experiment: simserve without CPU overhead vs Vidur ({policy}, QPS {qps:g})")
    bare = run_simserve(dep, cfg, work, overhead=CpuOverhead(scale=0.0))
    cmp = compare_table(bare, theirs).assign(with_overhead_diff_pct=compare_table(ours, theirs).diff_pct)
    print(md_table(cmp), flush=True)
    res["no_cpu_overhead"] = cmp.to_dict("records")

    print(f"\n## experiment: Vidur's own KV planner vs simserve's block count ({policy}, QPS {qps:g})")
    case = out / f"{policy}-qps{qps:g}-vidur-memory"
    case.mkdir()
    own, _ = run_vidur(python, export, vidur_setup(b, policy, None), work, case)
    cmp = compare_table(own, theirs).rename(
        columns={"simserve_s": "vidur_own_blocks_s", "vidur_s": "vidur_aligned_s"}
    )
    print(f"blocks: simserve plan_memory {ours.num_blocks}, Vidur's planner {own.num_blocks}")
    print(md_table(cmp), flush=True)
    res["memory"] = {
        "simserve_blocks": ours.num_blocks,
        "vidur_blocks": own.num_blocks,
        "compare": cmp.to_dict("records"),
    }

    print(f"\n## experiment: arrival process and sampling noise (simserve only, {policy}, QPS {qps:g})")
    rows = {}
    for name, proc, seed in (
        ("other seed", "poisson", b.seed + 1),
        ("clipped gaps (Vidur/Sarathi)", "poisson-clipped", b.seed),
    ):
        trace = load_trace(b.trace, max_total_tokens=b.max_model_len).sample(b.num_requests, seed=seed)
        arrived = arrival_times(b.num_requests, qps, proc, seed=seed)
        alt = run_simserve(dep, cfg, (trace.prompt_tokens, trace.output_tokens, arrived))
        rows[name] = compare_table(alt, ours).set_index("metric").diff_pct
    noise = pd.DataFrame(rows).reset_index()
    print(md_table(noise), flush=True)
    res["arrivals"] = noise.to_dict("records")
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="300 requests, Sarathi only, QPS 1, no experiments")
    ap.add_argument("--requests", type=int, help="requests per run")
    ap.add_argument("--qps", type=float, nargs="+", help="request rates")
    ap.add_argument("--policies", nargs="+", choices=("sarathi", "vllm"), help="policies to compare")
    ap.add_argument(
        "--grid", choices=("reduced", "default"), default="reduced", help="Vidur's RF grid search"
    )
    ap.add_argument("--no-experiments", action="store_true", help="skip the targeted experiments")
    ap.add_argument("--out", type=Path, default=vr.CACHE / "results", help="where tables and logs go")
    args = ap.parse_args(argv)

    b = Bench(grid=vr.DEFAULT_GRID if args.grid == "default" else vr.REDUCED_GRID)
    if args.quick:
        b = replace(b, num_requests=300, policies=("sarathi",), qps=(1.0,))
    b = replace(
        b,
        num_requests=args.requests or b.num_requests,
        qps=tuple(args.qps or b.qps),
        policies=tuple(args.policies or b.policies),
    )
    run_experiments = not (args.quick or args.no_experiments)
    out = args.out / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    print(f"[setup] vidur {vr.VIDUR_VERSION}; RF grid: {b.grid.describe()}; output in {out}", flush=True)
    python = vr.ensure_venv()
    dep = dep_for(b)
    with tempfile.TemporaryDirectory() as tmp:
        export = export_profile(b, Path(tmp) / "export")
        base: dict = {}
        report: dict = {
            "bench": asdict(b),
            "vidur_version": vr.VIDUR_VERSION,
            "deployment": dep.describe(),
            "runs": [],
        }
        for policy in b.policies:
            for qps in b.qps:
                work = workload(b, qps)
                case = out / f"{policy}-qps{qps:g}"
                case.mkdir()
                ours = run_simserve(dep, sim_config(b, policy), work)
                setup = vidur_setup(b, policy, ours.num_blocks)
                theirs, _ = run_vidur(python, export, setup, work, case)
                base[(policy, qps)] = (ours, theirs)
                cmp, spd = compare_table(ours, theirs), speed_table(b.num_requests, ours, theirs)
                print(f"\n## {policy}, QPS {qps:g}, {b.num_requests} requests, {ours.num_blocks} KV blocks")
                print(md_table(cmp))
                print(md_table(spd), flush=True)
                report["runs"].append(
                    {
                        "policy": policy,
                        "qps": qps,
                        "compare": cmp.to_dict("records"),
                        "speed": spd.to_dict("records"),
                    }
                )
        if run_experiments:
            report["experiments"] = run_all_experiments(b, dep, python, export, out, base)
    (out / "report.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(f"\nwrote {out / 'report.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
