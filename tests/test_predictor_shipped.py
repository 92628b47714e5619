"""The predictor on the profiles shipped in profiles/ (written by `simserve profile`): the paper's
deployments."""

from __future__ import annotations

import pytest

from simserve.deployment import Deployment
from simserve.predictor import default_profiles_root, fit, load_timer
from simserve.profiling.schema import profile_dir

# The Sarathi-Serve paper's deployments and strict P99 TBT SLOs (GUIDE.md). The SLO was set at 5× the decode
# iteration time of batch 32 at ~4k context, so our iteration time there should land near SLO / 5.
PAPER = [
    (("mistral-7b", "a100", 1, 1), 0.1),
    (("yi-34b", "a100", 2, 1), 0.2),
    (("llama2-70b", "a40", 4, 2), 1.0),
    (("falcon-180b", "a100", 4, 2), 1.0),
]


def shipped(model: str, gpu: str) -> bool:
    dep = Deployment.create(model, gpu)
    return (profile_dir(default_profiles_root(), dep.gpu.name, dep.model.name) / "linear.csv").exists()


@pytest.mark.parametrize(("spec", "slo"), PAPER, ids=[s[0][0] for s in PAPER])
def test_paper_deployment_decode_iteration(spec, slo, monkeypatch, tmp_path):
    model, gpu, tp, pp = spec
    if not shipped(model, gpu):
        pytest.skip(f"no shipped profile for {model} on {gpu} yet (run `simserve profile`)")
    monkeypatch.setenv("SIMSERVE_CACHE", str(tmp_path))
    dep = Deployment.create(model, gpu, tp=tp, pp=pp)
    timer = load_timer(dep)
    # One decode step of batch 32 at 4k context passes through every stage: a token's gap is the stages' sum.
    step = sum(timer([], [4096] * 32, stage=s) for s in range(pp))
    # Loose bounds: the roofline backend is not the paper's testbed. For the PP deployments our kernel-level
    # step is well under SLO/5 (0.4-0.5×: docs/predictor.md), so only the upper bound is checked there.
    assert step < 1.6 * slo / 5, (step, slo / 5)
    if pp == 1:
        assert step > 0.6 * slo / 5, (step, slo / 5)
    assert timer([(257, 0)], [], stage=0) > 1.1 * timer([(256, 0)], [], stage=0)


def test_held_out_error_on_a_shipped_profile():
    if not shipped("mistral-7b", "a100"):
        pytest.skip(
            "no shipped Mistral-7B profile yet (run `simserve profile --gpu a100 --model mistral-7b`)"
        )
    path = profile_dir(default_profiles_root(), "A100-80GB", "Mistral-7B")
    predictor = fit(path, use_cache=False)
    assert (predictor.summary["mape_pct"] < 5.0).all(), predictor.summary
