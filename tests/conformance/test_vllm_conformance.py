"""simserve's `vllm-v1` policy against vLLM 0.33.0's own V1 Scheduler, step by step.

The real scheduler runs in its own virtual environment (tools/vllm_env.sh builds it; the path comes from
SIMSERVE_VLLM_PYTHON, default .venv-vllm/bin/python in the repository root), fed the same request stream
as simserve (workloads.py). Every step must schedule the same requests with the same token counts and
preempt the same requests. Without that environment the test skips and says how to build it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import workloads  # noqa: E402

ROOT = HERE.parent.parent
VLLM_PYTHON = Path(os.environ.get("SIMSERVE_VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python"))


def vllm_steps(w: dict) -> list[dict]:
    if not VLLM_PYTHON.exists():
        pytest.skip(f"no vLLM 0.33.0 environment at {VLLM_PYTHON}: build it with `bash tools/vllm_env.sh`")
    proc = subprocess.run(
        [str(VLLM_PYTHON), str(HERE / "vllm_driver.py")],
        input=json.dumps(w),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


@pytest.mark.parametrize("name", list(workloads.WORKLOADS))
def test_simserve_schedules_every_step_as_vllm_does(name):
    w = workloads.make(name)
    theirs = vllm_steps(w)
    ours = workloads.run_simserve(w)
    assert workloads.compare(ours, theirs) == []
    # the workloads exercise what they are named for: hundreds of steps, several prefills in one step, and
    # preemption everywhere but in the light one
    assert len(ours) >= 800 and max(sum(c > 1 for c in s["tokens"].values()) for s in ours) > 1
    preemptions = sum(len(s["preempted"]) for s in ours)
    assert (preemptions > 0) == (name != "light")


@pytest.mark.parametrize("name", list(workloads.PREFIX_WORKLOADS))
def test_prefix_caching_schedules_and_hits_as_vllm_does(name):
    """Prefix caching on both sides (real token ids realise the shared streams for vLLM): the same batches,
    preemptions, and tokens found cached by every newly admitted request, step by step."""
    w = workloads.make(name)
    theirs = vllm_steps(w)
    ours = workloads.run_simserve(w)
    assert workloads.compare(ours, theirs) == []
    # hits, misses and preemptions all happen: the cache is doing work, and under pressure
    cached = [c for s in ours for c in s.get("cached", {}).values()]
    assert len(ours) >= 1000 and sum(c > 0 for c in cached) > 300 and sum(c == 0 for c in cached) > 0
    assert sum(len(s["preempted"]) for s in ours) > 0


def test_prefix_caching_changes_the_schedule():
    """The prefix workloads are not scheduled the same with the cache off: the comparison tests the cache."""
    w = workloads.make("shared")
    off = workloads.run_simserve({**w, "prefix_caching": False})
    on = workloads.run_simserve(w)
    assert len(on) < len(off)


def test_the_comparison_sees_a_difference():
    """A schedule that differs in one token count, or in one preemption, is reported."""
    w = workloads.make("tight")
    ours = workloads.run_simserve(w)
    k = next(i for i, s in enumerate(ours) if len(s["tokens"]) > 1)
    changed = [dict(s) for s in ours]
    rid = next(iter(changed[k]["tokens"]))
    changed[k] = {"tokens": {**changed[k]["tokens"], rid: changed[k]["tokens"][rid] + 1}, "preempted": []}
    assert len(workloads.compare(ours, changed)) == 1
    j = next(i for i, s in enumerate(ours) if s["preempted"])
    changed = [dict(s) for s in ours]
    changed[j] = {"tokens": ours[j]["tokens"], "preempted": []}
    assert workloads.compare(ours, changed) == [
        f"step {j}: simserve {workloads._normal(ours[j])}, vLLM {workloads._normal(changed[j])}"
    ]


@pytest.mark.parametrize("name", list(workloads.SPEC_WORKLOADS))
def test_speculative_decoding_schedules_as_vllm_does(name):
    """vLLM's Scheduler with a SpeculativeConfig, fed the accepted drafts simserve drew and K new drafts per
    request that sampled: the same tokens (drafts included), drafts, KV blocks, free blocks and
    preemptions."""
    w = workloads.make(name)
    theirs = vllm_steps(w)
    ours = workloads.run_simserve(w)
    assert workloads.compare(ours, theirs) == []
    assert sum(sum(s.get("spec", {}).values()) for s in ours) > 10000  # drafts verified, step after step
    k = w["spec"]["k"]
    if name == "spec-heavy":  # memory binds
        assert sum(len(s["preempted"]) for s in ours) > 0
    if name in ("spec-ngram", "spec-maxlen"):  # verifications cut short (threshold, max length)
        assert any(0 < v < k for s in ours for v in s.get("spec", {}).values())


def test_the_speculative_comparison_sees_the_lookahead():
    """Without EAGLE's lookahead slots the blocks held differ: the comparison checks them."""
    w = workloads.make("spec-light")
    ours = workloads.run_simserve(w)
    without = workloads.run_simserve({**w, "spec": {**w["spec"], "lookahead": 0}})
    assert workloads.compare(ours, without) != []
