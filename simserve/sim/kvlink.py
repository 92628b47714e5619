"""The link a disaggregated deployment moves KV caches over, from the catalog: NVLink or PCIe inside one node,
the network between nodes (RDMA InfiniBand or Ethernet), and what one transfer of a prompt's KV costs on it.

A transfer takes `latency + bytes / bandwidth` and holds the link for `bytes / bandwidth` (the latency is the
fabric's flight time: the next transfer can start streaming meanwhile). Bandwidth is what NCCL reaches on the
link (the catalog's bus bandwidth, per GPU inside a node, per node across nodes): NIXL's UCX/RDMA transports
move whole KV blocks, large messages that reach the same line-rate fraction. Inside one node each GPU has its
own NVLink (or PCIe) port and the KV is sharded over the replica's GPUs, so min(prefill GPUs, decode GPUs)
ports carry a transfer in parallel; across nodes the catalog's networks are one NIC per node, so one lane.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from simserve.catalog import NETWORKS
from simserve.deployment import Deployment
from simserve.errors import SimserveError
from simserve.memory import kv_bytes_per_token
from simserve.profiling.nccl import STEP_LATENCY_US

INTRA_NODE = ("nvlink", "pcie")


@dataclass(frozen=True)
class KVLink:
    name: str  # nvlink | pcie | a network of the catalog
    gbps: float  # GB/s one transfer streams at (all its lanes together)
    latency_s: float  # one-way latency added to every transfer
    lanes: int
    source: str

    def occupancy_s(self, nbytes: float) -> float:
        """How long one transfer holds the link."""
        return nbytes / (self.gbps * 1e9)

    def seconds(self, nbytes: float) -> float:
        """One transfer on an idle link: latency + bytes / bandwidth."""
        return self.latency_s + self.occupancy_s(nbytes)

    def describe(self) -> str:
        lanes = f" × {self.lanes} lanes" if self.lanes > 1 else ""
        return f"{self.name} ({self.gbps / self.lanes:g} GB/s{lanes}, {self.latency_s * 1e6:g} µs)"


def kv_bytes_per_prompt_token(dep: Deployment) -> int:
    """The whole model's KV of one token (every layer and KV head once): what moves from prefill to decode."""
    return kv_bytes_per_token(replace(dep, tp=1, pp=1))


def resolve_link(
    prefill: Deployment, prefill_replicas: int, decode: Deployment, decode_replicas: int, name: str | None
) -> KVLink:
    """The link between the pools: `name` (nvlink, pcie, or a network), or by default the node's own fabric
    when both pools fit in one node of the same box. SimserveError naming the layout when the catalog has no
    link."""
    lanes = min(prefill.num_gpus, decode.num_gpus)
    gpus = prefill.num_gpus * prefill_replicas + decode.num_gpus * decode_replicas
    layout = (
        f"{prefill_replicas}×TP{prefill.tp}PP{prefill.pp} {prefill.gpu.name} (prefill) + "
        f"{decode_replicas}×TP{decode.tp}PP{decode.pp} {decode.gpu.name} (decode)"
    )
    networks = ", ".join(n.name for n in NETWORKS)
    one_node = (
        prefill.gpu.name == decode.gpu.name
        and prefill.node is not None
        and prefill.node == decode.node
        and gpus <= prefill.node.gpus_per_node
    )
    if name is None or name in INTRA_NODE:
        if not one_node:
            where = (
                f"needs {gpus} GPUs, more than one {prefill.node.name} node holds "
                f"({prefill.node.gpus_per_node})"
                if prefill.node is not None and prefill.node == decode.node
                else "puts the pools in different nodes"
            )
            given = f"--kv-link {name} joins GPUs inside one node, but " if name else ""  # it was asked for
            raise SimserveError(
                f"{given}the disaggregated layout {layout} {where}, and the catalog has no link for the KV "
                f"transfer between them: name the network with --kv-link ({networks})"
            )
        node = prefill.node
        medium = name or ("nvlink" if node.kind == "nvswitch" else "pcie")
        if medium == "nvlink" and node.kind != "nvswitch":
            raise SimserveError(
                f"--kv-link nvlink: {node.name} is a {node.kind} box, not every GPU pair has NVLink; "
                f"use --kv-link pcie"
            )
        bus = node.nvlink_bus_gbps if medium == "nvlink" else node.pcie_bus_gbps
        lat = STEP_LATENCY_US[medium][("ring", "Simple")]
        return KVLink(
            medium,
            bus * lanes,
            lat * 1e-6,
            lanes,
            f"{node.name} {medium} bus bandwidth per GPU (catalog: {node.source}); latency NCCL's "
            f"Simple-protocol step over {medium} (tuning.cc hwLat)",
        )
    net = NETWORKS.get(name)
    return KVLink(net.name, net.bus_gbps, net.latency_us * 1e-6, 1, f"catalog network: {net.source}")
