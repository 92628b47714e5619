"""simserve's `sglang` policy against SGLang 0.5.23's own scheduler, closed loop, step by step.

SGLang's side runs in its own virtual environment (tools/sglang_env.sh builds it; the path comes from
SIMSERVE_SGLANG_PYTHON, default .venv-sglang/bin/python in the repository root): its `Scheduler` stepped by
sglang_loop_driver.py, fed the same requests as simserve's SimPy reference (sglang_loop.py says what is
compared). CI runs the workloads in `sglang_loop.CI`; SIMSERVE_SGLANG_FULL=1 runs them all (`--full` of the
script). Without the environment the comparisons skip and say how to build it; a workload the driver cannot
express fails (exit 2), it is never skipped.
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
import sglang_loop as sl  # noqa: E402

ROOT = HERE.parent.parent
SGLANG_PYTHON = Path(os.environ.get("SIMSERVE_SGLANG_PYTHON", ROOT / ".venv-sglang" / "bin" / "python"))
NAMES = (
    [*sl.WORKLOADS, *sl.PREFIX_WORKLOADS, *sl.SPEC_WORKLOADS]
    if os.environ.get("SIMSERVE_SGLANG_FULL") == "1"
    else list(sl.CI)
)


@pytest.fixture(scope="module")
def sglang_runs() -> dict[str, list[dict]]:
    if not SGLANG_PYTHON.exists():
        pytest.skip(
            f"no SGLang 0.5.23 environment at {SGLANG_PYTHON}: build it with `bash tools/sglang_env.sh`"
        )
    return dict(zip(NAMES, sl.sglang_steps(str(SGLANG_PYTHON), [sl.make(n) for n in NAMES]), strict=True))


# what each workload is there for, as a check on what it exercised (sglang_loop.counts)
def _exercised(name: str, c: dict, stats: dict) -> None:
    # (EAGLE's verifications give several tokens a step: its workloads count verifications below)
    assert (c["steps"] >= 1000 or name in sl.SPEC_WORKLOADS) and c["admissions"] >= 190
    if not name.startswith(("chunk256-eos", "spec-light")):  # there the chunk, not memory, bounds each step
        assert c["full"] > 100
    if name.startswith("chunk256"):
        assert c["chunked"] > 1000  # nearly every step continues a cut prompt
    if name.startswith(
        ("mixed", "ignore-eos-paged", "eos-mix-mixed", "chunk256-eos", "burst-eos", "tiny-pool-p")
    ):
        assert c["mixed steps"] > 100
    if (
        name.startswith(("tiny-pool", "mixed-heavy", "retract", "chat-retract", "shared-retract"))
        and "eos" not in name
    ):
        assert c["retracting steps"] > 0 and c["ratio"][1] - c["ratio"][0] > 0.3  # decays, jumps back up
    if name == "retract-many":
        assert c["retracted"] > c["retracting steps"]  # several retracted in one step
    if name.startswith("burst"):
        assert c["most in a step"] >= 5
    if name in sl.PREFIX_WORKLOADS:
        assert c["hits"] > 30 and stats["evicted pages"] > 0
    if name in sl.SPEC_WORKLOADS:  # EAGLE: verification steps that accept some drafts and reject others
        assert (
            stats["verifications"] > 1000
            and 0 < stats["accepted"] < stats["verifications"] * sl.make(name)["spec"]
        )
    if name.startswith("spec-retract"):  # each request's reserve past its committed tokens runs the pool out
        assert c["retracting steps"] > 0


@pytest.mark.parametrize("name", NAMES)
def test_simserve_steps_as_sglang_does_closed_loop(name, sglang_runs):
    """Every step alike: the prefill batch (requests, extend lengths, in batch order), the decodes (with
    EAGLE: the verifications), the requests retracted (in order) and aborted, the chunked request,
    batch_is_full, new_token_ratio, the KV pool's free and evictable tokens (with EAGLE: each request's
    over-allocation for its next verification held), and with the radix cache the tokens each admission found
    cached."""
    w = sl.make(name)
    stats: dict = {}
    ours = sl.run_simserve(w, stats)
    assert sl.compare(ours, sglang_runs[name]) == []
    _exercised(name, sl.counts(ours), stats)


def test_mixed_ignore_eos_workloads_mix_both_kinds():
    """The eos-mix workloads send some requests with ignore_eos and some without (both admission paths)."""
    for name in ("eos-mix", "eos-mix-mixed-paged"):
        eos = sl.make(name)["ignore_eos"]
        assert 0.3 < sum(eos) / len(eos) < 0.7


def test_the_comparison_sees_a_difference():
    """A step that differs in one field (a flag, a token count, a retraction) is reported, naming it."""
    ours = sl.run_simserve(sl.make("mixed-heavy"))
    k = next(i for i, s in enumerate(ours) if s["full"])
    changed = [dict(s) for s in ours]
    changed[k]["full"] = False
    assert sl.compare(ours, changed) == [f"step {k}: full: simserve True SGLang False"]
    j = next(i for i, s in enumerate(ours) if s.get("prefills"))
    changed = [dict(s) for s in ours]
    changed[j]["prefills"] = [[rid, c + 1] for rid, c in ours[j]["prefills"]]
    assert len(sl.compare(ours, changed)) == 1 and "prefills" in sl.compare(ours, changed)[0]
    r = next(i for i, s in enumerate(ours) if s["retracted"])
    changed = [dict(s) for s in ours]
    changed[r]["retracted"] = []
    assert len(sl.compare(ours, changed)) == 1 and "retracted" in sl.compare(ours, changed)[0]


@pytest.mark.parametrize(
    "field, value, named",
    [
        ("schedule_policy", "dfs-weight", "'schedule_policy'"),
        ("priority", 1, "'priority'"),
        ("ignore_eos", None, "'ignore_eos'"),
        ("chunk", 1000, "'chunk'"),
    ],
)
def test_a_workload_the_driver_cannot_express_exits_2_naming_the_field(field, value, named):
    """Checked before SGLang is imported: any Python with numpy runs this check (here simserve's)."""
    w = sl.make("burst") | {"page_size": 16}
    w[field] = value if field != "ignore_eos" else [True] * (len(w["prompt"]) - 1)
    proc = subprocess.run(
        [sys.executable, str(sl.DRIVER)], input=json.dumps([w]), capture_output=True, text=True, check=False
    )
    assert proc.returncode == 2 and proc.stdout == ""
    line = proc.stderr.strip()
    assert "\n" not in line and named in line and "Traceback" not in line
    with pytest.raises(RuntimeError, match=f"exited 2: .*{named}"):
        sl.sglang_steps(sys.executable, [w])


def test_simserve_refuses_a_pool_it_cannot_express():
    from simserve.errors import SimserveError

    with pytest.raises(SimserveError, match="'kv_tokens'"):
        sl.run_simserve(sl.make("burst") | {"kv_tokens": 1000})
