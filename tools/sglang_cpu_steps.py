"""Per-step CPU time of SGLang 0.5.23's scheduler, detokenizer and tokenizer manager, run from SGLang's own
code on CPU.

    /work/envs/sglcpu/bin/python tools/sglang_cpu_steps.py MODEL_DIR OUT_DIR
        [--repeats 5] [--quick] [--only PREFIX]

MODEL_DIR is tools/engine_cpu_model.py's tiny Llama directory (its tokenizer feeds the detokenizer; its
2-layer model is built with dummy weights and never run). Writes OUT_DIR/steps.csv (one row per scheduled
batch) and OUT_DIR/steps.provenance.json. Nothing of simserve is imported.

One process holds SGLang's three: a real `TokenizerManager` (with its own asyncio handle loop and one
`generate_request` task per request, streamed, as the HTTP server runs them), a real `DetokenizerManager` and
a real `Scheduler` (`--device cpu`, overlap schedule on as on a GPU, radix cache on), connected by their own
ZMQ sockets. The GPU's part is stubbed (tools/sglang_cpu_patch.py: the forward returns one token per request
at once; the one scheduler-side Triton kernel's work is done on the CPU and not counted). Each iteration runs
the scheduler's calls in the order of `Scheduler.event_loop_overlap` (managers/scheduler.py l. 2061-2124):
receive requests, `get_next_batch_to_run` (PrefillAdder admission, `ScheduleBatch.init_new` +
`prepare_for_extend`, or `update_running_batch` + `prepare_for_decode`), `run_batch` (launch; the model
stubbed) and the batch's copy into the result queue, then `process_batch_result` of the PREVIOUS batch (token
bookkeeping, finish checks, radix-cache updates, `stream_output` → `send_to_detokenizer`). The detokenizer
then handles that output as its event loop does (`handle_batch_token_id_out`: incremental detokenization,
`BatchStrOutput` to the tokenizer manager), and the tokenizer manager's loop runs until it has taken it
(`_handle_batch_output`) and every request's task has consumed its chunk.

Columns (µs of CPU of this thread, `time.thread_time_ns`; rows are scheduled batches): recv
(`ingest_requests`), schedule (`get_next_batch_to_run`), launch (`run_batch` without the model, the batch
copy, `launch_batch_sample_if_needed`), result (`process_batch_result` of this batch, run one iteration
later), detok (the detokenizer's receive + handle + send for this batch's output), tm_output
(`_handle_batch_output`), tm_stream (the rest of the tokenizer manager's loop turn: the request tasks taking
their chunks), tm_add (the tokenizer manager's `generate_request` up to sending each new request). A
configuration runs `--repeats` blocks of 16 iterations after a warm-up; the reference workload of
tools/engine_cpu_refbench.py runs around each block (`ref_us`): the fit divides the shared host's drift out
(simserve/predictor/sglang_cpu_fit.py).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import csv
import datetime
import gc
import json
import os
import platform
import random
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import sglang_cpu_patch as P  # noqa: E402

STEPS_PER_BLOCK = 16
DECODE_OUTPUTS = (
    300  # the running requests' max_new_tokens: they decode through every block of a configuration
)
FIELDS = [
    "config",
    "kind",
    "rep",
    "step",
    "mode",
    "num_reqs",
    "num_tokens",
    "decoding",
    "held",
    "new_reqs",
    "new_tokens",
    "streamed",
    "recv_us",
    "schedule_us",
    "launch_us",
    "result_us",
    "detok_us",
    "tm_output_us",
    "tm_stream_us",
    "tm_add_us",
    "ref_us",
]


def configs(quick: bool) -> list[dict]:
    """Decode-only over batch sizes; one new prompt of C tokens every other step beside D decoding requests
    (SGLang runs it as its own prefill step, the decodes waiting a step); the same with --enable-mixed-chunk
    (the decodes join the prefill step); many short prompts; one long prompt in chunks of 2048."""
    out = []
    for n in [1, 4, 16, 64, 256, 1024] if quick else [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]:
        out.append(dict(name=f"decode-{n}", kind="decode", decodes=n, new=0, prompt=0))
    for d in [0, 64, 1024] if quick else [0, 16, 64, 256, 1024]:
        for c in [512, 4096, 16384] if quick else [256, 1024, 2048, 4096, 8192, 16384]:
            out.append(dict(name=f"prefill-{d}-{c}", kind="prefill", decodes=d, new=1, prompt=c))
    for d, c in [(64, 2048)] if quick else [(16, 2048), (64, 2048), (256, 2048), (256, 8192), (1024, 4096)]:
        out.append(dict(name=f"mixedchunk-{d}-{c}", kind="mixedchunk", decodes=d, new=1, prompt=c))
    for k, p in [(4, 128), (16, 128), (64, 128), (16, 512), (64, 256)][: 2 if quick else None]:
        out.append(dict(name=f"newreqs-64-{k}x{p}", kind="newreqs", decodes=64, new=k, prompt=p))
    for d, c in [(64, 8192), (256, 16384)][: 1 if quick else None]:
        out.append(dict(name=f"chunked-{d}-{c}", kind="chunked", decodes=d, new=1, prompt=c))
    return out


class Engine:
    """SGLang's tokenizer manager, detokenizer and scheduler in this process, driven one iteration at a
    time."""

    def __init__(self, model_dir: str):
        P.install_stubs()
        from sglang.srt.entrypoints.engine import init_tokenizer_manager
        from sglang.srt.managers.detokenizer_manager import DetokenizerManager
        from sglang.srt.managers.io_struct import sock_recv, sock_send
        from sglang.srt.runtime_context import SpawnRanks, publish
        from sglang.srt.server_args import PortArgs, ServerArgs

        P.patch_gpu_worker()
        # the server's defaults but for sizes this host can hold; chunk and budget are set per configuration
        self.args = ServerArgs(
            model_path=model_dir,
            device="cpu",
            load_format="dummy",
            disable_cuda_graph=True,
            log_level="error",
            max_total_tokens=600_000,
            context_length=20_000,
            max_running_requests=1200,
            mem_fraction_static=0.5,
            chunked_prefill_size=16384,
            max_prefill_tokens=16384,
        )
        ports = PortArgs.init_new(self.args)
        # each manager checks that the process published its role before it is built (runtime_context.publish)
        publish(self.args, role="tokenizer")
        self.tm, _ = init_tokenizer_manager(self.args, ports)
        publish(self.args, role="detokenizer")
        self.detok = DetokenizerManager(self.args, ports)
        publish(self.args, role="scheduler", ranks=SpawnRanks(world_rank=0, dp_rank=None, gpu_id=0))
        from sglang.srt.managers.scheduler import Scheduler

        self.sched = s = Scheduler(self.args, ports)
        # what event_loop_overlap and run_event_loop set up (l. 1975-2070) before the loop
        s.enable_skip_finishing_decode = True
        s.result_queue = collections.deque()
        s._war_barrier_enabled = False
        s.schedule_stream.synchronize = lambda: None
        self.sock_recv, self.sock_send = sock_recv, sock_send
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        self.handled = [0, 0]  # tokenizer manager: batch outputs taken, their CPU ns
        original = self.tm._handle_batch_output

        async def timed(recv_obj):
            t0 = time.thread_time_ns()
            await original(recv_obj)
            self.handled[1] += time.thread_time_ns() - t0
            self.handled[0] += 1

        self.tm._handle_batch_output = timed
        self.rng = random.Random(0)
        self.tasks: set = set()
        self.pending_rows: dict = {}

    # --- the tokenizer manager's side ---
    def submit(self, k: int, prompt: int, max_new: int) -> int:
        """k streamed requests of `prompt` random token ids, each a generate_request task; CPU ns until
        sent."""
        from sglang.srt.managers.io_struct import GenerateReqInput

        async def consume(obj):
            async for _ in self.tm.generate_request(obj, None):
                pass

        objs = [
            GenerateReqInput(
                input_ids=[self.rng.randrange(3, 32000) for _ in range(prompt)],
                stream=True,
                sampling_params={"max_new_tokens": max_new, "ignore_eos": True},
            )
            for _ in range(k)
        ]

        async def start():
            for obj in objs:
                task = asyncio.get_running_loop().create_task(consume(obj))
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)
            for _ in range(2):  # each task runs until it has sent its request and waits for output
                await asyncio.sleep(0)

        t0 = time.thread_time_ns()
        self.loop.run_until_complete(start())
        return time.thread_time_ns() - t0

    def pump(self, expect: int) -> tuple[int, int]:
        """Run the tokenizer manager's loop until it has taken `expect` more batch outputs and its tasks have
        consumed them: (ns in _handle_batch_output, ns in the rest of the loop turn)."""
        h0, ns0 = self.handled

        async def turn():
            for _ in range(2000):  # bounded: the handle loop's socket read completes within a few turns
                if self.handled[0] - h0 >= expect:
                    break
                await asyncio.sleep(0)
            for _ in range(3):  # the request tasks woken by the output take their chunks
                await asyncio.sleep(0)

        t0 = time.thread_time_ns()
        self.loop.run_until_complete(turn())
        total = time.thread_time_ns() - t0
        handle = self.handled[1] - ns0
        return handle, total - handle

    # --- the detokenizer's event loop (detokenizer_manager.py l. 184-192), one message at a time ---
    def detokenize(self) -> tuple[int, int, int]:
        """(messages handled, requests in them, CPU ns): receive, handle_batch_token_id_out, send to the
        tokenizer manager."""
        n, rids, t0 = 0, 0, time.thread_time_ns()
        sock = self.detok.recv_from_scheduler
        while sock.poll(0):
            obj = self.sock_recv(sock)
            out = self.detok._request_dispatcher(obj)
            if out is not None:
                self.sock_send(self.detok.send_to_tokenizer, out)
            n, rids = n + 1, rids + len(getattr(obj, "rids", ()))
        return n, rids, time.thread_time_ns() - t0

    # --- the scheduler's event_loop_overlap, one iteration ---
    def _timed(self, fn, *args):
        e0, t0 = P.EMULATED_NS[0], time.thread_time_ns()
        out = fn(*args)
        return out, (time.thread_time_ns() - t0) - (P.EMULATED_NS[0] - e0)

    def iteration(self) -> tuple[object, dict]:
        s = self.sched
        rec: dict = {}
        _, rec["recv"] = self._timed(s.ingest_requests)

        def schedule():
            plan = s.get_next_batch_to_run(running_batch=s.running_batch, last_batch=s.last_batch)
            s.running_batch = plan.running_batch
            return plan.batch_to_run, s.is_disable_overlap_for_batch(
                plan.batch_to_run, last_batch=s.last_batch
            )

        (batch, disable), rec["schedule"] = self._timed(schedule)
        waiting_decodes = s.running_batch.batch_size()  # after a prefill step is formed: the decodes left out
        rec["result"], rec["result_of"] = 0, None
        if disable:
            rec["result_of"], rec["result"] = self._process_previous()
        result = None
        if batch:

            def launch():
                res = s.run_batch(batch)
                s._apply_war_barrier()
                s.result_queue.append((batch.copy(), res))
                return res

            result, rec["launch"] = self._timed(launch)
        else:
            rec["launch"] = 0
            s._sched_idled = True
        if s.last_batch and not disable:
            rec["result_of"], rec["result"] = self._process_previous()
        elif not s.last_batch and batch is None:
            s.on_idle()
        _, sample_ns = self._timed(s.launch_batch_sample_if_needed, result, batch)
        rec["launch"] += sample_ns
        s.last_batch = batch
        if batch:
            extend = batch.forward_mode.is_extend()
            # decoding: requests of the batch that decode (all of a decode batch; a mixed chunk's running
            # ones); held: running requests left out of it (the decodes waiting while a prefill step runs)
            decoding = len(batch.decoding_reqs or ()) if extend else len(batch.reqs)
            rec.update(
                mode="extend" if extend else "decode",
                num_reqs=len(batch.reqs),
                decoding=decoding,
                held=waiting_decodes if extend else 0,
                num_tokens=batch.extend_num_tokens if extend else len(batch.reqs),
            )
        return batch, rec

    def _process_previous(self) -> tuple[object, int]:
        b, r = self.sched.result_queue[0]
        key = id(b)
        _, ns = self._timed(lambda: self.sched.process_batch_result(*self.sched.result_queue.popleft()))
        return key, ns

    def step(self, new: int, prompt: int, max_new: int) -> dict | None:
        """One scheduler iteration with `new` requests submitted before it, and the downstream work of the
        batch whose result it processed. Returns the row of the batch it scheduled (completed later) or
        None."""
        add_ns = self.submit(new, prompt, max_new) if new else 0
        batch, rec = self.iteration()
        done_row = None
        if rec["result_of"] is not None and rec["result_of"] in self.pending_rows:
            done_row = self.pending_rows.pop(rec["result_of"])
            done_row["result_us"] = rec["result"] / 1e3
            n, rids, ns = self.detokenize()
            done_row["detok_us"], done_row["streamed"] = ns / 1e3, rids
            handle, rest = self.pump(n)
            done_row["tm_output_us"], done_row["tm_stream_us"] = handle / 1e3, rest / 1e3
        else:
            n, _, _ = self.detokenize()
            self.pump(n)
        if batch:
            key = id(self.sched.result_queue[-1][0])
            self.pending_rows[key] = dict(
                mode=rec["mode"],
                num_reqs=rec["num_reqs"],
                num_tokens=rec["num_tokens"],
                decoding=rec["decoding"],
                held=rec["held"],
                new_reqs=new,
                new_tokens=new * prompt,
                recv_us=rec["recv"] / 1e3,
                schedule_us=rec["schedule"] / 1e3,
                launch_us=rec["launch"] / 1e3,
                tm_add_us=add_ns / 1e3,
            )
        return done_row

    def drain(self) -> None:
        """Abort everything, run until idle, empty the radix cache (the next configuration starts clean)."""
        self.tm.abort_request(abort_all=True)
        for _ in range(200):
            self.step(0, 0, 0)
            if not self.tasks and self.sched.is_fully_idle():
                break
        self.pending_rows.clear()
        self.sched.flush_cache()


def run_config(eng: Engine, cfg: dict, repeats: int) -> list[dict]:
    """Warm up the configuration's decoding requests, then `repeats` blocks of STEPS_PER_BLOCK iterations."""
    from engine_cpu_refbench import python_round

    s = eng.sched
    d, c = cfg["decodes"], cfg["prompt"]
    chunk = 2048 if cfg["kind"] == "chunked" else max(2048, c * cfg["new"])
    s.chunked_prefill_size = chunk
    s.max_prefill_tokens = max(chunk, 16384)
    s.is_mixed_chunk = cfg["kind"] == "mixedchunk"
    if d:
        for i in range(d):  # prompts of 64-79 tokens, so their pages and finish steps spread
            eng.submit(1, 64 + i % 16, DECODE_OUTPUTS)
    for _ in range(400):
        eng.step(0, 0, 0)
        if s.running_batch.batch_size() == d and not s.waiting_queue and s.chunked_req is None:
            break
    for _ in range(2):
        eng.step(0, 0, 0)
    gc.collect()
    gc.freeze()  # the server freezes its start-up objects (POST /freeze_gc after warm-up)
    rows = []
    for rep in range(repeats):
        ref0 = python_round()
        block = []
        for step in range(STEPS_PER_BLOCK):
            new = 0
            if cfg["kind"] == "chunked":
                if s.chunked_req is None and not s.waiting_queue and step % 2 == 0:
                    new = cfg["new"]
            elif cfg["new"] and step % 2 == 0:
                new = cfg["new"]
            row = eng.step(new, c, 1)
            if row is not None:
                block.append(row)
        ref = (ref0 + python_round()) / 2
        for i, r in enumerate(block):
            r.update(config=cfg["name"], kind=cfg["kind"], rep=rep, step=i, ref_us=round(ref, 1))
        rows += block
    gc.unfreeze()
    eng.drain()
    s.is_mixed_chunk = False
    return rows


def host() -> dict:
    info = {"machine": platform.machine(), "python": platform.python_version(), "cpus": os.cpu_count()}
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
        for key in ("model name", "cpu MHz", "cpu family", "model", "stepping"):
            info[key.replace(" ", "_")] = next(
                line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith(key)
            )
    except (OSError, StopIteration):
        pass
    return info


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="fewer configurations (a smoke run)")
    ap.add_argument("--only", default="", help="run configurations whose name starts with this")
    args = ap.parse_args()
    start = time.process_time()
    import torch

    eng = Engine(args.model_dir)
    import sglang

    os.makedirs(args.out_dir, exist_ok=True)
    rows = []
    with torch.inference_mode():
        for cfg in (c for c in configs(args.quick) if c["name"].startswith(args.only)):
            rows += run_config(eng, cfg, args.repeats)
            print(
                f"{cfg['name']}: done ({time.process_time() - start:.0f} CPU-s)", file=sys.stderr, flush=True
            )
    path = os.path.join(args.out_dir, "steps.csv")
    with tempfile.NamedTemporaryFile("w", dir=args.out_dir, delete=False, newline="") as f:
        w = csv.DictWriter(f, FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow({k: (round(v, 2) if isinstance(v, float) else v) for k, v in r.items() if k in FIELDS})
    os.replace(f.name, path)
    prov = {
        "what": "per-step CPU time (thread_time) of SGLang's scheduler (event_loop_overlap's calls), "
        "detokenizer and tokenizer manager, run in one process on CPU with the model stubbed "
        "(tools/sglang_cpu_steps.py docstring)",
        "sglang": sglang.__version__,
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "repeats": args.repeats,
        "steps_per_repeat": STEPS_PER_BLOCK,
        "decode_max_new_tokens": DECODE_OUTPUTS,
        "host": host(),
        "load_average": os.getloadavg(),
        "cpu_seconds": round(time.process_time() - start, 1),
    }
    with open(os.path.join(args.out_dir, "steps.provenance.json"), "w") as f:
        json.dump(prov, f, indent=1)
    print(f"wrote {path}: {len(rows)} rows", file=sys.stderr)
    os._exit(0)  # the managers' sockets and the scheduler's threads would keep the interpreter alive


if __name__ == "__main__":
    main()
