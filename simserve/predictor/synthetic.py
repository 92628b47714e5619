"""A synthetic profile from closed-form kernel times, for tests and benchmarks that must not depend on a
profiler having run. It is NOT a hardware model (the roofline backend is): the constants are round numbers
chosen so that the features the predictor must keep are present and known exactly — a GEMM step at every
128-row tile, attention growing with context, alpha-beta collectives.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from simserve.catalog import NODES
from simserve.deployment import Deployment
from simserve.ops import attention_shape, elementwise_ops, linear_ops
from simserve.profiling import grid
from simserve.profiling.nccl import node_hops
from simserve.profiling.schema import profile_dir, write_profile

PEAK = 200e12  # FLOP/s
BW = 1.5e12  # B/s
KERNEL_MS = 0.005  # fixed cost of one kernel
LINK_GBPS = {"node": 100e9, "network": 10e9}
LINK_ALPHA_MS = {"node": 0.01, "network": 0.03}


def tile_rows(tokens: int) -> int:
    return max(tokens, 64) if tokens < 128 else math.ceil(tokens / 128) * 128


def linear_ms(flops_per_token: float, weight_bytes: float, tokens: int) -> float:
    return KERNEL_MS + 1e3 * max(flops_per_token * tile_rows(tokens) / PEAK, weight_bytes / BW)


def _rows(dep: Deployment, max_tokens: int, max_len: int) -> dict[str, list[dict]]:
    tables: dict[str, list[dict]] = {"linear": [], "elementwise": [], "attention": []}
    shape = attention_shape(dep)
    for t in grid.token_counts(max_tokens):
        for op in linear_ops(dep):
            ms = linear_ms(2.0 * op.in_features * op.out_features, 2.0 * op.in_features * op.out_features, t)
            tables["linear"].append({"op": op.name, "tp": dep.tp, "num_tokens": t, "time_ms": ms})
        for op in elementwise_ops(dep):
            ms = KERNEL_MS + 1e3 * t * op.bytes_per_token / BW
            tables["elementwise"].append({"op": op.name, "tp": dep.tp, "num_tokens": t, "time_ms": ms})
    kv_bytes_per_token = 2 * shape.kv_heads * shape.head_dim * 2
    for b in grid.decode_batch_sizes(256):
        for kv in grid.kv_lengths(max_len):
            ms = 2 * KERNEL_MS + 1e3 * b * kv * kv_bytes_per_token / BW
            row = {"phase": "decode", "tp": dep.tp, "batch_size": b, "chunk": 1, "kv_len": kv, "time_ms": ms}
            tables["attention"].append(row)
    for c in grid.prefill_chunks(max_len):
        for p in grid.prefill_prefixes(max_len):
            flops = 4.0 * shape.q_heads * shape.head_dim * c * (p + (c + 1) / 2)
            ms = 2 * KERNEL_MS + 1e3 * flops / (0.3 * PEAK)
            row = {"phase": "prefill", "tp": dep.tp, "batch_size": 1, "chunk": c, "kv_len": p, "time_ms": ms}
            tables["attention"].append(row)
    return tables


def _collectives(node: str, network: str | None, tps: Iterable[int]) -> list[dict]:
    rows = []
    # A box with NVLink pairs has a second kind of hop (`<node>:pcie`, see nccl.stage_hop); this closed-form
    # profile gives it the node's numbers, as it models no hardware.
    hops = [h.link for h in node_hops(NODES.get(node))] if node in NODES else [node]
    links = [(link, "node") for link in hops] + ([(network, "network")] if network else [])
    for link, kind in links:
        for s in grid.collective_sizes(2**30):
            rows.append(
                {
                    "op": "send_recv",
                    "link": link,
                    "num_workers": 2,
                    "size_bytes": s,
                    "time_ms": LINK_ALPHA_MS[kind] + 1e3 * s / LINK_GBPS[kind],
                }
            )
            if link not in (node, network):
                continue  # all-reduces are keyed by the node
            for n in sorted({t for t in tps if t > 1}):
                ms = LINK_ALPHA_MS[kind] + 1e3 * 2 * (n - 1) / n * s / LINK_GBPS[kind]
                rows.append(
                    {"op": "all_reduce", "link": link, "num_workers": n, "size_bytes": s, "time_ms": ms}
                )
    return rows


def write_synthetic_profile(
    root: str | Path,
    model: str = "mistral-7b",
    gpu: str = "a100",
    tps: Iterable[int] = (1, 2),
    network: str | None = "ethernet-100g",
    max_tokens: int = 4096,
    max_len: int = 8192,
) -> Path:
    """Write profiles/<gpu>/<model>/ under `root` with closed-form times; returns the profile directory."""
    tps = list(tps)
    deps = [Deployment.create(model, gpu, tp=tp) for tp in tps]
    tables: dict[str, list[dict]] = {"linear": [], "elementwise": [], "attention": []}
    for dep in deps:
        for name, rows in _rows(dep, max_tokens, max_len).items():
            tables[name] += rows
    node = deps[0].node.name if deps[0].node else "node"
    frames = {name: pd.DataFrame(rows) for name, rows in tables.items()}
    frames["collectives"] = pd.DataFrame(_collectives(node, network, tps))
    provenance = {
        "backend": "synthetic",
        "device": deps[0].gpu.name,
        "model": deps[0].model.name,
        "note": "closed-form test profile (simserve.predictor.synthetic), not a measurement",
    }
    return write_profile(profile_dir(root, deps[0].gpu.name, deps[0].model.name), frames, provenance)
