"""CPU time of vLLM 0.33.0's real OpenAI-compatible server per request and per streamed token, under `vllm
bench serve`.

    /work/envs/vllm033/bin/python tools/engine_cpu_server.py MODEL_DIR OUT_DIR
        [--repeats 5] [--api-server-counts 1,2]

Starts `vllm serve MODEL_DIR` through tools/engine_cpu_vllm_serve.py (async scheduling and the in-process
worker as on a GPU) with tools/engine_cpu_fake_worker.py's TimedWorker (no model: each step answers after a
GPU-like delay, using no CPU), then runs vLLM's own benchmark client (`vllm bench serve`'s code, called in
this process) against it for each workload below, and reads every server process's CPU time (utime + stime of
/proc/PID/stat, all threads) before and after each run. The client's CPU is not counted; the reference
workload of tools/engine_cpu_refbench.py runs before and after each run (`ref_us`: the shared host's speed at
the time, divided out by the fit). Writes OUT_DIR/server.csv (one row per process per run) and
OUT_DIR/server.provenance.json.

Workloads (random dataset, fixed lengths, `--ignore-eos`, `--max-concurrency 16`, 400 prompts): completions
and chat, prompts of 128 and 1024 tokens, 2 and 64 output tokens, so that per-request, per-prompt-token and
per-output-token costs separate in a least-squares fit (simserve/predictor/engine_cpu.py).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import datetime
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from engine_cpu_refbench import python_round  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the client loads the tokenizer from MODEL_DIR, never the hub
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
WORKLOADS = [  # (endpoint, prompt tokens, output tokens)
    ("completions", 128, 2),
    ("completions", 128, 64),
    ("completions", 1024, 2),
    ("chat", 128, 2),
    ("chat", 128, 64),
    ("chat", 1024, 2),
]
NUM_PROMPTS, CONCURRENCY = 400, 16
CLK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK  # utime, stime (fields 14, 15 of proc(5))


def server_processes(root: int) -> dict[int, str]:
    """The server's processes by role: the API server(s) and the EngineCore (vLLM names them with
    setproctitle)."""
    out = subprocess.run(
        ["ps", "-o", "pid=,args=", "--ppid", str(root)], capture_output=True, text=True
    ).stdout
    procs = {}
    for line in out.splitlines():
        pid, args = line.strip().split(" ", 1)
        if "EngineCore" in args:
            procs[int(pid)] = "engine_core"
        elif "APIServer" in args:
            procs[int(pid)] = "api_server"
    if not any(r == "api_server" for r in procs.values()):
        procs[root] = "api_server"  # one API server: the root process itself
    return procs


def wait_ready(port: int, proc: subprocess.Popen, timeout: float = 900) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            sys.exit(f"server exited with {proc.returncode}; see its log")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=5)
            return
        except OSError:
            time.sleep(3)
    sys.exit("server not ready in time")


def bench(model: str, port: int, endpoint: str, n_in: int, n_out: int, num_prompts: int, seed: int) -> dict:
    """One `vllm bench serve` run: its own code (vllm.benchmarks.serve.main, what the CLI subcommand calls),
    in this process so that each run does not pay the client's start-up (importing vLLM: ~15 CPU-s here)."""
    from vllm.benchmarks.serve import add_cli_args
    from vllm.benchmarks.serve import main as bench_main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    with tempfile.TemporaryDirectory() as d:
        argv = [
            "--base-url",
            f"http://127.0.0.1:{port}",
            "--model",
            model,
            "--dataset-name",
            "random",
            "--random-input-len",
            str(n_in),
            "--random-output-len",
            str(n_out),
            "--random-range-ratio",
            "0",
            "--num-prompts",
            str(num_prompts),
            "--max-concurrency",
            str(CONCURRENCY),
            "--request-rate",
            "inf",
            "--ignore-eos",
            "--seed",
            str(seed),
            "--disable-tqdm",
            "--save-result",
            "--save-detailed",
            "--result-dir",
            d,
            "--result-filename",
            "r.json",
        ]
        if endpoint == "chat":
            argv += ["--backend", "openai-chat", "--endpoint", "/v1/chat/completions"]
        else:
            argv += ["--backend", "openai", "--endpoint", "/v1/completions"]
        parser = FlexibleArgumentParser()
        add_cli_args(parser)
        with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
            bench_main(parser.parse_args(argv))
        with open(os.path.join(d, "r.json")) as f:
            r = json.load(f)
    # each streamed chunk after the first gives one inter-token latency
    chunks = sum(len(itl) + 1 for itl in r["itls"] if itl is not None)
    return dict(
        completed=r["completed"],
        input_tokens=r["total_input_tokens"],
        output_tokens=r["total_output_tokens"],
        chunks=chunks,
        bench_s=r["duration"],
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--api-server-counts", default="1,2")
    ap.add_argument("--port", type=int, default=8123)
    ap.add_argument("--workloads", default="", help="comma-separated indices into WORKLOADS (default all)")
    ap.add_argument("--workloads-multi", default="0,1", help="the same, for more than one API server")
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    one = [WORKLOADS[int(i)] for i in args.workloads.split(",")] if args.workloads else WORKLOADS
    multi = [WORKLOADS[int(i)] for i in args.workloads_multi.split(",")]
    rows, idle = [], {}
    for count in [int(c) for c in args.api_server_counts.split(",")]:
        counters = os.path.join(args.out_dir, f".counters-{count}")
        np.zeros(3, np.int64).tofile(counters)
        env = dict(
            os.environ,
            HF_HUB_OFFLINE="1",
            VLLM_TARGET_DEVICE="cpu",
            ENGINE_CPU_COUNTERS=counters,
            PYTHONPATH=HERE,
        )
        cmd = [
            sys.executable,
            os.path.join(HERE, "engine_cpu_vllm_serve.py"),
            args.model_dir,
            "--worker-cls",
            "engine_cpu_fake_worker.TimedWorker",
            "--host",
            "127.0.0.1",
            "--port",
            str(args.port),
            "--max-model-len",
            "4096",
            "--enforce-eager",
            "--api-server-count",
            str(count),
        ]
        log = open(os.path.join(args.out_dir, f"server-{count}.log"), "w")  # noqa: SIM115 (closed in finally)
        server = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_ready(args.port, server)
            procs = server_processes(server.pid)
            bench(args.model_dir, args.port, "completions", 128, 8, 32, seed=99)  # warm-up, not recorded
            bench(args.model_dir, args.port, "chat", 128, 8, 32, seed=99)
            before = {p: cpu_seconds(p) for p in procs}
            time.sleep(20)
            idle[count] = {procs[p]: (cpu_seconds(p) - before[p]) / 20 for p in procs}
            for rep in range(args.repeats):
                for endpoint, n_in, n_out in one if count == 1 else multi:
                    # how fast the shared host is just now (tools/engine_cpu_refbench.py)
                    ref0 = python_round()
                    c0 = np.fromfile(counters, np.int64)
                    before = {p: cpu_seconds(p) for p in procs}
                    t0 = time.time()
                    b = bench(args.model_dir, args.port, endpoint, n_in, n_out, NUM_PROMPTS, seed=rep)
                    wall = time.time() - t0
                    after = {p: cpu_seconds(p) for p in procs}
                    c1 = np.fromfile(counters, np.int64)
                    ref = round((ref0 + python_round()) / 2, 1)
                    steps, reqs, toks = (c1 - c0).tolist()
                    for p, role in procs.items():
                        rows.append(
                            dict(
                                api_server_count=count,
                                rep=rep,
                                endpoint=endpoint,
                                input_len=n_in,
                                output_len=n_out,
                                pid=p,
                                role=role,
                                cpu_s=round(after[p] - before[p], 3),
                                wall_s=round(wall, 2),
                                engine_steps=steps,
                                engine_step_reqs=reqs,
                                engine_step_tokens=toks,
                                ref_us=ref,
                                **b,
                            )
                        )
                    write(args.out_dir, rows, idle, sys.argv, args.repeats)
                    print(
                        f"count {count} rep {rep} {endpoint} {n_in}/{n_out}: "
                        + " ".join(f"{procs[p]}={after[p] - before[p]:.2f}s" for p in procs),
                        flush=True,
                    )
        finally:
            os.killpg(server.pid, signal.SIGINT)
            try:
                server.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
            log.close()
            os.remove(counters)


def write(out_dir: str, rows: list[dict], idle: dict, argv: list[str], repeats: int) -> None:
    """server.csv and its provenance, rewritten after every run (a long measurement stopped early keeps its
    runs)."""
    import vllm

    with open(os.path.join(out_dir, "server.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    prov = {
        "what": "CPU seconds (utime+stime from /proc) of each vLLM server process per `vllm bench serve` run",
        "vllm": vllm.__version__,
        "command": " ".join([os.path.basename(sys.executable), *argv]),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "repeats": repeats,
        "num_prompts": NUM_PROMPTS,
        "max_concurrency": CONCURRENCY,
        "idle_cpu_per_s": idle,
        "fake_gpu_step_ms": os.environ.get("ENGINE_CPU_GPU_STEP_MS", "8"),
        "fake_gpu_ms_per_token": os.environ.get("ENGINE_CPU_GPU_MS_PER_TOKEN", "0.03"),
        "load_average": os.getloadavg(),
        "cpus": os.cpu_count(),
    }
    with open(os.path.join(out_dir, "server.provenance.json"), "w") as f:
        json.dump(prov, f, indent=1)


if __name__ == "__main__":
    main()
