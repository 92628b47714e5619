"""Where a new replica reads its weights from, and how fast: measured load rates of the same model per store.

The rates are the Run:ai Model Streamer's published benchmark (run-ai/runai-model-streamer,
docs/src/benchmarks.md: meta-llama/Meta-Llama-3-8B in bf16, one safetensors file, loaded onto 4 x A10G of an
AWS g5.12xlarge, streamer 0.6.0): the time to the weights in GPU memory, so each rate is the whole path
(store, network, host, PCIe) as vLLM's `--load-format runai_streamer` sees it. One model on one machine:
another node's NIC or disks move them.
"""

from __future__ import annotations

from dataclasses import dataclass

from simserve.catalog.table import Table

_SOURCE = "run-ai/runai-model-streamer docs/src/benchmarks.md (Llama-3-8B bf16, g5.12xlarge, streamer 0.6.0)"


@dataclass(frozen=True)
class StorageSpec:
    name: str
    gib_per_s: float  # measured weights-to-GPU rate
    description: str
    source: str = _SOURCE
    aliases: tuple[str, ...] = ()


STORAGE = Table(
    "storage",
    [
        StorageSpec("gp3", 1.03, "AWS EBS gp3 volume (14.36 s for the model)"),
        StorageSpec("io2", 1.96, "AWS EBS io2 volume (7.6 s)"),
        StorageSpec("s3", 3.51, "AWS S3 object store (4.24 s)"),
        StorageSpec("weka", 4.28, "WEKA parallel file system (3.48 s)"),
        StorageSpec("vast", 2.57, "VAST Data file system (5.78 s)"),
    ],
)
DEFAULT_STORAGE = "s3"  # an autoscaled pod on a fresh node pulls from object storage
