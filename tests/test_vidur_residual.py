"""benchmarks/vidur_residual.py: Vidur's batch-time formula rebuilt from its tables, and the timers it swaps
in.

The formula is checked by hand on a tiny prediction table (no Vidur needed). With SIMSERVE_VIDUR_TESTS=1 and
.venv-vidur/ built (`python benchmarks/vs_vidur.py --quick`), a short end-to-end run also checks that the
rebuilt formula reproduces every batch time Vidur recorded and that simserve driven by it reproduces Vidur's
requests, and that Vidur 0.0.26 still crashes on a preempted request.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import vidur_residual as vres  # noqa: E402
import vidur_runner as vr  # noqa: E402

from simserve.sim.testing import LinearTimer  # noqa: E402


def _tables() -> dict:
    """A prediction table in the shape the epilogue dumps: {op: [[key..., ms], ...]}."""
    tok = {
        op: [[t, 0.001 * t + (1.0 if op == "mlp_up_proj" else 0.0)] for t in range(0, 1025, 8)]
        for op in vres.VidurTimer.TOKEN_OPS
    }
    dec = [[b, kv, 10.0 * b + kv / 256] for b in range(1, 9) for kv in range(0, 4097, 256)]
    pre = [[kv, c, kv / 256 + 100.0 * c / 32] for kv in range(0, 4097, 256) for c in range(32, 1025, 32)]
    return {**tok, "attn_decode": dec, "attn_prefill": pre}


def test_vidur_timer_rounds_as_vidur_does():
    t = vres.VidurTimer(_tables(), layers=2, prefix_key=True)
    # 3 decodes with contexts 300, 301, 302: Vidur counts one more (mean 302), rounded up to 512;
    # T = 3 tokens, rounded up to 8: nine ops at 0.008 ms plus up_proj's 1 ms
    tok, att = t.split([], [300, 301, 302])
    assert tok == pytest.approx(2 * (9 * 0.008 + 1.0) / 1e3)
    assert att == pytest.approx(2 * (30.0 + 512 / 256) / 1e3)
    # a 100-token chunk after a 700-token prefix: key (768, 128) with the prefix key, (1024, 128) as shipped
    _, att = t.split([(100, 700)], [])
    assert att == pytest.approx(2 * (768 / 256 + 100.0 * 128 / 32) / 1e3)
    shipped = vres.VidurTimer(_tables(), layers=2, prefix_key=False)
    assert shipped.split([(100, 700)], [])[1] == pytest.approx(2 * (1024 / 256 + 400.0) / 1e3)
    # a one-token chunk is a decode to Vidur (q == 1): it joins the decode group with kv = prefix + 1
    _, att = t.split([(1, 511)], [300])
    assert att == pytest.approx(2 * (20.0 + 512 / 256) / 1e3)


def test_partial_timer_takes_the_other_part_from_simserve():
    class Split(LinearTimer):
        def breakdown(self, prefills, decode_kv, stage=0):
            return {"linear": 0.5, "attention_prefill": 0.25, "attention_decode": 0.0}

    other = Split(0.0, 0.0, 0.0)
    full = vres.VidurTimer(_tables(), 2, True)
    tok, att = full.split([(64, 0)], [])
    assert vres.VidurTimer(_tables(), 2, True, ("token",), other)([(64, 0)], []) == pytest.approx(tok + 0.25)
    assert vres.VidurTimer(_tables(), 2, True, ("attention",), other)([(64, 0)], []) == pytest.approx(
        0.5 + att
    )
    with pytest.raises(ValueError):
        vres.VidurTimer(_tables(), 2, True, ("token",))


def test_batch_kinds_and_scaling():
    assert vres.batch_kind([], 12) == "decode-only"
    assert vres.batch_kind([(500, 0)], 12) == "prefill-heavy"
    assert vres.batch_kind([(10, 0)], 100) == "mixed"
    base = LinearTimer(0.01, 1e-4, 0.0)
    scaled = vres.ScaledTimer(base, {"decode-only": 0.5, "mixed": 1.0, "prefill-heavy": 2.0})
    assert scaled([(500, 0)], [10]) == pytest.approx(2 * base([(500, 0)], [10]))
    assert scaled([], [10, 20]) == pytest.approx(0.5 * base([], [10, 20]))


def test_vidur_patches_compile():
    compile(vres._PRELUDE, "prelude", "exec")
    compile(vres._EPILOGUE, "epilogue", "exec")


needs_vidur = pytest.mark.skipif(
    os.environ.get("SIMSERVE_VIDUR_TESTS") != "1" or not (vr.VENV / ".simserve-vidur").exists(),
    reason=(
        "runs Vidur: set SIMSERVE_VIDUR_TESTS=1 after `python benchmarks/vs_vidur.py --quick` built "
        ".venv-vidur"
    ),
)


@needs_vidur
def test_simserve_with_vidur_batch_times_reproduces_vidur(tmp_path):
    b = replace(vres.vs.Bench(), num_requests=200, qps=(2.0,), policies=("sarathi",))
    report = vres.residual(b, vr.ensure_venv(), tmp_path)
    assert report["rebuild_max_rel_err"] < 1e-12  # the rebuilt formula is Vidur's, batch by batch
    assert (
        max(report["same_requests_max_abs_s"].values()) < 1e-9
    )  # and the schedulers agree request by request


@needs_vidur
def test_vidur_0_0_26_crashes_on_a_preempted_request(tmp_path):
    b = replace(vres.vs.Bench(), num_requests=300, qps=(2.0,), policies=("sarathi",))
    out = vres.preemption_crash(b, vr.ensure_venv(), tmp_path, num_blocks=600)
    assert out["crashed"] and "num_stage_processed_tokens <= self.total_tokens" in "\n".join(out["traceback"])
