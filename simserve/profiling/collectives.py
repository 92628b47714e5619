"""Alpha-beta cost of NCCL collectives: t = α + k · S / (e · B) per interconnect.

Ring all-reduce over n GPUs moves k = 2(n−1)/n times the message through its slowest link in 2(n−1) steps, so
α = base + 2(n−1) · step. Inside an NVLink group the link is NVLink; a ring that leaves the group (a pairwise-NVLink
box with TP 4) is bottlenecked by PCIe. Send/recv moves the message once (k = 1). Bandwidths B come from the
catalog's spec sheets; the achieved fractions e and the latencies were calibrated on the measured A100 NCCL
profiles (Vidur, a100_pairwise_nvlink box) and are used unchanged for every node: see docs/execution-model.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from simserve.catalog import NetworkSpec, NodeSpec
from simserve.profiling import grid

# Calibrated on the measured a100_pairwise_nvlink all_reduce.csv (2 GPUs on NVLink, 4 GPUs across PCIe):
NCCL_ALLREDUCE_BASE_US = 30.0  # fixed cost of an all-reduce: launch, barrier, protocol setup
NCCL_RING_STEP_US = 4.6  # latency of one of the 2(n−1) ring steps
NVLINK_EFF = (
    0.65  # achieved fraction of spec NVLink bandwidth (190 GB/s bus bandwidth of 300 GB/s per direction)
)
PCIE_EFF = 0.74  # achieved fraction of spec PCIe Gen4 x16 (24 GB/s of 32 GB/s per direction)
# Calibrated on small messages of the measured a100_pairwise_nvlink send_recv.csv (2 KiB costs ~4-10 µs):
NCCL_P2P_MIN_US = 8.5  # fixed cost of one send/recv pair: median time of messages ≤ 64 KiB
# No measurement of an inter-node network is available: default to the PCIe fraction (NCCL over a NIC that sits
# on PCIe), plus the network's spec latency. An uncalibrated default; replace it when a measurement exists.
NETWORK_EFF = PCIE_EFF


@dataclass(frozen=True)
class CollectiveConstants:
    nccl_allreduce_base_us: float = NCCL_ALLREDUCE_BASE_US
    nccl_ring_step_us: float = NCCL_RING_STEP_US
    nvlink_eff: float = NVLINK_EFF
    pcie_eff: float = PCIE_EFF
    nccl_p2p_min_us: float = NCCL_P2P_MIN_US
    network_eff: float = NETWORK_EFF


COLLECTIVES = CollectiveConstants()


def node_link(node: NodeSpec, num_workers: int, c: CollectiveConstants = COLLECTIVES) -> tuple[float, float]:
    """(spec GB/s per direction, achieved fraction) of the slowest link a ring over `num_workers` GPUs uses."""
    if num_workers <= node.nvlink_group:
        return node.nvlink_gbps, c.nvlink_eff
    return node.pcie_gbps, c.pcie_eff


def all_reduce_ms(
    node: NodeSpec, num_workers: int, size_bytes, c: CollectiveConstants = COLLECTIVES
) -> np.ndarray:
    n = num_workers
    gbps, eff = node_link(node, n, c)
    alpha_us = c.nccl_allreduce_base_us + 2 * (n - 1) * c.nccl_ring_step_us
    k = 2 * (n - 1) / n
    return (alpha_us * 1e-6 + k * np.asarray(size_bytes, dtype=float) / (eff * gbps * 1e9)) * 1e3


def send_recv_ms(
    gbps: float, eff: float, size_bytes, extra_latency_us: float = 0.0, c: CollectiveConstants = COLLECTIVES
) -> np.ndarray:
    alpha_us = c.nccl_p2p_min_us + extra_latency_us
    return (alpha_us * 1e-6 + np.asarray(size_bytes, dtype=float) / (eff * gbps * 1e9)) * 1e3


def node_send_recv_ms(node: NodeSpec, size_bytes, c: CollectiveConstants = COLLECTIVES) -> np.ndarray:
    """A pipeline hop inside a node. Stage s sits on GPUs [s·tp, (s+1)·tp): unless every GPU of the box shares one
    NVLink domain (NVSwitch), the hop from GPU g to g + tp generally leaves its NVLink pair and crosses PCIe."""
    gbps, eff = (
        (node.nvlink_gbps, c.nvlink_eff)
        if node.nvlink_group >= node.gpus_per_node
        else (node.pcie_gbps, c.pcie_eff)
    )
    return send_recv_ms(gbps, eff, size_bytes, 0.0, c)


def network_send_recv_ms(
    network: NetworkSpec, size_bytes, c: CollectiveConstants = COLLECTIVES
) -> np.ndarray:
    return send_recv_ms(network.gbps, c.network_eff, size_bytes, network.latency_us, c)


def collectives_table(
    node: NodeSpec | None, network: NetworkSpec | None, tps: list[int], quick: bool = False,
    c: CollectiveConstants = COLLECTIVES,
) -> pd.DataFrame:  # fmt: skip
    """all_reduce rows for every TP degree above 1 on the node; send_recv rows on the node and the network."""
    sizes = np.array(grid.collective_sizes())
    if quick:
        sizes = sizes[::2]
    frames = []

    def rows(op: str, link: str, workers: int, times: np.ndarray) -> None:
        frames.append(pd.DataFrame({"op": op, "link": link, "num_workers": workers, "size_bytes": sizes,
                                    "time_ms": times}))  # fmt: skip

    if node is not None:
        for n in sorted({t for t in tps if t > 1}):
            rows("all_reduce", node.name, n, all_reduce_ms(node, n, sizes, c))
        rows("send_recv", node.name, 2, node_send_recv_ms(node, sizes, c))
    if network is not None:
        rows("send_recv", network.name, 2, network_send_recv_ms(network, sizes, c))
    if not frames:
        raise ValueError("collectives_table needs a node or a network")
    return pd.concat(frames, ignore_index=True)
