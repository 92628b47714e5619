"""The compiled simulation core: the SimPy reference's replica loop and policies outside SimPy (replica.py,
state.py, policies.py, adaptive_budgets.py, vllm_v1.py, sglang*.py).

Plain Python that Cython compiles module by module (pure-Python mode: each `.py` here has a `.pxd` beside it
that declares its cdef class and functions for the others to cimport; the `cython.*` annotations are ignored
when it runs uncompiled, which is how the property test also exercises the source: core_run.py,
SIMSERVE_CORE=python). It is the fast twin of the SimPy model, never its replacement: the SimPy model is the
reference, and tests/test_sim_core.py holds the two equal bit for bit (docs/architecture.md, "Reference and
core").

One class, one concern per module: each module adds the methods of one concern to the class below it, and
driver.Core is the class a run builds (its fields are declared once, in events.pxd):

    events.CoreEvents          fields, event slots (SimPy's queue), TBT histogram, iteration rows
    blocks.CoreBlocks          KV blocks, the prefix / radix caches' mirror (kvcache.py, state.py)
    routing.CoreRouting        arrivals, API servers' output, routing, DP ranks (cluster.py, api_server.py)
    transitions.CoreTransitions admission of the head, preemption, completion (state.ReplicaState)
    paper_policies.CorePaperPolicies  fcfs, orca, vllm, sarathi, chunked, adaptive (policies.py,
                               adaptive_budgets.py)
    vllm_v1.CoreVllmV1         vLLM V1's scheduler (vllm_v1.vllm_v1_batch)
    sglang.CoreSGLang          SGLang's scheduler (sglang.py, sglang_admission.py)
    scheduler.CoreScheduler    the policy dispatch, scheduler loop, PP stages (replica.Replica)
    stretch.CoreStretch        decode stretches (no SimPy counterpart)
    lockstep.CoreLockstep      attention-DP lockstep (lockstep.DpGroup)
    driver.Core                start-up, the event loop, the watchdog's seam (cluster.Cluster)
    disagg.DisaggCore          two pools and the KV link (disagg.DisaggCluster)
    timer.Timer, rep.Rep       the BatchTimer's arithmetic; one replica's state; consts: codes and slots
    blockstart.block_start     the KV block test of every decode, inline in each module (blockstart.pxd)

What it reproduces, and how:
  - SimPy's event order. SimPy pops events by (time, priority, id), the id counting every scheduled event;
    processes start with an URGENT event at time 0, timeouts and `succeed` are NORMAL. The core keeps the
    same keys, assigned at the same moments, so ties (an iteration ending exactly at an overload check, two
    replicas finishing at once, the run's end) resolve as in the reference. Each process waits for one
    event at a time, so the pending events are one slot per process (a replica's scheduler and stages, the
    arrivals, the watchdog, the run's end), and the next event is the smallest key among a few slots.
  - Every float operation in the same order (iteration times, TBT gaps, bubbles), and the TBT histogram's
    buckets through libm's log, as `LogHistogram.add` does.
  - Attention DP's ranks in lockstep (lockstep.py): each group of ranks is one process with one event slot, as
    the reference's DpGroup is; a rank's scheduling is the replica's own code.
  - The watchdog stays in Python: `run` returns at an overload check, with the shared request arrays and
    histogram up to date, and the caller (core_run.py) applies the rules of watchdog.py as cluster.Cluster
    does. It returns only at the checks where a rule could act (`_check_due`); at the others (most of them, at
    light load) it schedules the next check itself, as the caller would have.

State is shared, not copied: the request arrays and the histogram counts are the numpy arrays of the
reference's `Requests`/`LogHistogram`, seen through typed memoryviews. An internal inconsistency sets
`error` (an INV_* code) and stops the run at the end of the event; core_run.py turns it into one line.

After editing a module here, rebuild the extensions (`pip install -e .`): an old build would keep running the
old code (tests/test_sim_core.py compares both the build and this source with the reference, so it shows).
"""

from __future__ import annotations

from .consts import (
    CHECK,
    DONE,
    FAILED,
    FINISHED,
    IGNORED,
    INV_KV_NEGATIVE,
    INV_KV_OVERFULL,
    INV_SCHEDULED_TWICE,
    INV_TIME_BACKWARDS,
    INVARIANTS,
    NORMAL,
    P_CHUNKED,
    P_EQUAL,
    P_FCFS,
    P_ORCA,
    P_PRESSURE,
    P_SARATHI,
    P_SGLANG,
    P_SLO,
    P_V1,
    P_VLLM,
    POLICY_CODES,
    PROGRESS_FLOOR,
    ROLE_AGGREGATED,
    ROLE_DECODE,
    ROLE_PREFILL,
    ROW_BUFFER,
    RUNNING,
    SCALE,
    SLOT_ARRIVALS,
    SLOT_FINISHED,
    SLOT_WATCHDOG,
    T_CONSTANT,
    T_LINEAR,
    T_TABLES,
    URGENT,
    WAITING,
)
from .disagg import DECODE_ROUTERS, DisaggCore
from .driver import COMPILED, Core
from .rep import Rep
from .timer import Timer

__all__ = [
    "CHECK",
    "COMPILED",
    "DECODE_ROUTERS",
    "DONE",
    "FAILED",
    "FINISHED",
    "IGNORED",
    "INVARIANTS",
    "INV_KV_NEGATIVE",
    "INV_KV_OVERFULL",
    "INV_SCHEDULED_TWICE",
    "INV_TIME_BACKWARDS",
    "NORMAL",
    "POLICY_CODES",
    "PROGRESS_FLOOR",
    "P_CHUNKED",
    "P_EQUAL",
    "P_FCFS",
    "P_ORCA",
    "P_PRESSURE",
    "P_SARATHI",
    "P_SGLANG",
    "P_SLO",
    "P_V1",
    "P_VLLM",
    "ROLE_AGGREGATED",
    "ROLE_DECODE",
    "ROLE_PREFILL",
    "ROW_BUFFER",
    "RUNNING",
    "SCALE",
    "SLOT_ARRIVALS",
    "SLOT_FINISHED",
    "SLOT_WATCHDOG",
    "T_CONSTANT",
    "T_LINEAR",
    "T_TABLES",
    "URGENT",
    "WAITING",
    "Core",
    "DisaggCore",
    "Rep",
    "Timer",
]
