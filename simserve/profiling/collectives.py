"""The collectives rows of an analytic profile: NCCL's model (simserve/profiling/nccl.py) over the box's
topology.

all_reduce rows per TP degree, over the link a TP group of that size really uses (NVLink inside an NVLink
domain, PCIe through the host once a ring leaves an NVLink pair, PCIe everywhere on a PCIe-only box);
send_recv rows for every kind of pipeline hop the box has — `<node>` (its own link), `<node>:pcie` (between
NVLink pairs) — and the network between nodes. `nccl.stage_hop` picks among the same names when the simulator
times a hop.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from simserve.catalog import NetworkSpec, NodeSpec
from simserve.profiling import grid, nccl


@dataclass(frozen=True)
class CollectiveConstants:
    """The constants of the collective model that are not NCCL's own tables (those are cited in nccl.py)."""

    # host-side cost of one collective call: nccl.launch_us_for(node) per generation
    launch_us: float = nccl.LAUNCH_US
    collective_model: str = (
        "NCCL tuner: ring/tree x LL/LL128/Simple over the node kind and bus bandwidths (nccl.py)"
    )


COLLECTIVES = CollectiveConstants()


def for_node(node: NodeSpec | None) -> CollectiveConstants:
    """The constants of the box's GPU generation (its launch cost, nccl.LAUNCH_US_BY_ARCH)."""
    return CollectiveConstants(launch_us=nccl.launch_us_for(node))


def all_reduce_ms(
    node: NodeSpec, num_workers: int, size_bytes, c: CollectiveConstants | None = None
) -> np.ndarray:
    """A TP group of `num_workers` GPUs of one node all-reducing `size_bytes`."""
    c = c or for_node(node)
    return nccl.collective_ms("all_reduce", nccl.node_fabric(node, num_workers), size_bytes, c.launch_us)


def collectives_table(
    node: NodeSpec | None,
    network: NetworkSpec | None,
    tps: list[int],
    quick: bool = False,
    c: CollectiveConstants | None = None,
) -> pd.DataFrame:
    """all_reduce rows for every TP degree above 1 on the node; send_recv rows for each hop kind and the
    network."""
    c = c or for_node(node)
    sizes = np.array(grid.collective_sizes())
    if quick:
        sizes = sizes[::2]
    frames = []

    def rows(op: str, link: str, workers: int, times: np.ndarray) -> None:
        frames.append(
            pd.DataFrame(
                {"op": op, "link": link, "num_workers": workers, "size_bytes": sizes, "time_ms": times}
            )
        )

    if node is not None:
        for n in sorted({t for t in tps if t > 1}):
            rows("all_reduce", node.name, n, all_reduce_ms(node, n, sizes, c))
        for hop in nccl.node_hops(node):
            rows("send_recv", hop.link, 2, nccl.hop_ms(node, None, hop, sizes, c.launch_us))
    if network is not None:
        if node is None:
            raise ValueError("network send_recv rows need the node whose GPUs send")
        hop = nccl.Hop(network.name, "net")
        rows("send_recv", network.name, 2, nccl.hop_ms(node, network, hop, sizes, c.launch_us))
    if not frames:
        raise ValueError("collectives_table needs a node or a network")
    return pd.concat(frames, ignore_index=True)
