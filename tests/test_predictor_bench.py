"""pytest-benchmark of the BatchTimer hot path (disabled in CI by --benchmark-disable; run with
`pytest tests/test_predictor_bench.py --benchmark-enable`). Never asserts on time."""

from __future__ import annotations

import numpy as np
import pytest

from simserve.deployment import Deployment
from simserve.predictor import fit
from simserve.predictor import synthetic as syn


@pytest.fixture(scope="module")
def timer(tmp_path_factory):
    path = syn.write_synthetic_profile(tmp_path_factory.mktemp("p"), tps=(1,), network=None, max_len=4096)
    return fit(path, use_cache=False).compile(Deployment.create("mistral-7b", "a100"))


def test_bench_call_mixed_batch(benchmark, timer):
    kv = np.random.default_rng(0).integers(100, 8000, 100).tolist()
    result = benchmark(timer, [(512, 1000)], kv)
    assert result > 0
