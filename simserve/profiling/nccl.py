"""NCCL's own cost model for the collectives of LLM serving, driven by the box's topology.

NCCL picks, for every call, the (algorithm, protocol) pair its tuner predicts to be fastest:

    time = base latency + steps × per-step latency of the link + bytes / algorithm bandwidth

* algorithms: **ring** (all-reduce in 2(n−1) steps, all-gather and reduce-scatter in n−1, algorithm bandwidth
  n/steps × bus bandwidth) and **tree** (all-reduce only: a chain inside a node, a binary tree of log2(nodes)
  steps between nodes, algorithm bandwidth half the bus bandwidth);
* protocols: **LL** (8-byte stores with a 4-byte flag: lowest latency, a quarter to a third of the bandwidth),
  **LL128** (128-byte lines with an 8-byte flag: ~92% of the bandwidth, used by NCCL on NVLink only) and
  **Simple** (full bandwidth, the highest latency);
* per-step latencies depend on what a step crosses: NVLink, PCIe (through the host) or the network.

The latencies and protocol factors follow NCCL's tuner (src/graph/tuning.cc in NVIDIA/nccl, the tables of the
2.7–2.9 releases; later releases retune them per GPU generation); the bus bandwidths come from the catalog
(spec sheets and published nccl-tests figures, cited there). One more cost is not NCCL's: the host-side launch
of a collective as the profiler times it (torch.distributed dispatch and the kernel launch). It is the only
constant measured here — on the calibration box (a100_dgx), see docs/collectives.md — and the other box is
validation. Send/recv, which NCCL does not tune, is one step (LL up to 16 KiB, Simple above) across the link
the pipeline hop really crosses (`stage_hop`); docs/collectives.md has the whole model and its measured
errors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from simserve.catalog import NetworkSpec, NodeSpec

ALGORITHMS = ("ring", "tree", "nvls")
PROTOCOLS = ("LL", "LL128", "Simple")

# NCCL tuning.cc `baseLat` (µs): the fixed cost of an algorithm/protocol pair.
BASE_LATENCY_US = {
    ("tree", "LL"): 4.4,
    ("tree", "LL128"): 4.4,
    ("tree", "Simple"): 0.0,
    ("ring", "LL"): 3.6,
    ("ring", "LL128"): 10.0,
    ("ring", "Simple"): 8.4,
}
# NCCL tuning.cc `hwLat` (µs): latency of one step over NVLink, PCIe or the network. Tree/Simple is high
# because a tree step forwards whole 256 KiB chunks.
STEP_LATENCY_US = {
    "nvlink": {
        ("tree", "LL"): 0.52,
        ("tree", "LL128"): 1.2,
        ("tree", "Simple"): 28.0,
        ("ring", "LL"): 0.47,
        ("ring", "LL128"): 1.9,
        ("ring", "Simple"): 3.4,
    },
    "pcie": {
        ("tree", "LL"): 1.0,
        ("tree", "LL128"): 1.9,
        ("tree", "Simple"): 28.0,
        ("ring", "LL"): 1.0,
        ("ring", "LL128"): 2.5,
        ("ring", "Simple"): 5.7,
    },
    "net": {
        ("tree", "LL"): 5.0,
        ("tree", "LL128"): 8.5,
        ("tree", "Simple"): 50.0,
        ("ring", "LL"): 2.7,
        ("ring", "LL128"): 4.0,
        ("ring", "Simple"): 9.6,
    },
}
# NCCL 2.19 and later (every release Hopper and Blackwell boxes run; NVIDIA's H100/H200 tables were measured
# with 2.29.2) retuned the per-step latencies: tuning.cc `hwLat` (NVIDIA/nccl tags v2.19.3-1 … v2.30.7-1)
# NVLink Tree 0.6 / 1.25 / 4.0, Ring 0.6 / 1.9 / 3.4; PCI Tree 1.0 / 1.9 / 4.0, Ring 1.0 / 2.5 / 5.7; NET Tree
# 5.0 / 8.5 / 14, Ring 2.7 / 4.0 / 14. A ring's step over NVLink with LL, the small-message protocol, is 0.6
# µs there against 0.47 in the 2.7-2.9 table above: a 2(n−1)-step all-reduce on 8 GPUs pays 1.8 µs more. The
# fixed costs are left as above: the launch per generation is calibrated on top of them (nccl_validation).
STEP_LATENCY_US_2_19 = {
    "nvlink": {
        ("tree", "LL"): 0.6,
        ("tree", "LL128"): 1.25,
        ("tree", "Simple"): 4.0,
        ("ring", "LL"): 0.6,
        ("ring", "LL128"): 1.9,
        ("ring", "Simple"): 3.4,
    },
    "pcie": {
        ("tree", "LL"): 1.0,
        ("tree", "LL128"): 1.9,
        ("tree", "Simple"): 4.0,
        ("ring", "LL"): 1.0,
        ("ring", "LL128"): 2.5,
        ("ring", "Simple"): 5.7,
    },
    "net": {
        ("tree", "LL"): 5.0,
        ("tree", "LL128"): 8.5,
        ("tree", "Simple"): 14.0,
        ("ring", "LL"): 2.7,
        ("ring", "LL128"): 4.0,
        ("ring", "Simple"): 14.0,
    },
}
NEW_TUNER_ARCHS = ("hopper", "blackwell")  # boxes whose NCCL has the 2.19+ table
# NCCL's default NCCL_P2P_LL_THRESHOLD (bytes): point-to-point sends at most this size use LL, larger ones
# Simple.
P2P_LL_THRESHOLD = 16384
# Bus-bandwidth ceilings of the tree algorithm in tuning.cc (GB/s): ≤ 2 nodes, more nodes.
TREE_MAX_GBPS = (110.0, 80.0)

# Host-side cost of one collective call as a profiler times it (torch.distributed dispatch + kernel launch):
# the median residual of the calibration box's small send/recv messages (a100_dgx, ≤ 64 KiB), see
# simserve/profiling/nccl_validation.py `calibrate_launch_us`.
LAUNCH_US = 6.4
# The same cost per GPU generation. In one harness (aiconfigurator-core's NCCL tables, 2-GPU all-reduces ≤ 64
# KiB, NCCL's kernel time subtracted) the residual is 5.9 µs on A100, 2.0 on H100 and 5.8 on B200: Hopper's
# kernels launch and synchronise ~3× faster. Each generation's launch is LAUNCH_US × its residual / A100's
# (nccl_validation.launch_by_arch), so the A100 keeps the value measured on Vidur's box. Ada keeps the A100's:
# the L40S table's small messages leave no residual over the PCIe model's kernel time, so they cannot separate
# it.
LAUNCH_US_BY_ARCH = {"ampere": LAUNCH_US, "ada": LAUNCH_US, "hopper": 1.9, "blackwell": 5.9}

# NVLS (NVLink SHARP): on Hopper NVSwitch boxes the switch reduces multicast stores, so an all-reduce moves
# each byte once each way. NCCL runs it with the Simple protocol only, one fixed latency (tuning.cc hwLat
# NVLink NVLS Simple 25 µs in NCCL 2.18-2.19; later releases book 23 µs as baseLat) and a bus bandwidth of its
# own (the node's `nvls_bus_gbps`). NVLS_MIN_RANKS: aiconfigurator-core's H100 NCCL tables (NCCL 2.27) exceed
# the ring's bus bandwidth only at 8 GPUs (432 GB/s at 256 MiB, against 305 and 339 at 2 and 4), so the model
# offers it from 8.
NVLS_LATENCY_US = 25.0
NVLS_MIN_RANKS = 8


@dataclass(frozen=True)
class Fabric:
    """What one communicator runs over: its ranks, the link between ranks of a node, and the network between
    nodes.

    `bus_gbps` is the bus bandwidth NCCL's Simple protocol reaches on the slowest intra-node link (per GPU and
    direction); `net_gbps` the network's, per node and direction; `net_latency_us` the fabric's one-way
    latency added to NCCL's per-step network latency.
    """

    ranks: int
    nodes: int
    medium: str  # "nvlink" or "pcie": what a step between two GPUs of one node crosses
    bus_gbps: float
    net_gbps: float = 0.0
    net_latency_us: float = 0.0
    nvls_gbps: float = 0.0  # NVLS bus bandwidth where the NVSwitch reduces (0: no NVLS)
    # NCCL 2.19+'s per-step latencies (STEP_LATENCY_US_2_19): Hopper and Blackwell boxes
    new_tuner: bool = False

    def __post_init__(self):
        if self.medium not in ("nvlink", "pcie"):
            raise ValueError(f"intra-node medium must be nvlink or pcie, not {self.medium!r}")
        if self.ranks < 1 or self.nodes < 1 or self.ranks % self.nodes:
            raise ValueError(f"{self.ranks} ranks do not spread evenly over {self.nodes} nodes")


def _steps(collective: str, n: int) -> int:
    return {"all_reduce": 2 * (n - 1), "all_gather": n - 1, "send_recv": 1}[collective]


def _enabled(collective: str, algorithm: str, protocol: str, f: Fabric) -> bool:
    if algorithm == "nvls":  # all-reduce inside one NVSwitch box, Simple only (NCCL's NVLS model)
        return (
            collective == "all_reduce"
            and protocol == "Simple"
            and f.nodes == 1
            and f.nvls_gbps > 0
            and f.ranks >= NVLS_MIN_RANKS
        )
    if algorithm == "tree" and collective != "all_reduce":
        return False  # NCCL runs trees for all-reduce only
    if collective == "send_recv":
        return protocol != "LL128"  # point-to-point runs LL or Simple, by size (see options_us)
    # NCCL enables LL128 by default only when every hop is NVLink (silent corruption is possible elsewhere).
    return protocol != "LL128" or (f.medium == "nvlink" and f.nodes == 1)


def _bus_gbps(collective: str, algorithm: str, protocol: str, f: Fabric) -> float:
    """Bus bandwidth of an algorithm/protocol pair: the link's, cut by the protocol's payload fraction."""
    if algorithm == "nvls":
        return f.nvls_gbps
    bus = f.bus_gbps if f.nodes == 1 else min(f.bus_gbps, f.net_gbps)
    ranks_per_node = f.ranks / f.nodes
    if algorithm == "ring":
        # half of each 8-byte store is a flag; NCCL's tuner takes ¼ for reductions, ⅓ else
        if protocol == "LL":
            return bus / (4.0 if (f.nodes > 1 or collective == "all_reduce") else 3.0)
        if protocol == "LL128":  # 120 of 128 bytes are data; one GPU per node shares a NIC both ways
            return bus * (0.7 if ranks_per_node < 2 else 0.92)
        return bus
    bus = min(bus * 0.9, TREE_MAX_GBPS[f.nodes > 2])
    if protocol == "LL":
        return bus / 3.8
    if protocol == "LL128":
        return bus * (7.0 / 9.0 if f.nodes == 1 else 0.915)
    return bus


def _latency_us(collective: str, algorithm: str, protocol: str, f: Fabric) -> float:
    if algorithm == "nvls":
        return NVLS_LATENCY_US
    key = (algorithm, protocol)
    table = STEP_LATENCY_US_2_19 if f.new_tuner else STEP_LATENCY_US
    intra = table[f.medium][key] * (1.8 if f.nodes > 1 and protocol == "LL" else 1.0)
    inter = table["net"][key] + f.net_latency_us
    if algorithm == "tree":
        per_node = f.ranks // f.nodes
        levels = int(math.log2(f.nodes))  # whole levels of the binary tree between nodes, as NCCL counts them
        return BASE_LATENCY_US[key] + 2 * ((per_node - 1) * intra + levels * inter)
    steps = _steps(collective, f.ranks)
    inter_steps = _steps(collective, f.nodes) if f.nodes > 1 else 0
    # Point-to-point is not tuned by NCCL and has no ring to fill: its fixed cost is the smallest kernel's
    # (ring LL)
    base = BASE_LATENCY_US[("ring", "LL")] if collective == "send_recv" else BASE_LATENCY_US[key]
    return base + (steps - inter_steps) * intra + inter_steps * inter


def options_us(collective: str, f: Fabric, size_bytes) -> dict[tuple[str, str], np.ndarray]:
    """Predicted µs (NCCL's kernel time, no launch) of every enabled algorithm/protocol pair."""
    size = np.asarray(size_bytes, dtype=float)
    n, out = f.ranks, {}
    for algorithm in ALGORITHMS:
        for protocol in PROTOCOLS:
            if not _enabled(collective, algorithm, protocol, f):
                continue
            # bus -> algorithm bandwidth: a tree moves the message up and down; a ring all-reduce 2(n−1)/n of
            # it through each link, an all-gather (n−1)/n; a send/recv moves it once (NVLS too: NCCL converts
            # its bus bandwidth to algorithm bandwidth by nRanks / nSteps, like a ring's)
            ratio = (
                0.5
                if algorithm == "tree"
                else 1.0
                if collective == "send_recv"
                else n / _steps(collective, n)
            )
            algo_gbps = _bus_gbps(collective, algorithm, protocol, f) * ratio
            lat = _latency_us(collective, algorithm, protocol, f)
            big = size >= n / 16.0 * 65536
            if algorithm == "ring" and protocol == "Simple" and f.nodes > 1 and collective == "all_reduce":
                lat = np.where(big, lat * 1.9, lat)  # tuning.cc: the ring's plateau across nodes
            t = lat + size / (algo_gbps * 1e3)
            # not tuned: NCCL sends LL up to NCCL_P2P_LL_THRESHOLD, Simple above
            if collective == "send_recv":
                t = np.where((size <= P2P_LL_THRESHOLD) == (protocol == "LL"), t, np.inf)
            out[(algorithm, protocol)] = t
    return out


def choose(collective: str, f: Fabric, size_bytes: float) -> tuple[str, str]:
    """The algorithm/protocol NCCL's tuner picks for one message size."""
    opts = options_us(collective, f, size_bytes)
    return min(opts, key=lambda k: float(opts[k]))


def launch_us_for(node: NodeSpec | None) -> float:
    """The launch cost of the generation of GPU the node holds (LAUNCH_US where the GPU is not in the
    catalog)."""
    from simserve.catalog import GPU

    if node is None or node.gpu not in GPU:
        return LAUNCH_US
    return LAUNCH_US_BY_ARCH[GPU.get(node.gpu).arch]


def collective_ms(collective: str, f: Fabric, size_bytes, launch_us: float = LAUNCH_US) -> np.ndarray:
    """Time of one collective in ms: launch + the fastest algorithm/protocol for each size."""
    if collective not in ("all_reduce", "all_gather", "send_recv"):
        raise ValueError(f"unknown collective {collective!r}; use all_reduce, all_gather or send_recv")
    if f.ranks == 1:
        return np.zeros_like(np.asarray(size_bytes, dtype=float))
    best = np.minimum.reduce(list(options_us(collective, f, size_bytes).values()))
    return (launch_us + best) * 1e-3


# ----------------------------------------------------------------------------------------- the box's topology


def _require(spec, fields: tuple[str, ...], what: str) -> None:
    missing = [name for name in fields if getattr(spec, name, None) in (None, "")]
    if missing:
        from simserve.errors import SimserveError

        raise SimserveError(
            f"{what} {spec.name!r} lacks {', '.join(missing)}, which the collective model needs; "
            f"add it to its catalog entry (see docs/collectives.md)"
        )


def new_tuner(node: NodeSpec | None) -> bool:
    """Whether the box's GPUs run NCCL 2.19+'s tuner table (Hopper and Blackwell)."""
    from simserve.catalog import GPU

    return node is not None and node.gpu in GPU and GPU.get(node.gpu).arch in NEW_TUNER_ARCHS


def node_fabric(node: NodeSpec, ranks: int) -> Fabric:
    """A communicator of `ranks` GPUs packed into one node (TP groups): NVLink only if they share an NVLink
    domain."""
    _require(node, ("kind", "nvlink_bus_gbps", "pcie_bus_gbps"), "node")
    new = new_tuner(node)
    if node.kind == "pcie-host":
        # No peer-to-peer: every hop of the ring is a copy through host memory, and the n hops share it.
        return Fabric(ranks, 1, "pcie", node.pcie_bus_gbps * 2.0 / max(ranks, 2), new_tuner=new)
    if node.kind == "pcie" or (node.kind == "nvlink-pairs" and ranks > 2):
        # A ring over pairs alternates NVLink and PCIe hops: the PCIe hops through the host bound it.
        return Fabric(ranks, 1, "pcie", node.pcie_bus_gbps, new_tuner=new)
    return Fabric(ranks, 1, "nvlink", node.nvlink_bus_gbps, nvls_gbps=node.nvls_bus_gbps, new_tuner=new)


def network_fabric(node: NodeSpec, network: NetworkSpec, ranks: int, nodes: int) -> Fabric:
    """A communicator spread over `nodes` nodes (ranks/nodes per node) joined by `network`."""
    _require(network, ("bus_gbps", "latency_us"), "network")
    inside = node_fabric(node, max(ranks // nodes, 1))
    return Fabric(
        ranks,
        nodes,
        inside.medium,
        inside.bus_gbps,
        network.bus_gbps,
        network.latency_us,
        new_tuner=inside.new_tuner,
    )


@dataclass(frozen=True)
class Hop:
    """The link a pipeline hop crosses and the name of its send_recv rows in a profile."""

    link: str  # profile row name: "<node>", "<node>:pcie" or "<network>"
    medium: str  # "nvlink", "pcie" or "net"


def pcie_link(node_name: str) -> str:
    return f"{node_name}:pcie"


def node_hops(node: NodeSpec) -> list[Hop]:
    """Every kind of hop between two GPUs of this node (the send_recv rows a profile of it holds)."""
    _require(node, ("kind",), "node")
    if node.kind == "nvswitch":
        return [Hop(node.name, "nvlink")]
    if node.kind in ("pcie", "pcie-host"):
        return [Hop(node.name, "pcie")]
    return [Hop(node.name, "nvlink"), Hop(pcie_link(node.name), "pcie")]


def stage_hop(node: NodeSpec | None, network: NetworkSpec | None, tp: int, stage: int) -> Hop:
    """The link the activations of pipeline stage `stage` cross to reach stage + 1.

    Stage s holds GPUs [s·tp, (s+1)·tp) (vLLM/Sarathi's rank order) and TP rank i sends to rank i of the next
    stage, GPU g to g + tp. Leaving the node means the network; inside it, NVSwitch is NVLink everywhere,
    NVLink pairs only when g and g + tp are in one pair (TP 1, even stages), and otherwise the hop goes
    through the host. Used by the simulator (which rows to read) and the profile writer (which rows to write)
    alike.
    """
    if node is None:
        raise ValueError("a pipeline hop needs a node")
    per_node = node.gpus_per_node
    first, nxt = stage * tp, (stage + 1) * tp
    if first // per_node != nxt // per_node:
        if network is None:
            raise ValueError("the hop leaves the node but no network is named")
        return Hop(network.name, "net")
    hops = {h.medium: h for h in node_hops(node)}
    if node.kind == "nvlink-pairs":
        g = first % per_node
        same_pair = all((g + i) // 2 == (g + i + tp) // 2 for i in range(tp))
        return hops["nvlink" if same_pair else "pcie"]
    return next(iter(hops.values()))


def hop_ms(
    node: NodeSpec, network: NetworkSpec | None, hop: Hop, size_bytes, launch_us: float | None = None
) -> np.ndarray:
    """send/recv time of `size_bytes` across one hop; `launch_us` defaults to the node's GPU generation's."""
    launch_us = launch_us_for(node) if launch_us is None else launch_us
    if hop.medium == "net":
        if network is None:
            raise ValueError("a network hop needs a network")
        f = network_fabric(node, network, 2, 2)
    else:
        # A copy over NVLink runs at the link's rate: the bus-bandwidth figures (and NCCL's 235 GB/s Ampere
        # cap) are for rings that also reduce. Through the host a copy is bound like a ring's PCIe hop.
        _require(node, ("kind", "nvlink_gbps", "pcie_bus_gbps"), "node")
        gbps = node.nvlink_gbps if hop.medium == "nvlink" else node.pcie_bus_gbps
        f = Fabric(2, 1, hop.medium, gbps, new_tuner=new_tuner(node))
    return collective_ms("send_recv", f, size_bytes, launch_us)
