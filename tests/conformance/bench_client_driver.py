"""Run inside the vLLM 0.33.0 environment: vLLM's own benchmark-client functions on cases read from stdin.

For each case, `get_sampling_params` (the random dataset's lengths, a stub tokenizer with one special token)
and `get_request` (the send times, its clock and sleep stubbed so no time passes) after `np.random.seed`, as
`vllm bench serve`'s main_async seeds it. Prints JSON: one {"inputs", "outputs", "sends"} per case.
"""

from __future__ import annotations

import asyncio
import json
import sys

import numpy as np
import vllm.benchmarks.serve as serve
from vllm.benchmarks.datasets.utils import get_sampling_params


class Tokenizer:  # what get_sampling_params asks of a tokenizer
    vocab_size = 32000

    def num_special_tokens_to_add(self) -> int:
        return 1


clock = [0.0]


class Clock:
    @staticmethod
    def time() -> float:
        return clock[0]

    perf_counter = time


async def sleep(seconds: float) -> None:
    clock[0] += seconds


serve.time = Clock
serve.asyncio.sleep = sleep


async def sends(n: int, rate: float, burstiness: float, seed: int) -> list[float]:
    np.random.seed(seed)
    clock[0] = 0.0
    out = []
    async for _request, _rate in serve.get_request(list(range(n)), rate, burstiness):
        out.append(clock[0])
    return out


results = []
for case in json.load(sys.stdin):
    inputs, outputs, _ = get_sampling_params(
        np.random.default_rng(case["seed"]),
        case["n"],
        case["ratio"],
        case["input_len"],
        case["output_len"],
        Tokenizer(),
    )
    rate = float(case["rate"])
    results.append(
        {
            "inputs": inputs.tolist(),
            "outputs": outputs.tolist(),
            "sends": asyncio.run(sends(case["n"], rate, case["burstiness"], case["seed"])),
        }
    )
json.dump(results, sys.stdout)
