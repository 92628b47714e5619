"""Batching policies: plain functions from a replica's state to the next batch.

Design note (after vLLM v1's scheduler): there is no prefill phase and no decode phase. Every request has
tokens computed and tokens wanted (`Requests.computed`, `Requests.target`, plus one token per step once the
prompt is in), and a policy hands out tokens under its limits:

  fcfs     request-level batching (FasterTransformer): admit whole prompts only when nothing is resident,
           then decode that batch until every request in it is done.
  orca     iteration-level: all decodes, plus whole prompts of new requests, up to max_batch residents.
  vllm     prefill-prioritizing: a batch of whole new prompts (up to `budget` tokens) if any fits, else all
           decodes. Ongoing decodes stall during prefill batches.
  sarathi  stall-free: all decodes first (never limited by the budget), then chunks of partial prefills,
           then chunks of new requests, filling the token budget; several prefills can share a batch.
  chunked  ablation "chunked prefills only": Sarathi's chunking but prefill-only and decode-only batches
           alternate (Sarathi-Serve's SimpleChunking).
  hybrid   ablation "hybrid batching only": sarathi with budget = max_model_len.
  slo-aware, pressure, equal-cost
           sarathi's batch with the prefill chunks sized each iteration from the BatchTimer's prediction
           (adaptive_budgets.py): under a TBT target, by queue pressure, or at equal cost per chunk (for PP).
  vllm-v1  vLLM's v1 scheduler: one token budget shared by decodes and prefill chunks (vllm_v1.py).
  sglang   SGLang's scheduler: a prefill batch (chunked, under a token and a KV-reservation budget) when one
           can be formed, else a decode step with retraction (sglang.py).

A policy mutates the state the way the real scheduler does (admits, allocates KV, preempts) and returns
`Batch(prefills=[(request, chunk tokens)], decodes=array of requests)`. Admission is strict FIFO: the
first waiting request that does not fit stops admission (head-of-line blocking), as in every policy of the
Sarathi-Serve source. Requests in a micro-batch in flight (pipeline parallelism) are never scheduled again
until it leaves the last stage, not even after a preemption (Sarathi-Serve may readmit a preempted request
while its stale micro-batch is still in flight). Semantics and line references: docs/simulator.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from simserve.sim import adaptive_budgets, sglang
from simserve.sim.state import ReplicaState
from simserve.sim.vllm_v1 import vllm_v1_batch

_NO_DECODES = np.zeros(0, dtype=np.int64)


class Batch(NamedTuple):
    prefills: list[tuple[int, int]]  # (request id, chunk tokens)
    decodes: np.ndarray  # request ids, one token each

    def __bool__(self) -> bool:
        return bool(self.prefills) or len(self.decodes) > 0


def fcfs(rep: ReplicaState, now: float) -> Batch:
    if rep.num_running:
        # NOTE: stricter than Sarathi-Serve's FasterTransformer scheduler under PP (it admits while the
        # whole batch is in flight): request-level batching admits nothing while a request is resident.
        return Batch([], rep.paused_decodes())
    return Batch(_admit_whole(rep, now, max_tokens=None), _NO_DECODES)


def orca(rep: ReplicaState, now: float) -> Batch:
    decodes = rep.paused_decodes()  # KV was reserved at admission: decodes never need a block
    return Batch(_admit_whole(rep, now, max_tokens=None), decodes)


def vllm(rep: ReplicaState, now: float) -> Batch:
    prefills = _admit_whole(rep, now, max_tokens=rep.budget)
    if prefills:
        return Batch(prefills, _NO_DECODES)  # a prefill-only batch: generation stalls
    return Batch([], rep.schedule_decodes())


def sarathi(rep: ReplicaState, now: float) -> Batch:
    decodes = rep.schedule_decodes()
    tokens = len(decodes)
    prefills, tokens = _partial_prefills(rep, tokens)
    prefills += _admit_chunked(rep, now, tokens)
    return Batch(prefills, decodes)


def chunked(rep: ReplicaState, now: float) -> Batch:
    tried = rep.turn_prefill
    if tried:
        prefills = _prefills_only(rep, now)
        if prefills:
            rep.turn_prefill = False
            return Batch(prefills, _NO_DECODES)
    decodes = rep.schedule_decodes()
    rep.turn_prefill = True
    if len(decodes) or tried:
        return Batch([], decodes)
    # NOTE: the source returns an empty batch here and reschedules within 10 ms; the prefill turn
    # follows at once instead, so an empty decode turn costs no simulated time.
    prefills = _prefills_only(rep, now)
    rep.turn_prefill = not prefills
    return Batch(prefills, _NO_DECODES)


def slo_aware(rep: ReplicaState, now: float) -> Batch:
    decodes = rep.schedule_decodes()
    return Batch(
        adaptive_budgets.fill_chunks(rep, now, len(decodes), adaptive_budgets.slo_aware_size(rep, decodes)),
        decodes,
    )


def pressure(rep: ReplicaState, now: float) -> Batch:
    decodes = rep.schedule_decodes()
    size = adaptive_budgets.pressure_size(rep, decodes, now)
    return Batch(adaptive_budgets.fill_chunks(rep, now, len(decodes), size), decodes)


def equal_cost(rep: ReplicaState, now: float) -> Batch:
    decodes = rep.schedule_decodes()
    return Batch(
        adaptive_budgets.fill_chunks(rep, now, len(decodes), adaptive_budgets.equal_cost_size(rep)), decodes
    )


def vllm_v1(rep: ReplicaState, now: float) -> Batch:
    return Batch(*vllm_v1_batch(rep, now))


def sglang_policy(rep: ReplicaState, now: float) -> Batch:
    return Batch(*sglang.sglang_batch(rep, now))


POLICIES: dict[str, Callable[[ReplicaState, float], Batch]] = {
    "fcfs": fcfs,
    "orca": orca,
    "vllm": vllm,
    "sarathi": sarathi,
    "chunked": chunked,
    "hybrid": sarathi,  # the budget (max_model_len) makes the difference: SimConfig.token_budget
    "slo-aware": slo_aware,
    "pressure": pressure,
    "equal-cost": equal_cost,
    "vllm-v1": vllm_v1,
    "sglang": sglang_policy,
}


def _prefills_only(rep: ReplicaState, now: float) -> list[tuple[int, int]]:
    """SimpleChunking's prefill turn: chunks of partial prefills, or else of new requests."""
    prefills, tokens = _partial_prefills(rep, 0)
    return prefills or _admit_chunked(rep, now, tokens)


def _partial_prefills(rep: ReplicaState, tokens: int) -> tuple[list[tuple[int, int]], int]:
    """Next chunks of admitted prompts, FCFS, while the budget lasts (their KV is already allocated)."""
    r = rep.reqs
    out: list[tuple[int, int]] = []
    for rid in rep.prefilling:
        if rep.pp > 1 and r.inflight[rid]:
            continue
        n = min(int(r.target[rid] - r.computed[rid]), rep.budget - tokens)
        if n <= 0:
            continue  # NOTE: never a negative chunk, even when decodes alone exceed the budget
        out.append((rid, n))
        tokens += n
    return out, tokens


def _admit_chunked(rep: ReplicaState, now: float, tokens: int) -> list[tuple[int, int]]:
    """New requests in FIFO order, each allocated its whole prompt, computed in budget-sized chunks."""
    out: list[tuple[int, int]] = []
    rep.drop_too_long()
    while rep.waiting:
        rid = rep.waiting[0]
        if not rep.head_admissible(rid):
            break
        n = min(rep.num_tokens(rid), rep.budget - tokens)
        if n <= 0:
            break
        rep.admit_head(now)
        out.append((rid, n))
        tokens += n
        rep.drop_too_long()
    return out


def _admit_whole(rep: ReplicaState, now: float, max_tokens: int | None) -> list[tuple[int, int]]:
    """New requests in FIFO order with their whole prompt (fcfs, orca, vllm)."""
    out: list[tuple[int, int]] = []
    tokens = 0
    rep.drop_too_long()
    while rep.waiting:
        rid = rep.waiting[0]
        n = rep.num_tokens(rid)
        if not rep.head_admissible(rid) or (max_tokens is not None and tokens + n > max_tokens):
            break
        rep.admit_head(now)
        out.append((rid, n))
        tokens += n
        rep.drop_too_long()
    return out
