"""Collectives for the torch backend: all_reduce and send/recv timed in spawned processes (NCCL, or gloo on
the CPU).

What this machine cannot measure (more GPUs than visible, other nodes) comes from the NCCL model of
`collectives.py`, marked `method=analytic` row by row.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from typing import Any

import pandas as pd

from simserve.catalog import GPUSpec, NetworkSpec, NodeSpec
from simserve.profiling.collectives import collectives_table
from simserve.profiling.torch_device import check_device, import_torch
from simserve.profiling.torch_timing import summarize, wall_ms


def measure_collectives(
    workers: list[int], sizes: list[int], device_type: str, warmup: int, repeats: int
) -> pd.DataFrame:
    """all_reduce over the first n ranks for each n in `workers`, and send/recv from rank 0 to rank 1.

    Spawns one process per GPU (NCCL), or per CPU worker (gloo) when `device_type` is "cpu", which tests use
    to run this same code without GPUs.
    """
    torch = import_torch()
    world = max([*workers, 2])
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rows.json")
        args = (world, f"file://{tmp}/rendezvous", workers, sizes, device_type, warmup, repeats, out)
        torch.multiprocessing.spawn(_collective_worker, args=args, nprocs=world, join=True)
        return pd.read_json(out, orient="records")


def _collective_worker(
    rank: int,
    world: int,
    init: str,
    workers: list[int],
    sizes: list[int],
    device_type: str,
    warmup: int,
    repeats: int,
    out: str,
) -> None:
    torch = import_torch()
    dist, cuda = torch.distributed, device_type == "cuda"
    if cuda:
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if cuda else "gloo", init_method=init, rank=rank, world_size=world)
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    dtype = torch.float16 if cuda else torch.float32  # NCCL profiles use fp16 (Vidur too); gloo wants fp32
    # every rank must join every group, members or not
    groups = {n: dist.new_group(list(range(n))) for n in sorted({*workers, 2})}
    rows = []

    def timed(fn: Callable[[], Any], group: Any) -> dict[str, float]:
        times = []
        for i in range(warmup + repeats):
            dist.barrier(group=group)  # start together: the time is the collective, not the peers' skew
            if cuda:
                torch.cuda.synchronize()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                torch.cuda.synchronize()
                ms = start.elapsed_time(end)
            else:
                ms = wall_ms(fn)
            if i >= warmup:
                times.append(ms)
        return summarize(times)

    for size in sizes:
        buf = torch.ones(
            max(1, size // torch.tensor([], dtype=dtype).element_size()), dtype=dtype, device=device
        )
        for n in workers:
            if rank < n:
                stats = timed(lambda buf=buf, n=n: dist.all_reduce(buf, group=groups[n]), groups[n])
                rows.append({"op": "all_reduce", "num_workers": n, "size_bytes": size, **stats})
        if rank < 2:
            peer = 1 - rank

            def hop(buf: Any = buf, peer: int = peer) -> None:
                (dist.send if rank == 0 else dist.recv)(buf, peer)

            stats = timed(hop, groups[2])
            rows.append({"op": "send_recv", "num_workers": 2, "size_bytes": size, **stats})
    dist.barrier()
    if rank == 0:
        pd.DataFrame(rows).to_json(out, orient="records")
    dist.destroy_process_group()


def collective_rows(
    torch: Any,
    device: Any,
    gpu: GPUSpec,
    node: NodeSpec,
    network: NetworkSpec | None,
    tps: list[int],
    quick: bool,
    warmup: int,
    repeats: int,
) -> tuple[pd.DataFrame, str]:
    """Measured NCCL rows where this machine can measure them; the NCCL model's rows (nccl.py), marked,
    elsewhere."""
    analytic = collectives_table(node, network, tps, quick).assign(method="analytic")
    count = torch.cuda.device_count() if device.type == "cuda" else 0
    if count < 2:
        return analytic, (
            f"not measured ({count} visible GPU(s)): every row is the NCCL model of "
            f"simserve/profiling/collectives.py (method=analytic)"
        )
    for i in range(count):
        check_device(gpu, torch.cuda.get_device_name(i))
    workers = sorted({t for t in tps if 1 < t <= count})
    sizes = sorted(set(analytic["size_bytes"].tolist()))
    measured = measure_collectives(workers, sizes, "cuda", warmup, repeats).assign(
        link=node.name, method="measured"
    )
    keys = set(zip(measured["op"], measured["link"], measured["num_workers"], strict=True))
    rest = analytic[
        [k not in keys for k in zip(analytic["op"], analytic["link"], analytic["num_workers"], strict=True)]
    ]
    note = (
        f"measured over NCCL on {count} visible GPUs, taken to be a {node.name} box (all_reduce over the "
        f"first n, send_recv GPU 0 -> 1); {len(rest)} rows it cannot measure (more GPUs, other nodes) are "
        "analytic"
    )
    return pd.concat([measured, rest], ignore_index=True), note
