"""A run's mean step broken into its parts, per step kind, and the physics guard on what the steps achieved.

From the iteration table and the timer the run used (predictor/step.py composes a step as max(GPU side,
overlapping CPU side) + serial CPU). Every part but attention is read back from the timer's tables at the
row's token and request counts; attention is what remains of the GPU side. A step whose overlapping CPU work
was longer than its GPU side (CPU-bound) gives no GPU side to split: its GEMMs, elementwise ops, collectives
and launch gaps are still shown, attention is 0 and the rest of its time is `cpu_exposed`; `cpu_bound_steps`
says how many steps that was. A decode stretch (one row for k identical decode steps) counts as k steps of its
mean length. Parts are mean seconds per step; they add up to `mean_step_s`. `cpu_hidden_s` is CPU work (and
kernel launches) that ran beside the GPU and cost nothing.

Achieved rates, per GPU: GEMM FLOP/s (dense linear ops at the tokens the step computed; attention's FLOPs are
not counted, so this is a lower bound on the step's arithmetic) against the dense bf16 peak and the GPU's
sustained GEMM rate, and bytes/s (weights, the linear ops' activations, and for steps with decodes the KV
cache in use, an upper bound on what they read) against the HBM bandwidth. `guard` lists the steps faster than
the GPU's best measured GEMM rate allows (tests/test_step_parts.py).
"""

from __future__ import annotations

import numpy as np

KINDS = ("prefill_only", "decode_only", "mixed")
PARTS = (
    "gemm",
    "clock",
    "elementwise",
    "collectives",
    "attention",
    "launch_gaps",
    "cpu_gpu_stream",
    "cpu_exposed",
    "cpu_serial",
)
CPU_BOUND_SLACK = 1e-12  # seconds: a step whose GPU side does not exceed its CPU side by more is CPU-bound


def _at(table: np.ndarray, slope: float, t: np.ndarray) -> np.ndarray:
    end = len(table) - 1
    return np.where(t <= end, table[np.minimum(t, end)], table[end] + (t - end) * slope)


def _rows(log, replicas: tuple[int, int] | None = None) -> dict[str, np.ndarray]:
    """The rows as per-step arrays; `replicas` (lo, hi): only those replicas' rows (a disaggregated pool)."""
    cols = log.columns(0, len(log))
    if replicas is not None:
        keep = (cols["replica"] >= replicas[0]) & (cols["replica"] < replicas[1])
        cols = {name: col[keep] for name, col in cols.items()}
    k = np.maximum(cols["num_iterations"], 1).astype(float)
    out = {
        "replica": cols["replica"].astype(int),
        "stage": cols["stage"].astype(int),
        "k": k,
        "d": (cols["end_s"] - cols["start_s"]) / k,
    }
    pre, dec, req = cols["num_prefill_tokens"] / k, cols["num_decode_tokens"] / k, cols["num_requests"] / k
    out["t"] = np.rint(pre + dec).astype(np.int64)
    out["n"] = req
    out["prefills"] = req - dec
    out["kv_blocks"] = cols["kv_blocks_used"].astype(float)
    out["kind"] = np.where(dec == 0, 0, np.where(pre == 0, 1, 2))
    return out


def _padded(t: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """vllm_worker.padded over every row at once: the next captured size, or the row's own count past the
    largest (eager) or at 0."""
    at = sizes[np.minimum(np.searchsorted(sizes, t, side="left"), len(sizes) - 1)]
    return np.where((t == 0) | (t > sizes[-1]), t, at)


def _parts(timer, r: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per row: each part's seconds on the step's critical path, and the hidden CPU work."""
    tok, stage, t, n = timer._tokens, r["stage"], r["t"], r["n"]
    sizes = getattr(timer, "cudagraph_sizes", ())
    tp = _padded(t, np.asarray(sizes, dtype=np.int64)) if sizes else t
    linear = _at(tok.linear, tok.slopes["linear"], t)
    boost = getattr(timer, "boost_linear", None)
    gemm = linear if boost is None else np.minimum(linear, _at(boost, tok.slopes["linear"], tp))
    ew = _at(tok.elementwise, tok.slopes["elementwise"], t)
    coll = _at(tok.all_reduce, tok.slopes["all_reduce"], t)
    coll = (
        coll
        + np.array(
            [
                _at(tok.send_recv[s], tok.send_recv_slopes[s], np.array([x]))[0]
                for s, x in zip(stage, t, strict=True)
            ]
        )
        if timer.num_stages > 1
        else coll
    )
    mode = np.where(t > timer._launch_cap, 2, np.where(r["prefills"] > 0, 1, 0))

    def per_stage(table) -> np.ndarray:  # (stages, 3) -> per row; one stage: the row of scalars (broadcast)
        a = np.array(table, dtype=float).reshape(-1, 3)
        return a[0] if timer.num_stages == 1 else a[stage].T

    pre = per_stage(getattr(timer, "_cpu_pre", [(0.0, 0.0, 0.0)] * timer.num_stages))

    def coef(table, role):  # a + b·n + c·t, and d per prefill chunk (predictor/overhead.py)
        a = per_stage(table)
        return a[0] + a[1] * n + a[2] * t + pre[role] * r["prefills"]

    lg = np.array(timer._launch_gpu, dtype=float)[stage, mode]
    lc = np.array(timer._launch_cpu, dtype=float)[stage, mode]
    gpu_cpu, ovl, ser = coef(timer._cpu_gpu, 0), coef(timer._cpu_ovl, 1) + lc, coef(timer._cpu_ser, 2)
    side = r["d"] - ser  # max(GPU side, overlapping CPU side)
    known = gemm + (linear - gemm) + ew + coll + lg + gpu_cpu
    cpu_bound = side <= ovl + CPU_BOUND_SLACK
    attention = np.where(cpu_bound, 0.0, np.maximum(side - known, 0.0))
    return {
        "gemm": gemm,
        "clock": linear - gemm,
        "elementwise": ew,
        "collectives": coll,
        "attention": attention,
        "launch_gaps": lg,
        "cpu_gpu_stream": gpu_cpu,
        "cpu_exposed": np.where(cpu_bound, side - known, 0.0),
        "cpu_serial": ser,
        "cpu_hidden": np.where(cpu_bound, 0.0, ovl),
        "cpu_bound": cpu_bound.astype(float),
    }


def breakdown(
    log, timer, dep, replicas: tuple[int, int] | None = None, block_tokens: int | None = None
) -> dict:
    """summary.json's `step_parts`: per step kind (and all steps), the mean step, its parts, achieved rates
    (`replicas`: only those replicas' rows, e.g. a disaggregated pool). `block_tokens`: tokens per KV block
    the log counts (`kv_blocks_used`): SimConfig.kv_block_tokens(); None: the deployment's block size."""
    from simserve.memory import kv_bytes_per_token
    from simserve.ops import linear_ops
    from simserve.predictor.step import gemm_flops_per_token

    if not hasattr(timer, "_launch_cap") or not len(log):
        return {}
    r = _rows(log, replicas)
    if not len(r["d"]):
        return {}
    parts = _parts(timer, r)
    fpt = gemm_flops_per_token(dep)
    layers = dep.layers_per_stage
    ops = linear_ops(dep)
    weights = layers * sum(op.share * op.bytes(0, dep.weight_bytes) for op in ops)
    act = layers * sum(
        op.share * (op.bytes(1, dep.model.dtype_bytes) - op.bytes(0, dep.model.dtype_bytes)) for op in ops
    )
    # NOTE: SGLang's pool counts pages of --page-size tokens (1 by default), not vLLM's 16-token blocks
    per_block = kv_bytes_per_token(dep) * (dep.block_size if block_tokens is None else block_tokens)
    kv = np.where(r["kind"] > 0, r["kv_blocks"] * per_block, 0.0)
    flops, nbytes = r["t"] * fpt, weights + r["t"] * act + kv
    peak, sus, hbm = dep.gpu.peak_tflops * 1e12, dep.gpu.sustained_tflops * 1e12, dep.gpu.hbm_gbps * 1e9
    sums = _weighted_sums(r, {"d": r["d"], **parts, "flops": flops, "nbytes": nbytes})
    out = {}
    for name, total in sums.items():
        steps = total["k"]
        if not steps:
            continue
        time = total["d"]
        mean = {p: total[p] / steps for p in (*PARTS, "cpu_hidden")}
        gemm_rate = total["flops"] / time
        entry = {
            "steps": int(round(steps)),
            "mean_step_s": time / steps,
            "parts_s": {p: mean[p] for p in PARTS},
            "cpu_hidden_s": mean["cpu_hidden"],
            "cpu_bound_steps": int(round(total["cpu_bound"])),
            "gemm_tflops": gemm_rate / 1e12,
            "gemm_fraction_of_peak": gemm_rate / peak,
            "hbm_fraction": total["nbytes"] / time / hbm,
        }
        if sus:
            entry["gemm_fraction_of_sustained"] = gemm_rate / sus
        entry["limited_by"] = _limit(mean)
        out[name] = entry
    return out


def _weighted_sums(r: dict[str, np.ndarray], values: dict[str, np.ndarray]) -> dict[str, dict[str, float]]:
    """Per step kind ("all", then KINDS): each value's sum over the kind's rows weighted by the steps a row
    is, and the steps ("k"). Summed as `(x[kind] * k[kind]).sum()` sums (numpy's pairwise sum over the kind's
    rows in row order), but each product is taken once and the rows are put in kind order once, so every kind
    is a contiguous slice rather than a mask over every row (a day's replay has millions of rows)."""
    order = np.argsort(r["kind"], kind="stable")
    bounds = np.searchsorted(r["kind"][order], np.arange(len(KINDS) + 1)).tolist()
    out: dict[str, dict[str, float]] = {name: {} for name in ("all", *KINDS)}
    for key, x in (("k", None), *values.items()):
        wx = r["k"] if x is None else x * r["k"]
        out["all"][key] = float(wx.sum())
        wx = wx[order]
        for i, name in enumerate(KINDS):
            out[name][key] = float(wx[bounds[i] : bounds[i + 1]].sum())
    return out


def _limit(mean: dict[str, float]) -> str:
    """The part that takes the largest share of the mean step, in words."""
    words = {
        "gemm": "GEMMs",
        "clock": "GEMMs held to the sustained clock",
        "elementwise": "elementwise ops",
        "collectives": "collectives",
        "attention": "attention",
        "launch_gaps": "kernel launch gaps",
        "cpu_gpu_stream": "the sampler",
        "cpu_exposed": "engine CPU work not hidden by the GPU",
        "cpu_serial": "serial engine CPU work",
    }
    total = sum(mean[p] for p in PARTS) or 1.0
    top = max(PARTS, key=lambda p: mean[p])
    return f"{words[top]} ({mean[top] / total:.0%} of the step)"


def guard(log, timer, dep, replicas: tuple[int, int] | None = None, slack: float = 1e-9) -> list[str]:
    """Steps whose GEMM FLOP/s beat the GPU's best measured GEMM rate (the sustained one when the timer holds
    GEMMs to it, else the dense peak): each a line naming the row, its rate and the ceiling."""
    from simserve.predictor.step import gemm_flops_per_token

    r = _rows(log, replicas)
    ceiling = (
        dep.gpu.sustained_tflops if getattr(timer, "boost_linear", None) is not None else dep.gpu.peak_tflops
    ) * 1e12
    rate = r["t"] * gemm_flops_per_token(dep) / np.maximum(r["d"], 1e-300)
    bad = np.flatnonzero(rate > ceiling * (1 + slack))
    return [
        f"row {i}: {r['t'][i]} tokens in {r['d'][i] * 1e3:.3f} ms = {rate[i] / 1e12:.0f} TFLOP/s > "
        f"{ceiling / 1e12:.0f}"
        for i in bad[:10]
    ]
