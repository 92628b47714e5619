"""The compiled core (simserve/sim/core/) against the SimPy reference, bit for bit.

Every comparison runs the same case twice, once with SIMSERVE_CORE=reference (the SimPy model) and once
on the core, and compares every request array, every iteration row, the TBT histogram, the summary and the
per-replica counters exactly. The core runs compiled when the install built it, and also as plain Python
(SIMSERVE_CORE=python: the source itself, which is what Cython compiles).
"""

from __future__ import annotations

import importlib.util
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simserve.sim import SimConfig, build_result, core_run, simulate
from simserve.sim.autoscale import AutoscaleConfig
from simserve.sim.config import DEFAULT_ROUTER_WEIGHTS, POLICY_NAMES, ROUTER_NAMES
from simserve.sim.core_run import REFERENCE_ONLY
from simserve.sim.request import IGNORED
from simserve.sim.scenario import Scenario, simulate_scenario
from simserve.sim.testing import ConstantTimer, LinearTimer

# sim/core/ run uncompiled needs Cython's pure-Python shadow module (the dev extra installs it).
HAS_CYTHON = importlib.util.find_spec("cython") is not None
needs_cython = pytest.mark.skipif(
    not HAS_CYTHON, reason="the core as Python needs Cython (pip install -e '.[dev]')"
)
CORES = (["python"] if HAS_CYTHON else []) + (["compiled"] if core_run.compiled_available() else [])
ARRAYS = (
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
    "inflight",
    "status",
    "replica",
    "cached_tokens",
)


def _run(monkeypatch, mode: str, fn):
    monkeypatch.setenv(core_run.ENV, {"compiled": ""}.get(mode, mode))
    return fn()


def assert_same(ref, got) -> None:
    """Two RawRuns agree to the last bit."""
    for name in ARRAYS:
        a, b = getattr(ref.reqs, name), getattr(got.reqs, name)
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), name
    ra, rb = ref.log.columns(0, len(ref.log)), got.log.columns(0, len(got.log))
    assert len(ref.log) == len(got.log)
    for c in ra:
        assert np.array_equal(ra[c], rb[c]), c
    assert np.array_equal(ref.tbt.counts, got.tbt.counts) and ref.tbt.zeros == got.tbt.zeros
    assert (ref.end_time, ref.overloaded, ref.stopped_early, ref.capped) == (
        got.end_time,
        got.overloaded,
        got.stopped_early,
        got.capped,
    )
    for x, y in zip(ref.replicas, got.replicas, strict=True):
        assert x.bubble == y.bubble
        for k in ("tokens", "prefill_pairs", "prefill_kv", "decode_kv", "micro_batches"):
            assert getattr(x.work, k) == getattr(y.work, k), k
        assert (x.state.outstanding, x.state.kv.free, x.state.preemptions) == (
            y.state.outstanding,
            y.state.kv.free,
            y.state.preemptions,
        )
        px, py = x.state.prefix, y.state.prefix
        assert (px is None) == (py is None)
        if px is not None:  # the cache's own state too: its free queue, keys and counters
            assert list(px.queue) == list(py.queue) and px.key == py.key and px.ref == py.ref
            assert (px.queries, px.hits, px.preempted_queries, px.preempted_hits, px.evictions) == (
                py.queries,
                py.hits,
                py.preempted_queries,
                py.preempted_hits,
                py.evictions,
            )
            assert (px.tier is None) == (py.tier is None)
            # the CPU tier (kv_offload.py): what it holds, in which order, its counters
            if px.tier is not None:
                assert px.tier.rank == py.tier.rank and px.tier.summary() == py.tier.summary()
    assert (ref.api is None) == (got.api is None)
    # the API servers (api_server.py): what each client saw, and the servers' own state
    if ref.api is not None:
        x, y = ref.api, got.api
        for name in ("sent", "first", "last", "done", "itl_max", "input_wait"):
            assert np.array_equal(getattr(x, name), getattr(y, name), equal_nan=True), name
        assert np.array_equal(x.itl.counts, y.itl.counts) and x.itl.zeros == y.itl.zeros
        for name in ("free_at", "tokens", "out"):
            assert np.array_equal(getattr(x, name), getattr(y, name)), name
        assert (x.requests, x.prompt_tokens, x.released, x.next_send) == (
            y.requests,
            y.prompt_tokens,
            y.released,
            y.next_send,
        )
    assert build_result(ref).summary.as_dict() == build_result(got).summary.as_dict()


# The policies the core implements; the others run on the reference (core_run.REFERENCE_ONLY, checked below).
CORE_POLICIES = tuple(p for p in POLICY_NAMES if p not in REFERENCE_ONLY)


@st.composite
def cases(draw, policies=CORE_POLICIES):
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    n = draw(st.integers(1, 60))
    max_len = draw(st.sampled_from([64, 200, 1024]))
    min_blocks = -(-max_len // 16)
    policy = draw(st.sampled_from(policies))
    # attention DP (sim/lockstep.py): D ranks stepping in lockstep, one or two deployments of them, at PP 1
    dp = draw(st.sampled_from([1, 1, 1, 2, 3, 4]))
    pp = 1 if policy == "sglang" or dp > 1 else draw(st.integers(1, 3))  # sglang models SGLang without PP
    stop = draw(st.sampled_from(["none", "overload", "tbt", "cap"]))
    # the lockstep's experts (e per token of all ranks) and, sometimes, vLLM's CUDA graphs padding every rank
    timer = (
        ConstantTimer(0.01, num_stages=pp)
        if draw(st.booleans())
        else LinearTimer(0.003, 2e-5, 3e-8, num_stages=pp, e=draw(st.sampled_from([0.0, 2e-5, 1e-4])))
    )
    if dp > 1 and draw(st.booleans()):
        timer.cudagraph_sizes = (1, 2, 4, 8, 16, 24, 32, 64)  # read as lockstep.DpGroup and core_run read it
    case = dict(
        prompt=rng.integers(1, max_len + 40, n),  # a few are too long: ignored
        output=rng.integers(1, draw(st.sampled_from([4, 40, 120])), n),
        arrived=np.cumsum(rng.exponential(draw(st.sampled_from([0.001, 0.02, 0.2])), n)),
        blocks=draw(st.integers(min_blocks, 4 * min_blocks)),  # small pools: preemption happens
        timer=timer,
    )
    budget = draw(st.one_of(st.none(), st.integers(1, 600)))
    case["cfg"] = SimConfig(
        policy=policy,
        budget=budget if budget is None or policy != "sglang" else max(budget, dp),  # a page (1) per rank
        max_batch=draw(st.one_of(st.none(), st.integers(1, 20))),
        max_model_len=max_len,
        num_replicas=dp * draw(st.integers(1, 2)) if dp > 1 else draw(st.integers(1, 3)),
        dp_attention=dp,
        router=draw(st.sampled_from(ROUTER_NAMES)),  # sim/routers.py, which both models call
        router_weights=draw(st.sampled_from([DEFAULT_ROUTER_WEIGHTS, (1.0, 0.0, 5.0)])),
        stretch=False,
        # the watchdog's ways to end a run, so the core's returns to Python are exercised too
        sched_delay_slo_s=0.05 if stop == "overload" else 1e9,
        stop_when_overloaded=draw(st.booleans()),  # False: overloaded, the run goes on (and skips its checks)
        overload_wait_s=0.5 if stop == "overload" else 1e9,
        check_period_s=draw(st.sampled_from([0.01, 0.1, 1.0])),
        stop_tbt=(0.02, 0.5) if stop == "tbt" else None,
        time_limit_s=0.3 if stop == "cap" else None,
        tbt_target_s=draw(st.sampled_from([0.005, 0.02, 0.1])),
        long_prefill_token_threshold=draw(st.sampled_from([0, 64])),
        long_prefill_token_threshold_adaptive=draw(st.booleans()),
        # vllm-v1's admission: the whole sequence must fit (vLLM 0.33.0), or only the first chunk (0.8.2)
        reserve_full_isl=draw(st.booleans()),
        min_budget=draw(st.one_of(st.none(), st.integers(1, 300))),
        watermark=draw(st.sampled_from([0.0, 0.01, 0.1])),
        block_size=draw(st.sampled_from([16, 16, 8, 10])),  # 10: the core's division path, not its mask
        # a closed-loop client (its send times move with completions) or the open loop
        max_concurrency=draw(st.one_of(st.none(), st.integers(1, 12))),
        frontend_s=draw(st.sampled_from([0.0, 0.0, 0.003])),
        **draw(api_servers()),
    )
    return case


@st.composite
def api_servers(draw):
    """The API-server model (sim/api_server.py) or none: a few processes, costs from none to ones that
    queue."""
    count = draw(st.sampled_from([0, 0, 1, 1, 2, 3]))
    if not count:
        return {}
    return dict(
        api_servers=count,
        api_request_s=draw(st.sampled_from([0.0, 0.002, 0.03])),
        api_prompt_token_s=draw(st.sampled_from([0.0, 2e-5])),
        api_token_s=draw(st.sampled_from([0.0, 1e-4, 4e-3])),
    )


@pytest.mark.parametrize("mode", CORES)
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(case=cases())
def test_the_core_gives_the_reference_results_bit_for_bit(monkeypatch, mode, case):
    def sim():
        return simulate(
            case["prompt"], case["output"], case["arrived"], case["timer"], case["blocks"], case["cfg"]
        )

    assert_same(_run(monkeypatch, "reference", sim), _run(monkeypatch, mode, sim))


@pytest.mark.parametrize("mode", CORES)
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(case=cases(policies=("vllm-v1",)))
def test_the_core_gives_the_reference_results_for_vllm_v1(monkeypatch, mode, case):
    """vllm-v1's own bookkeeping (running order, per-chunk KV, preempting the last admitted) on small
    pools."""

    def sim():
        return simulate(
            case["prompt"], case["output"], case["arrived"], case["timer"], case["blocks"], case["cfg"]
        )

    assert_same(_run(monkeypatch, "reference", sim), _run(monkeypatch, mode, sim))


@st.composite
def speculative_cases(draw):
    """vllm-v1 with speculative decoding (PP 1, no prefix caching, no attention DP: what it models): K draft
    tokens with or without lookahead slots (EAGLE/MTP or n-gram), acceptance from certain to never, a draft
    pass costing a fraction of the step, CPU per request; prompts from one token (vLLM's padding) and a small
    max length (its cap on the verification)."""
    case = draw(cases(policies=("vllm-v1",)))
    cfg = case["cfg"]
    k = draw(st.integers(1, 6))
    acc = sorted((draw(st.sampled_from([0.0, 0.3, 0.7, 1.0])) for _ in range(k)), reverse=True)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n = len(case["prompt"])
    case["prompt"] = np.where(rng.random(n) < 0.2, 1, case["prompt"])
    if isinstance(case["timer"], ConstantTimer) or case["timer"].num_stages > 1:
        case["timer"] = LinearTimer(0.003, 2e-5, 3e-8)
    case["cfg"] = replace(
        cfg,
        num_replicas=min(cfg.num_replicas, 3) if cfg.dp_attention == 1 else 1,
        dp_attention=1,
        budget=max(cfg.budget or 0, k + 2) if cfg.budget else None,
        spec_k=k,
        spec_lookahead=draw(st.sampled_from([0, k])),
        spec_acceptance=tuple(acc),
        spec_seed=draw(st.integers(0, 1000)),
        spec_fraction=draw(st.sampled_from([0.0, 0.05])),
        spec_passes=k,
        spec_cpu_s=draw(st.sampled_from([0.0, 1e-5])),
    )
    return case


@pytest.mark.parametrize("mode", CORES)
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(case=speculative_cases())
def test_the_core_gives_the_reference_results_with_speculative_decoding(monkeypatch, mode, case):
    def sim():
        return simulate(
            case["prompt"], case["output"], case["arrived"], case["timer"], case["blocks"], case["cfg"]
        )

    ref = _run(monkeypatch, "reference", sim)
    got = _run(monkeypatch, mode, sim)
    assert_same(ref, got)
    for name in ("spec", "spec_steps"):
        assert np.array_equal(getattr(ref.reqs, name), getattr(got.reqs, name)), name


@st.composite
def sglang_cases(draw):
    """sglang at PP 1 (all it models) with its own knobs, on pools small enough to retract (and to abort a
    request that cannot grow even alone): without ignore_eos and with a low conservativeness, admission
    holds back a fraction of the running requests' outputs, so long outputs outgrow the pool."""
    case = draw(cases(policies=("sglang",)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    cfg = case["cfg"]
    n = draw(st.integers(1, 60))
    if draw(st.booleans()):  # retraction-heavy: short prompts, long outputs, a pool of a few requests
        # one replica, or one deployment of DP ranks
        cfg = replace(
            cfg,
            max_model_len=1024,
            sched_delay_slo_s=1e9,
            overload_wait_s=1e9,
            time_limit_s=None,
            num_replicas=cfg.dp_attention,
        )
        case["prompt"] = rng.integers(1, 64, n)
        case["output"] = rng.integers(100, 1000, n)
        case["blocks"] = draw(st.integers(16, 320))
    else:
        max_len = cfg.max_model_len
        case["prompt"] = rng.integers(1, draw(st.sampled_from([32, max_len + 40])), n)
        case["output"] = rng.integers(1, draw(st.sampled_from([40, 120, 400])), n)
        case["blocks"] = draw(st.integers(1, 4 * (-(-max_len // 16))))
    case["arrived"] = np.cumsum(rng.exponential(draw(st.sampled_from([0.001, 0.02])), n))
    case["cfg"] = replace(
        cfg,
        # a multiple of any page, and at least a page for each DP rank
        budget=draw(st.one_of(st.none(), st.integers(cfg.dp_attention, 40).map(lambda k: k * 16))),
        enable_mixed_chunk=draw(st.booleans()),
        schedule_policy=draw(st.sampled_from(["fcfs", "lof", "lpm"])),
        schedule_conservativeness=draw(st.sampled_from([0.1, 0.3, 1.0, 1.5])),
        page_size=draw(st.sampled_from([1, 1, 4, 16])),
        max_prefill_tokens=draw(st.sampled_from([16384, 64, 300])),
        ignore_eos=draw(st.sampled_from([False, False, True])),
        block_size=16,
    )
    if draw(st.booleans()):  # per request: some sent with ignore_eos, some without (both admission paths)
        case["ignore_eos"] = rng.random(n) < draw(st.sampled_from([0.2, 0.5, 0.8]))
    return case


@pytest.mark.parametrize("mode", CORES)
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(case=sglang_cases())
def test_the_core_gives_the_reference_results_for_sglang(monkeypatch, mode, case):
    """sglang's prefill-first steps, chunking, reservation with new_token_ratio, retraction to the back of the
    queue and abort, mixed chunks, fcfs/lof and page-size KV."""

    def sim():
        return simulate(
            case["prompt"],
            case["output"],
            case["arrived"],
            case["timer"],
            case["blocks"],
            case["cfg"],
            ignore_eos=case.get("ignore_eos"),
        )

    assert_same(_run(monkeypatch, "reference", sim), _run(monkeypatch, mode, sim))


@st.composite
def radix_cases(draw):
    """sglang with its radix cache (--prefix-caching): requests sharing streams (a few groups, shared lengths
    from nothing to past the whole request), on pools small enough to evict and retract, lpm among the
    orders."""
    case = draw(sglang_cases())
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n = len(case["prompt"])
    groups = draw(st.integers(1, 4))
    case["prefix"] = (
        np.where(rng.random(n) < 0.8, rng.integers(0, groups, n), -1),
        rng.integers(0, int(case["prompt"].max()) + 50, n),
    )
    case["cfg"] = replace(
        case["cfg"], prefix_caching=True, schedule_policy=draw(st.sampled_from(["fcfs", "lof", "lpm", "lpm"]))
    )
    return case


@pytest.mark.parametrize("mode", CORES)
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(case=radix_cases())
def test_the_core_gives_the_reference_results_for_sglangs_radix_cache(monkeypatch, mode, case):
    """Matching, node splits, locks, LRU eviction, checkpoints, lpm with in-batch deprioritization,
    retraction: the core calls the reference's own RadixCache at the same moments, so the tree ends the same
    too."""

    def sim():
        return simulate(
            case["prompt"],
            case["output"],
            case["arrived"],
            case["timer"],
            case["blocks"],
            case["cfg"],
            prefix=case["prefix"],
            ignore_eos=case.get("ignore_eos"),
        )

    ref = _run(monkeypatch, "reference", sim)
    got = _run(monkeypatch, mode, sim)
    assert_same(ref, got)
    for x, y in zip(ref.replicas, got.replicas, strict=True):
        a, b = x.state.radix, y.state.radix
        assert (a.available, a.evictable, a.protected, a.evictions, a.queries, a.hits) == (
            b.available,
            b.evictable,
            b.protected,
            b.evictions,
            b.queries,
            b.hits,
        )


@pytest.mark.parametrize("mode", CORES)
@pytest.mark.parametrize("num_blocks", [2000, 40])
def test_the_core_orders_and_evicts_as_the_reference_does_with_the_radix_cache(monkeypatch, mode, num_blocks):
    """lpm by construction: forty requests at once, two in three on one of three shared 200-token streams, a
    budget that admits several per step, so a stream's later requests wait behind the first one's prefill
    (in-batch deprioritization) until it has cached the stream; on 40 blocks the tree also evicts."""
    n = 40
    rng = np.random.default_rng(5)
    group = np.where(np.arange(n) % 3 == 0, -1, rng.integers(0, 3, n))
    prompt, output = rng.integers(210, 400, n), rng.integers(5, 40, n)
    cfg = SimConfig(
        policy="sglang",
        prefix_caching=True,
        schedule_policy="lpm",
        budget=1024,
        max_model_len=1024,
        sched_delay_slo_s=1e9,
        overload_wait_s=1e9,
    )

    def sim():
        return simulate(
            prompt,
            output,
            np.zeros(n),
            LinearTimer(0.003, 2e-5, 3e-8),
            num_blocks,
            cfg,
            prefix=(group, np.full(n, 200)),
        )

    ref = _run(monkeypatch, "reference", sim)
    radix = ref.replicas[0].state.radix
    assert radix.hits > 0 and (radix.evictions > 0) == (num_blocks == 40)
    got = _run(monkeypatch, mode, sim)
    assert_same(ref, got)
    assert got.replicas[0].state.radix.evictions == radix.evictions


@pytest.mark.parametrize("mode", CORES)
def test_the_core_admits_ignore_eos_requests_as_the_reference_does_for_sglang(monkeypatch, mode):
    """add_one_req_ignore_eos by construction (ignore_eos, no radix cache): a pool that binds, so its look
    ahead decides admissions, and mixed chunks on 16-token pages, so the chunk left after the decodes' tokens
    is not a whole number of pages and a request cut short takes all of it (unfloored, unlike the general
    path)."""
    rng = np.random.default_rng(11)
    n = 80
    prompt, output = rng.integers(50, 1500, n), rng.integers(20, 400, n)
    arrived = np.cumsum(rng.exponential(0.01, n))
    cfg = SimConfig(
        policy="sglang",
        max_model_len=2048,
        ignore_eos=True,
        enable_mixed_chunk=True,
        page_size=16,
        budget=512,
        sched_delay_slo_s=1e9,
        overload_wait_s=1e9,
    )

    def sim():
        return simulate(prompt, output, arrived, LinearTimer(0.003, 2e-5, 3e-8), 400, cfg)

    ref = _run(monkeypatch, "reference", sim)
    chunks = build_result(ref).iterations.num_prefill_tokens.to_numpy()
    assert (chunks % 16 != 0).sum() > 10  # unaligned cuts (and prompts) were taken
    assert_same(ref, _run(monkeypatch, mode, sim))


@pytest.mark.parametrize("mode", CORES)
@pytest.mark.parametrize("mixed", [False, True])
def test_the_core_retracts_and_aborts_as_the_reference_does_for_sglang(monkeypatch, mode, mixed):
    """Retraction-heavy by construction: admission holds back 7 % of the running requests' outputs
    (conservativeness 0.1, no ignore_eos), so they outgrow the pool; and outputs past SGLang's 4096-token
    clip are admitted with too little room, so one alone outgrows the pool and is aborted."""
    rng = np.random.default_rng(7)
    n = 60
    prompt = np.concatenate([rng.integers(1, 64, n), [10, 12]])
    output = np.concatenate([rng.integers(300, 600, n), [6000, 6000]])
    arrived = np.concatenate([np.cumsum(rng.exponential(0.002, n)), [1.0, 1.0]])
    cfg = SimConfig(
        policy="sglang",
        max_model_len=8192,
        ignore_eos=False,
        schedule_conservativeness=0.1,
        enable_mixed_chunk=mixed,
        page_size=4,
        budget=256,
        sched_delay_slo_s=1e9,
        overload_wait_s=1e9,
    )

    def sim():
        return simulate(prompt, output, arrived, LinearTimer(0.003, 2e-5, 3e-8), 263, cfg)

    ref = _run(monkeypatch, "reference", sim)
    assert ref.reqs.preemptions.sum() > 10 and (ref.reqs.status == IGNORED).sum() >= 1
    assert_same(ref, _run(monkeypatch, mode, sim))


@st.composite
def sglang_speculative_cases(draw):
    """sglang with EAGLE (no radix cache, no mixed chunks, no attention DP: what it models): K drafts per
    verification, acceptance from certain to never, the reserve past the committed tokens on every page size,
    pools small enough to retract (and abort)."""
    case = draw(sglang_cases())
    cfg = case["cfg"]
    k = draw(st.integers(1, 6))
    acc = sorted((draw(st.sampled_from([0.0, 0.3, 0.7, 1.0])) for _ in range(k)), reverse=True)
    if isinstance(case["timer"], ConstantTimer) or case["timer"].num_stages > 1:
        case["timer"] = LinearTimer(0.003, 2e-5, 3e-8)
    case["cfg"] = replace(
        cfg,
        num_replicas=min(cfg.num_replicas, 3) if cfg.dp_attention == 1 else 1,
        dp_attention=1,
        enable_mixed_chunk=False,
        spec_k=k,
        spec_acceptance=tuple(acc),
        spec_seed=draw(st.integers(0, 1000)),
        spec_fraction=draw(st.sampled_from([0.0, 0.05])),
        spec_passes=k,
    )
    return case


@pytest.mark.parametrize("mode", CORES)
@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(case=sglang_speculative_cases())
def test_the_core_gives_the_reference_results_for_sglang_with_eagle(monkeypatch, mode, case):
    """sglang's EAGLE verification steps: each running request's K drafts verified, its KV kept allocated to
    the committed tokens plus 2(K + 1), retraction against that."""

    def sim():
        return simulate(
            case["prompt"],
            case["output"],
            case["arrived"],
            case["timer"],
            case["blocks"],
            case["cfg"],
            ignore_eos=case.get("ignore_eos"),
        )

    ref = _run(monkeypatch, "reference", sim)
    got = _run(monkeypatch, mode, sim)
    assert_same(ref, got)
    assert np.array_equal(ref.reqs.spec_steps, got.reqs.spec_steps)


@pytest.mark.parametrize("mode", CORES)
def test_the_core_retracts_as_the_reference_does_for_sglang_with_eagle(monkeypatch, mode):
    """The retraction-heavy case above with EAGLE (K = 4, page 4): each request holds 10 tokens past its
    committed ones, so the pool runs out sooner; both retract and abort alike."""
    rng = np.random.default_rng(7)
    n = 60
    prompt = np.concatenate([rng.integers(1, 64, n), [10, 12]])
    output = np.concatenate([rng.integers(300, 600, n), [6000, 6000]])
    arrived = np.concatenate([np.cumsum(rng.exponential(0.002, n)), [1.0, 1.0]])
    cfg = SimConfig(
        policy="sglang",
        max_model_len=8192,
        ignore_eos=False,
        schedule_conservativeness=0.1,
        page_size=4,
        budget=256,
        sched_delay_slo_s=1e9,
        overload_wait_s=1e9,
        spec_k=4,
        spec_acceptance=(0.8, 0.6, 0.4, 0.2),
        spec_passes=4,
        spec_fraction=0.05,
    )

    def sim():
        return simulate(prompt, output, arrived, LinearTimer(0.003, 2e-5, 3e-8), 263, cfg)

    ref = _run(monkeypatch, "reference", sim)
    assert ref.reqs.preemptions.sum() > 10 and ref.reqs.spec_steps.sum() > 1000
    assert_same(ref, _run(monkeypatch, mode, sim))


@st.composite
def prefix_cases(draw):
    """vllm-v1 with prefix caching: requests sharing streams (a few groups, shared lengths from nothing to
    past the whole request: conversation turns), on pools small enough to evict and preempt."""
    case = draw(cases(policies=("vllm-v1",)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n = len(case["prompt"])
    groups = draw(st.integers(1, 4))
    case["prefix"] = (
        np.where(rng.random(n) < 0.8, rng.integers(0, groups, n), -1),
        rng.integers(0, case["cfg"].max_model_len + 50, n),
    )
    case["cfg"] = replace(case["cfg"], prefix_caching=True, watermark=0.0)
    return case


@pytest.mark.parametrize("mode", CORES)
@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(case=prefix_cases())
def test_the_core_gives_the_reference_results_with_prefix_caching(monkeypatch, mode, case):
    def sim():
        return simulate(
            case["prompt"],
            case["output"],
            case["arrived"],
            case["timer"],
            case["blocks"],
            case["cfg"],
            prefix=case["prefix"],
            ignore_eos=case.get("ignore_eos"),
        )

    ref = _run(monkeypatch, "reference", sim)
    assert_same(ref, _run(monkeypatch, mode, sim))


def chained_ids(rng, prompt, block: int) -> tuple:
    """A Mooncake-like tree of prefixes: each request's chained block ids (one per `block` tokens) share a
    prefix of an earlier request's whole blocks (a branch of the tree) or start fresh; a few carry no ids at
    all."""
    rows, full, fresh = [], [], 0
    for p in prompt:
        blocks = -(-int(p) // block)
        ids = []
        if rows and rng.random() < 0.8:
            parent = int(rng.integers(len(rows)))
            ids = rows[parent][: int(rng.integers(0, min(full[parent], blocks) + 1))]
        if rng.random() < 0.1:
            blocks = len(ids)  # the rest of this one's tokens are its own
        ids = ids + list(range(fresh, fresh + blocks - len(ids)))
        fresh += blocks
        rows.append(ids)
        full.append(int(p) // block)
    offsets = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
    ids = np.array([i for r in rows for i in r], dtype=np.int64)
    n = len(prompt)
    return np.full(n, -1), np.zeros(n, dtype=np.int64), offsets, ids


@pytest.mark.parametrize("mode", CORES)
@pytest.mark.parametrize("policy", ["vllm-v1", "sglang"])
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_the_core_gives_the_reference_results_for_a_tree_of_prefixes(monkeypatch, mode, policy, data):
    """Chained block ids (Mooncake's hash_ids) as the prefix identity, on vllm-v1's block pool and SGLang's
    radix tree (lpm among the orders). The hash block is 64 tokens here, not Mooncake's 512, so that the short
    prompts of these cases make deep trees; both runs read the same patched constant."""
    from simserve.sim import prefix_cache

    monkeypatch.setattr(prefix_cache, "HASH_BLOCK_TOKENS", data.draw(st.sampled_from([64, 64, 512])))
    case = data.draw(radix_cases() if policy == "sglang" else prefix_cases())
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    case["prefix"] = chained_ids(rng, case["prompt"], prefix_cache.HASH_BLOCK_TOKENS)

    def sim():
        return simulate(
            case["prompt"],
            case["output"],
            case["arrived"],
            case["timer"],
            case["blocks"],
            case["cfg"],
            prefix=case["prefix"],
            ignore_eos=case.get("ignore_eos"),
        )

    ref = _run(monkeypatch, "reference", sim)
    got = _run(monkeypatch, mode, sim)
    assert_same(ref, got)
    for x, y in zip(ref.replicas, got.replicas, strict=True):
        a, b = x.state.radix, y.state.radix
        if a is not None:
            assert (a.available, a.evictable, a.protected, a.evictions, a.queries, a.hits) == (
                b.available,
                b.evictable,
                b.protected,
                b.evictions,
                b.queries,
                b.hits,
            )


def test_a_tree_of_prefixes_hits_where_its_branches_meet(monkeypatch):
    """The reference by construction: 30 requests a second apart (each done well before the next) on one
    replica, branches of a tree of 512-token chained blocks; with vllm-v1's prefix caching each hits the run
    of its whole blocks that earlier requests computed (no eviction: the pool holds them all)."""
    from simserve.sim.prefix_cache import block_keys

    rng = np.random.default_rng(1)
    n = 30
    prompt, output = rng.integers(1100, 2000, n), rng.integers(2, 5, n)
    prefix = chained_ids(rng, prompt, 512)
    cfg = SimConfig(
        policy="vllm-v1",
        prefix_caching=True,
        budget=8192,
        max_model_len=4096,
        sched_delay_slo_s=1e9,
        overload_wait_s=1e9,
    )
    run = _run(
        monkeypatch,
        "reference",
        lambda: simulate(prompt, output, np.arange(n) * 1.0, ConstantTimer(0.01), 4000, cfg, prefix=prefix),
    )
    reqs = run.reqs
    seen: set = set()
    for i in range(n):
        keys = block_keys(reqs, i, 16, (int(prompt[i]) - 1) // 16)
        hit = next((k for k, key in enumerate(keys) if key not in seen), len(keys))
        assert reqs.cached_tokens[i] == hit * 16, i
        seen.update(block_keys(reqs, i, 16, int(reqs.computed[i]) // 16))
    assert reqs.cached_tokens.sum() > 0.3 * prompt.sum()  # the tree shares a lot


@st.composite
def routed_prefix_cases(draw):
    """The prefix-aware and kv routers over 2-4 replicas (or DP deployments) of vllm-v1 with prefix caching,
    requests sharing a few streams: the routers' index and the caches both in play."""
    case = draw(prefix_cases())
    cfg = case["cfg"]
    d = cfg.dp_attention
    case["cfg"] = replace(
        cfg,
        router=draw(st.sampled_from(["prefix-aware", "prefix-aware", "kv"])),
        num_replicas=d * draw(st.integers(2, 4 if d == 1 else 2)),
    )
    return case


@pytest.mark.parametrize("mode", CORES)
@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(case=routed_prefix_cases())
def test_the_core_routes_as_the_reference_with_prefix_caching(monkeypatch, mode, case):
    def sim():
        return simulate(
            case["prompt"],
            case["output"],
            case["arrived"],
            case["timer"],
            case["blocks"],
            case["cfg"],
            prefix=case["prefix"],
        )

    ref = _run(monkeypatch, "reference", sim)
    assert_same(ref, _run(monkeypatch, mode, sim))


@st.composite
def tier_cases(draw):
    """prefix_cases with a CPU KV tier (--kv-offload-gb, kv_offload.py): one stage, no attention DP, tiers
    from a block to more than the GPU pool, loads from free to longer than a step, decode stretches on or
    off."""
    case = draw(prefix_cases())
    case["timer"] = ConstantTimer(0.01) if draw(st.booleans()) else LinearTimer(0.003, 2e-5, 3e-8)
    case["cfg"] = replace(
        case["cfg"],
        dp_attention=1,
        num_replicas=draw(st.integers(1, 2)),
        stretch=draw(st.booleans()),
        kv_offload_blocks=draw(st.integers(1, 5 * case["blocks"])),
        kv_offload_block_s=draw(st.sampled_from([0.0, 1e-4, 2e-3, 0.05])),
    )
    return case


@pytest.mark.parametrize("mode", CORES)
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(case=tier_cases())
def test_the_core_gives_the_reference_results_with_a_cpu_kv_tier(monkeypatch, mode, case):
    def sim():
        return simulate(
            case["prompt"],
            case["output"],
            case["arrived"],
            case["timer"],
            case["blocks"],
            case["cfg"],
            prefix=case["prefix"],
            ignore_eos=case.get("ignore_eos"),
        )

    ref = _run(monkeypatch, "reference", sim)
    assert_same(ref, _run(monkeypatch, mode, sim))


@st.composite
def conversation_cases(draw):
    """Answer-driven conversations (--arrival conversation): a few conversations whose rounds follow each
    other (a round is released when the one before it completes, plus the front end's delay and its think
    time), among first-round-only requests; any policy, with vllm-v1's prefix caching sometimes."""
    case = draw(cases())
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n = len(case["prompt"])
    group = np.where(
        rng.random(n) < draw(st.sampled_from([0.5, 0.9])), rng.integers(0, draw(st.integers(1, 5)), n), -1
    )
    parent = np.full(n, -1, dtype=np.int64)
    last: dict[int, int] = {}
    for i, g in enumerate(group.tolist()):  # the rounds of a conversation, in arrival (= id) order
        if g >= 0:
            parent[i] = last.get(g, -1)
            last[g] = i
    case["conversation"] = parent
    cfg = replace(case["cfg"], max_concurrency=None)  # the conversation paces itself
    case["prefix"] = None
    if cfg.policy == "vllm-v1" and draw(st.booleans()):
        case["prefix"] = (group, rng.integers(0, cfg.max_model_len + 50, n))
        cfg = replace(cfg, prefix_caching=True, watermark=0.0)
    case["cfg"] = cfg
    return case


@pytest.mark.parametrize("mode", CORES)
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(case=conversation_cases())
def test_the_core_gives_the_reference_results_for_conversations(monkeypatch, mode, case):
    def sim():
        return simulate(
            case["prompt"],
            case["output"],
            case["arrived"],
            case["timer"],
            case["blocks"],
            case["cfg"],
            prefix=case["prefix"],
            conversation=case["conversation"],
        )

    ref = _run(monkeypatch, "reference", sim)
    assert_same(ref, _run(monkeypatch, mode, sim))


@st.composite
def autoscale_cases(draw):
    """An autoscaled run (sim/autoscale.py): any policy of the engine and of the autoscaler, replicas that
    cold start, drain and come back, under arrivals whose rate steps up tenfold in the middle third."""
    case = draw(cases())
    cfg = case["cfg"]
    hi = draw(st.integers(2, 4))
    lo = draw(st.integers(1, hi))
    case["cfg"] = replace(cfg, dp_attention=1, num_replicas=hi)
    case["prefix"] = None
    # prefix caching: the prefix-aware router's index in play
    if cfg.policy == "vllm-v1" and draw(st.booleans()):
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        n = len(case["prompt"])
        case["prefix"] = (rng.integers(0, 3, n), rng.integers(0, cfg.max_model_len + 50, n))
        case["cfg"] = replace(case["cfg"], prefix_caching=True, watermark=0.0)
    gaps = np.diff(case["arrived"], prepend=0.0)
    n = len(gaps)
    gaps[n // 3 : 2 * n // 3] /= 10.0
    case["arrived"] = np.cumsum(gaps)
    # intervals and cold starts in proportion: decisions happen in every run
    span = float(case["arrived"][-1])
    policy = draw(st.sampled_from(["utilization", "queue", "slo"]))
    case["autoscale"] = AutoscaleConfig(
        lo,
        hi,
        policy,
        initial=draw(st.integers(lo, hi)),
        interval_s=span * draw(st.sampled_from([0.02, 0.1, 0.3])),
        cold_start_s=span * draw(st.sampled_from([0.0, 0.03, 0.15])),
        target=draw(st.sampled_from([None, 0.02, 0.3])) if policy == "utilization" else None,
        capacity_qps=(n / span) * draw(st.sampled_from([0.1, 0.5, 2.0])) if policy == "slo" else None,
    )
    return case


@pytest.mark.parametrize("mode", CORES)
@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(case=autoscale_cases())
def test_the_core_gives_the_reference_results_with_the_autoscaler(monkeypatch, mode, case):
    def sim():
        return simulate(
            case["prompt"],
            case["output"],
            case["arrived"],
            case["timer"],
            case["blocks"],
            case["cfg"],
            prefix=case["prefix"],
            autoscale=case["autoscale"],
        )

    ref, got = _run(monkeypatch, "reference", sim), _run(monkeypatch, mode, sim)
    assert_same(ref, got)
    assert ref.scaler.rows == got.scaler.rows  # every decision, the metric it saw, to the last bit
    assert ref.scaler.held(ref.end_time) == got.scaler.held(got.end_time)


@pytest.mark.parametrize("rule", ["late", "oldest"])
def test_an_overloaded_conversation_run_stops_at_the_references_check(monkeypatch, rule):
    """The overload rule scans requests in routing order, which conversations' follow-ups make differ from id
    order: the core's skip test (Core._check_due) must scan the same order, or it skips the check where the
    rule acts. Twelve conversations of slow rounds overload a replica of two slots, by either half of the
    rule."""
    slo, wait = (0.3, 1e9) if rule == "late" else (1e9, 0.5)
    cfg = SimConfig(
        policy="sarathi",
        budget=64,
        max_batch=2,
        max_model_len=512,
        sched_delay_slo_s=slo,
        overload_wait_s=wait,
        check_period_s=0.1,
        stop_when_overloaded=True,
    )
    for seed in range(10):
        rng = np.random.default_rng(seed)
        n = 80
        group = rng.integers(0, 12, n)
        parent = np.full(n, -1, dtype=np.int64)
        last: dict[int, int] = {}
        for i, g in enumerate(group.tolist()):
            parent[i] = last.get(g, -1)
            last[g] = i
        arrived = np.cumsum(rng.exponential(0.05, n))
        prompt, output = rng.integers(20, 300, n), rng.integers(2, 20, n)

        def sim(prompt=prompt, output=output, arrived=arrived, parent=parent):
            return simulate(
                prompt, output, arrived, LinearTimer(0.01, 2e-4, 1e-7), 200, cfg, conversation=parent
            )

        ref = _run(monkeypatch, "reference", sim)
        if rule == "oldest":
            assert ref.overloaded
        for mode in CORES:
            assert_same(ref, _run(monkeypatch, mode, sim))


MISTRAL = dict(model="mistral-7b", gpu="a100", num_requests=200, stretch=False)
SCENARIOS = {  # the profiled predictor's timer, as `simserve run` uses it
    "sarathi": (Scenario(**MISTRAL, budget=512), 2.0),
    "vllm": (Scenario(**MISTRAL, policy="vllm"), 2.0),
    "slo-aware": (Scenario(**MISTRAL, policy="slo-aware", tbt_target_s=0.05), 1.5),
    "vllm-v1-2rep": (Scenario(**MISTRAL, policy="vllm-v1", num_replicas=2, router="lor"), 4.0),
    # vLLM's worker: CUDA-graph padding composed into the timer's tables, its memory profile
    "vllm-worker": (Scenario(**MISTRAL, policy="vllm-v1", vllm_worker=True, memory_utilization=0.92), 4.0),
    "overloaded": (Scenario(**MISTRAL, budget=512), 12.0),
    "pp2": (Scenario(model="llama2-70b", gpu="a40", tp=4, pp=2, num_requests=120, stretch=False), 0.8),
    "sglang-mixed": (Scenario(**MISTRAL, policy="sglang", enable_mixed_chunk=True, budget=2048), 4.0),
    "closed-loop": (Scenario(**MISTRAL, policy="vllm-v1", max_concurrency=8, frontend_ms=2.0), 6.0),
    # the routers (sim/routers.py) on a prefix-sharing workload with vLLM's prefix caching
    "prefix-aware-4rep": (
        Scenario(
            **MISTRAL,
            policy="vllm-v1",
            prefix_caching=True,
            num_replicas=4,
            router="prefix-aware",
            trace="prefix-repetition",
        ),
        12.0,
    ),
    "kv-3rep-multiturn": (
        Scenario(
            **MISTRAL,
            policy="vllm-v1",
            prefix_caching=True,
            num_replicas=3,
            router="kv",
            trace="sharegpt-multiturn",
        ),
        6.0,
    ),
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_the_core_matches_the_reference_with_the_profiled_timer(monkeypatch, name):
    s, qps = SCENARIOS[name]
    ref = _run(monkeypatch, "reference", lambda: simulate_scenario(s, qps)[0])
    got = _run(monkeypatch, CORES[-1], lambda: simulate_scenario(s, qps)[0])
    assert_same(ref, got)


def test_without_a_compiled_core_simserve_says_so_once_and_runs_the_reference(monkeypatch, capsys):
    monkeypatch.delenv(core_run.ENV, raising=False)
    monkeypatch.setitem(core_run._modules, True, None)
    monkeypatch.setattr(core_run, "_warned", False)
    cfg = SimConfig(stretch=False)
    assert core_run.choose(cfg, ConstantTimer(0.01)) is None
    assert core_run.choose(cfg, ConstantTimer(0.01)) is None
    err = capsys.readouterr().err
    assert err.count("compiled simulation core is not built") == 1 and len(err.splitlines()) == 1


@needs_cython
def test_the_environment_switch_forces_the_reference(monkeypatch):
    monkeypatch.setenv(core_run.ENV, "reference")
    assert core_run.choose(SimConfig(stretch=False), ConstantTimer(0.01)) is None
    monkeypatch.setenv(core_run.ENV, "python")
    assert core_run.choose(SimConfig(stretch=False), ConstantTimer(0.01)) is not None
    assert core_run.choose(SimConfig(stretch=False), object()) is None  # a timer the core cannot reproduce


@needs_cython
def test_a_broken_invariant_is_one_line_naming_it(monkeypatch):
    """Admission that ignores the free-block check drives free KV negative: the core stops with one line."""
    monkeypatch.setenv(core_run.ENV, "python")
    core = core_run._load(False)
    monkeypatch.setattr(core.Core, "_can_allocate", lambda self, rep, n: True)
    with pytest.raises(core_run.InvariantError) as e:
        simulate([100] * 8, [50] * 8, [0.0] * 8, ConstantTimer(0.01), 10, SimConfig(stretch=False))
    msg = str(e.value)
    assert "free KV blocks went negative" in msg and "\n" not in msg


@needs_cython
def test_every_policy_and_the_closed_loop_client_run_on_the_core(capsys, monkeypatch):
    monkeypatch.setenv(core_run.ENV, "python")
    for policy in POLICY_NAMES:
        for limit in (None, 4):
            assert (
                core_run.choose(SimConfig(policy=policy, max_concurrency=limit), ConstantTimer(0.01))
                is not None
            )
    assert capsys.readouterr().err == ""


def test_a_policy_the_core_lacks_would_run_on_the_reference_and_say_so_once(capsys, monkeypatch):
    """The routing stays for the next mechanism that lands in the reference first."""
    monkeypatch.delenv(core_run.ENV, raising=False)
    monkeypatch.setattr(core_run, "_said", set())
    monkeypatch.setattr(core_run, "REFERENCE_ONLY", ("sglang",))
    monkeypatch.setenv(core_run._SAID_ENV, "")  # restored after the test: the function sets it
    cfg = SimConfig(policy="sglang")
    assert core_run.choose(cfg, ConstantTimer(0.01)) is None
    assert core_run.choose(cfg, ConstantTimer(0.01)) is None
    assert capsys.readouterr().err.count("--policy sglang runs on the SimPy reference") == 1


# -- attention-DP lockstep (core.Core._lockstep_* against sim/lockstep.py) -----------------------------------
# The random cases above reach it too (D 2-4, one or two deployments, both routers, closed and open loops,
# small pools, CUDA-graph padding); these use the profiled MoE timer, whose lockstep tables are the real ones.
@needs_cython
def test_the_cores_lockstep_arithmetic_is_the_batch_timers(moe_dp_timer):
    """Timer.own_base/own_time/experts_time (core/timer.py, run as plain Python) against BatchTimer.own_time
    and experts_time, bit for bit: random batches, padded or not, in and past the tables' ends, the idle
    rank's dummy batch (its own time only counts where it is the slowest rank, which the runs rarely
    reach)."""
    import copy

    from simserve.predictor.overhead import Component, CpuOverhead
    from simserve.predictor.step import launch_costs, with_launch_costs
    from simserve.sim.lockstep import DUMMY_KV
    from simserve.vllm_worker import padded_timer

    core = core_run._load(False)
    rng = np.random.default_rng(2)
    sizes = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
    # the step composed with every part (async overlap that sometimes exceeds the GPU side, launch costs per
    # mode), so own_time's composition is checked beyond the plain sum
    # each role with a per-prefill-chunk term too (vLLM's request admission: engine_cpu.components)
    heavy = (
        ("schedule", Component(0.5, 0.05, 0.001, stage="first", role_async="overlap", d_ms=0.7)),
        ("sampler", Component(0.3, 0.002, stage="last", role_async="gpu", d_ms=0.05)),
        ("process_outputs", Component(0.1, 0.03, stage="last", role_async="serial", d_ms=0.2)),
    )
    composed = copy.copy(moe_dp_timer)
    composed._set_cpu(CpuOverhead(async_scheduling=True, components=heavy))
    composed = with_launch_costs(padded_timer(composed, sizes), launch_costs(moe_dp_timer.deployment, sizes))
    for timer in (moe_dp_timer, padded_timer(moe_dp_timer, sizes), composed):
        kind, tables = core_run.timer_params(timer)
        t = core.Timer(kind, 1, tables)
        end, last = int(tables["tend"]), len(tables["experts"]) - 1
        for pad in (0, 1, 24, 512, end + 7):
            assert t.dummy_time(pad) == timer.own_time((), DUMMY_KV, pad)[0]
            for _ in range(40):
                k = rng.integers(0, 3)
                prefills = [
                    (int(c), int(p))
                    for c, p in zip(rng.integers(1, 3000, k), rng.integers(0, 5000, k), strict=True)
                ]
                kv = rng.integers(2, 6000, rng.integers(0 if prefills else 1, 300))
                own, tokens = timer.own_time(prefills, kv, pad)
                base = t.own_base([c for c, _ in prefills], [p for _, p in prefills], len(kv), int(kv.sum()))
                assert t.own_time(tokens, base, len(prefills), len(prefills) + len(kv), pad) == own
        for tokens in (0, 1, 2, 777, last, last + 1, 3 * last + 5):
            assert t.experts_time(tokens) == timer.experts_time(tokens)


@pytest.mark.parametrize("policy", ["vllm-v1", "sglang"])
@pytest.mark.parametrize("graphs", [False, True])
def test_the_core_steps_dp_ranks_as_the_reference_does_with_the_profiled_timer(
    monkeypatch, moe_dp_timer, policy, graphs
):
    """Mixtral fp8 on H100 (TP 1, EP 2, two attention-DP ranks) from a roofline profile; two deployments of
    two ranks behind the lor router, a pool small enough that a rank's KV is over half full (vLLM's balancer
    adds its waiting penalty) and preempts, and vLLM's CUDA graphs padding the ranks to the largest (or
    not)."""
    from simserve.vllm_worker import padded_timer

    timer = padded_timer(moe_dp_timer, (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)) if graphs else moe_dp_timer
    rng = np.random.default_rng(3)
    n = 160
    prompt, output = rng.integers(1, 3000, n), rng.integers(1, 300, n)
    arrived = np.cumsum(rng.exponential(0.01, n))
    cfg = SimConfig(
        policy=policy,
        budget=2048,
        max_model_len=4096,
        num_replicas=4,
        dp_attention=2,
        router="lor",
        sched_delay_slo_s=1e9,
        overload_wait_s=1e9,
        ignore_eos=False,
    )

    def sim():
        return simulate(prompt, output, arrived, timer, 700, cfg)

    ref = _run(monkeypatch, "reference", sim)
    assert ref.reqs.preemptions.sum() > 0 and set(ref.reqs.replica.tolist()) == {0, 1, 2, 3}
    for mode in CORES:
        assert _run(monkeypatch, mode, lambda: core_run.choose(cfg, timer)) is not None  # the core runs it
        assert_same(ref, _run(monkeypatch, mode, sim))


@pytest.mark.parametrize("mode", CORES)
def test_a_request_a_drop_lets_in_waits_for_the_next_lockstep_step(monkeypatch, mode):
    """A closed-loop client of two: request 0 decodes on rank 0; request 1 can never fit the pool, and rank 1
    drops it at the next step (DpGroup._batch), which frees a slot, so request 2 is sent then. It reaches
    rank 1 through the arrivals process, after that step was formed (the group routes only at the top of its
    loop): it waits for the next step, on the reference and on the core alike."""
    cfg = SimConfig(
        policy="vllm-v1",
        budget=512,
        max_model_len=4096,
        num_replicas=2,
        dp_attention=2,
        max_concurrency=2,
        sched_delay_slo_s=1e9,
        overload_wait_s=1e9,
    )
    prompt, output, arrived = [100, 3000, 50], [40, 5, 5], [0.0, 0.05, 0.05]

    timer = LinearTimer(0.003, 2e-5, 3e-8, e=1e-5)

    def sim():
        return simulate(prompt, output, arrived, timer, 100, cfg)

    assert _run(monkeypatch, mode, lambda: core_run.choose(cfg, timer)) is not None  # the core runs it
    ref = _run(monkeypatch, "reference", sim)
    r = ref.reqs
    assert r.status[1] == IGNORED and r.replica.tolist() == [0, 1, 1]
    steps = build_result(ref).iterations
    dropped_at = steps.start_s[steps.start_s > 0.05].min()  # the step after request 1 arrived: dropped there
    assert r.arrived[2] == dropped_at and r.scheduled[2] > dropped_at  # sent then, scheduled a step later
    assert_same(ref, _run(monkeypatch, mode, sim))


# -- disaggregated serving (core.DisaggCore against disagg.DisaggCluster) ------------------------------------
def assert_same_disagg(ref, got) -> None:
    """Two DisaggRuns agree to the last bit: the user's view, both pools' rows and counters, every
    transfer."""
    assert_same(ref.raw, got.raw)
    for name in ("prefilled", "queued", "start", "end", "nbytes", "prefill_replica"):
        a, b = getattr(ref.transfers, name), getattr(got.transfers, name)
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), name
    from simserve.sim.disagg import transfer_summary

    assert transfer_summary(ref) == transfer_summary(got)


@st.composite
def disagg_cases(draw):
    """Random workloads through random xPyD layouts: each pool its own replicas, PP, timer, KV pool and policy
    limits; decode pools down to a few prompts' blocks (admission waits, and prompts that never fit are
    ignored), links from NVLink-fast to a crawl (the prefill side holds its KV, transfers queue)."""
    from simserve.sim.disagg import CHUNKING, Pool
    from simserve.sim.kvlink import KVLink

    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n = draw(st.integers(1, 60))
    max_len = draw(st.sampled_from([64, 200, 1024]))
    stop = draw(st.sampled_from(["none", "overload", "tbt", "cap"]))
    prompt = rng.integers(1, max_len + 40, n)  # a few are too long: ignored at the door
    output = rng.integers(1, draw(st.sampled_from([4, 40, 120])), n)
    arrived = np.cumsum(rng.exponential(draw(st.sampled_from([0.001, 0.02, 0.2])), n))
    block_size = draw(st.sampled_from([16, 16, 10]))
    cfg = SimConfig(
        policy=draw(st.sampled_from(CHUNKING)),
        budget=draw(st.one_of(st.none(), st.integers(1, 600))),
        max_batch=draw(st.one_of(st.none(), st.integers(1, 20))),
        max_model_len=max_len,
        router=draw(st.sampled_from(ROUTER_NAMES)),  # sim/routers.py, which both models call
        router_weights=draw(st.sampled_from([DEFAULT_ROUTER_WEIGHTS, (1.0, 0.0, 5.0)])),
        stretch=False,
        sched_delay_slo_s=0.05 if stop == "overload" else 1e9,
        stop_when_overloaded=draw(st.booleans()),
        overload_wait_s=0.5 if stop == "overload" else 1e9,
        check_period_s=draw(st.sampled_from([0.01, 0.1, 1.0])),
        stop_tbt=(0.02, 0.5) if stop == "tbt" else None,
        time_limit_s=0.3 if stop == "cap" else None,
        tbt_target_s=draw(st.sampled_from([0.005, 0.02, 0.1])),
        long_prefill_token_threshold=draw(st.sampled_from([0, 64])),
        min_budget=draw(st.one_of(st.none(), st.integers(1, 300))),
        watermark=draw(st.sampled_from([0.0, 0.01, 0.1])),
        block_size=block_size,
    )
    min_blocks = -(-max_len // block_size)

    def pool(router, starved):
        pp = draw(st.integers(1, 3))
        timer = (
            ConstantTimer(draw(st.sampled_from([0.002, 0.01])), num_stages=pp)
            if draw(st.booleans())
            else LinearTimer(0.003, draw(st.sampled_from([2e-5, 1e-4])), 3e-8, num_stages=pp)
        )
        blocks = draw(st.integers(1, 2 * min_blocks) if starved else st.integers(min_blocks, 4 * min_blocks))
        own = None  # the decode pool's own limits (a decode engine runs its own budget and max batch)
        if router != cfg.router and draw(st.booleans()):
            own = replace(
                cfg,
                budget=draw(st.one_of(st.none(), st.integers(1, 600))),
                max_batch=draw(st.one_of(st.none(), st.integers(1, 20))),
            )
        return Pool(draw(st.integers(1, 3)), timer, blocks, router, own)

    prefill = pool(cfg.router, False)
    decode = pool(draw(st.sampled_from(["rr", "lor", "kv", "kv"])), draw(st.booleans()))
    link = KVLink(
        "test", draw(st.sampled_from([100.0, 1.0, 0.01])), draw(st.sampled_from([0.0, 2e-5, 5e-3])), 1, "test"
    )
    return dict(
        prompt=prompt,
        output=output,
        arrived=arrived,
        cfg=cfg,
        prefill=prefill,
        decode=decode,
        link=link,
        kv=draw(st.sampled_from([100.0, 4096.0])),
    )


@pytest.mark.parametrize("mode", CORES)
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(case=disagg_cases())
def test_the_core_gives_the_reference_results_for_disaggregated_serving(monkeypatch, mode, case):
    from simserve.sim.disagg import simulate_disagg

    def sim():
        return simulate_disagg(
            case["prompt"],
            case["output"],
            case["arrived"],
            case["cfg"],
            case["prefill"],
            case["decode"],
            case["link"],
            case["kv"],
        )

    assert_same_disagg(_run(monkeypatch, "reference", sim), _run(monkeypatch, mode, sim))


# each of the watchdog's ways to end a run, reached mid-run on the case below (the reference's flag)
STOPS = {
    "none": ({}, None),
    "tbt": ({"stop_tbt": (0.005, 0.99)}, "stopped_early"),
    "overload": ({"sched_delay_slo_s": 0.5, "overload_wait_s": 3.0}, "overloaded"),
    "cap": ({"time_limit_s": 2.0}, "capped"),
}


@pytest.mark.parametrize("mode", CORES)
@pytest.mark.parametrize("stop", list(STOPS))
def test_a_kv_starved_decode_pool_behind_a_slow_link_runs_as_the_reference(monkeypatch, mode, stop):
    """Built to exercise every disaggregation path at once: decode admission waits for blocks, prompts larger
    than the decode pool are ignored after their prefill (their prefill blocks freed), transfers queue on a
    crawling link while the prefill side holds its KV, and the decode side preempts; and each watchdog rule
    ends it mid-run (the core skips the checks where no rule can act: DisaggCore._check_due)."""
    from simserve.sim.disagg import Pool, simulate_disagg
    from simserve.sim.kvlink import KVLink

    rng = np.random.default_rng(11)
    n = 80
    prompt = rng.integers(16, 900, n)
    output = rng.integers(20, 200, n)
    arrived = np.cumsum(rng.exponential(0.01, n))
    rules, flag = STOPS[stop]
    cfg = replace(
        SimConfig(
            policy="sarathi",
            budget=256,
            max_model_len=1024,
            sched_delay_slo_s=1e9,
            overload_wait_s=1e9,
            check_period_s=0.1,
        ),
        **rules,
    )

    def sim():
        return simulate_disagg(
            prompt,
            output,
            arrived,
            cfg,
            Pool(2, LinearTimer(0.003, 2e-5, 3e-8, num_stages=2), 80),
            Pool(2, LinearTimer(0.004, 1e-5, 3e-8), 48, "kv"),
            KVLink("slow", 0.05, 2e-5, 1, "test"),
            20000.0,
        )

    ref = _run(monkeypatch, "reference", sim)
    r, t = ref.raw.reqs, ref.transfers
    if flag is None:
        assert (r.status == IGNORED).sum() >= 1 and r.preemptions.sum() >= 1
        assert np.nanmax(t.start - t.queued) > 0.1 and np.nanmax(t.queued - t.prefilled) > 0.1
    else:
        assert getattr(ref.raw, flag) and ref.raw.end_time < 10.0
    assert_same_disagg(ref, _run(monkeypatch, mode, sim))


def test_the_core_runs_a_disaggregated_scenario_with_the_profiled_timers_as_the_reference(monkeypatch):
    from simserve.sim.disagg_scenario import DisaggScenario, PoolSpec, run_disagg

    base = Scenario(model="llama-2-7b", gpu="h200", num_requests=150, stretch=False, budget=512)
    ds = DisaggScenario.create(base, PoolSpec(2, 1), PoolSpec(1, 2), decode_router="kv")
    ref = _run(monkeypatch, "reference", lambda: run_disagg(ds, 8.0))
    assert_same_disagg(ref, _run(monkeypatch, CORES[-1], lambda: run_disagg(ds, 8.0)))


@pytest.mark.parametrize("mode", CORES)
def test_a_backlog_only_in_front_of_the_decode_pool_is_an_overload_on_the_core_too(monkeypatch, mode):
    """A roomy prefill pool and a decode pool of 150 blocks: prefills keep up, so only decode admission (the
    watchdog's "scheduled") falls behind; the core's skip test must read that, not the prefill side's
    admission."""
    from simserve.sim.disagg import Pool, simulate_disagg
    from simserve.sim.kvlink import KVLink

    rng = np.random.default_rng(0)
    prompt, output = rng.integers(20, 1500, 400), rng.integers(1, 200, 400)
    arrived = np.cumsum(rng.exponential(1 / 20.0, 400))
    timer = LinearTimer(0.004, 1e-5, 1e-8)

    def sim():
        return simulate_disagg(
            prompt,
            output,
            arrived,
            SimConfig(policy="sarathi"),
            Pool(2, timer, 20000),
            Pool(1, timer, 150, "kv"),
            KVLink("test", 10.0, 20e-6, 1, "test"),
            1000.0,
        )

    ref = _run(monkeypatch, "reference", sim)
    assert ref.raw.overloaded and np.nanmedian(ref.raw.reqs.scheduled - ref.raw.reqs.arrived) < 2.0
    assert_same_disagg(ref, _run(monkeypatch, mode, sim))
