"""The torch profiling backend: the real kernels of one layer, timed on the GPU the profile is labelled with.

Each op of `simserve/ops.py` runs at its per-GPU shard shape for every TP degree: bf16 GEMMs (`F.linear`, as vLLM
calls them), RMSNorm/LayerNorm, neox rotary, SiLU·mul or GELU, the residual add, and attention through flash-attn
when it is importable (what vLLM runs) or `scaled_dot_product_attention` otherwise. Times are CUDA-event medians of
`repeats` calls after `warmup` calls. The GPU is first given a `torch.cuda._sleep` spin so that all timed calls are
queued before it reaches them: the events then bracket kernel time only, not CPU launch gaps (the convention of the
reference measurements), and each call starts with L2 flushed, as weights are in a real forward pass.

Without a GPU it runs the same code on the CPU with `time.perf_counter`, only in quick mode and labelled as the CPU:
its numbers exercise the code path and never stand in for the GPU asked for. Collectives are measured over NCCL
when several GPUs are visible; what cannot be measured here comes from the alpha-beta model of `collectives.py`,
marked `method=analytic` row by row and in the provenance.
"""

from __future__ import annotations

import os
import platform
import re
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import pandas as pd

from simserve.catalog import GPUSpec, ModelSpec, NetworkSpec, NodeSpec
from simserve.deployment import Deployment
from simserve.errors import SimserveError
from simserve.ops import attention_shape, linear_ops
from simserve.profiling import grid
from simserve.profiling.collectives import collectives_table

WARMUP, REPEATS = 3, 10
QUICK_WARMUP, QUICK_REPEATS = 1, 3
SPIN_UP_S = 0.5
SLEEP_CYCLES = 2_000_000  # ~1.3 ms of GPU spin at 1.5 GHz: longer than the CPU needs to queue 10 timed calls
# torch.cuda.get_device_name() of each catalog GPU (NVIDIA driver names); user GPUs match their name or an alias.
DEVICE_NAMES = {
    "A100-80GB": r"nvidia a100[- ]sxm4?[- ]80gb",
    "A40-48GB": r"nvidia a40",
    "H100-SXM": r"nvidia h100 80gb hbm3",
    "H200": r"nvidia h200",
}
QUICK_GRID = {
    "tokens": [1, 16, 64, 65],
    "batches": [1, 4],
    "kv": [16, 64],
    "chunks": [16, 64],
    "prefixes": [0, 64],
}
STAT_NAMES = ("time_ms", "time_min_ms", "time_max_ms", "time_mean_ms", "time_std_ms")


def summarize(times: list[float]) -> dict[str, float]:
    stats = (
        statistics.median(times),
        min(times),
        max(times),
        statistics.fmean(times),
        statistics.pstdev(times),
    )
    return dict(zip(STAT_NAMES, stats, strict=True))


def import_torch() -> Any:
    try:
        import torch
    except ImportError:
        raise SimserveError(
            "the torch backend needs PyTorch: pip install 'simserve[torch]' (or torch==2.13.0 for a CPU build)"
        ) from None
    return torch


def device_matches(gpu: GPUSpec, device_name: str) -> bool:
    name = device_name.strip().lower()
    if gpu.name in DEVICE_NAMES:
        return re.fullmatch(DEVICE_NAMES[gpu.name], name) is not None
    bare = name.removeprefix("nvidia").strip().replace(" ", "-").replace("_", "-")
    return bare in {n.lower().replace(" ", "-").replace("_", "-") for n in (gpu.name, *gpu.aliases)}


def check_device(gpu: GPUSpec, device_name: str) -> None:
    if not device_matches(gpu, device_name):
        raise SimserveError(
            f"--gpu {gpu.name} was asked for, but the visible CUDA device is {device_name!r}; run on a "
            f"{gpu.name} (select it with CUDA_VISIBLE_DEVICES) or pass the --gpu that names this device"
        )


class Timer:
    """Median (and min/max/mean/std) in ms of `repeats` calls of a function, after `warmup` calls."""

    def __init__(self, torch: Any, device: Any, warmup: int, repeats: int):
        self.torch, self.device, self.warmup, self.repeats = torch, device, warmup, repeats
        self.cuda = device.type == "cuda"
        if self.cuda:
            l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 64 * 2**20
            self.flush = torch.empty(2 * l2, dtype=torch.uint8, device=device)
        self.spin_up()

    def spin_up(self) -> None:
        """Keep the device busy before the first timing: a GPU ramps its clocks up from idle; per-shape warm-up
        calls are too short to do it. On the CPU a short spin absorbs first-call page faults and allocator growth."""
        seconds = SPIN_UP_S if self.cuda else SPIN_UP_S / 5
        torch = self.torch
        x = torch.randn(512, 512, device=self.device)
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            x = torch.nn.functional.normalize(x @ x, dim=1)
            if self.cuda:
                torch.cuda.synchronize()

    def __call__(self, fn: Callable[[], Any]) -> dict[str, float]:
        for _ in range(self.warmup):
            fn()
        if self.cuda:
            times = self._cuda_times(fn)
        else:
            times = []
            for _ in range(self.repeats):
                start = time.perf_counter()
                fn()
                times.append((time.perf_counter() - start) * 1e3)
        return summarize(times)

    def _cuda_times(self, fn: Callable[[], Any]) -> list[float]:
        torch = self.torch
        events = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            for _ in range(self.repeats)
        ]
        torch.cuda.synchronize()
        if hasattr(
            torch.cuda, "_sleep"
        ):  # private API: without it, launch gaps of tiny kernels are timed too
            torch.cuda._sleep(
                SLEEP_CYCLES
            )  # NOTE: the GPU spins while the CPU queues every timed call behind it
        for start, end in events:
            self.flush.zero_()
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        return [start.elapsed_time(end) for start, end in events]


def _grid(max_model_len: int, max_tokens: int, quick: bool) -> dict[str, list[int]]:
    """The shared sampling grid (`grid.py`), or a few small points in quick mode, within the requested limits."""
    max_chunk = min(max_tokens, max_model_len)
    if not quick:
        return {"tokens": grid.token_counts(max_tokens), "batches": grid.decode_batch_sizes(),
                "kv": grid.kv_lengths(max_model_len), "chunks": grid.prefill_chunks(max_chunk),
                "prefixes": grid.prefill_prefixes(max_model_len)}  # fmt: skip
    limits = {
        "tokens": max_tokens,
        "batches": 256,
        "kv": max_model_len,
        "chunks": max_chunk,
        "prefixes": max_model_len - 1,
    }
    return {k: [v for v in QUICK_GRID[k] if v <= limit] or [limit] for k, limit in limits.items()}


def linear_rows(torch: Any, dep: Deployment, tokens: list[int], timer: Timer, dtype: Any) -> list[dict]:
    F, rows = torch.nn.functional, []
    for op in linear_ops(dep):
        w = torch.randn(op.out_features, op.in_features, dtype=dtype, device=timer.device)
        x = torch.randn(max(tokens), op.in_features, dtype=dtype, device=timer.device)
        for t in tokens:
            xt = x[:t]
            rows.append(
                {"op": op.name, "tp": dep.tp, "num_tokens": t, **timer(lambda xt=xt, w=w: F.linear(xt, w))}
            )
        w = x = None  # free this op's tensors before the next op allocates its own
    return rows


def elementwise_rows(torch: Any, dep: Deployment, tokens: list[int], timer: Timer, dtype: Any) -> list[dict]:
    F, m, s = torch.nn.functional, dep.model, attention_shape(dep)
    n, dev = max(tokens), timer.device
    h = torch.randn(n, m.hidden, dtype=dtype, device=dev)
    res = torch.randn(n, m.hidden, dtype=dtype, device=dev)
    out = torch.empty(n, m.hidden, dtype=dtype, device=dev)
    weight, bias = (
        torch.ones(m.hidden, dtype=dtype, device=dev),
        torch.zeros(m.hidden, dtype=dtype, device=dev),
    )
    q = torch.randn(n, s.q_heads, s.head_dim, dtype=dtype, device=dev)
    k = torch.randn(n, s.kv_heads, s.head_dim, dtype=dtype, device=dev)
    angles = torch.arange(n, device=dev, dtype=torch.float32)[:, None] / 10000 ** (
        torch.arange(0, s.head_dim, 2, device=dev, dtype=torch.float32) / s.head_dim
    )
    cos, sin = angles.cos().to(dtype)[:, None, :], angles.sin().to(dtype)[:, None, :]
    ffn = m.ffn // dep.tp
    up = torch.randn(n, m.ffn_in_width // dep.tp, dtype=dtype, device=dev)

    def norm(t: int) -> Any:
        if m.norm == "rmsnorm":
            return F.rms_norm(h[:t], (m.hidden,), weight, 1e-5)
        return F.layer_norm(h[:t], (m.hidden,), weight, bias, 1e-5)

    def rope(x: Any, t: int) -> Any:
        """Neox-style rotary (Llama, Mistral) in eager torch: several kernels where vLLM runs one fused kernel."""
        half = s.head_dim // 2
        x1, x2 = x[:t, :, :half], x[:t, :, half:]
        c, sn = cos[:t], sin[:t]
        return torch.cat((x1 * c - x2 * sn, x2 * c + x1 * sn), dim=-1)

    def act(t: int) -> Any:
        if m.activation == "swiglu":
            return F.silu(up[:t, :ffn]) * up[:t, ffn:]
        return F.gelu(up[:t])

    fns: dict[str, Callable[[int], Any]] = {
        "attn_norm": norm,
        "mlp_norm": norm,
        "rotary": lambda t: (rope(q, t), rope(k, t)),
        "act": act,
        "residual_add": lambda t: torch.add(h[:t], res[:t], out=out[:t]),
    }
    return [{"op": op, "tp": dep.tp, "num_tokens": t, **timer(lambda f=f, t=t: f(t))}
            for op, f in fns.items() for t in tokens]  # fmt: skip


class Attention:
    """Prefill chunks over a cached prefix and batched decode with GQA, through flash-attn or SDPA."""

    def __init__(self, torch: Any, dep: Deployment, dtype: Any, device: Any, capacity: int):
        self.torch, self.dtype, self.device = torch, dtype, device
        s = attention_shape(dep)
        self.hq, self.hkv, self.d = s.q_heads, s.kv_heads, s.head_dim
        self.window = dep.model.sliding_window
        self.capacity = capacity  # KV tokens (all sequences together) that fit in the preallocated cache
        self.k = torch.randn(capacity * self.hkv * self.d, dtype=dtype, device=device)
        self.v = torch.randn(capacity * self.hkv * self.d, dtype=dtype, device=device)
        self.flash = _flash_attn(torch, device)
        self.backend = f"flash-attn {self.flash.__version__}" if self.flash else "torch sdpa"

    def _kv(self, b: int, n: int, heads_first: bool) -> tuple[Any, Any]:
        shape = (b, self.hkv, n, self.d) if heads_first else (b, n, self.hkv, self.d)
        size = b * n * self.hkv * self.d
        return self.k[:size].view(shape), self.v[:size].view(shape)

    def fits(self, b: int, n: int) -> bool:
        return b * n <= self.capacity

    def prefill(self, chunk: int, prefix: int, q: Any = None) -> Callable[[], Any]:
        """One request's `chunk` new tokens after `prefix` cached ones; q is (1, chunk, heads, head_dim)."""
        torch, F = self.torch, self.torch.nn.functional
        from torch.nn.attention.bias import causal_lower_right

        if self.window and not self.flash:  # keys no query of the chunk can see are never read
            prefix = min(prefix, self.window)
        q = torch.randn(1, chunk, self.hq, self.d, dtype=self.dtype, device=self.device) if q is None else q
        if self.flash:
            k, v = self._kv(1, prefix + chunk, heads_first=False)
            window = (self.window, 0) if self.window else (-1, -1)
            return lambda: self.flash.flash_attn_func(q, k, v, causal=True, window_size=window)
        k, v = self._kv(1, prefix + chunk, heads_first=True)
        q = q.transpose(1, 2)
        # causal inside the chunk, full over the prefix: the mask is aligned to the bottom-right corner
        mask = causal_lower_right(chunk, prefix + chunk) if prefix else None
        gqa = self.hq != self.hkv
        if mask is None:
            return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        return lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)

    def decode(self, batch: int, kv_len: int, q: Any = None) -> Callable[[], Any]:
        """`batch` requests, one new token each, over `kv_len` cached tokens; q is (batch, 1, heads, head_dim)."""
        torch, F = self.torch, self.torch.nn.functional
        kv_len = min(kv_len, self.window) if self.window else kv_len
        q = torch.randn(batch, 1, self.hq, self.d, dtype=self.dtype, device=self.device) if q is None else q
        if self.flash:
            k, v = self._kv(batch, kv_len, heads_first=False)
            lens = torch.full((batch,), kv_len, dtype=torch.int32, device=self.device)
            return lambda: self.flash.flash_attn_with_kvcache(q, k, v, cache_seqlens=lens)
        k, v = self._kv(batch, kv_len, heads_first=True)
        q = q.transpose(1, 2)
        return lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=self.hq != self.hkv)


def _flash_attn(torch: Any, device: Any) -> Any:
    """flash-attn when importable on a GPU and it runs a tiny GQA call; otherwise None (SDPA is used)."""
    if device.type != "cuda":
        return None
    try:
        import flash_attn

        q = torch.randn(1, 4, 4, 64, dtype=torch.bfloat16, device=device)
        kv = torch.randn(1, 8, 2, 64, dtype=torch.bfloat16, device=device)
        flash_attn.flash_attn_func(q, kv, kv, causal=True)
        return flash_attn
    except Exception:  # not installed, or built for another GPU/torch: SDPA is the portable path
        return None


def attention_rows(
    attn: Attention, tp: int, g: dict[str, list[int]], timer: Timer, max_model_len: int
) -> tuple[list[dict], int]:
    """Decode over batch × context and prefill over chunk × prefix; points whose KV does not fit are counted."""
    rows, skipped = [], 0
    for b in g["batches"]:
        for kv in g["kv"]:
            if not attn.fits(b, kv):
                skipped += 1
                continue
            stats = timer(attn.decode(b, kv))
            rows.append({"phase": "decode", "tp": tp, "batch_size": b, "chunk": 1, "kv_len": kv, **stats})
    for c in g["chunks"]:
        for p in g["prefixes"]:
            if c + p > max_model_len:
                continue
            if not attn.fits(1, p + c):
                skipped += 1
                continue
            stats = timer(attn.prefill(c, p))
            rows.append({"phase": "prefill", "tp": tp, "batch_size": 1, "chunk": c, "kv_len": p, **stats})
    return rows, skipped


def kv_capacity(torch: Any, device: Any, dep: Deployment, g: dict[str, list[int]], dtype: Any) -> int:
    """KV tokens to preallocate: the largest grid point, or what 80% of free GPU memory holds."""
    s = attention_shape(dep)
    needed = max(max(g["batches"]) * max(g["kv"]), max(g["chunks"]) + max(g["prefixes"]))
    if device.type != "cuda":
        return needed
    free, _ = torch.cuda.mem_get_info(device)
    per_token = 2 * s.kv_heads * s.head_dim * torch.tensor([], dtype=dtype).element_size()
    return min(needed, int(0.8 * free / per_token))


# ------------------------------------------------------------------------------------------------ collectives


def measure_collectives(
    workers: list[int], sizes: list[int], device_type: str, warmup: int, repeats: int
) -> pd.DataFrame:
    """all_reduce over the first n ranks for each n in `workers`, and send/recv from rank 0 to rank 1.

    Spawns one process per GPU (NCCL), or per CPU worker (gloo) when `device_type` is "cpu", which tests use
    to run this same code without GPUs.
    """
    torch = import_torch()
    world = max([*workers, 2])
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rows.json")
        args = (world, f"file://{tmp}/rendezvous", workers, sizes, device_type, warmup, repeats, out)
        torch.multiprocessing.spawn(_collective_worker, args=args, nprocs=world, join=True)
        return pd.read_json(out, orient="records")


def _collective_worker(
    rank: int, world: int, init: str, workers: list[int], sizes: list[int], device_type: str, warmup: int,
    repeats: int, out: str,
) -> None:  # fmt: skip
    torch = import_torch()
    dist, cuda = torch.distributed, device_type == "cuda"
    if cuda:
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if cuda else "gloo", init_method=init, rank=rank, world_size=world)
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    dtype = torch.float16 if cuda else torch.float32  # NCCL profiles use fp16 (Vidur too); gloo wants fp32
    # every rank must join every group, members or not
    groups = {n: dist.new_group(list(range(n))) for n in sorted({*workers, 2})}
    rows = []

    def timed(fn: Callable[[], Any], group: Any) -> dict[str, float]:
        times = []
        for i in range(warmup + repeats):
            dist.barrier(group=group)  # start together: the time is the collective, not the peers' skew
            if cuda:
                torch.cuda.synchronize()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                torch.cuda.synchronize()
                ms = start.elapsed_time(end)
            else:
                t0 = time.perf_counter()
                fn()
                ms = (time.perf_counter() - t0) * 1e3
            if i >= warmup:
                times.append(ms)
        return summarize(times)

    for size in sizes:
        buf = torch.ones(
            max(1, size // torch.tensor([], dtype=dtype).element_size()), dtype=dtype, device=device
        )
        for n in workers:
            if rank < n:
                stats = timed(lambda buf=buf, n=n: dist.all_reduce(buf, group=groups[n]), groups[n])
                rows.append({"op": "all_reduce", "num_workers": n, "size_bytes": size, **stats})
        if rank < 2:
            peer = 1 - rank

            def hop(buf: Any = buf, peer: int = peer) -> None:
                (dist.send if rank == 0 else dist.recv)(buf, peer)

            stats = timed(hop, groups[2])
            rows.append({"op": "send_recv", "num_workers": 2, "size_bytes": size, **stats})
    dist.barrier()
    if rank == 0:
        pd.DataFrame(rows).to_json(out, orient="records")
    dist.destroy_process_group()


def collective_rows(
    torch: Any, device: Any, gpu: GPUSpec, node: NodeSpec, network: NetworkSpec | None, tps: list[int], quick: bool,
    warmup: int, repeats: int,
) -> tuple[pd.DataFrame, str]:  # fmt: skip
    """Measured NCCL rows where this machine can measure them; the alpha-beta model's rows, marked, elsewhere."""
    analytic = collectives_table(node, network, tps, quick).assign(method="analytic")
    count = torch.cuda.device_count() if device.type == "cuda" else 0
    if count < 2:
        return analytic, (
            f"not measured ({count} visible GPU(s)): every row is the alpha-beta model of "
            f"simserve/profiling/collectives.py (method=analytic)"
        )
    for i in range(count):
        check_device(gpu, torch.cuda.get_device_name(i))
    workers = sorted({t for t in tps if 1 < t <= count})
    sizes = sorted(set(analytic["size_bytes"].tolist()))
    measured = measure_collectives(workers, sizes, "cuda", warmup, repeats).assign(
        link=node.name, method="measured"
    )
    keys = set(zip(measured["op"], measured["link"], measured["num_workers"], strict=True))
    rest = analytic[
        [k not in keys for k in zip(analytic["op"], analytic["link"], analytic["num_workers"], strict=True)]
    ]
    note = (
        f"measured over NCCL on {count} visible GPUs, taken to be a {node.name} box (all_reduce over the first n, "
        f"send_recv GPU 0 -> 1); {len(rest)} rows it cannot measure (more GPUs, other nodes) are analytic"
    )
    return pd.concat([measured, rest], ignore_index=True), note


# ------------------------------------------------------------------------------------------------ profile


def _free(torch: Any, device: Any) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _device(torch: Any, gpu: GPUSpec, quick: bool) -> tuple[Any, Any, str]:
    """(device, dtype, label): the GPU asked for, or the CPU in quick mode, never one posing as the other."""
    if torch.cuda.is_available():
        device = torch.device("cuda", torch.cuda.current_device())
        name = torch.cuda.get_device_name(device)
        check_device(gpu, name)
        return device, torch.bfloat16, name
    if not quick:
        raise SimserveError(
            f"no CUDA GPU is visible, so the torch backend cannot measure {gpu.name}: run it on a {gpu.name}, "
            f"use --backend roofline, or add --quick to exercise the code path on this CPU (labelled as the CPU)"
        )
    cpu = platform.processor() or platform.machine() or "unknown"
    return (
        torch.device("cpu"),
        torch.float32,
        f"CPU ({cpu}), not a {gpu.name}: a code-path check, not GPU timings",
    )


def profile(
    model: ModelSpec,
    gpu: GPUSpec,
    tps: list[int],
    node: NodeSpec | None,
    network: NetworkSpec | None,
    max_model_len: int = 16384,
    max_tokens: int = 16384,
    quick: bool = False,
) -> tuple[dict[str, pd.DataFrame], dict]:
    """Return the four tables of simserve/profiling/schema.py (ms per layer per GPU) and provenance fields."""
    torch = import_torch()
    if not tps:
        raise SimserveError("no TP degrees to profile; pass --tp, e.g. --tp 1,2,4")
    tps = sorted(set(tps))
    deps = [Deployment.create(model, gpu, tp, 1, node, network, max_model_len=max_model_len) for tp in tps]
    node = deps[0].node
    if node is None:
        raise SimserveError(f"GPU {gpu.name} has no default node for its collectives; pass --node NAME")
    device, dtype, label = _device(torch, gpu, quick)
    warmup, repeats = (QUICK_WARMUP, QUICK_REPEATS) if quick else (WARMUP, REPEATS)
    threads = torch.get_num_threads()
    if device.type == "cpu":
        # One thread: on a shared CPU, a multi-threaded op waits for descheduled workers in whole scheduler
        # ticks (4 ms steps seen on a 2-core CI box), which would bury the op's own time.
        torch.set_num_threads(1)
    try:
        timer, g = Timer(torch, device, warmup, repeats), _grid(max_model_len, max_tokens, quick)
        linear, elementwise, attention, skipped, backend = [], [], [], 0, ""
        with torch.inference_mode():
            for dep in deps:
                linear += linear_rows(torch, dep, g["tokens"], timer, dtype)
                elementwise += elementwise_rows(torch, dep, g["tokens"], timer, dtype)
                _free(torch, device)
                attn = Attention(torch, dep, dtype, device, kv_capacity(torch, device, dep, g, dtype))
                rows, n_skipped = attention_rows(attn, dep.tp, g, timer, max_model_len)
                attention, skipped, backend = attention + rows, skipped + n_skipped, attn.backend
                del attn
                _free(torch, device)
    finally:
        torch.set_num_threads(threads)
    collectives, coll_note = collective_rows(torch, device, gpu, node, network, tps, quick, warmup, repeats)
    tables = {"linear": pd.DataFrame(linear), "elementwise": pd.DataFrame(elementwise),
              "attention": pd.DataFrame(attention), "collectives": collectives}  # fmt: skip
    cuda = device.type == "cuda"
    provenance = {
        "backend": "torch",
        "model": model.name,
        "gpu": gpu.name,
        "node": node.name,
        "network": network.name if network else None,
        "device": label,
        "device_is_requested_gpu": cuda,
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "cudnn_version": torch.backends.cudnn.version() if cuda else None,
        "dtype": str(dtype).removeprefix("torch."),
        "cpu_threads": None if cuda else 1,
        "attention_backend": backend,
        "timer": "CUDA events around calls queued behind a GPU spin (kernel time, no launch gaps), L2 flushed "
        "before each call"
        if cuda
        else "time.perf_counter around each call (CPU wall clock)",
        "warmup": warmup,
        "repeats": repeats,
        "statistic": "median of repeats (min/max/mean/std in time_<stat>_ms)",
        "quick": quick,
        "max_model_len": max_model_len,
        "max_tokens": max_tokens,
        "grid_sizes": {k: len(v) for k, v in g.items()},
        "attention_points_skipped_for_memory": skipped,
        "collectives": coll_note,
        "notes": "rotary runs as eager torch ops (several kernels; vLLM fuses it into one), so it reads slower "
        "than a serving engine's; SwiGLU is silu + mul (two kernels, vLLM fuses them)",
    }
    return tables, provenance
