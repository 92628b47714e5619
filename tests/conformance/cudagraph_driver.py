"""Run inside the vLLM 0.33.0 environment: `VllmConfig._set_cudagraph_sizes` on cases read from stdin.

Each case is [max_num_seqs, max_num_batched_tokens, compute capability × 10]; the method runs on a stand-in
config holding only what it reads (a real CompilationConfig in FULL_AND_PIECEWISE mode, the scheduler's two
limits, no speculative decoding), with the platform's Blackwell check answered from the case. Prints JSON: the
capture sizes per case.
"""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

import vllm.platforms as platforms
from vllm.config.compilation import CompilationConfig, CUDAGraphMode
from vllm.config.vllm import VllmConfig


def capture_sizes(max_num_seqs: int, max_num_batched_tokens: int, capability: int) -> list[int]:
    platforms.current_platform.is_device_capability_family = lambda family, device_id=0: (
        capability // 10 == family // 10
    )
    compilation = CompilationConfig()
    compilation.cudagraph_mode = CUDAGraphMode.FULL_AND_PIECEWISE
    config = SimpleNamespace(
        model_config=SimpleNamespace(enforce_eager=False),
        compilation_config=compilation,
        scheduler_config=SimpleNamespace(
            max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens
        ),
        uniform_decode_query_len=1,
        speculative_config=None,
        performance_mode="balanced",
    )
    VllmConfig._set_cudagraph_sizes(config)
    return list(compilation.cudagraph_capture_sizes)


json.dump([capture_sizes(*case) for case in json.load(sys.stdin)], sys.stdout)
