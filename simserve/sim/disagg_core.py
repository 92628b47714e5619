"""A disaggregated run on the compiled core (core.DisaggCore: both pools and the link), the watchdog in
Python.

The same seam as core_run.run for an aggregated run: each pool is a core.Core of its own (its replicas, timer,
policy limits and request arrays: disagg.py's `pre` and `dec`), joined by a DisaggCore that runs one event
loop for both, moves the KV over the link and counts the run's requests. The watchdog's rules are evaluated
here at the checks where one could act (DisaggCore._check_due, as Core._check_due for an aggregated run), as
disagg.DisaggCluster.watchdog evaluates them, over the same view of the requests (a request is scheduled once
the decode side has given it KV blocks). tests/test_sim_core.py holds it equal to the SimPy reference bit for
bit.
"""

from __future__ import annotations

from types import ModuleType

import numpy as np

from simserve.sim import core_run, routers
from simserve.sim.config import SimConfig
from simserve.sim.histogram import LogHistogram
from simserve.sim.iterations import IterationLog
from simserve.sim.kvlink import KVLink
from simserve.sim.request import Requests
from simserve.sim.watchdog import Watchdog


def covers(cfg: SimConfig, prefill, decode) -> ModuleType | None:
    """The core module that runs this disaggregated case, or None for the SimPy reference (core_run.choose's
    rules for each pool's timer and policy; a prefill pool whose own prompt limit differs from the run's,
    which the core's one router check cannot tell apart, stays on the reference)."""
    pcfg, dcfg = prefill.cfg or cfg, decode.cfg or cfg
    if pcfg.prompt_limit() != cfg.prompt_limit() or pcfg.check_period_s != cfg.check_period_s:
        return None
    pre = core_run.choose(pcfg, prefill.timer)
    dec = core_run.choose(dcfg, decode.timer)
    return pre if pre is not None and pre is dec else None


def run(
    core: ModuleType,
    pre: Requests,
    dec: Requests,
    cfg: SimConfig,
    prefill,
    decode,
    link: KVLink,
    kv_token_bytes: float,
    transfers,
) -> tuple:
    """Simulate on `core`; returns (log, tbt, replicas, overloaded, end time, stopped early, capped) with the
    pools' arrays and `transfers` filled in as the reference fills them."""
    n = pre.n
    log = IterationLog()
    tbt = LogHistogram()  # the decode side's gaps: the user's TBT
    rows = core.ROW_BUFFER
    ints, floats = np.zeros((rows, 7), dtype=np.int64), np.zeros((rows, 2), dtype=np.float64)
    cores = []
    for role, pool, reqs, hist, first in (
        (core.ROLE_PREFILL, prefill, pre, LogHistogram(), 0),
        (core.ROLE_DECODE, decode, dec, tbt, prefill.replicas),
    ):
        pcfg = pool.cfg or cfg
        kind, tables = core_run.timer_params(pool.timer)
        pp = pool.timer.num_stages
        params = core_run.core_params(pcfg, pp, pool.num_blocks, n, pool.replicas, None)
        # the prefill pool's router is the reference's (DisaggCluster.prefill_router); the decode side's is
        # DisaggCore's
        router = routers.make(
            pcfg, reqs, pool.num_blocks, pool.router if role == core.ROLE_PREFILL else "rr", pool.replicas
        )
        params.update(role=role, first_replica=first, router=router)
        cores.append(
            core.Core(
                core_run.request_views(reqs),
                core_run.histogram_view(hist),
                params,
                core.Timer(kind, pp, tables),
                log,
                ints,
                floats,
            )
        )
    views = {
        name: memoryview(getattr(transfers, name))
        for name in ("prefilled", "queued", "start", "end", "nbytes", "prefill_replica")
    }
    c = core.DisaggCore(
        cores[0],
        cores[1],
        views,
        dict(gbps=link.gbps, latency_s=link.latency_s, kv_token_bytes=kv_token_bytes),
        decode.router,
    )
    # the watchdog's view (DisaggCluster.__init__): scheduled once the decode side admitted it
    view = Requests(pre.prompt, dec.output, pre.arrived)
    view.scheduled, view.status = transfers.queued, pre.status
    rules = Watchdog(view, cfg, tbt)
    bucket, need = rules.tbt_stop if rules.tbt_stop is not None else (-1, 0.0)
    c.configure_watch(False, rules.cap, bucket, need)
    overloaded, stopped_early, capped = core_run.drive(core, c, rules, n, tbt, cfg.stop_when_overloaded)
    replicas = []
    for pc, pool in zip(cores, (prefill, decode), strict=True):
        pp = pool.timer.num_stages
        first = 0 if pc is cores[0] else prefill.replicas
        replicas += [
            core_run._summary(first + i, pp, t, pool.num_blocks) for i, t in enumerate(pc.replica_totals())
        ]
    return log, tbt, replicas, overloaded, c.counters()[0], stopped_early, capped
