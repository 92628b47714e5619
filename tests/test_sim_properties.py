"""Invariants of the simulator on random workloads and deployments (hypothesis, bounded examples)."""

from __future__ import annotations

import contextlib
import os

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simserve.sim import SimConfig, build_result, core_run, policies, simulate
from simserve.sim.config import POLICY_NAMES
from simserve.sim.request import DONE, IGNORED
from simserve.sim.testing import ConstantTimer, LinearTimer


@st.composite
def cases(draw):
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    n = draw(st.integers(1, 40))
    max_len = draw(st.sampled_from([64, 200, 1024]))
    min_blocks = -(-max_len // 16)
    case = dict(
        prompt=rng.integers(1, max_len + 40, n),  # a few are too long: ignored
        output=rng.integers(1, draw(st.sampled_from([4, 40, 120])), n),
        arrived=np.cumsum(rng.exponential(draw(st.sampled_from([0.001, 0.02, 0.2])), n)),
        pp=draw(st.integers(1, 4)),
        blocks=draw(st.integers(min_blocks, 4 * min_blocks)),  # small pools: preemption happens
        constant=draw(st.booleans()),
    )
    case["cfg"] = SimConfig(
        policy=draw(st.sampled_from(POLICY_NAMES)),
        budget=draw(st.one_of(st.none(), st.integers(1, 600))),
        max_batch=draw(st.one_of(st.none(), st.integers(1, 20))),
        max_model_len=max_len,
        num_replicas=draw(st.integers(1, 2)),
        router=draw(st.sampled_from(["rr", "lor"])),
        sched_delay_slo_s=1e9,  # never stop early: every request must finish
        overload_wait_s=1e9,
    )
    if case["cfg"].policy == "sglang":
        case["pp"] = 1  # SGLang's pipeline parallelism is not modelled: refused (tests/test_sim_sglang.py)
    return case


def timer_for(case):
    if case["constant"]:
        return ConstantTimer(0.01, num_stages=case["pp"])
    return LinearTimer(0.003, 2e-5, 3e-8, num_stages=case["pp"])


@contextlib.contextmanager
def checked_policies(violations: list[str]):
    """Wrap every policy: a batch never holds a request already in flight, and it respects the budget."""
    saved = dict(policies.POLICIES)

    def wrap(fn):
        def checked(rep, now):
            inflight_before = rep.reqs.inflight.copy()
            batch = fn(rep, now)
            ids = [rid for rid, _ in batch.prefills] + batch.decodes.tolist()
            if len(ids) != len(set(ids)):
                violations.append(f"a request twice in one batch: {ids}")
            if any(inflight_before[i] for i in ids):
                violations.append("a request in two micro-batches in flight")
            if any(c <= 0 for _, c in batch.prefills):
                violations.append(f"a non-positive chunk: {batch.prefills}")
            chunks = sum(c for _, c in batch.prefills)
            if rep.cfg.policy in ("sarathi", "chunked", "hybrid") and chunks + len(batch.decodes) > max(
                rep.budget, len(batch.decodes)
            ):
                violations.append(f"budget {rep.budget} exceeded: {chunks} + {len(batch.decodes)}")
            if rep.cfg.policy == "vllm" and chunks > rep.budget:
                violations.append(f"vllm prefill batch of {chunks} > {rep.budget}")
            if rep.num_running > rep.max_batch:
                violations.append(f"{rep.num_running} resident > max batch {rep.max_batch}")
            return batch

        return checked

    policies.POLICIES.update({name: wrap(fn) for name, fn in saved.items()})
    try:
        yield
    finally:
        policies.POLICIES.update(saved)


@contextlib.contextmanager
def _reference():
    saved = os.environ.get(core_run.ENV)
    os.environ[core_run.ENV] = "reference"
    try:
        yield
    finally:
        if saved is None:
            del os.environ[core_run.ENV]
        else:
            os.environ[core_run.ENV] = saved


def check_invariants(case, raw, res):
    r = raw.reqs
    cfg = case["cfg"]
    # every request ends exactly once: completed with exactly its output tokens, or ignored (too long)
    assert np.isin(r.status, [DONE, IGNORED]).all()
    done = r.status == DONE
    assert (r.generated[done] == r.output[done]).all()
    assert np.isfinite(r.completed[done]).all() and np.isnan(r.completed[~done]).all()
    assert (r.prompt[~done] > cfg.prompt_limit()).sum() <= (~done).sum()
    assert all(rep.state.outstanding == 0 for rep in raw.replicas)
    # KV blocks are conserved: all free at the end, none held (sglang counts its pool in pages of tokens)
    assert all(rep.state.kv.free == rep.state.kv.num_blocks for rep in raw.replicas)
    assert all(rep.state.kv.num_blocks == raw.num_blocks for rep in raw.replicas if cfg.policy != "sglang")
    assert (r.blocks == 0).all()
    # time never goes backwards
    a, s, f, c = r.arrived[done], r.scheduled[done], r.first_token[done], r.completed[done]
    assert (s >= a).all() and (f >= s).all() and (c >= f).all()
    for _, rows in res.iterations.groupby(["replica", "stage"]):
        start, end = rows.start_s.to_numpy(), rows.end_s.to_numpy()
        assert (end >= start).all() and (start[1:] >= end[:-1] - 1e-12).all()
    # the token budget holds per iteration
    if cfg.policy in ("sarathi", "chunked", "hybrid"):
        it = res.iterations[res.iterations.num_iterations == 1]
        assert (it.num_prefill_tokens <= np.maximum(cfg.token_budget() - it.num_decode_tokens, 0)).all()
    # a prefill batch within --chunked-prefill-size, and (no mixed chunk) no decodes
    if cfg.policy == "sglang":
        it = res.iterations[res.iterations.num_iterations == 1]
        assert (it.num_prefill_tokens <= cfg.token_budget()).all()
        assert (it.num_decode_tokens[it.num_prefill_tokens > 0] == 0).all()
    assert not raw.overloaded
    assert all(
        b >= 0 and u >= 0 and b + u <= 1 + 1e-9
        for b, u in zip(res.summary.stage_bubble, res.summary.stage_busy, strict=True)
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_invariants_hold_on_random_workloads(case):
    violations: list[str] = []
    # The policy checks wrap the reference's policy functions: run the SimPy model (tests/test_sim_core.py
    # holds the compiled core equal to it).
    with checked_policies(violations), _reference():
        raw = simulate(
            case["prompt"], case["output"], case["arrived"], timer_for(case), case["blocks"], case["cfg"]
        )
    assert not violations, violations[:3]
    check_invariants(case, raw, build_result(raw))
