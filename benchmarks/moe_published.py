"""Published end-to-end MoE / FP8 serving results, simulated with the same setup (docs/models.md §
Validation).

    python benchmarks/moe_published.py [--backends measured,roofline] [--write]

The published runs: GPUStack's performance lab (github.com/gpustack/gpustack, docs/performance-lab/
qwen3-235b-a22b/h100.md and deepseek-r1/h200.md), vLLM v0.11.0, `vllm bench serve` with every request sent at
once (its default request rate is infinite): 1000 ShareGPT prompts (ShareGPT_V3_unfiltered_cleaned_split.json,
vLLM's sampler: first human turn → first reply, prompt 4–1024 tokens, prompt + reply ≤ 2048) or 500 random
prompts. Qwen3-235B-A22B-Instruct-2507-FP8 and DeepSeek-R1-0528 are both block-scaled fp8 checkpoints
(simserve --dtype fp8), KV cache bf16 (vLLM's `auto`), vLLM 0.11's defaults on H100/H200:
--max-num-batched-tokens 8192 (16384 where the run set it), --max-num-seqs 1024, --gpu-memory-utilization 0.9.

The simulated workload is `vllm bench serve`'s own, as simserve models it (`--trace sharegpt-bench`: vLLM
0.33's ShareGPT sampler over the packaged ShareGPT file, Mistral's tokenizer; `--trace random:4000:200`;
`--qps inf`: every request at t = 0), so the token totals differ from the published ones (another tokenizer;
the published model stops at EOS before a reply's length): the table shows both. simserve runs `--policy
vllm-v1 --engine vllm --no-async-scheduling` (vLLM's worker: memory profile, CUDA graphs; 0.11 scheduled
synchronously) with the flags above, on a profile of each backend written to a temporary folder (measured:
NVIDIA's vLLM 0.24.0 kernel tables, the nearest release the package has; roofline: analytic). Compared: the
benchmark duration (the last completion), total token throughput, mean TTFT and mean TPOT ((e2e − TTFT) /
(output − 1), averaged over requests with more than one output token, as vllm bench computes it). Nothing is
fitted to these numbers.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from common import write_block

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "models.md"
BEGIN, END = "<!-- moe_published: begin -->", "<!-- moe_published: end -->"
QWEN = "https://github.com/gpustack/gpustack/blob/main/docs/performance-lab/qwen3-235b-a22b/h100.md"
DSR1 = "https://github.com/gpustack/gpustack/blob/main/docs/performance-lab/deepseek-r1/h200.md"


@dataclass(frozen=True)
class Case:
    name: str
    source: str
    model: str
    gpu: str
    tp: int
    ep: int
    budget: int
    dataset: str  # sharegpt | random
    requests: int  # successful requests of the published run (it sent REQUESTS[dataset])
    input_tokens: int  # published totals (successful requests)
    output_tokens: int
    duration_s: float  # published results
    ttft_ms: float
    tpot_ms: float

    @property
    def vllm(self) -> str:
        ep = " --enable-expert-parallel" if self.ep > 1 else ""
        tokens = f" --max-num-batched-tokens {self.budget}" if self.budget != 8192 else ""
        return f"-tp {self.tp}{ep}{tokens}"


CASES = (
    Case(
        "Qwen3-235B-A22B FP8, 4×H100, ShareGPT",
        QWEN,
        "qwen3-235b-a22b",
        "h100",
        4,
        1,
        8192,
        "sharegpt",
        984,
        212992,
        194446,
        54.12,
        9924.69,
        169.20,
    ),
    Case(
        "Qwen3-235B-A22B FP8, 8×H100 EP8, ShareGPT",
        QWEN,
        "qwen3-235b-a22b",
        "h100",
        8,
        8,
        8192,
        "sharegpt",
        984,
        211761,
        192350,
        49.88,
        9755.64,
        169.52,
    ),
    Case(
        "Qwen3-235B-A22B FP8, 4×H100, random 4000/200",
        QWEN,
        "qwen3-235b-a22b",
        "h100",
        4,
        1,
        16384,
        "random",
        500,
        1997942,
        90966,
        126.76,
        60513.14,
        89.52,
    ),
    Case(
        "DeepSeek-R1 FP8, 8×H200, ShareGPT",
        DSR1,
        "deepseek-v3",
        "h200",
        8,
        1,
        8192,
        "sharegpt",
        1000,
        219171,
        200752,
        76.59,
        17743.08,
        227.45,
    ),
    Case(
        "DeepSeek-R1 FP8, 8×H200, random 4000/200",
        DSR1,
        "deepseek-v3",
        "h200",
        8,
        1,
        8192,
        "random",
        500,
        1997530,
        100000,
        132.68,
        63058.71,
        164.23,
    ),
)


REQUESTS = {"sharegpt": 1000, "random": 500}  # the published `--num-prompts`


def simserve(*args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "simserve", *args], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"simserve {' '.join(args)} failed:\n{done.stderr.strip()}")


def simulate(case: Case, backend: str, tmp: Path) -> dict:
    profiles = tmp / f"profiles-{backend}"
    key = tmp / f"{backend}-{case.gpu}-{case.model}.done"  # one profile per GPU and model, every TP it needs
    if not key.exists():
        tps = ",".join(sorted({str(c.tp) for c in CASES if (c.gpu, c.model) == (case.gpu, case.model)}))
        simserve(
            "profile",
            "--backend",
            backend,
            "--gpu",
            case.gpu,
            "--model",
            case.model,
            "--tp",
            tps,
            "--dtype",
            "fp8",
            "--max-model-len",
            "8192",
            "--out",
            str(profiles),
            "--force",
        )
        key.touch()
    out = tmp / "run"
    trace = "sharegpt-bench" if case.dataset == "sharegpt" else "random:4000:200"
    simserve(
        "run",
        "--model",
        case.model,
        "--gpu",
        case.gpu,
        "--tp",
        str(case.tp),
        "--ep",
        str(case.ep),
        "--dtype",
        "fp8",
        "--policy",
        "vllm-v1",
        "--engine",
        "vllm",
        "--no-async-scheduling",
        "--budget",
        str(case.budget),
        "--max-batch",
        "1024",
        "--memory-utilization",
        "0.9",
        "--max-model-len",
        "8192",
        "--trace",
        trace,
        "--qps",
        "inf",
        "--requests",
        str(REQUESTS[case.dataset]),
        "--profiles",
        str(profiles),
        "--iterations",
        "none",
        "--out",
        str(out),
        "--force",
    )
    req = pd.read_csv(out / "requests.csv")
    req = req[req["status"] == "completed"]
    duration = float(req["completed_at_s"].max())
    ttft = (req["first_token_at_s"] - req["arrived_at_s"]).mean()
    many = req[req["output_tokens"] > 1]
    tpot = ((many["completed_at_s"] - many["first_token_at_s"]) / (many["output_tokens"] - 1)).mean()
    tokens = float((req["prompt_tokens"] + req["output_tokens"]).sum())
    return {
        "duration_s": duration,
        "tps": tokens / duration,
        "ttft_ms": 1e3 * ttft,
        "tpot_ms": 1e3 * tpot,
        "input": int(req["prompt_tokens"].sum()),
        "output": int(req["output_tokens"].sum()),
    }


def table(backends: list[str]) -> str:
    lines = [
        "| published run (vLLM v0.11.0 flags) | profile | tokens in / out: published; simulated | duration "
        "s: published / simulated (error) | total tok/s | mean TTFT s | mean TPOT ms |",
        "|---|---|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for case in CASES:
            for backend in backends:
                s = simulate(case, backend, tmp)
                tps = (case.input_tokens + case.output_tokens) / case.duration_s

                def cell(pub: float, sim: float, fmt: str = "{:.1f}") -> str:
                    return f"{fmt.format(pub)} / {fmt.format(sim)} ({sim / pub - 1:+.0%})"

                lines.append(
                    f"| [{case.name}]({case.source}) `{case.vllm}` | {backend} | {case.input_tokens:,} / "
                    f"{case.output_tokens:,}; {s['input']:,} / {s['output']:,} | "
                    f"{cell(case.duration_s, s['duration_s'])} | {cell(tps, s['tps'], '{:.0f}')} | "
                    f"{cell(case.ttft_ms / 1e3, s['ttft_ms'] / 1e3)} | "
                    f"{cell(case.tpot_ms, s['tpot_ms'], '{:.0f}')} |"
                )
                print(lines[-1], flush=True)
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", default="measured,roofline")
    ap.add_argument("--write", action="store_true", help=f"replace the generated block in {DOC.name}")
    args = ap.parse_args()
    out = table(args.backends.split(","))
    if args.write:
        write_block(DOC, BEGIN, END, out)


if __name__ == "__main__":
    main()
