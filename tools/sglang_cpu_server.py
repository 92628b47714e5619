"""CPU time of SGLang 0.5.23's real server per request and per streamed token, under SGLang's own
bench_serving.

    /work/envs/sglcpu/bin/python tools/sglang_cpu_server.py MODEL_DIR OUT_DIR [--repeats 5]

Starts `python -m sglang.launch_server --device cpu --load-format dummy` (SGLang's own launcher, unchanged)
with tools/sglang_cpu_site on its PYTHONPATH, so that in each of its processes the GPU-only modules are
stubbed and in the scheduler process the model's forward is replaced (tools/sglang_cpu_patch.py): each step's
result becomes ready SGLANG_CPU_GPU_STEP_MS (8) + SGLANG_CPU_GPU_MS_PER_TOKEN (0.03) x tokens after the
previous step, waited for without CPU, as a GPU would — roughly an 8B model's step on one H100, the same as
the vLLM measurement (tools/engine_cpu_fake_worker.py). Everything else is SGLang's defaults — overlap
schedule, radix cache, stream interval 1, uvicorn's access log — except `--sleep-on-idle` (an idle scheduler
would otherwise spin on its ZMQ socket and take one of this host's two shared cores; it changes nothing while
a batch runs), `--disable-cuda-graph` (there is no GPU) and sizes a CPU host holds.

Then SGLang's benchmark client (`sglang.benchmark.serving.run_benchmark`, what `python -m
sglang.bench_serving` runs, called in this process so each run does not re-import SGLang) sends 400 streamed
requests at concurrency 16 with random token ids (`--dataset-name random-ids`, fixed lengths, ignore_eos as
bench_serving's default) for three backends: `sglang` (the native /generate, bench_serving's default),
`sglang-oai` (/v1/completions) and `sglang-oai-chat` (/v1/chat/completions), prompts of 128 and 1024 tokens, 2
and 64 output tokens. Every server process's utime + stime (`/proc/PID/stat`, all threads) is read before and
after each run: the main process (HTTP server + TokenizerManager), `sglang::scheduler` and
`sglang::detokenizer`. The client's CPU is not counted; the reference workload of tools/engine_cpu_refbench.py
runs around each run (`ref_us`). Writes OUT_DIR/server.csv (one row per process per run) and
OUT_DIR/server.provenance.json.
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
import sglang_cpu_patch  # noqa: E402
from engine_cpu_refbench import python_round  # noqa: E402

WORKLOADS = [  # (bench_serving backend, prompt tokens, output tokens)
    ("sglang", 128, 2),
    ("sglang", 128, 64),
    ("sglang", 1024, 2),
    ("sglang-oai", 128, 2),
    ("sglang-oai", 128, 64),
    ("sglang-oai", 1024, 2),
    ("sglang-oai-chat", 128, 2),
    ("sglang-oai-chat", 128, 64),
    ("sglang-oai-chat", 1024, 2),
]
NUM_PROMPTS, CONCURRENCY = 400, 16
CLK = os.sysconf("SC_CLK_TCK")
COUNTERS = ("decode_steps", "decode_reqs", "extend_steps", "extend_reqs", "extend_tokens")


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK  # utime, stime (fields 14, 15 of proc(5))


def server_processes(root: int) -> dict[int, str]:
    """The server's processes by role (SGLang names its children with setproctitle)."""
    out = subprocess.run(
        ["ps", "-o", "pid=,args=", "--ppid", str(root)], capture_output=True, text=True
    ).stdout
    procs = {root: "tokenizer_manager"}
    for line in out.splitlines():
        pid, args = line.strip().split(" ", 1)
        if "sglang::scheduler" in args:
            procs[int(pid)] = "scheduler"
        elif "sglang::detokenizer" in args:
            procs[int(pid)] = "detokenizer"
    if sorted(procs.values()) != ["detokenizer", "scheduler", "tokenizer_manager"]:
        sys.exit(f"unexpected server processes: {procs}")
    return procs


def wait_ready(port: int, proc: subprocess.Popen, timeout: float = 900) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            sys.exit(f"server exited with {proc.returncode}; see its log")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health_generate", timeout=30)
            return
        except OSError:
            time.sleep(3)
    sys.exit("server not ready in time")


def bench(model: str, port: int, backend: str, n_in: int, n_out: int, num_prompts: int, seed: int) -> dict:
    """One bench_serving run (sglang.benchmark.serving: its CLI's parser and run_benchmark)."""
    sglang_cpu_patch.install_stubs()  # the client imports transformers, whose torchvision import needs them
    from sglang.benchmark import serving

    with tempfile.TemporaryDirectory() as d:
        argv = [
            "--backend",
            backend,
            "--base-url",
            f"http://127.0.0.1:{port}",
            "--model",
            model,
            "--dataset-name",
            "random-ids",
            "--random-input-len",
            str(n_in),
            "--random-output-len",
            str(n_out),
            "--random-range-ratio",
            "1",
            "--num-prompts",
            str(num_prompts),
            "--max-concurrency",
            str(CONCURRENCY),
            "--request-rate",
            "inf",
            "--seed",
            str(seed),
            "--disable-tqdm",
            "--output-details",
            "--output-file",
            os.path.join(d, "r.jsonl"),
        ]
        parser = _parser(serving)
        with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
            r = serving.run_benchmark(parser.parse_args(argv))
    # each streamed chunk after the first gives one inter-token latency
    chunks = sum(len(itl) + 1 for itl in r["itls"] if itl is not None)
    return dict(
        completed=r["completed"],
        input_tokens=r["total_input_tokens"],
        output_tokens=r["total_output_tokens"],
        chunks=chunks,
        bench_s=r["duration"],
    )


def _parser(serving):
    """bench_serving's own argument parser (cli_main builds it and runs; this takes the parser only)."""
    import argparse as _argparse

    captured = {}
    real = _argparse.ArgumentParser.parse_args

    def grab(self, *a, **k):
        captured["p"] = self
        raise SystemExit(0)

    _argparse.ArgumentParser.parse_args = grab
    try:
        serving.cli_main()
    except SystemExit:
        pass
    finally:
        _argparse.ArgumentParser.parse_args = real
    return captured["p"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--port", type=int, default=30123)
    ap.add_argument("--workloads", default="", help="comma-separated indices into WORKLOADS (default all)")
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    work = [WORKLOADS[int(i)] for i in args.workloads.split(",")] if args.workloads else WORKLOADS
    counters = os.path.join(args.out_dir, ".counters")
    np.zeros(len(COUNTERS), np.int64).tofile(counters)
    env = dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        SGLANG_CPU_PATCH="1",
        SGLANG_CPU_COUNTERS=counters,
        SGLANG_CPU_GPU_STEP_MS=os.environ.get("SGLANG_CPU_GPU_STEP_MS", "8"),
        PYTHONPATH=os.path.join(HERE, "sglang_cpu_site"),
    )
    cmd = [
        sys.executable,
        "-W",
        "ignore",
        "-m",
        "sglang.launch_server",
        "--model-path",
        args.model_dir,
        "--device",
        "cpu",
        "--load-format",
        "dummy",
        "--host",
        "127.0.0.1",
        "--port",
        str(args.port),
        "--disable-cuda-graph",
        "--sleep-on-idle",
        "--max-total-tokens",
        "200000",
        "--context-length",
        "4096",
        "--mem-fraction-static",
        "0.5",
    ]
    rows, idle = [], {}
    log = open(os.path.join(args.out_dir, "server.log"), "w")  # noqa: SIM115 (closed in finally)
    server = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_ready(args.port, server)
        procs = server_processes(server.pid)
        for backend in ("sglang", "sglang-oai", "sglang-oai-chat"):  # warm-up, not recorded
            bench(args.model_dir, args.port, backend, 128, 8, 32, seed=99)
        before = {p: cpu_seconds(p) for p in procs}
        time.sleep(20)
        idle = {procs[p]: (cpu_seconds(p) - before[p]) / 20 for p in procs}
        for rep in range(args.repeats):
            for k, (backend, n_in, n_out) in enumerate(work):
                ref0 = python_round()  # how fast the shared host is just now (tools/engine_cpu_refbench.py)
                c0 = np.fromfile(counters, np.int64)
                before = {p: cpu_seconds(p) for p in procs}
                t0 = time.time()
                # a seed per run: no run's prompts are in the radix cache from an earlier one
                b = bench(args.model_dir, args.port, backend, n_in, n_out, NUM_PROMPTS, seed=100 * rep + k)
                wall = time.time() - t0
                after = {p: cpu_seconds(p) for p in procs}
                steps = dict(zip(COUNTERS, (np.fromfile(counters, np.int64) - c0).tolist(), strict=True))
                ref = round((ref0 + python_round()) / 2, 1)
                for p, role in procs.items():
                    rows.append(
                        dict(
                            rep=rep,
                            backend=backend,
                            input_len=n_in,
                            output_len=n_out,
                            pid=p,
                            role=role,
                            cpu_s=round(after[p] - before[p], 3),
                            wall_s=round(wall, 2),
                            ref_us=ref,
                            **steps,
                            **b,
                        )
                    )
                write(args.out_dir, rows, idle, sys.argv, args.repeats)
                print(
                    f"rep {rep} {backend} {n_in}/{n_out}: "
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
    import sglang

    with open(os.path.join(out_dir, "server.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    prov = {
        "what": "CPU seconds (utime+stime from /proc) of each SGLang server process per bench_serving run",
        "sglang": sglang.__version__,
        "command": " ".join([os.path.basename(sys.executable), *argv]),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "repeats": repeats,
        "num_prompts": NUM_PROMPTS,
        "max_concurrency": CONCURRENCY,
        "idle_cpu_per_s": idle,
        "fake_gpu_step_ms": os.environ.get("SGLANG_CPU_GPU_STEP_MS", "8"),
        "fake_gpu_ms_per_token": os.environ.get("SGLANG_CPU_GPU_MS_PER_TOKEN", "0.03"),
        "load_average": os.getloadavg(),
        "cpus": os.cpu_count(),
    }
    with open(os.path.join(out_dir, "server.provenance.json"), "w") as f:
        json.dump(prov, f, indent=1)


if __name__ == "__main__":
    main()
