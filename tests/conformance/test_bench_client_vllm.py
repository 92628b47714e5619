"""simserve's `vllm bench serve` datasets and send times against vLLM 0.33.0's own functions.

vLLM's `get_sampling_params` (random dataset) and `get_request` (the client's send times) run in the vLLM
environment (bench_client_driver.py); simserve must give the same lengths and the same send times, bit for
bit. Without that environment the test skips and says how to build it.
"""

from __future__ import annotations

import json
import math
import subprocess

import numpy as np
import pytest
from test_vllm_conformance import HERE, VLLM_PYTHON

from simserve.vllm_worker import capture_sizes
from simserve.workload import arrival_times
from simserve.workload.bench_datasets import random_lengths

CASES = [
    {"seed": s, "n": n, "ratio": r, "input_len": i, "output_len": o, "rate": q, "burstiness": b}
    for s, n, r, i, o, q, b in [
        (0, 1000, 0.0, 1024, 128, 4.0, 1.0),
        (1, 500, 0.1, 2048, 256, 12.5, 1.0),
        (2, 300, 0.5, 100, 20, 1.0, 0.5),
        (3, 64, 0.9, 8000, 1000, 100.0, 4.0),
        (42, 2000, 0.25, 512, 64, "inf", 1.0),
    ]
]


def test_lengths_and_send_times_are_vllms():
    if not VLLM_PYTHON.exists():
        pytest.skip(f"no vLLM 0.33.0 environment at {VLLM_PYTHON}: build it with `bash tools/vllm_env.sh`")
    proc = subprocess.run(
        [str(VLLM_PYTHON), str(HERE / "bench_client_driver.py")],
        input=json.dumps(CASES),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    for case, theirs in zip(CASES, json.loads(proc.stdout), strict=True):
        prompt, output = random_lengths(
            case["n"], case["seed"], case["input_len"], case["output_len"], case["ratio"]
        )
        assert (prompt - 1).tolist() == theirs["inputs"]  # simserve adds back the BOS the server adds
        assert output.tolist() == theirs["outputs"]
        rate = float(case["rate"])
        cv = 1 / math.sqrt(case["burstiness"])
        ours = arrival_times(case["n"], rate, "vllm-bench", seed=case["seed"], cv=cv)
        assert np.array_equal(ours, np.array(theirs["sends"])), case


# (max_num_seqs, max_num_batched_tokens, compute capability): the per-GPU defaults and edges
CUDAGRAPH_CASES = [
    (256, 2048, 80),
    (1024, 8192, 90),
    (1024, 16384, 100),
    (8, 2048, 80),
    (256, 100, 80),
    (300, 4096, 90),
    (1, 1, 80),
    (128, 512, 86),
    (600, 700, 100),
    (64, 8192, 103),
]


def test_cudagraph_capture_sizes_are_vllms():
    if not VLLM_PYTHON.exists():
        pytest.skip(f"no vLLM 0.33.0 environment at {VLLM_PYTHON}: build it with `bash tools/vllm_env.sh`")
    proc = subprocess.run(
        [str(VLLM_PYTHON), str(HERE / "cudagraph_driver.py")],
        input=json.dumps(CUDAGRAPH_CASES),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    for case, theirs in zip(CUDAGRAPH_CASES, json.loads(proc.stdout), strict=True):
        assert list(capture_sizes(*case)) == theirs, case
