"""simserve's `sglang` policy against SGLang 0.5.23's own prefill admission, decision by decision.

SGLang's code runs in its own virtual environment (tools/sglang_env.sh builds it; the path comes from
SIMSERVE_SGLANG_PYTHON, default .venv-sglang/bin/python in the repository root): from simserve's state at
every step, its `PrefillAdder` / `PrefillBudget` and the scheduler's loop around them (sglang_driver.py) must
admit the same requests with the same extend lengths, leave the same request half-prefilled and mark the batch
full alike, and its `ScheduleBatch.retract_decode` must retract the same requests in the same order and
estimate the same new_token_ratio (sglang_workloads.py says what is and is not compared). Without that
environment the test skips and says how to build it. An open-loop diagnostic beside the closed-loop check
(test_sglang_loop.py), run with SIMSERVE_SGLANG_FULL=1 only (not in CI).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import sglang_workloads as sw  # noqa: E402

ROOT = HERE.parent.parent
SGLANG_PYTHON = Path(os.environ.get("SIMSERVE_SGLANG_PYTHON", ROOT / ".venv-sglang" / "bin" / "python"))


def decisions(name: str):
    if not SGLANG_PYTHON.exists():
        pytest.skip(
            f"no SGLang 0.5.23 environment at {SGLANG_PYTHON}: build it with `bash tools/sglang_env.sh`"
        )
    if os.environ.get("SIMSERVE_SGLANG_FULL") != "1":  # CI runs the closed loop (test_sglang_loop.py) only
        pytest.skip("the open-loop diagnostic runs with SIMSERVE_SGLANG_FULL=1 (the closed loop covers it)")
    states, ours, counts = sw.run_simserve(sw.make(name))
    return states, ours, sw.sglang_decisions(str(SGLANG_PYTHON), states), counts


@pytest.mark.parametrize("name", ["light", "tight", "mixed", "paged", "retract"])
def test_simserve_admits_and_retracts_as_sglang_does(name):
    states, ours, theirs, counts = decisions(name)
    assert sw.compare(ours, theirs, states) == []
    # the workloads exercise what decides a step: several admissions, chunking, a full batch, retraction
    prefills = [(s, o) for s, o in zip(states, ours, strict=True) if "retract" not in s]
    assert counts["steps"] >= 1000 and max(len(o["admitted"]) for _, o in prefills) > 1
    assert sum(o["chunked"] is not None for _, o in prefills) > 5
    if name != "light":  # memory binds: admission stops short of the queue, and decode steps retract
        assert sum(o["full"] and bool(s["waiting"]) for s, o in prefills) > 100
        assert counts["retractions"] > 0 and len(states) - len(prefills) == counts["retractions"]


@pytest.mark.parametrize("name", ["ignore-eos", "ignore-eos-paged"])
def test_ignore_eos_without_the_radix_cache_admits_as_sglang_does(name):
    """SGLang 0.5.23 admits ignore_eos requests without the radix cache through add_one_req_ignore_eos (its
    look ahead over requests finishing); retraction does not happen here (whole outputs are held back)."""
    states, ours, theirs, counts = decisions(name)
    assert sw.compare(ours, theirs, states) == []
    assert counts["retractions"] == 0  # every decision below is a prefill decision
    assert counts["steps"] >= 1000 and max(len(o["admitted"]) for o in ours) > 1
    assert sum(o["chunked"] is not None for o in ours) > 5
    assert sum(o["full"] and bool(s["waiting"]) for s, o in zip(states, ours, strict=True)) > 100
