"""Batches per pipeline stage as a Chrome trace (open in https://ui.perfetto.dev or chrome://tracing).

One process per replica, one thread (track) per stage, one complete ("X") event per row of the iteration
table. A huge run is thinned to at most `max_events` events by keeping every k-th row (k is recorded in
`otherData.sampled_every`); the iteration table itself is never thinned.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING

import numpy as np

from simserve.sim.iterations import COLUMNS, IterationLog

if TYPE_CHECKING:
    import pandas as pd

MAX_EVENTS = 200_000  # about 30 MB of JSON: still loads in the Perfetto UI


def _name(prefill: int, decode: int, iterations: int) -> str:
    kind = "mixed" if prefill and decode else ("prefill" if prefill else "decode")
    return f"{kind} ×{iterations}" if iterations > 1 else kind


def chrome_trace(iterations: pd.DataFrame, max_events: int = MAX_EVENTS) -> dict:
    step = max(1, math.ceil(len(iterations) / max_events))
    replica, stage = iterations.replica.to_numpy(), iterations.stage.to_numpy()
    return _trace(iterations.iloc[::step], replica, stage, len(iterations), step)


def chrome_trace_from_log(log: IterationLog, max_events: int = MAX_EVENTS) -> dict:
    """The same document as chrome_trace(log.to_frame()), without building the whole table."""
    step = max(1, math.ceil(len(log) / max_events))
    return _trace(log.frame(0, len(log), step), log.column("replica"), log.column("stage"), len(log), step)


def _trace(rows: pd.DataFrame, replica: np.ndarray, stage_of: np.ndarray, num_rows: int, step: int) -> dict:
    events: list[dict] = []
    for rep in sorted(set(replica.tolist())):
        events.append({"name": "process_name", "ph": "M", "pid": rep, "args": {"name": f"replica {rep}"}})
        for stage in sorted(set(stage_of[replica == rep].tolist())):
            events.append(
                {
                    "name": "thread_name",
                    "ph": "M",
                    "pid": rep,
                    "tid": stage,
                    "args": {"name": f"stage {stage}"},
                }
            )
    cols = [rows[c].to_numpy() for c in COLUMNS]  # positions as in iterations.COLUMNS
    start_us = np.round(cols[2] * 1e6, 3)
    dur_us = np.round((cols[3] - cols[2]) * 1e6, 3)
    for i in range(len(rows)):
        events.append(
            {
                "name": _name(int(cols[4][i]), int(cols[5][i]), int(cols[8][i])),
                "cat": "batch",
                "ph": "X",
                "pid": int(cols[0][i]),
                "tid": int(cols[1][i]),
                "ts": float(start_us[i]),
                "dur": float(dur_us[i]),
                "args": {
                    "prefill_tokens": int(cols[4][i]),
                    "decode_tokens": int(cols[5][i]),
                    "requests": int(cols[6][i]),
                    "kv_blocks_used": int(cols[7][i]),
                    "iterations": int(cols[8][i]),
                },
            }
        )
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {"rows": num_rows, "sampled_every": step},
    }


def write_chrome_trace(path, iterations: pd.DataFrame | IterationLog, max_events: int = MAX_EVENTS) -> None:
    doc = (
        chrome_trace_from_log(iterations, max_events)
        if isinstance(iterations, IterationLog)
        else chrome_trace(iterations, max_events)
    )
    # json.dumps, not json.dump: only the one-shot encoder uses the C accelerator (same text, ~10x less CPU)
    text = json.dumps(doc, separators=(",", ":"))
    with open(path, "w") as f:
        f.write(text)
