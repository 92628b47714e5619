"""What is left between simserve and Vidur near capacity once the two known differences are removed.

    python benchmarks/vidur_residual.py                     # Sarathi 512, QPS 2, 2000 arXiv-like requests
    python benchmarks/vidur_residual.py --preemption-crash
        # Vidur 0.0.26 on a KV pool small enough to preempt

The inputs are benchmarks/vs_vidur.py's (same profile, requests, arrivals, blocks, policy). Removed on both
sides:
* CPU overhead: simserve runs with `CpuOverhead(scale=0)` (Vidur 0.0.26 models none);
* Vidur's prefill-attention key: patched in Vidur's interpreter to look prefill attention up at the prefix
  before the chunk (what the profile's kv_cache_size means), keeping Vidur's rounding up to 256.

Then the residual is taken apart:
(a) every batch Vidur ran is recorded with its own predicted time (the random forests' predictions) and timed
    again by simserve's predictor: ratios per kind of batch (decode-only, mixed, prefill-heavy);
(b) simserve is re-run with its batch times scaled by those per-kind ratios;
(c) simserve is re-run with Vidur's own batch-time formula (its prediction tables, dumped from the run and
    checked against every recorded batch), then with Vidur's times for one component at a time (token-count
    ops vs attention): what is left after (c) is scheduling and bookkeeping, not batch time.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
import side_by_side as vs  # noqa: E402
import vidur_runner as vr  # noqa: E402

from simserve.predictor.load import load_timer  # noqa: E402
from simserve.predictor.overhead import CpuOverhead  # noqa: E402

LINEAR = ("qkv_proj", "o_proj", "up_proj", "down_proj")
KINDS = ("decode-only", "mixed", "prefill-heavy")
SHOWN = (
    "ttft_p50",
    "ttft_p99",
    "scheduling_delay_p50",
    "scheduling_delay_p99",
    "tbt_p50",
    "e2e_p50",
    "makespan",
)

# Runs in Vidur's interpreter before the simulator is built. SIMSERVE_PREFIX_KEY=1 replaces 0.0.26's
# _get_batch_prefill_attention_params, which keys prefill attention at num_kv_tokens = prefix + chunk, by the
# prefix alone (its profiler's processed_len; Vidur's GitHub code uses num_processed_tokens). Every batch's
# composition and predicted time is recorded; the prediction tables are kept for the epilogue.
_PRELUDE = r"""
import json as _json, os as _os
from vidur.execution_time_predictor.base_execution_time_predictor import BaseExecutionTimePredictor as _Base
from vidur.execution_time_predictor.sklearn_execution_time_predictor import SklearnExecutionTimePredictor as _SK
if _os.environ.get("SIMSERVE_PREFIX_KEY") == "1":
    def _prefill_params(self, batch):
        g = self._config.kv_cache_prediction_granularity
        return [((kv - q + g - 1) // g * g, q) for q, kv in zip(batch.num_q_tokens, batch.num_kv_tokens) if q != 1]
    _SK._get_batch_prefill_attention_params = _prefill_params
_RECORD, _PRED = [], []
_get = _Base.get_execution_time
def _recorded(self, batch, stage):
    et = _get(self, batch, stage)
    if not _PRED:
        _PRED.append(self)
    pre, nd, dkv = [], 0, 0
    for r, q, kv in zip(batch.requests, batch.num_q_tokens, batch.num_kv_tokens):
        if r.is_prefill_complete:
            nd, dkv = nd + 1, dkv + kv
        else:
            pre.append((q, kv))
    _RECORD.append((stage, pre, nd, dkv, et.total_time, et.attention_prefill_execution_time,
                    et.attention_decode_execution_time))
    return et
_Base.get_execution_time = _recorded
"""  # noqa: E501

_EPILOGUE = r"""
_json.dump(_RECORD, open(out + "/batches.json", "w"))
_json.dump({op: [[*map(int, k), float(v)] for k, v in table.items()] for op, table in _PRED[0]._predictions.items()},
           open(out + "/predictions.json", "w"))
"""  # noqa: E501


# -- Vidur's batch time, rebuilt from its prediction tables --------------------------------------------------


class VidurTimer:
    """Vidur 0.0.26's iteration time (SklearnExecutionTimePredictor + ExecutionTime) with simserve's
    interface.

    Per layer: the nine token-count ops at T rounded up to a multiple of 8, decode attention at (number of
    decodes, mean KV rounded up to 256), each prefill chunk at (prefix rounded up to 256 [the prefix key] or
    prefix + chunk [0.0.26], chunk rounded up to 32); times layers; TP1/PP1, so no communication. Vidur counts
    the token a decode step produces in its KV (kv = simserve's decode context + 1). `parts` selects which
    components come from Vidur; the others come from `other` (simserve's timer) via its breakdown.
    """

    TOKEN_OPS = (
        "attn_pre_proj",
        "attn_post_proj",
        "attn_rope",
        "mlp_up_proj",
        "mlp_down_proj",
        "mlp_act",
        "input_layernorm",
        "post_attention_layernorm",
        "add",
    )

    def __init__(
        self, predictions: dict, layers: int, prefix_key: bool, parts=("token", "attention"), other=None
    ):
        self.num_stages = 1
        self.layers, self.prefix_key, self.parts, self.other = layers, prefix_key, set(parts), other
        if self.parts != {"token", "attention"} and other is None:
            raise ValueError("a partial VidurTimer needs simserve's timer for the other parts")
        tables = {op: {tuple(row[:-1]): row[-1] for row in rows} for op, rows in predictions.items()}
        tmax = max(k[0] for k in tables["mlp_up_proj"])
        self.token_ms = np.array(
            [sum(tables[op].get((t,), math.nan) for op in self.TOKEN_OPS) for t in range(tmax + 1)]
        )
        self.decode = tables["attn_decode"]
        self.prefill = tables["attn_prefill"]

    def _decode_ms(self, nd: int, vidur_kv_sum: float) -> float:
        mean = int(vidur_kv_sum / nd)  # Vidur: int(np.mean(kv)), then up to a multiple of 256
        return self.decode[(nd, -(-mean // 256) * 256)]

    def split(self, prefills, decode_kv) -> tuple[float, float]:
        """(token-count ops, attention) in seconds, Vidur's way."""
        return self._split(prefills, len(decode_kv), float(np.sum(decode_kv)) if len(decode_kv) else 0.0)

    def _split(self, prefills, nd: int, context_sum: float) -> tuple[float, float]:
        kv_sum = context_sum + nd
        att = 0.0
        t = nd
        for chunk, prefix in prefills:
            t += chunk
            if chunk == 1:  # Vidur tells decodes by q == 1: a one-token chunk joins the decode group
                nd, kv_sum = nd + 1, kv_sum + prefix + 1
                continue
            key = prefix if self.prefix_key else prefix + chunk
            att += self.prefill[(-(-key // 256) * 256, -(-chunk // 32) * 32)]
        if nd:
            att += self._decode_ms(nd, kv_sum)
        tok = self.token_ms[-(-t // 8) * 8] if t else 0.0
        return self.layers * tok / 1e3, self.layers * att / 1e3

    def __call__(self, prefills, decode_kv, stage: int = 0) -> float:
        tok, att = self.split(prefills, decode_kv)
        if self.parts == {"token", "attention"}:
            return tok + att
        b = self.other.breakdown(prefills, decode_kv, stage)
        s_att = b["attention_prefill"] + b["attention_decode"]
        s_tok = sum(b.values()) - s_att
        return (tok if "token" in self.parts else s_tok) + (att if "attention" in self.parts else s_att)


class ScaledTimer:
    """simserve's timer with each batch's time multiplied by the ratio for its kind."""

    def __init__(self, timer, ratios: dict[str, float]):
        self.timer, self.ratios, self.num_stages = timer, ratios, timer.num_stages

    def __call__(self, prefills, decode_kv, stage: int = 0) -> float:
        return self.timer(prefills, decode_kv, stage) * self.ratios[batch_kind(prefills, len(decode_kv))]


def batch_kind(prefills, num_decodes: int) -> str:
    """decode-only; prefill-heavy when prefill chunks are at least half the batch's tokens; else mixed."""
    pre = sum(c for c, _ in prefills)
    if pre == 0:
        return "decode-only"
    return "prefill-heavy" if pre >= num_decodes else "mixed"


# -- the experiment ------------------------------------------------------------------------------------------


def run_vidur_recorded(python, export, setup, work, out: Path, prefix_key: bool):
    """Vidur with its batches and prediction tables recorded (and the prefill key patched when asked)."""
    import os

    staged = vr.stage_profile(export, setup)
    trace_csv = vr.write_replay_trace(out / "requests.csv", work[2], work[0], work[1])
    os.environ["SIMSERVE_PREFIX_KEY"] = "1" if prefix_key else "0"
    try:
        res = vr.run_vidur(python, setup, staged, trace_csv, out / "vidur", _PRELUDE, _EPILOGUE)
    finally:
        del os.environ["SIMSERVE_PREFIX_KEY"]
    if not np.allclose(res.requests["arrived_at_s"], work[2], rtol=0, atol=1e-9):
        raise RuntimeError("Vidur's arrivals differ from the replayed ones")
    q = res.tbt_quantiles
    side = vs.Side(
        vs.latency_stats(res.requests, float(q.loc[0.5]), float(q.loc[0.99])),
        res.wall_s,
        res.setup_s,
        res.sim_s,
        res.num_blocks,
    )
    batches = json.loads((res.out_dir / "batches.json").read_text())
    predictions = json.loads((res.out_dir / "predictions.json").read_text())
    return side, batches, predictions, res.requests


def per_batch(batches: list, simserve_timer, vidur_timer: VidurTimer) -> pd.DataFrame:
    """Each batch Vidur ran: its recorded time, simserve's time for it, and the rebuilt Vidur time."""
    rows = []
    for stage, pre, nd, dkv, total_s, pre_att_ms, dec_att_ms in batches:
        if stage != 0:
            continue
        prefills = [(q, kv - q) for q, kv in pre]  # Vidur's kv includes the chunk: prefix = kv - q
        # Vidur's decode kv counts the token being produced; simserve's is the context read before it
        decode_kv = np.full(nd, (dkv - nd) / nd) if nd else np.zeros(0)
        b = simserve_timer.breakdown(prefills, decode_kv)
        s_att = b["attention_prefill"] + b["attention_decode"]
        v_tok, v_att = vidur_timer.split(prefills, decode_kv)
        rows.append(
            {
                "kind": batch_kind(prefills, nd),
                "prefill_tokens": sum(q for q, _ in pre),
                "decodes": nd,
                "vidur_s": total_s,
                "vidur_rebuilt_s": v_tok + v_att,
                "vidur_attention_s": vidur_timer.layers * (pre_att_ms + dec_att_ms) / 1e3,
                "vidur_token_s": v_tok,
                "simserve_s": sum(b.values()),
                "simserve_attention_s": s_att,
                "simserve_token_s": sum(b.values()) - s_att,
            }
        )
    return pd.DataFrame(rows)


def kind_table(df: pd.DataFrame) -> pd.DataFrame:
    g = df.groupby("kind")
    t = pd.DataFrame(
        {
            "batches": g.size(),
            "vidur_busy_s": g.vidur_s.sum(),
            "ratio_time_weighted": g.vidur_s.sum() / g.simserve_s.sum(),
            "ratio_median": (df.vidur_s / df.simserve_s).groupby(df.kind).median(),
            "token_ops_ratio": g.vidur_token_s.sum() / g.simserve_token_s.sum(),
            "attention_ratio": g.vidur_attention_s.sum() / g.simserve_attention_s.sum(),
            "attention_share_vidur": g.vidur_attention_s.sum() / g.vidur_s.sum(),
        }
    ).reindex([k for k in KINDS if k in set(df.kind)])
    return t.reset_index().rename(columns={"index": "kind"})


def stats_row(name: str, side: vs.Side, ref: vs.Side) -> dict:
    row = {"run": name}
    for k in SHOWN:
        row[k] = side.stats[k]
        row[f"{k}_diff_pct"] = 100 * (side.stats[k] - ref.stats[k]) / ref.stats[k]
    return row


def residual(b: vs.Bench, python: Path, out: Path) -> dict:
    dep = vs.dep_for(b)
    policy, qps = b.policies[0], b.qps[0]
    work, cfg = vs.workload(b, qps), vs.sim_config(b, policy)
    report: dict = {"policy": policy, "qps": qps, "num_requests": b.num_requests}
    with tempfile.TemporaryDirectory() as tmp:
        export = vs.export_profile(b, Path(tmp) / "export")
        shipped = vs.run_simserve(dep, cfg, work)
        bare_timer = load_timer(dep, overhead=CpuOverhead(scale=0.0))
        bare = vs.run_simserve(dep, cfg, work, overhead=CpuOverhead(scale=0.0))
        setup = vs.vidur_setup(b, policy, shipped.num_blocks)
        runs = {}
        for name, fix in (("as-shipped", False), ("prefix-key", True)):
            (out / name).mkdir(parents=True)
            runs[name] = run_vidur_recorded(python, export, setup, work, out / name, prefix_key=fix)
            print(f"[vidur {name}] sim {runs[name][0].sim_s:.1f} s, {len(runs[name][1])} batches", flush=True)
    v_ship = runs["as-shipped"][0]
    v_fix, batches, predictions, v_requests = runs["prefix-key"]
    layers = dep.layers_per_stage

    # (a) the same batches, timed by both predictors
    vt = VidurTimer(predictions, layers, prefix_key=True)
    df = per_batch(batches, bare_timer, vt)
    rebuild_err = float(np.max(np.abs(df.vidur_rebuilt_s / df.vidur_s - 1)))
    kinds = kind_table(df)
    ratios = dict(zip(kinds.kind, kinds.ratio_time_weighted, strict=True))
    print(
        f"\n## (a) Vidur's {len(df)} batches timed by both (rebuilt Vidur time max rel. error "
        f"{rebuild_err:.2e})"
    )
    print(vs.md_table(kinds), flush=True)
    overall = float(df.vidur_s.sum() / df.simserve_s.sum())

    # (b) and (c): simserve re-run with other batch times
    alt = {
        "simserve, scaled per kind": ScaledTimer(bare_timer, ratios),
        "simserve, scaled uniformly": ScaledTimer(bare_timer, dict.fromkeys(KINDS, overall)),
        "simserve, Vidur's batch times": vt,
        "simserve, Vidur's token-count ops only": VidurTimer(
            predictions, layers, True, ("token",), bare_timer
        ),
        "simserve, Vidur's attention only": VidurTimer(predictions, layers, True, ("attention",), bare_timer),
    }
    sides = {
        "Vidur as shipped": v_ship,
        "simserve as shipped": shipped,
        "Vidur, prefix key": v_fix,
        "simserve, no CPU overhead": bare,
    }
    same_requests = {}
    for name, timer in alt.items():
        t0 = time.perf_counter()
        sides[name], reqs = run_with_timer(dep, cfg, work, timer)
        print(f"[{name}] {time.perf_counter() - t0:.1f} s", flush=True)
        if name == "simserve, Vidur's batch times":  # request by request: scheduling identical?
            same_requests = {
                col: float(np.max(np.abs(reqs[col].to_numpy() - v_requests[col].to_numpy())))
                for col in ("scheduled_at_s", "first_token_at_s", "completed_at_s")
            }
            print(
                "simserve with Vidur's batch times vs Vidur, max |difference| per request (s): "
                f"{same_requests}"
            )
    table = pd.DataFrame([stats_row(n, s, v_fix) for n, s in sides.items()])
    table.loc[0, [c for c in table.columns if c.endswith("_diff_pct")]] = [
        100 * (v_ship.stats[k] - v_fix.stats[k]) / v_fix.stats[k] for k in SHOWN
    ]
    gap = bare.stats["ttft_p50"] - v_fix.stats["ttft_p50"]
    closed = {n: 1 - (sides[n].stats["ttft_p50"] - v_fix.stats["ttft_p50"]) / gap for n in alt}
    print(f"\n## (b, c) {policy}, QPS {qps:g}: every run vs Vidur with the prefix key (diff %)")
    print(vs.md_table(table[["run"] + [f"{k}_diff_pct" for k in SHOWN]]))
    print(vs.md_table(table[["run", *SHOWN]]))
    print(
        "share of the TTFT p50 gap closed: " + ", ".join(f"{n}: {100 * c:.0f} %" for n, c in closed.items())
    )
    report |= {
        "batches": len(df),
        "rebuild_max_rel_err": rebuild_err,
        "overall_ratio": overall,
        "kinds": kinds.to_dict("records"),
        "runs": table.to_dict("records"),
        "ttft_p50_gap_closed": closed,
        "token_bins": token_bins(df).to_dict("records"),
        "same_requests_max_abs_s": same_requests,
        "busy_fraction_vidur": float(df.vidur_s.sum() / v_fix.stats["makespan"]),
    }
    print(
        f"overall busy-time ratio Vidur/simserve {overall:.4f}; Vidur busy "
        f"{report['busy_fraction_vidur']:.3f} of the makespan"
    )
    ops = token_ops_at(dep, predictions, (16, 32, 256, 512))
    print("\n## token-count ops per layer (ms): the profile, simserve, Vidur's random forest")
    print(vs.md_table(ops))
    report["token_ops"] = ops.to_dict("records")
    print("\n## busy-time ratio by batch size (tokens in the batch)")
    print(vs.md_table(token_bins(df)))
    return report


def token_ops_at(dep, predictions: dict, tokens) -> pd.DataFrame:
    """Per op at the given token counts (grid points of the profile): profile median, simserve, Vidur."""
    from simserve.ops import elementwise_ops
    from simserve.predictor.fit import ModelKey, fit
    from simserve.profiling.schema import profile_dir, read_profile
    from simserve.profiling.vidur_format import OP_MAP

    prof = read_profile(profile_dir(Path(vr.ROOT, "profiles"), dep.gpu.name, dep.model.name))
    ops = pd.concat([prof.linear, prof.elementwise])
    ops = ops[ops.tp == dep.tp].groupby(["op", "num_tokens"]).time_ms.median()
    ours = fit(prof, seed=0)
    tables = {op: {tuple(r[:-1]): r[-1] for r in rows} for op, rows in predictions.items()}
    counts = {op.name: op.count for op in elementwise_ops(dep)}
    rows = []
    for t in tokens:
        tot = {"profile": 0.0, "simserve": 0.0, "vidur": 0.0}
        for vop, sop in OP_MAP.items():
            truth, v = float(ops.loc[(sop, t)]), tables[vop][(-(-t // 8) * 8,)]
            family = "linear" if sop in LINEAR else "elementwise"
            s_ms = float(ours.predict_ms(ModelKey(family, sop, dep.tp), np.array([t]))[0])
            n = counts.get(sop, 1)
            tot["profile"] += n * truth
            tot["simserve"] += n * s_ms
            tot["vidur"] += v  # Vidur's block time adds each op once (one residual add)
            rows.append(
                {
                    "tokens": t,
                    "op": sop,
                    "profile_ms": truth,
                    "simserve_err_pct": 100 * (s_ms / truth - 1),
                    "vidur_ms": v,
                    "vidur_err_pct": 100 * (v / truth - 1),
                }
            )
        rows.append(
            {
                "tokens": t,
                "op": "layer total",
                "profile_ms": tot["profile"],
                "simserve_err_pct": 100 * (tot["simserve"] / tot["profile"] - 1),
                "vidur_ms": tot["vidur"],
                "vidur_err_pct": 100 * (tot["vidur"] / tot["profile"] - 1),
            }
        )
    return pd.DataFrame(rows)


def token_bins(df: pd.DataFrame) -> pd.DataFrame:
    tokens = df.prefill_tokens + df.decodes
    bins = pd.cut(tokens, [0, 32, 64, 128, 256, 511, 512, 4096], right=True)
    g = df.groupby(bins, observed=True)
    return pd.DataFrame(
        {
            "tokens": [str(i) for i in g.size().index],
            "batches": g.size().to_numpy(),
            "vidur_over_simserve": (g.vidur_s.sum() / g.simserve_s.sum()).to_numpy(),
            "token_ops_ratio": (g.vidur_token_s.sum() / g.simserve_token_s.sum()).to_numpy(),
        }
    )


def run_with_timer(dep, cfg, work, timer) -> tuple[vs.Side, pd.DataFrame]:
    from simserve.memory import plan_memory, profile_tokens
    from simserve.sim.cluster import simulate
    from simserve.sim.metrics import build_result

    prompt, output, arrived = work
    blocks = plan_memory(
        dep, profile_tokens(cfg.policy, cfg.max_model_len, cfg.memory_budget, cfg.batch_limit(dep.pp))
    )
    t0 = time.perf_counter()
    res = build_result(simulate(prompt, output, arrived, timer, blocks.num_blocks, cfg), dep)
    done = res.requests[res.requests.status == "completed"]
    side = vs.Side(
        vs.latency_stats(done, res.summary.tbt_p50_s, res.summary.tbt_p99_s),
        0.0,
        0.0,
        time.perf_counter() - t0,
        blocks.num_blocks,
    )
    return side, done.sort_values("request_id").reset_index(drop=True)


# -- Vidur 0.0.26 and preemption -----------------------------------------------------------------------------

# Prints the state of the request whose stage-end bookkeeping fails, then lets the error through unchanged.
_CRASH_PRELUDE = r"""
from vidur.entities.request import Request as _Request
_stage_end = _Request.on_batch_stage_end
def _checked(self, *args, **kwargs):
    try:
        return _stage_end(self, *args, **kwargs)
    except AssertionError:
        print(f"[simserve] failing request {self.id}: num_restarts={self.num_restarts} "
              f"num_prefill_tokens={self.num_prefill_tokens} num_processed_tokens={self.num_processed_tokens} "
              f"num_stage_processed_tokens={self.num_stage_processed_tokens} total_tokens={self.total_tokens} "
              f"is_prefill_stage_complete={self.is_prefill_stage_complete}", flush=True)
        raise
_Request.on_batch_stage_end = _checked
"""  # noqa: E501


def preemption_crash(b: vs.Bench, python: Path, out: Path, num_blocks: int) -> dict:
    """Run Vidur with a KV pool a few requests fill, so that Sarathi must preempt; return how it ended."""
    work = vs.workload(b, b.qps[0])
    setup = vs.vidur_setup(b, "sarathi", num_blocks)
    with tempfile.TemporaryDirectory() as tmp:
        export = vs.export_profile(b, Path(tmp) / "export")
        staged = vr.stage_profile(export, setup)
        trace_csv = vr.write_replay_trace(out / "requests.csv", work[2], work[0], work[1])
        try:
            vr.run_vidur(python, setup, staged, trace_csv, out / "vidur", _CRASH_PRELUDE)
            return {"crashed": False}
        except vr.SimserveError as exc:
            log = (out / "vidur" / "vidur.log").read_text().splitlines()
            start = max(i for i, ln in enumerate(log) if ln.startswith("Traceback"))
            state = [ln for ln in log if ln.startswith("[simserve] failing request")]
            tb = log[start:]
            print("\n".join(state + tb))
            return {"crashed": True, "error": str(exc), "request_state": state, "traceback": tb}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000, help="requests per run")
    ap.add_argument("--qps", type=float, default=2.0, help="request rate (2 is near Sarathi 512's capacity)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the request sample and arrivals")
    ap.add_argument(
        "--preemption-crash", action="store_true", help="run Vidur on a KV pool that forces preemption"
    )
    ap.add_argument("--blocks", type=int, default=600, help="KV blocks for --preemption-crash")
    ap.add_argument("--out", type=Path, default=vr.CACHE / "results", help="where tables and logs go")
    args = ap.parse_args(argv)
    b = replace(
        vs.Bench(), num_requests=args.requests, qps=(args.qps,), policies=("sarathi",), seed=args.seed
    )
    out = args.out / ("residual-" + time.strftime("%Y%m%d-%H%M%S"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"[setup] vidur {vr.VIDUR_VERSION}; RF grid: {b.grid.describe()}; output in {out}", flush=True)
    python = vr.ensure_venv()
    if args.preemption_crash:
        report = preemption_crash(b, python, out, args.blocks)
    else:
        report = residual(b, python, out)
    (out / "report.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(f"\nwrote {out / 'report.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
