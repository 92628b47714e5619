"""Run a simulation on the compiled core (sim/core/) and keep the watchdog in Python; pick core or reference.

`simulate` (cluster.py) asks `choose(cfg, timer)` which model runs:
  - the compiled core when it was built at install (setup.py compiles sim/core/ with Cython) and covers the
    case (`covers`: a timer whose arithmetic it has, below);
  - the SimPy reference otherwise, or when $SIMSERVE_CORE=reference asks for it. Without a compiled core
    simserve says so once per process on stderr and runs the reference.
$SIMSERVE_CORE=python runs sim/core/ uncompiled (plain Python, slow): how tests exercise the source itself.

The driver below is the reference's watchdog process (cluster.Cluster.watchdog) around `Core.run`, which
returns at an overload check with the shared request arrays and histogram up to date. It returns only at
the checks where a rule could act (Core._check_due: a progress callback, the trial cap, the TBT stop count,
the stall check's idle moments, or a request the overload scan would count); at the others evaluating the
rules would change nothing, so the core schedules the next check itself.
"""

from __future__ import annotations

import heapq
import importlib
import importlib.abc
import importlib.util
import os
import sys
import weakref
from collections.abc import Callable
from pathlib import Path
from types import ModuleType, SimpleNamespace

import numpy as np

from simserve.errors import SimserveError
from simserve.sim import routers, sglang, sglang_admission
from simserve.sim.api_server import ApiServers
from simserve.sim.autoscale import Autoscaler, last_completion
from simserve.sim.config import SimConfig
from simserve.sim.histogram import _LOG_GAMMA, _NUM, _OFFSET, LogHistogram
from simserve.sim.iterations import IterationLog
from simserve.sim.kv_offload import attach as attach_tier
from simserve.sim.prefix_cache import PrefixCache
from simserve.sim.radix_cache import RadixCache
from simserve.sim.request import Requests
from simserve.sim.scale_policies import Load
from simserve.sim.watchdog import Watchdog

# "reference": the SimPy model; "python": sim/core/ uncompiled; unset: the compiled core
ENV = "SIMSERVE_CORE"
_warned = False
# Policies the core does not implement yet: they run on the SimPy reference, said once per process.
REFERENCE_ONLY: tuple[str, ...] = ()
_said: set[str] = set()
_SAID_ENV = "SIMSERVE_SAID_REFERENCE"  # inherited by worker processes: a sweep says it once, not per worker


def say_reference_once(policy: str) -> None:
    if policy not in REFERENCE_ONLY:  # the core runs it: nothing to say
        return
    said = os.environ.get(_SAID_ENV, "").split(",")
    if policy not in _said and policy not in said:
        _said.add(policy)
        os.environ[_SAID_ENV] = ",".join([*filter(None, said), policy])
        print(
            f"simserve: --policy {policy} runs on the SimPy reference model (the compiled core does not "
            "cover it yet): slower, same answers",
            file=sys.stderr,
        )


_modules: dict[bool, ModuleType | None] = {}


class InvariantError(SimserveError):
    """The core found its own state inconsistent (a bug in simserve, never the user's input)."""


def _load(compiled: bool) -> ModuleType | None:
    """simserve.sim.core as built (None when it is not compiled), or its source run as plain Python."""
    if compiled not in _modules:
        if compiled:
            try:
                from simserve.sim import core
            except ModuleNotFoundError as exc:  # no extension built and no Cython to read core's types
                if exc.name != "cython":
                    raise
                core = None
            _modules[True] = core if core is not None and core.COMPILED else None
        else:
            _modules[False] = _load_source()
    return _modules[compiled]


_SOURCE = "simserve.sim._core_source"  # the package's source, imported under its own name


class _SourceFinder(importlib.abc.MetaPathFinder):
    """Finds simserve/sim/core/'s `.py` files for the names under _SOURCE (never the extensions built beside
    them)."""

    def find_spec(self, fullname: str, path=None, target=None):
        folder = Path(__file__).with_name("core")
        if fullname == _SOURCE:
            return importlib.util.spec_from_file_location(
                fullname, folder / "__init__.py", submodule_search_locations=[str(folder)]
            )
        if fullname.startswith(_SOURCE + "."):
            return importlib.util.spec_from_file_location(
                fullname, folder / f"{fullname.rpartition('.')[2]}.py"
            )
        return None


def _load_source() -> ModuleType:
    finder = _SourceFinder()
    sys.meta_path.insert(0, finder)
    try:
        return importlib.import_module(_SOURCE)
    finally:
        sys.meta_path.remove(finder)


def compiled_available() -> bool:
    return _load(True) is not None


def choose(cfg: SimConfig, timer) -> ModuleType | None:
    """The core module to run this case on, or None for the SimPy reference."""
    global _warned
    mode = os.environ.get(ENV, "")
    params = timer_params(timer)
    if mode == "reference" or params is None:
        return None
    if cfg.dp_attention > 1 and params[0] == 0 and params[1]["own"] is None:
        return None  # a timer without attention DP's tables: the reference says so (BatchTimer.own_time)
    if cfg.policy in REFERENCE_ONLY:
        say_reference_once(cfg.policy)
        return None
    if mode == "python":
        return _load(False)
    core = _load(True)
    if core is None and not _warned:
        _warned = True
        print(
            "simserve: the compiled simulation core is not built (no C compiler at install?); running the "
            "SimPy reference model, which is slower (reinstall with a C compiler for speed)",
            file=sys.stderr,
        )
    return core


_tables: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # BatchTimer -> its tables as arrays


def timer_params(timer) -> tuple[int, dict] | None:
    """(kind, tables) for a timer whose arithmetic the core reproduces; None for any other timer."""
    from simserve.predictor.timer import BatchTimer
    from simserve.sim.testing import ConstantTimer, LinearTimer

    kind = type(timer)
    if kind is BatchTimer:
        if timer not in _tables:  # NOTE: views of the timer's arrays; kept per timer, not per run
            _tables[timer] = _table_arrays(timer)
        return 0, _tables[timer]
    if kind is LinearTimer:
        return 1, dict(a=timer.a, b=timer.b, c=timer.c, e=timer.e)
    if kind is ConstantTimer:
        return 2, dict(a=timer.seconds, b=0.0, c=0.0)
    return None


def _table_arrays(t) -> dict:
    tok = t._tokens
    lockstep = {"own": None}
    if tok.own is not None:  # attention DP's lockstep tables (BatchTimer.own_time / experts_time)
        lockstep = dict(
            own=np.ascontiguousarray(tok.own, dtype=np.float64),
            own_slope=float(tok.own_slope),
            experts=np.ascontiguousarray(tok.experts, dtype=np.float64),
            experts_slope=float(tok.experts_slope),
        )
    return dict(
        **lockstep,
        tok=np.ascontiguousarray(t._tok_np, dtype=np.float64),
        tend=int(t._tend),
        tslope=np.array(t._tslope, dtype=np.float64),
        dec=np.ascontiguousarray(t._dec_np, dtype=np.float64),
        dl=float(t._dl),
        bmax=int(t._bmax),
        bhalf=int(t._bhalf),
        jlast=int(t._jlast),
        pre=np.ascontiguousarray(t._pre_np, dtype=np.float64),
        dc=float(t._dc),
        dp=float(t._dp),
        ilast=int(t._ilast),
        klast=int(t._klast),
        cpu_gpu=np.array(t._cpu_gpu, dtype=np.float64).reshape(-1, 3),
        cpu_ovl=np.array(t._cpu_ovl, dtype=np.float64).reshape(-1, 3),
        cpu_ser=np.array(t._cpu_ser, dtype=np.float64).reshape(-1, 3),
        cpu_pre=np.array(t._cpu_pre, dtype=np.float64).reshape(-1, 3),
        launch_gpu=np.array(t._launch_gpu, dtype=np.float64).reshape(-1, 3),
        launch_cpu=np.array(t._launch_cpu, dtype=np.float64).reshape(-1, 3),
        launch_cap=int(t._launch_cap),
        plain=not (
            np.any(t._cpu_gpu)
            or np.any(t._cpu_ovl)
            or np.any(np.array(t._cpu_ser)[:, 2])
            or np.any(t._cpu_pre)
            or np.any(t._launch_gpu)
            or np.any(t._launch_cpu)
        ),
    )


class _Work(SimpleNamespace):
    pass


def run(
    core: ModuleType,
    reqs: Requests,
    cfg: SimConfig,
    timer,
    num_blocks: int,
    progress: Callable[[int, int], None] | None,
    follow: tuple[np.ndarray, np.ndarray] | None = None,
    scaler: Autoscaler | None = None,
):
    """Simulate on `core`; returns what cluster.simulate puts in its RawRun (replicas are summaries with the
    attributes metrics.py and the tests read). `follow`: answer-driven conversations, as cluster.Cluster takes
    them (each request's next round, or -1, and the think times)."""
    kind, tables = timer_params(timer)
    pp = 1 if cfg.dp_attention > 1 else timer.num_stages  # attention-DP ranks run at PP 1 (lockstep.build)
    if cfg.spec_k:  # the reference's ReplicaState draws them; the same numbers, before the run
        reqs.draw_speculation(cfg.spec_acceptance, cfg.spec_seed)
    tbt = LogHistogram()
    log = IterationLog()
    n = reqs.n
    arrays = request_views(reqs)
    routed = np.asarray(arrays["routed"])  # ids in routing order, as the core routes them
    due = None
    api = ApiServers(reqs, cfg, follow) if cfg.api_servers else None  # the one the reference would have
    if api is not None:  # Cluster.__init__: the API servers push engine entries on an empty heap
        due = []
    elif follow is not None:  # Cluster.__init__: the first rounds wait in a heap of (arrival, id)
        arrays["child"] = memoryview(np.ascontiguousarray(follow[0], dtype=np.int64))
        arrays["think"] = memoryview(np.ascontiguousarray(follow[1], dtype=np.float64))
        first = np.ones(n, dtype=bool)
        first[follow[0][follow[0] >= 0]] = False
        due = [(float(reqs.arrived[i]), int(i)) for i in np.flatnonzero(first)]
        heapq.heapify(due)
    caches = radixes = None
    if cfg.prefix_caching and cfg.policy != "sglang":  # the reference's own block pool, one per replica
        caches = [
            attach_tier(PrefixCache(num_blocks, cfg.block_size, reqs), cfg, reqs)
            for _ in range(cfg.num_replicas)
        ]
    params = core_params(cfg, pp, num_blocks, n, cfg.num_replicas, caches, due)
    params["router"] = routers.make(cfg, reqs, num_blocks)  # the reference's own router (cluster.Cluster)
    if api is not None:  # the API servers send the requests: the core's own closed loop stays off
        params["api"] = api
        params["released"] = n
    pool = params["num_blocks"]
    if cfg.policy == "sglang" and cfg.prefix_caching:  # SGLang's radix cache is the pool: the reference's own
        radixes = [RadixCache(pool, cfg.page_size, reqs) for _ in range(cfg.num_replicas)]
    params["radixes"] = radixes
    params["cudagraph_sizes"] = getattr(timer, "cudagraph_sizes", ())  # lockstep.DpGroup.sizes
    params["scaled"] = scaler is not None
    hist = histogram_view(tbt)
    rows = core.ROW_BUFFER
    c = core.Core(
        arrays,
        hist,
        params,
        core.Timer(kind, pp, tables),
        log,
        np.zeros((rows, 7), dtype=np.int64),
        np.zeros((rows, 2), dtype=np.float64),
    )
    rules = Watchdog(reqs, cfg, tbt, None if due is None else routed)
    bucket, need = rules.tbt_stop if rules.tbt_stop is not None else (-1, 0.0)
    c.configure_watch(progress is not None, rules.cap, bucket, need)
    if scaler is not None:
        c.set_serving(scaler.serving())
    overloaded, stopped_early, capped = drive(
        core,
        c,
        rules,
        n,
        tbt,
        cfg.stop_when_overloaded,
        progress,
        scaler and (lambda now, arrived: _wake(c, scaler, reqs, now, arrived)),
    )
    if api is not None:  # what the core kept of the API servers while it ran (api_finish)
        c.api_finish()
    replicas = [
        _summary(i, pp, t, pool, caches[i] if caches else None, radixes[i] if radixes else None)
        for i, t in enumerate(c.replica_totals())
    ]
    return log, tbt, replicas, overloaded, c.counters()[0], stopped_early, capped, api


def drive(
    core: ModuleType,
    c,
    rules: Watchdog,
    n: int,
    tbt: LogHistogram,
    stop_when_overloaded: bool,
    progress: Callable[[int, int], None] | None = None,
    scale: Callable[[float, int], None] | None = None,
) -> tuple[bool, bool, bool]:
    """The reference's watchdog process (cluster.Cluster.watchdog, its rules in the same order) around
    `c.run()` for a Core or a DisaggCore; returns (overloaded, stopped early, capped). `scale(now, arrived)`
    wakes the autoscaler at its event (an autoscaled Core's SCALE)."""
    overloaded = stopped_early = capped = False
    while True:
        code = c.run()
        now, arrived, num_done, num_ignored, _, zeros = c.counters()
        tbt.zeros = zeros
        if code == core.FAILED:
            raise InvariantError(
                f"internal inconsistency at t = {now:.6f} s: {core.INVARIANTS[c.error]} "
                f"(a simserve bug; SIMSERVE_CORE=reference runs the SimPy model, which asserts the same)"
            )
        if code == core.FINISHED:
            return overloaded, stopped_early, capped
        if code == core.SCALE:
            scale(now, arrived)
            continue
        if progress is not None:
            progress(num_done, n)
        if not overloaded and rules.overloaded(now, arrived, num_ignored):
            overloaded = True
            if stop_when_overloaded:
                c.end_run()
                continue
        if rules.tbt_missed():
            stopped_early = True
            c.end_run()
            continue
        if now >= rules.cap:
            capped = c.end_run()
            continue
        if arrived >= n:  # the stall check (it only looks once every request has arrived)
            transfers, in_flight, micro_batches = c.busy()
            rules.check_stall(True, transfers > 0 or in_flight > 0, num_done, micro_batches)
        else:
            rules.check_stall(False, False, num_done, 0)
        c.watch(not overloaded, *rules.positions())
        c.next_check_at()


def _wake(c, scaler: Autoscaler, reqs: Requests, now: float, arrived: int) -> None:
    """cluster.Cluster.autoscaler's loop body on the core: the same wake, then the next one scheduled."""
    version = scaler.version
    t = scaler.wake(
        now, [Load(*load) for load in c.scale_loads()], arrived, lambda i: last_completion(reqs, i)
    )
    if scaler.version != version:
        c.set_serving(scaler.serving())
    c.schedule_scale(t)


def request_views(reqs: Requests) -> dict:
    """The request arrays the core shares with the reference's `Requests` (no copies)."""
    arrays = {
        name: memoryview(getattr(reqs, name))
        for name in (
            "prompt",
            "output",
            "arrived",
            "scheduled",
            "first_token",
            "completed",
            "last_token",
            "tbt_max",
            "computed",
            "target",
            "generated",
            "blocks",
            "preemptions",
            "status",
            "replica",
        )
    }
    arrays["inflight"] = memoryview(reqs.inflight.view(np.uint8))
    arrays["stamp"] = memoryview(np.zeros(reqs.n, dtype=np.int64))
    arrays["cached_tokens"] = memoryview(reqs.cached_tokens)
    arrays["prefix_group"] = memoryview(reqs.prefix_group)
    arrays["prefix_tokens"] = memoryview(reqs.prefix_tokens)
    if reqs.ignore_eos is not None:  # sglang: a workload's per-request ignore_eos (else the run's, in params)
        arrays["ignore_eos"] = memoryview(np.ascontiguousarray(reqs.ignore_eos, dtype=np.uint8))
    # ids in routing order, as the core routes them
    arrays["routed"] = memoryview(np.zeros(reqs.n, dtype=np.int64))
    for name in ("spec", "spec_sched", "spec_steps"):
        arrays[name] = memoryview(getattr(reqs, name))
    none = reqs.spec_draws is None  # no speculation: never read
    arrays["spec_off"] = memoryview(np.zeros(1, dtype=np.int64) if none else reqs.spec_off)
    arrays["spec_draws"] = memoryview(np.zeros(1, dtype=np.int16) if none else reqs.spec_draws)
    return arrays


def histogram_view(tbt: LogHistogram) -> dict:
    return dict(
        counts=memoryview(tbt.counts), zeros=tbt.zeros, log_gamma=_LOG_GAMMA, offset=_OFFSET, num=_NUM
    )


def core_params(
    cfg: SimConfig, pp: int, num_blocks: int, n: int, num_replicas: int, caches, due=None
) -> dict:
    """One Core's configuration: the policy's limits for `num_replicas` replicas of `pp` stages."""
    budget = cfg.token_budget()
    block_size, max_batch, pool = cfg.block_size, cfg.batch_limit(pp), num_blocks
    sg = None
    if cfg.policy == "sglang":  # SGLang's page pool and running-request cap (sglang.setup), its flags
        pool, max_batch = sglang.pool(cfg, num_blocks, pp)
        block_size = cfg.page_size
        conservativeness = cfg.schedule_conservativeness
        if cfg.dp_attention > 1:  # sglang.setup: a rank's chunk is the budget // D, conservativeness × 0.3
            budget = budget // cfg.dp_attention
            conservativeness *= sglang.DP_ATTENTION_CONSERVATIVENESS
        ratio = sglang.SGLangScheduler(conservativeness, cfg.spec_k)
        sg = dict(
            reserve=ratio.reserve,
            mixed=cfg.enable_mixed_chunk,
            lof=cfg.schedule_policy == "lof",
            ignore_eos=cfg.ignore_eos,
            max_prefill=cfg.max_prefill_tokens,
            init=ratio.init,
            min=ratio.min,
            decay=ratio.decay,
            clip=sglang_admission.CLIP_MAX_NEW_TOKENS,
            retract_steps=sglang.RETRACT_DECODE_STEPS,
            lpm=cfg.schedule_policy == "lpm",
            lpm_max=sglang_admission.LPM_MAX_WAITING,
            refresh_every=sglang_admission.WAITING_REFRESH_INTERVAL,
            in_batch_check=sglang_admission.IN_BATCH_CHECK,
            in_batch_dep=sglang_admission.IN_BATCH_DEPRIORITIZE,
            eos_reserve=sglang_admission.IGNORE_EOS_RESERVE_TOKENS,
        )
    return dict(
        n=n,
        pp=pp,
        policy=cfg.policy,
        dynamic=not cfg.reserves_max_len,
        block_size=block_size,
        reserve=-(-cfg.max_model_len // cfg.block_size),
        budget=None if cfg.policy in ("fcfs", "orca") else int(budget),
        max_batch=max_batch,
        prompt_limit=cfg.prompt_limit(),
        max_model_len=cfg.max_model_len,
        caches=caches,
        radixes=None,
        router=None,  # the caller's routers.Router
        check_period=cfg.check_period_s,
        sched_delay_slo=cfg.sched_delay_slo_s,
        overload_wait=cfg.overload_wait_s,
        tbt_target=cfg.tbt_target_s,
        pressure_floor=cfg.pressure_floor() if cfg.policy == "pressure" else 0,
        long_threshold=cfg.long_prefill_token_threshold,
        long_adaptive=bool(cfg.long_prefill_token_threshold_adaptive),
        reserve_full_isl=bool(cfg.reserve_full_isl),
        num_blocks=pool,
        watermark_blocks=int(cfg.kv_watermark() * pool),
        num_replicas=num_replicas,
        released=n if cfg.max_concurrency is None else min(cfg.max_concurrency, n),
        frontend_s=cfg.frontend_s,
        sglang=sg,
        due=due,
        dp=cfg.dp_attention,
        spec_k=cfg.spec_k,
        spec_lookahead=cfg.spec_lookahead,
        spec_fraction=cfg.spec_fraction,
        spec_passes=cfg.spec_passes,
        spec_cpu_s=cfg.spec_cpu_s,
    )


def _summary(index: int, pp: int, totals: tuple, num_blocks: int, prefix=None, radix=None) -> SimpleNamespace:
    in_flight, _, outstanding, free, preemptions, bubble, work = totals
    tokens, pairs, prefill_kv, decode_kv, mbs = work
    kv = SimpleNamespace(free=free, num_blocks=num_blocks, used=num_blocks - free)
    return SimpleNamespace(
        index=index,
        pp=pp,
        in_flight=in_flight,
        bubble=bubble,
        work=_Work(
            tokens=tokens, prefill_pairs=pairs, prefill_kv=prefill_kv, decode_kv=decode_kv, micro_batches=mbs
        ),
        state=SimpleNamespace(
            outstanding=outstanding, kv=kv, preemptions=preemptions, prefix=prefix, radix=radix
        ),
    )
