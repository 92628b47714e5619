"""Test-session settings.

Hypothesis draws the same examples on every run (derandomize): a property test that passes in CI passes on
every machine, and one that fails names an example anyone can rerun. `HYPOTHESIS_PROFILE=explore` draws fresh
random examples instead, to hunt for new counterexamples locally.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None)
settings.register_profile("explore")
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def moe_dp_timer(tmp_path_factory):
    """Mixtral-8x7B fp8 on H100 at TP 1, EP 2, two attention-DP ranks, from a quick roofline profile: the
    timer the DP lockstep tests (vLLM's and SGLang's) run on, built once per session."""
    from simserve.cli import main
    from simserve.deployment import Deployment
    from simserve.predictor.fit import fit

    root = tmp_path_factory.mktemp("profiles")
    main(
        [
            "profile",
            "--gpu",
            "h100",
            "--model",
            "mixtral-8x7b",
            "--tp",
            "1,2",
            "--dtype",
            "fp8",
            "--quick",
            "--max-model-len",
            "4096",
            "--max-tokens",
            "4096",
            "--out",
            str(root),
        ]
    )
    dep = Deployment.create("mixtral-8x7b", "h100", 1, ep=2, dtype="fp8", dp=2, max_model_len=4096)
    return fit(root / "h100-sxm" / "mixtral-8x7b-fp8", use_cache=False).compile(dep)
