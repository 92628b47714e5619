"""What NVIDIA's GEMM tables measured: weights warm in L2 where the collector's loop fits in it, and the floor
a serving profile puts under such rows (weights streamed from HBM).

How the tables were timed (github.com/ai-dynamo/aiconfigurator at 095f58a, the vLLM 0.24.0 collection, commit
d5bad971c): `collector/vllm/collect_gemm.py` `run_gemm` builds `outside_loop_count` = 6 RowParallelLinear
layers (1 for fp8_block and nvfp4), each with its own weight, and times `kernel_func` = the 6 layers' forward
on one shared input `x`; `collector/helper.py` `benchmark_with_power` captures that in a CUDA graph (eager for
fp8_block), replays it 3 times to warm up, then times 6 back-to-back replays between two CUDA events, and the
row's latency is the total / 6 replays / 6 layers. No L2 flush, no rotating buffers beyond the 6 layers: when
the 6 weights fit in L2 they stay resident from one replay to the next, and the row times an L2 read, not an
HBM one.

Serving is the other condition: a decode step streams every layer's weights once, far more than any L2, so
each GEMM reads its weights from HBM. The data show where this matters (`python benchmarks/l2_in_tables.py`):
on GPUs whose L2 is large against a slow bus (L40S: 96 MB over 864 GB/s GDDR6; RTX PRO 6000: 128 MB over 1.79
TB/s GDDR7) the skinny GEMMs whose 6 weights fit in L2 stream them at up to 2.9x the bus's bandwidth, and the
rate falls to the bus's where they outgrow it; on HBM GPUs (A100, H100, H200, B200, ...) no row is faster than
HBM: where their weights fit in L2 the kernels are too short to be bandwidth-bound, so warm or cold times the
same.

The floor: a row cannot take less time than streaming its weights from HBM at the fastest rate the same table
shows for weights that cannot be L2-resident (skinny GEMMs, m <= COLD_M, whose 6 weights exceed
COLD_L2_MULTIPLE x L2 under any replacement policy). It is applied to the rows whose loop fits in
COLD_L2_MULTIPLE x L2 only, so a row of a cold shape is never touched; activations are not floored (in
serving, a GEMM's input was just written by the kernel before it and is L2-warm there too).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from simserve.catalog import GPUSpec

# Layers with their own weights in one timed loop of collect_gemm.py's run_gemm (outside_loop_count), per
# dtype.
GEMM_ROTATION = {"bfloat16": 6, "fp8": 6, "fp8_block": 1, "nvfp4": 1}
WEIGHT_BYTES = {"bfloat16": 2.0, "fp8": 1.0, "fp8_block": 1.0, "nvfp4": 0.5}
COLD_M = 16  # skinny GEMMs: the time is the weights' streaming time (2·m·n·k flops are negligible)
# A loop of more than 2x L2 cannot keep any of its lines between two passes under LRU and keeps little under
# an adaptive policy (L40S's table: 6 weights of 16-32 MB still show 0.98-1.14x the bus, of 32 MB+ at most
# 0.97x).
COLD_L2_MULTIPLE = 2.0
LABEL = "L2-warm in the table, floored to HBM"


def loop_weight_bytes(n, k, gemm_dtype: str) -> np.ndarray:
    """Bytes of weights one timed loop of the collector reads: its layers' weights together."""
    return GEMM_ROTATION[gemm_dtype] * WEIGHT_BYTES[gemm_dtype] * np.asarray(n, float) * np.asarray(k, float)


def weight_bytes(n, k, gemm_dtype: str) -> np.ndarray:
    return WEIGHT_BYTES[gemm_dtype] * np.asarray(n, float) * np.asarray(k, float)


def can_be_resident(n, k, gemm_dtype: str, gpu: GPUSpec) -> np.ndarray:
    """Rows whose loop of weights fits in COLD_L2_MULTIPLE x the GPU's L2: they may have been timed
    L2-warm."""
    return loop_weight_bytes(n, k, gemm_dtype) <= COLD_L2_MULTIPLE * gpu.l2_bytes


@dataclass(frozen=True)
class Floor:
    """The cold streaming rate of one table and how many of its rows it lifts."""

    gemm_dtype: str
    cold_gbps: float  # fastest weight streaming among rows that cannot be L2-resident; nan: no such rows
    rows: int
    floored: int  # rows whose time rose to the floor
    median_lift: float  # floored time / table time, median over the floored rows (1.0 when none)

    def provenance(self, gpu: GPUSpec) -> dict:
        return {
            "label": LABEL,
            "rows_floored": self.floored,
            "of_rows": self.rows,
            "cold_weight_streaming_gbps": None if np.isnan(self.cold_gbps) else round(self.cold_gbps, 1),
            "median_lift": round(self.median_lift, 3),
            "l2_mib": gpu.l2_mib,
            "why": "the collector times 6 layers' GEMMs in a replayed CUDA graph without flushing L2 "
            "(aiconfigurator collector/vllm/collect_gemm.py run_gemm, collector/helper.py "
            "benchmark_with_power); serving streams each layer's weights from HBM, so a row may not beat "
            "its weights' bytes at the fastest rate the table shows where they cannot be L2-resident "
            "(simserve/profiling/l2_residency.py)",
        }


def cold_bandwidth(rows: pd.DataFrame, gemm_dtype: str, gpu: GPUSpec) -> float:
    """Bytes/s: the fastest weight streaming of the skinny rows (m <= COLD_M) whose loop cannot be
    L2-resident."""
    skinny = rows[rows["m"] <= COLD_M]
    cold = ~can_be_resident(skinny["n"], skinny["k"], gemm_dtype, gpu)
    if not cold.any():
        return float("nan")
    rate = weight_bytes(skinny["n"], skinny["k"], gemm_dtype)[cold] / (
        skinny["latency"].to_numpy()[cold] * 1e-3
    )
    return float(rate.max())


def floor_to_hbm(rows: pd.DataFrame, gemm_dtype: str, gpu: GPUSpec) -> tuple[pd.DataFrame, Floor]:
    """The GEMM rows (m, n, k, latency in ms) with each possibly L2-warm row's latency raised to its weights'
    cold streaming time. A GPU without a known L2 size, or a table without cold rows, is returned
    unchanged."""
    if gpu.l2_mib <= 0 or gemm_dtype not in GEMM_ROTATION:
        return rows, Floor(gemm_dtype, float("nan"), len(rows), 0, 1.0)
    rate = cold_bandwidth(rows, gemm_dtype, gpu)
    if np.isnan(rate):
        return rows, Floor(gemm_dtype, rate, len(rows), 0, 1.0)
    lat = rows["latency"].to_numpy(dtype=float)
    floor_ms = weight_bytes(rows["n"], rows["k"], gemm_dtype) / rate * 1e3
    lift = can_be_resident(rows["n"], rows["k"], gemm_dtype, gpu) & (floor_ms > lat)
    out = rows.assign(latency=np.where(lift, floor_ms, lat))
    median = float(np.median(floor_ms[lift] / lat[lift])) if lift.any() else 1.0
    return out, Floor(gemm_dtype, rate / 1e9, len(rows), int(lift.sum()), median)
