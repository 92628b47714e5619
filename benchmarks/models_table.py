"""Iteration times and memory of today's models under the roofline backend: the numbers in docs/models.md.

    python benchmarks/models_table.py  # writes roofline profiles into a temporary folder, prints a table

For each deployment: weights and KV per GPU, KV blocks, and the simulated time of three batches on the stage:
one decode (batch 1 at 512 tokens of context), a decode batch (32 requests at 4096), and a 2048-token prefill
chunk. Analytic numbers (spec-sheet peaks, A100-calibrated efficiencies), not measurements.
"""

from __future__ import annotations

import argparse
import tempfile

from simserve.deployment import Deployment
from simserve.memory import GIB, kv_bytes_per_token, plan_memory, profile_tokens, weights_bytes_per_gpu
from simserve.predictor import load_timer
from simserve.profiling.roofline import profile
from simserve.profiling.schema import profile_dir, write_profile

CASES = [  # (model, gpu, tp, ep, dtype, kv dtype)
    ("llama-3.1-8b", "h100", 1, 1, "bf16", "bf16"),
    ("llama-3.1-8b", "h100", 1, 1, "fp8", "fp8"),
    ("llama-3.1-8b", "a100", 1, 1, "fp8", "bf16"),
    ("llama-3.1-70b", "h100", 4, 1, "bf16", "bf16"),
    ("llama-3.1-70b", "h100", 4, 1, "fp8", "fp8"),
    ("mixtral-8x7b", "h100", 2, 1, "bf16", "bf16"),
    ("mixtral-8x7b", "h100", 2, 2, "bf16", "bf16"),
    ("mixtral-8x7b", "a100", 1, 1, "fp8", "bf16"),
    ("qwen3-235b-a22b", "h100", 4, 4, "fp8", "bf16"),
    ("qwen3-235b-a22b", "h100", 8, 8, "fp8", "fp8"),
    ("deepseek-v3", "h200", 8, 8, "fp8", "bf16"),
]


def main() -> None:
    argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    ).parse_args()
    root = tempfile.mkdtemp(prefix="simserve-models-")
    print(
        "| deployment | weights GiB/GPU | KV KiB/token/GPU | KV blocks | decode b1@512 ms | decode b32@4k "
        "ms | prefill 2048 ms |"
    )
    print("|---|---|---|---|---|---|---|")
    for model, gpu, tp, ep, dtype, kv in CASES:
        dep = Deployment.create(model, gpu, tp, 1, max_model_len=8192, dtype=dtype, kv_dtype=kv, ep=ep)
        path = profile_dir(root, dep.gpu.name, dep.profile_model)
        if not (path / "linear.csv").exists():
            tables, fields = profile(
                dep.model, dep.gpu, [tp], dep.node, None, 8192, 8192, quick=True, dtype=dtype, kv_dtype=kv
            )
            write_profile(path, tables, {"backend": fields.get("backend", "roofline"), **fields})
        timer = load_timer(dep, root, cache=False)
        mem = plan_memory(dep, profile_tokens("sarathi", 8192, 2048, 128))
        b1 = timer([], [512]) * 1e3
        b32 = timer([], [4096] * 32) * 1e3
        pre = timer([(2048, 0)], []) * 1e3
        print(
            f"| {dep.describe()} | {weights_bytes_per_gpu(dep) / GIB:.1f} | "
            f"{kv_bytes_per_token(dep) / 1024:.1f} | {mem.num_blocks} | {b1:.2f} | {b32:.2f} | {pre:.1f} |"
        )


if __name__ == "__main__":
    main()
