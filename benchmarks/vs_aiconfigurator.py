"""simserve's plan beside NVIDIA's AIConfigurator on the same question (docs/vs-aiconfigurator.md records it).

    python benchmarks/vs_aiconfigurator.py                 # Llama-2-70B, 8×H200, ISL/OSL 1700/400
    python benchmarks/vs_aiconfigurator.py --ttft 2 --tpot 0.2 --gpus 8
    python benchmarks/vs_aiconfigurator.py --model qwen3-235b-a22b --dtype fp8 --isl 4000 --osl 1000 \
        --ttft 3 --tpot 0.05                               # an MoE model: attention-DP layouts on both sides

AIConfigurator (`aiconfigurator` on PyPI, pinned below) is installed into its own virtual environment
(`--venv`, default $SIMSERVE_CACHE/aiconfigurator-venv), never into simserve's: it is run as a program, and
none of its code is copied here. It needs the model's HuggingFace config.json; this machine may not reach
HuggingFace, so the script writes one from simserve's catalog entry (the published config's fields) for a
dense Llama, and names the checkpoint whose config.json aiconfigurator-core ships for an MoE model
(`AIC_MODELS`; fp8 weights: the FP8 checkpoint, from which AIConfigurator infers fp8_block quantization).

Both tools get: the model, the GPU (H200 SXM), the GPU count, every request 1700 prompt and 400 output tokens
(for simserve: a trace file of such requests, Poisson arrivals), and the latency SLAs, and both are asked for
aggregated AND disaggregated (xPyD) deployments. AIConfigurator is asked with `--database-mode SILICON` (its
measured kernel tables) and `--backend vllm`; its TTFT and TPOT are steady-state per-request values. simserve
is asked (`plan --layouts agg,disagg`) with the SLAs at the tail (P99 TTFT and P99 TBT) and at the median (P50
TTFT and P50 TBT, the closest it has to a steady-state mean), and at the median with 256 resident requests per
replica instead of the default 128 (AIConfigurator's answer batches 176), each from a cold cache. Recorded per
run: the best aggregated and the best disaggregated answer (replicas × TP; x prefill and y decode workers with
each pool's TP), its request rate and output tokens/s per GPU, and the CPU seconds (user + sys of the process
and its children) and wall seconds of the run (both layouts together).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

AIC_PACKAGE = "aiconfigurator==0.12.0"
# (simserve model, --dtype) -> the checkpoint aiconfigurator-core 0.12.0 ships a config.json for
# (aiconfigurator_core/model_configs/<org>--<name>_config.json)
AIC_MODELS = {
    ("qwen3-235b-a22b", "bf16"): "Qwen/Qwen3-235B-A22B",
    ("qwen3-235b-a22b", "fp8"): "Qwen/Qwen3-235B-A22B-FP8",
    ("deepseek-v3", "fp8"): "deepseek-ai/DeepSeek-V3",
}


def timed(cmd: list[str], env: dict | None = None) -> tuple[subprocess.CompletedProcess, float, float]:
    """Run `cmd`; (result, CPU seconds of it and its children, wall seconds)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if res.returncode != 0:
        sys.exit(f"{shlex.join(cmd)} failed ({res.returncode}):\n{res.stderr[-3000:]}")
    return res, cpu, wall


def ensure_venv(venv: Path) -> Path:
    exe = venv / "bin" / "aiconfigurator"
    if not exe.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", AIC_PACKAGE], check=True)
    return exe


def hf_config(model: str, where: Path) -> Path:
    """A HuggingFace-style config.json from simserve's catalog (the fields AIConfigurator reads)."""
    from simserve.catalog import MODELS

    m = MODELS.get(model)
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": m.hidden,
        "intermediate_size": m.ffn,
        "num_attention_heads": m.num_heads,
        "num_hidden_layers": m.num_layers,
        "num_key_value_heads": m.num_kv_heads,
        "vocab_size": m.vocab,
        "head_dim": m.hidden // m.num_heads,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5,
        "hidden_act": "silu",
        "torch_dtype": "float16",
        "tie_word_embeddings": False,
    }
    where.mkdir(parents=True, exist_ok=True)
    (where / "config.json").write_text(json.dumps(cfg, indent=1))
    return where


def run_aic(exe: Path, model_dir: Path | str, args, out: Path) -> dict:
    cmd = [
        str(exe),
        "cli",
        "default",
        "--model",
        str(model_dir),
        "--system",
        "h200_sxm",
        "--total-gpus",
        str(args.gpus),
        "--backend",
        "vllm",
        "--isl",
        str(args.isl),
        "--osl",
        str(args.osl),
        "--ttft",
        f"{args.ttft * 1000:g}",
        "--tpot",
        f"{args.tpot * 1000:g}",
        "--database-mode",
        "SILICON",
        "--save-dir",
        str(out),
        "--no-color",
    ]
    _, cpu, wall = timed(cmd)
    found = {}
    for mode in ("agg", "disagg"):
        (table,) = out.glob(f"**/{mode}/best_config_topn.csv")  # an HF id names a folder in a folder
        rows = list(csv.DictReader(table.open()))
        found[mode] = max(rows, key=lambda r: float(r["tokens/s/gpu"])) if rows else None
    tool = "AIConfigurator 0.12.0 (--database-mode SILICON, --backend vllm)"
    command = "aiconfigurator " + shlex.join(cmd[1:]).replace(str(out), "<out>")
    if isinstance(model_dir, Path):
        command = command.replace(str(model_dir), "<config.json dir>")
    moe = not isinstance(model_dir, Path)  # `parallel` names attention DP and the experts' TP and EP
    answers = {}
    agg = found["agg"]
    if agg is not None:
        replicas = args.gpus // int(agg["num_total_gpus"])
        shape = agg["parallel"] if moe else f"TP{agg['tp']} PP{agg['pp']}"
        batch = f"batch {agg['bs']}" + (f" (global_bs {agg['global_bs']})" if moe else "")
        answers["agg"] = {
            "answer": f"{replicas}×{shape}, {batch}",
            "req_per_s": replicas * float(agg["seq/s"]),
            "tokens_per_s_per_gpu": float(agg["tokens/s/gpu"]),
            "latency": f"TTFT {float(agg['ttft']):.0f} ms, TPOT {float(agg['tpot']):.1f} ms (steady state)",
        }
    dis = found["disagg"]
    if dis is not None:
        copies = args.gpus // int(dis["num_total_gpus"])  # AIConfigurator's "replicas" of one xPyD unit
        layout = f"{dis['(p)workers']}xTP{dis['(p)tp']}P+{dis['(d)workers']}xTP{dis['(d)tp']}D"
        if moe:
            layout = f"{dis['(p)workers']}x{dis['(p)parallel']}P+{dis['(d)workers']}x{dis['(d)parallel']}D"
        answers["disagg"] = {
            "answer": f"{copies}×({layout}), decode batch {dis['(d)bs']}",
            "req_per_s": copies * float(dis["seq/s"]),
            "tokens_per_s_per_gpu": float(dis["tokens/s/gpu"]),
            "latency": f"TTFT {float(dis['ttft']):.0f} ms, TPOT {float(dis['tpot']):.1f} ms (steady state)",
        }
    return {"tool": tool, "command": command, "answers": answers, "cpu_s": cpu, "wall_s": wall}


def run_simserve(args, trace: Path, quantile: float, tmp: Path, max_batch: int = 128) -> dict:
    out, cache = tmp / f"plan-{quantile}-{max_batch}", tmp / f"cache-{quantile}-{max_batch}"
    flags = [
        "--model",
        args.model,
        "--dtype",
        args.dtype,
        "--gpus",
        "h200",
        "--max-gpus",
        str(args.gpus),
        "--trace",
        str(trace),
        "--slo",
        f"{args.tpot:g}",
        "--tbt-quantile",
        f"{quantile:g}",
        "--ttft-slo",
        f"{args.ttft:g}",
        "--ttft-quantile",
        f"{quantile:g}",
        "--max-batch",
        str(max_batch),
        "--layouts",
        "agg,disagg",
        "--workers",
        str(args.workers),
    ]
    cmd = [
        sys.executable,
        "-c",
        "from simserve.cli import main; main()",
        "plan",
        *flags,
        "--out",
        str(out),
        "--cache",
        str(cache / "p"),
    ]
    env = {**os.environ, "SIMSERVE_CACHE": str(cache), "COLUMNS": "200"}
    res, cpu, wall = timed(cmd, env)
    doc = json.loads((out / "plan.json").read_text())
    plan = list(csv.DictReader((out / "plan.csv").open()))
    searches = list(csv.DictReader((out / "searches.csv").open()))
    first = doc["recommendation"]
    ties = {t["row"] for t in doc["ties"]}
    answers = {}
    for mode in ("agg", "disagg"):
        rows = (
            [r for r in plan if (r.get("layout") or "agg") == "agg"]
            if mode == "agg"
            else [r for r in plan if (r.get("layout") or "agg") != "agg"]
        )
        if not rows:
            answers[mode] = None
            continue
        # the plan's own objective: $ per million output tokens (one H200 node: the same order as tokens/s per
        # GPU)
        best = min(rows, key=lambda r: (float(r["usd_per_million_output_tokens"]), -float(r["capacity_qps"])))
        layout = best.get("layout") or "agg"
        # an MoE model's TP, EP = TP and DP × TP rows share tp and pp
        key = ("gpu", "tp", "pp", "ep", "budget")
        search = [
            r
            for r in searches
            if (r.get("layout") or "agg") == layout
            and r["seed"] == "0"
            and all(r.get(k) == best.get(k) for k in key)
        ]
        ep, tp = int(best.get("ep") or 1), int(best["tp"])
        dp = f"DP{ep // tp}×" if ep > tp else ""  # plan.report.deployment_label's: attention DP, EP = DP × TP
        shape = f"{dp}TP{tp}{f' EP{ep}' if ep > 1 else ''} PP{best['pp']}" if layout == "agg" else layout
        chosen = (
            first.get("layout", "agg") == layout
            and str(first["tp"]) == best["tp"]
            and str(first["pp"]) == best["pp"]
            and str(first.get("ep", 1)) == (best.get("ep") or "1")
            and int(first["replicas"]) == int(best["replicas"])
        )
        note = " (the plan's first row)" if chosen else ""
        if chosen and ties:
            note = f" (the plan's first row, tied with {', '.join(sorted(ties))})"
        budget = "budget" if layout == "agg" else "prefill budget"
        # the screen's other layouts: searched, or pruned (proven off the front by one probe)
        if mode == "disagg":
            others = [
                r for r in searches if (r.get("layout") or "agg") not in ("agg", layout) and r["seed"] == "0"
            ]
            cut = [
                f"{r['layout']} fails at {float(r['start_qps']):.3g}"
                for r in others
                if r["status"] == "pruned"
            ]
            kept = [
                f"{r['layout']} {float(r['capacity_qps']):.3g}" for r in others if r["status"] != "pruned"
            ]
            note += "; " + "; ".join(
                filter(
                    None,
                    [
                        f"searched: {', '.join(kept)}" if kept else "",
                        f"pruned: {', '.join(cut)} req/s" if cut else "",
                    ],
                )
            )
        answers[mode] = {
            "answer": (
                f"{best['replicas']}×({shape}), {budget} {best['budget']}{note}; {best['profile']} profile"
            ),
            "req_per_s": float(best["capacity_qps"]),
            "tokens_per_s_per_gpu": float(best["output_tokens_per_s"]) / float(best["gpus"]),
            "latency": f"{doc['slo']}; the bound met last: {search[0]['limited_by'] if search else '?'}",
        }
    return {
        "tool": (
            f"simserve plan --layouts agg,disagg, P{100 * quantile:g} TTFT and TBT, max batch {max_batch}"
        ),
        "command": "simserve plan " + shlex.join(flags).replace(str(trace), f"<{args.isl}/{args.osl} trace>"),
        "answers": answers,
        "cpu_s": cpu,
        "wall_s": wall,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    moe = sorted({m for m, _ in AIC_MODELS})
    ap.add_argument("--model", default="llama-2-70b", help=f"llama-2-70b or an MoE model: {', '.join(moe)}")
    ap.add_argument("--dtype", default="bf16", help="weights: bf16 | fp8 (simserve --dtype, AIC checkpoint)")
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--isl", type=int, default=1700)
    ap.add_argument("--osl", type=int, default=400)
    ap.add_argument("--ttft", type=float, default=2.0, help="TTFT SLA, seconds")
    ap.add_argument(
        "--tpot", type=float, default=0.2, help="TPOT (AIConfigurator) / TBT (simserve) SLA, seconds"
    )
    ap.add_argument("--requests", type=int, default=1024, help="requests in simserve's trace file")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--venv", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = ap.parse_args()
    from simserve.predictor.cache import cache_root

    venv = args.venv or cache_root() / "aiconfigurator-venv"
    exe = ensure_venv(venv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="vs-aic-") as t:
        tmp = Path(t)
        trace = tmp / f"fixed-{args.isl}-{args.osl}.csv"
        trace.write_text("prompt_tokens,output_tokens\n" + f"{args.isl},{args.osl}\n" * args.requests)
        if args.model == "llama-2-70b":
            model = hf_config(args.model, tmp / args.model)
        elif (args.model, args.dtype) in AIC_MODELS:
            model = AIC_MODELS[args.model, args.dtype]
        else:
            sys.exit(f"no AIConfigurator config for {args.model} {args.dtype}; known: {list(AIC_MODELS)}")
        rows.append(run_aic(exe, model, args, tmp / "aic"))
        for q in (0.99, 0.5):
            rows.append(run_simserve(args, trace, q, tmp))
        # AIConfigurator's answer runs 176 requests per replica; simserve's default cap is 128 (--max-batch)
        rows.append(run_simserve(args, trace, 0.5, tmp, max_batch=256))
    print(
        f"# {args.model} {args.dtype}, {args.gpus}×H200, ISL/OSL {args.isl}/{args.osl}, TTFT ≤ {args.ttft:g} "
        f"s, TPOT/TBT ≤ {args.tpot:g} s; {os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}\n"
    )
    print(
        "| tool | layout | answer | req/s | output tokens/s per GPU | latency | CPU s (run) | wall s (run) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        for mode in ("agg", "disagg"):
            a = r["answers"].get(mode)
            if a is None:
                print(
                    f"| {r['tool']} | {mode} | none meets the SLAs | | | | {r['cpu_s']:.1f} | "
                    f"{r['wall_s']:.1f} |"
                )
                continue
            print(
                f"| {r['tool']} | {mode} | {a['answer']} | {a['req_per_s']:.2f} | "
                f"{a['tokens_per_s_per_gpu']:.0f} | {a['latency']} | {r['cpu_s']:.1f} | {r['wall_s']:.1f} |"
            )
    print()
    for r in rows:
        print(f"- {r['tool']}: `{r['command']}`")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
