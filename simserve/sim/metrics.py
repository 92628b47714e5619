"""Tables and summary of a finished run: per request, per iteration, percentiles, throughput, MFU/MBU.

Latency metrics cover completed requests (ignored ones are excluded, as in Sarathi-Serve). TBT is every
gap between a request's consecutive output tokens, stalls, bubbles and preemptions included; the first
token contributes no gap (Sarathi-Serve records a 0 there, one per request: leaving it out raises P99 TBT
by well under 1%, and it is not a real gap). TBT percentiles come from a 0.1%-accurate log histogram.

With the API-server model (sim/api_server.py) TTFT, end-to-end and normalized latency are the client's: from
when it sent the request to when the API server had streamed the token, plus `frontend_s` (network and
client); TBT and scheduling delay stay engine-side (the capacity criteria read them), and `api_server` holds
the processes' utilisation and queueing, the client's inter-token latency, and the engine-side TTFT and e2e.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import numpy as np

from simserve import numerics
from simserve.sim.cluster import RawRun
from simserve.sim.histogram import LogHistogram
from simserve.sim.iterations import CHUNK_ROWS
from simserve.sim.request import DONE, IGNORED

if TYPE_CHECKING:  # pandas only where a caller asks for DataFrames: `simserve run` never loads it
    import pandas as pd

QUANTILES = (50, 90, 99)
STATUS = ("unfinished", "running", "completed", "ignored")  # by the status codes of sim/request.py


@dataclass(frozen=True)
class Summary:
    num_requests: int
    completed: int
    ignored: int
    overloaded: bool
    duration_s: float  # first arrival to last completion (or to the stop, when overloaded)
    throughput_rps: float
    throughput_tps: float  # output tokens per second
    ttft_p50_s: float
    ttft_p90_s: float
    ttft_p99_s: float
    tbt_p50_s: float
    tbt_p90_s: float
    tbt_p99_s: float
    tbt_mean_s: float
    scheduling_delay_p50_s: float
    scheduling_delay_p90_s: float
    scheduling_delay_p99_s: float
    e2e_p50_s: float
    e2e_p90_s: float
    e2e_p99_s: float
    normalized_latency_p50_s: float  # end-to-end latency per output token
    normalized_latency_p90_s: float
    normalized_latency_p99_s: float
    preemptions: int
    num_iterations: int
    kv_blocks_per_replica: int
    mfu: float  # estimate: see estimate_utilization
    mbu: float
    stage_busy: tuple[float, ...]  # per (replica, stage), replica-major
    stage_bubble: tuple[float, ...]
    stopped_early: bool = False  # SimConfig.stop_tbt ended the run: its TBT quantile had surely failed
    capped: bool = False  # SimConfig.time_limit_s ended the run; the latencies cover completed requests
    # the front end's latency, included in TTFT, e2e and normalized latency (frontend.py)
    frontend_s: float = 0.0
    # prefix caching (vLLM's prefix-cache counters, first admissions; readmissions after preemption apart):
    # prompt tokens looked up, tokens found cached, and their ratio. None when prefix caching is off.
    prefix_cache_queries: int | None = None
    prefix_cache_hits: int | None = None
    prefix_cache_hit_rate: float | None = None
    prefix_cache_preempted_hits: int | None = None
    api_server: dict | None = None  # the API-server model's report (api_server.py); None: not modelled
    # More than one replica (or attention-DP rank): per replica, the requests routed to it, the mean number
    # outstanding there (routed, not finished: each request from its arrival to its completion or the run's
    # end, over the run's duration) and its prefix-cache hit rate (None without prefix caching).
    # per_replica_load.
    per_replica: tuple[dict, ...] | None = None
    # --kv-offload-gb: the CPU tier's counters summed over replicas (kv_offload.CpuTier.summary); None: no
    # tier
    kv_offload: dict | None = None

    def as_dict(self) -> dict:
        d = asdict(self)
        if not self.capped:  # only when it happened, so uncapped summaries stay as they were
            del d["capped"]
        if not self.frontend_s:  # likewise: engine-side summaries keep their keys
            del d["frontend_s"]
        if self.api_server is None:  # likewise: runs without the API-server model keep their summary
            del d["api_server"]
        if self.per_replica is None:  # likewise: one-replica summaries keep their keys
            del d["per_replica"]
        if self.kv_offload is None:  # likewise: runs without a CPU tier keep their summary
            del d["kv_offload"]
        if self.prefix_cache_queries is None:  # likewise: runs without prefix caching keep their summary
            for k in (
                "prefix_cache_queries",
                "prefix_cache_hits",
                "prefix_cache_hit_rate",
                "prefix_cache_preempted_hits",
            ):
                del d[k]
        return d


def tier_report(tiers: list[dict], gpu_hits: int, gpu_queries: int) -> dict:
    """The CPU tier beside the GPU prefix cache: tokens each tier served, of the prompt tokens looked up."""
    out = {k: sum(t[k] for t in tiers) for k in tiers[0]}
    out["load_s"] = float(out["load_s"])
    out["gpu_prefix_hits"] = gpu_hits
    out["gpu_hit_rate"] = gpu_hits / gpu_queries if gpu_queries else 0.0
    # vLLM's connector prefix-cache counters: of the tokens the GPU hit left, how many the CPU tier held
    out["cpu_hit_rate"] = out["cpu_hits"] / out["cpu_queries"] if out["cpu_queries"] else 0.0
    return out


@dataclass(frozen=True)
class SimResult:
    requests: pd.DataFrame
    iterations: pd.DataFrame
    summary: Summary
    tbt: LogHistogram

    @property
    def overloaded(self) -> bool:
        return self.summary.overloaded


def _pct(x: np.ndarray) -> list[float]:
    if not len(x):
        return [math.nan] * len(QUANTILES)
    return numerics.percentiles(x, QUANTILES)


def request_columns(run: RawRun, lo: int = 0, hi: int | None = None) -> dict[str, np.ndarray]:
    """Rows lo..hi (default all) of the per-request table, column by column; `status` holds the codes of
    STATUS. TBT columns are NaN for requests that did not complete or have fewer than two tokens."""
    r = run.reqs
    part = slice(lo, r.n if hi is None else hi)
    generated, first, last = r.generated[part], r.first_token[part], r.last_token[part]
    status = r.status[part]
    gaps = np.maximum(generated - 1, 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        tbt_mean = np.where(gaps > 0, (last - first) / np.maximum(gaps, 1), np.nan)
    tbt_max = np.where(gaps > 0, r.tbt_max[part], np.nan)
    unfinished = status != DONE
    tbt_mean[unfinished] = np.nan
    tbt_max[unfinished] = np.nan
    return {
        "request_id": run.request_ids[part],
        "replica": r.replica[part],
        "arrived_at_s": r.arrived[part],
        "scheduled_at_s": r.scheduled[part],
        "first_token_at_s": first,
        "completed_at_s": r.completed[part],
        "prompt_tokens": r.prompt[part],
        "output_tokens": r.output[part],
        "preemptions": r.preemptions[part],
        "tbt_mean_s": tbt_mean,
        "tbt_max_s": tbt_max,
        **_client_columns(run, part),
        "status": status,
    }


def _client_columns(run: RawRun, part: slice) -> dict[str, np.ndarray]:
    """With the API-server model: when the client sent each request, saw its first token and its last (network
    and client, `frontend_s`, not included); `arrived_at_s` is then when the request entered the engine."""
    api = run.api
    if api is None:
        return {}
    return {
        "sent_at_s": api.sent[part],
        "client_first_token_at_s": api.first[part],
        "client_completed_at_s": api.done[part],
    }


def request_table(run: RawRun, lo: int = 0, hi: int | None = None) -> pd.DataFrame:
    """Rows lo..hi (default all) of the per-request table as a DataFrame (status categorical)."""
    import pandas as pd

    cols = request_columns(run, lo, hi)
    cols["status"] = pd.Categorical.from_codes(cols["status"], STATUS)
    return pd.DataFrame(cols)


def build_result(run: RawRun, dep=None) -> SimResult:
    """Tables and summary; `dep` (a simserve Deployment) adds the MFU/MBU estimate."""
    return SimResult(request_table(run), run.log.to_frame(), summarize(run, dep), run.tbt)


def summarize(run: RawRun, dep=None) -> Summary:
    """The summary alone, without building the tables (what `simserve run` needs before streaming them)."""
    r = run.reqs
    done = r.status == DONE
    a, s, f, c = r.arrived[done], r.scheduled[done], r.first_token[done], r.completed[done]
    out = r.output[done]
    start = float(r.arrived[0])
    duration = max(float(run.end_time) - start, 1e-12)
    front = run.cfg.frontend_s
    api_report = None
    # the client's times (api_server.py), then the network's; engine-side ones reported
    if run.api is not None:
        api = run.api
        sent = api.sent[done]
        cf, cc = api.first[done] - sent, api.done[done] - sent
        if front:
            cf, cc = cf + front, cc + front
        ttft, e2e, norm = _pct(cf), _pct(cc), _pct(cc / out)
        api_report = _api_report(run, api, duration, f - a, c - a)
    # what the client sees: the front end's way in and out (frontend.py); sched delay stays engine-side
    elif front:
        ttft, e2e, norm = _pct(f - a + front), _pct(c - a + front), _pct((c - a + front) / out)
    else:
        ttft, e2e, norm = _pct(f - a), _pct(c - a), _pct((c - a) / out)
    sched = _pct(s - a)
    # Busy time from the table, clipped at the end: an overloaded run stops in the middle of iterations.
    per_stage, num_iterations = _busy_and_iterations(run.log, float(run.end_time))
    busy = tuple(
        min(1.0, per_stage.get((rep.index, s), 0.0) / duration) for rep in run.replicas for s in range(rep.pp)
    )
    bubble = tuple(b / duration for rep in run.replicas for b in rep.bubble)
    mfu, mbu = estimate_utilization(run, dep, duration) if dep is not None else (math.nan, math.nan)
    bubble = tuple(float(x) for x in bubble)
    # vLLM's block pool (vllm-v1) or SGLang's radix cache (sglang): the same counters
    caches = [
        c
        for rep in run.replicas
        if (c := getattr(rep.state, "prefix", None) or getattr(rep.state, "radix", None)) is not None
    ]
    prefix = {}
    if caches:
        queries, hits = sum(c.queries for c in caches), sum(c.hits for c in caches)
        prefix = dict(
            prefix_cache_queries=queries,
            prefix_cache_hits=hits,
            prefix_cache_hit_rate=hits / queries if queries else 0.0,
            prefix_cache_preempted_hits=sum(c.preempted_hits for c in caches),
        )
        tiers = [c.tier.summary() for c in caches if getattr(c, "tier", None) is not None]
        if tiers:
            prefix["kv_offload"] = tier_report(tiers, hits, queries)
    per_replica = per_replica_load(run, duration) if len(run.replicas) > 1 else None
    summary = Summary(
        **prefix,
        per_replica=per_replica,
        num_requests=r.n,
        completed=int(done.sum()),
        ignored=int((r.status == IGNORED).sum()),
        overloaded=run.overloaded,
        stopped_early=run.stopped_early,
        capped=run.capped,
        duration_s=duration,
        throughput_rps=float(done.sum()) / duration,
        throughput_tps=float(out.sum()) / duration,
        ttft_p50_s=ttft[0],
        ttft_p90_s=ttft[1],
        ttft_p99_s=ttft[2],
        tbt_p50_s=run.tbt.quantile(0.5),
        tbt_p90_s=run.tbt.quantile(0.9),
        tbt_p99_s=run.tbt.quantile(0.99),
        tbt_mean_s=run.tbt.mean(),
        scheduling_delay_p50_s=sched[0],
        scheduling_delay_p90_s=sched[1],
        scheduling_delay_p99_s=sched[2],
        e2e_p50_s=e2e[0],
        e2e_p90_s=e2e[1],
        e2e_p99_s=e2e[2],
        normalized_latency_p50_s=norm[0],
        normalized_latency_p90_s=norm[1],
        normalized_latency_p99_s=norm[2],
        preemptions=int(r.preemptions.sum()),
        num_iterations=num_iterations,
        kv_blocks_per_replica=run.num_blocks,
        mfu=mfu,
        mbu=mbu,
        stage_busy=busy,
        stage_bubble=bubble,
        frontend_s=front,
        api_server=api_report,
    )
    return summary


def per_replica_load(run: RawRun, duration: float) -> tuple[dict, ...]:
    """Per replica: requests routed there, mean outstanding (Little's law over the requests table: each routed
    request counts from its arrival to its completion, or to the run's end if unfinished) and prefix-cache hit
    rate (tokens found cached / tokens looked up at first admissions, vLLM's counter; None when off)."""
    r = run.reqs
    end = float(run.end_time)
    # a request a replica dropped left it at an unrecorded time
    routed = (r.replica >= 0) & (r.status != IGNORED)
    finish = np.where(np.isnan(r.completed), end, np.minimum(r.completed, end))
    stay = np.maximum(finish - r.arrived, 0.0)
    out = []
    for rep in run.replicas:
        mine = routed & (r.replica == rep.index)
        cache = getattr(rep.state, "prefix", None) or getattr(rep.state, "radix", None)
        rate = None if cache is None else (cache.hits / cache.queries if cache.queries else 0.0)
        out.append(
            dict(
                replica=int(rep.index),
                requests=int(mine.sum()),
                mean_outstanding=float(stay[mine].sum()) / duration,
                prefix_cache_hit_rate=rate,
            )
        )
    return tuple(out)


def probe_summary(run: RawRun) -> dict:
    """What a capacity probe's record reads of the summary (tune/simadapter.py: SUMMARY_FIELDS, the stop flags
    and the front end's latency), each field computed as `summarize` computes it, without the latency
    percentiles, busy times and utilisation a probe never reads (half the CPU of a probe's reduction)."""
    r = run.reqs
    done = r.status == DONE
    duration = max(float(run.end_time) - float(r.arrived[0]), 1e-12)
    return {
        "completed": int(done.sum()),
        "ignored": int((r.status == IGNORED).sum()),
        "overloaded": run.overloaded,
        "stopped_early": run.stopped_early,
        "capped": run.capped,
        "duration_s": duration,
        "throughput_rps": float(done.sum()) / duration,
        "throughput_tps": float(r.output[done].sum()) / duration,
        "preemptions": int(r.preemptions.sum()),
        "num_iterations": _iterations(run.log),
        "kv_blocks_per_replica": run.num_blocks,
        "frontend_s": run.cfg.frontend_s,
    }


def _iterations(log) -> int:
    """The iterations of stage 0 (`_busy_and_iterations`' count, without the busy times)."""
    return sum(int(ints[ints[:, 1] == 0, 6].sum()) for ints, _ in log.chunks(CHUNK_ROWS))


def _api_report(run: RawRun, api, duration: float, ttft: np.ndarray, e2e: np.ndarray) -> dict:
    """The API servers' utilisation and queueing (api_server.ApiServers.report), the client's inter-token
    latency, and the engine-side TTFT and e2e (from entering the engine to the engine's token)."""
    doc = api.report(duration)
    (t50, t99), (e50, e99) = (_pct(x)[::2] for x in (ttft, e2e))
    doc.update(
        client_itl_p50_s=api.itl.quantile(0.5),
        client_itl_p99_s=api.itl.quantile(0.99),
        client_itl_mean_s=api.itl.mean(),
        engine_ttft_p50_s=t50,
        engine_ttft_p99_s=t99,
        engine_e2e_p50_s=e50,
        engine_e2e_p99_s=e99,
    )
    return doc


def _busy_and_iterations(log, end: float) -> tuple[dict[tuple[int, int], float], int]:
    """Busy seconds per (replica, stage), clipped at `end`, and the iterations of stage 0.

    The log is read a chunk at a time; only the clipped durations and group keys (12 bytes a row) are
    gathered. The sums are the float operations of the pandas grouped sum this replaced (pandas 3), so
    `stage_busy` keeps its last bits: when the rows come grouped (one replica at PP = 1), each group's sum is
    `np.add.reduceat` over its segment; otherwise a compensated (Kahan) sum per group in row order, a
    Python loop of about 0.3 µs a row.
    """
    n = len(log)
    clipped = np.empty(n)
    key = np.empty(n, np.int32)  # replica << 8 | stage (PP < 256): sorts as (replica, stage) does
    iterations = 0
    for lo, (ints, floats) in zip(range(0, n, CHUNK_ROWS), log.chunks(CHUNK_ROWS), strict=True):
        hi = lo + len(ints)
        clipped[lo:hi] = np.minimum(floats[:, 1], end) - np.minimum(floats[:, 0], end)
        key[lo:hi] = (ints[:, 0] << 8) | ints[:, 1]
        iterations += int(ints[ints[:, 1] == 0, 6].sum())
    if not n:
        return {}, 0
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    if (np.diff(key[starts]) > 0).all():  # grouped rows: pandas takes np.add.reduceat
        sums = np.add.reduceat(clipped, starts).tolist()
        groups = key[starts].tolist()
    else:
        groups, sums = [], []
        for k in np.flatnonzero(np.bincount(key)).tolist():  # not np.unique: it imports numpy.ma
            total = comp = 0.0
            for v in clipped[key == k].tolist():
                y = v - comp
                t = total + y
                comp = t - total - y
                total = t
            groups.append(k)
            sums.append(total)
    return {(k >> 8, k & 0xFF): total for k, total in zip(groups, sums, strict=True)}, iterations


def estimate_utilization(run: RawRun, dep, duration: float) -> tuple[float, float]:
    """MFU and MBU over the run, an estimate from simserve.ops: the linear ops (a MoE model's routed experts
    at the expected load of the run's mean micro-batch) and attention for FLOPs; weights, activations of the
    linear ops and KV reads for bytes. Elementwise ops, the embedding and the LM head are left out, so both
    figures are slight underestimates. MFU is against the bf16 peak, also for fp8 weights."""
    from simserve.ops import attention_shape, expert_load, expert_ops, linear_ops

    m = dep.model
    ops = linear_ops(dep)
    tokens = sum(rep.work.tokens for rep in run.replicas)
    pairs = sum(rep.work.prefill_pairs + rep.work.decode_kv for rep in run.replicas)
    kv_read = sum(rep.work.prefill_kv + rep.work.decode_kv for rep in run.replicas)
    mbs = sum(rep.work.micro_batches for rep in run.replicas)
    att = attention_shape(dep)
    per_gpu_layers = dep.tp * m.num_layers  # every GPU of every stage runs its shard of its layers
    wb = dep.weight_bytes
    flops_token = sum(op.share * op.flops(1) for op in ops)
    weights = sum(op.share * op.bytes(0, wb) for op in ops)
    act = sum(op.share * (op.bytes(1, m.dtype_bytes) - op.bytes(0, m.dtype_bytes)) for op in ops)
    if m.is_moe and mbs:  # routed experts at the run's mean micro-batch: rows per token, experts touched
        touched, rows = expert_load(dep, max(tokens / mbs, 1.0))
        per_token = float(rows) / max(tokens / mbs, 1.0)
        for op in expert_ops(dep):
            flops_token += op.share * per_token * 2.0 * op.in_features * op.out_features
            weights += op.share * float(touched) * op.in_features * op.out_features * wb
            act += op.share * per_token * (op.in_features + op.out_features) * m.dtype_bytes
    flops = per_gpu_layers * (flops_token * tokens + 4.0 * att.q_heads * att.head_dim * pairs)
    kv_token = dep.kv_bytes * att.head_dim if m.is_mla else 2 * dep.kv_bytes * att.kv_heads * att.head_dim
    nbytes = per_gpu_layers * (weights * mbs + act * tokens + kv_token * kv_read)
    gpus = dep.num_gpus * len(run.replicas)
    mfu = flops / (duration * gpus * dep.gpu.peak_tflops * 1e12)
    return float(mfu), float(nbytes / (duration * gpus * dep.gpu.hbm_gbps * 1e9))
