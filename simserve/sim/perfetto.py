"""Batches per pipeline stage as a Chrome trace (open in https://ui.perfetto.dev or chrome://tracing).

One process per replica, one thread (track) per stage, one complete ("X") event per row of the iteration
table. A huge run is thinned to at most `max_events` events by keeping every k-th row (k is recorded in
`otherData.sampled_every`); the iteration table itself is never thinned.

`write_chrome_trace` writes the document a chunk of events at a time (the same bytes as one `json.dumps` of
the whole): 200,000 event dicts held at once were about a quarter of a 1M-request run's peak memory.
"""

from __future__ import annotations

import itertools
import json
import math
from typing import TYPE_CHECKING

import numpy as np

from simserve.sim.iterations import COLUMNS, IterationLog

if TYPE_CHECKING:
    import pandas as pd

try:  # the compiled formatter (setup.py builds it; the same text as _batch_text_python, faster)
    from simserve.sim._textrows import batch_events as _batch_events_text
except ImportError:  # built without a C compiler
    _batch_events_text = None

MAX_EVENTS = 200_000  # about 30 MB of JSON: still loads in the Perfetto UI
CHUNK_EVENTS = 16_384  # events built and written at a time


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
    events = _track_names(_tracks_of_log(log))
    for lo in range(0, len(log), CHUNK_EVENTS * step):
        events += _batch_events(log.columns(lo, lo + CHUNK_EVENTS * step, step))
    return {"traceEvents": events, **_tail(len(log), step)}


def _trace(rows: pd.DataFrame, replica: np.ndarray, stage_of: np.ndarray, num_rows: int, step: int) -> dict:
    tracks = set(zip(replica.tolist(), stage_of.tolist(), strict=True))
    events = _track_names(tracks) + _batch_events({c: rows[c].to_numpy() for c in COLUMNS})
    return {"traceEvents": events, **_tail(num_rows, step)}


def _tail(num_rows: int, step: int) -> dict:
    return {"displayTimeUnit": "ms", "otherData": {"rows": num_rows, "sampled_every": step}}


def _tracks_of_log(log: IterationLog) -> set[tuple[int, int]]:
    """The (replica, stage) pairs in the log, read a chunk at a time."""
    tracks: set[tuple[int, int]] = set()
    for ints, _ in log.chunks():
        # NOTE: bincount, not np.unique: that imports numpy.ma, 0.01 s of a warm run's start-up
        for key in np.flatnonzero(np.bincount((ints[:, 0] << 8) | ints[:, 1])).tolist():
            tracks.add((key >> 8, key & 0xFF))
    return tracks


def _track_names(tracks: set[tuple[int, int]]) -> list[dict]:
    events: list[dict] = []
    for rep in sorted({r for r, _ in tracks}):
        events.append({"name": "process_name", "ph": "M", "pid": rep, "args": {"name": f"replica {rep}"}})
        for stage in sorted(s for r, s in tracks if r == rep):
            events.append(
                {
                    "name": "thread_name",
                    "ph": "M",
                    "pid": rep,
                    "tid": stage,
                    "args": {"name": f"stage {stage}"},
                }
            )
    return events


def _batch_events(rows: dict[str, np.ndarray]) -> list[dict]:
    cols = [rows[c] for c in COLUMNS]  # positions as in iterations.COLUMNS
    start_us = np.round(cols[2] * 1e6, 3).tolist()
    dur_us = np.round((cols[3] - cols[2]) * 1e6, 3).tolist()
    replica, stage, prefill, decode, requests, kv, iters = (cols[i].tolist() for i in (0, 1, 4, 5, 6, 7, 8))
    return [
        {
            "name": _name(prefill[i], decode[i], iters[i]),
            "cat": "batch",
            "ph": "X",
            "pid": replica[i],
            "tid": stage[i],
            "ts": start_us[i],
            "dur": dur_us[i],
            "args": {
                "prefill_tokens": prefill[i],
                "decode_tokens": decode[i],
                "requests": requests[i],
                "kv_blocks_used": kv[i],
                "iterations": iters[i],
            },
        }
        for i in range(len(start_us))
    ]


# One batch event as json.dumps(..., separators=(",", ":")) writes it: floats by repr (%r), names
# JSON-escaped once per distinct name. Formatting the text directly is ~4x cheaper than building dicts
# and encoding them (tests/test_sim_writers.py checks the bytes against json.dumps).
_EVENT = (
    '{"name":%s,"cat":"batch","ph":"X","pid":%d,"tid":%d,"ts":%r,"dur":%r,"args":{"prefill_tokens":%d,'
    '"decode_tokens":%d,"requests":%d,"kv_blocks_used":%d,"iterations":%d}}'
)


def _batch_text(rows: dict[str, np.ndarray]) -> str:
    """The text of _dumps(_batch_events(rows)) without its brackets."""
    if _batch_events_text is None:
        return _batch_text_python(rows)
    cols = [np.ascontiguousarray(rows[c]) for c in COLUMNS]
    start_us = np.round(cols[2] * 1e6, 3)
    dur_us = np.round((cols[3] - cols[2]) * 1e6, 3)
    prefill, decode, iters = cols[4], cols[5], cols[8]
    # the event's name: mixed / prefill / decode (as _name), with " ×k" for rows of k iterations
    kind = np.where(prefill > 0, np.where(decode > 0, 0, 1), 2)
    keys = kind * (int(iters.max()) + 1 if len(iters) else 1) + iters
    names: dict[int, int] = {}
    texts: list[str] = []
    name_of = np.empty(len(keys), dtype=np.int64)
    for key in np.flatnonzero(np.bincount(keys)).tolist() if len(keys) else []:
        names[key] = len(texts)
        i = int(np.argmax(keys == key))
        texts.append(json.dumps(_name(int(prefill[i]), int(decode[i]), int(iters[i]))))
    for key, k in names.items():
        name_of[keys == key] = k
    return _batch_events_text(
        texts, name_of, cols[0], cols[1], start_us, dur_us, prefill, decode, cols[6], cols[7], iters
    )


def _batch_text_python(rows: dict[str, np.ndarray]) -> str:
    """_batch_text in Python: the fallback without the compiled formatter, and what tests compare it with."""
    cols = [rows[c] for c in COLUMNS]
    start_us = np.round(cols[2] * 1e6, 3).tolist()
    dur_us = np.round((cols[3] - cols[2]) * 1e6, 3).tolist()
    replica, stage, prefill, decode, requests, kv, iters = (cols[i].tolist() for i in (0, 1, 4, 5, 6, 7, 8))
    names: dict[tuple[bool, bool, int], str] = {}
    out = []
    for i in range(len(start_us)):
        p, d, k = prefill[i], decode[i], iters[i]
        key = (p > 0, d > 0, k)
        name = names.get(key)
        if name is None:
            name = names[key] = json.dumps(_name(p, d, k))
        out.append(_EVENT % (name, replica[i], stage[i], start_us[i], dur_us[i], p, d, requests[i], kv[i], k))
    return ",".join(out)


def write_chrome_trace(path, iterations: pd.DataFrame | IterationLog, max_events: int = MAX_EVENTS) -> None:
    if not isinstance(iterations, IterationLog):
        doc = chrome_trace(iterations, max_events)
        with open(path, "w") as f:
            f.write(_dumps(doc))
        return
    log = iterations
    step = max(1, math.ceil(len(log) / max_events))
    with open(path, "w") as f:
        # the text of _dumps(chrome_trace_from_log(log)), one chunk of events at a time
        sep = '{"traceEvents":['
        span = CHUNK_EVENTS * step
        chunks = (_batch_text(log.columns(lo, lo + span, step)) for lo in range(0, len(log), span))
        for text in itertools.chain([_dumps(_track_names(_tracks_of_log(log)))[1:-1]], chunks):  # lazily
            if text:
                f.write(sep + text)
                sep = ","
        if sep != ",":  # no events at all
            f.write(sep)
        f.write("]," + _dumps(_tail(len(log), step))[1:])


def _dumps(x) -> str:
    # json.dumps, not json.dump: only the one-shot encoder uses the C accelerator (same text, ~10x less CPU)
    return json.dumps(x, separators=(",", ":"))


def write_disagg_trace(
    path, log: IterationLog, num_prefill: int, transfers, link, max_events: int = MAX_EVENTS
) -> None:
    """A disaggregated run: the prefill and decode replicas as processes named by pool, and one more process,
    the KV link, with one event per transfer while it holds the link (its latency follows, off the link)."""
    doc = chrome_trace_from_log(log, max_events)
    for ev in doc["traceEvents"]:
        if ev.get("name") == "process_name":
            pid = ev["pid"]
            side, i = ("prefill", pid) if pid < num_prefill else ("decode", pid - num_prefill)
            ev["args"] = {"name": f"{side} replica {i}"}
    moved = np.flatnonzero(~np.isnan(transfers.end))
    step = max(1, math.ceil(len(moved) / max_events))
    link_pid = max([num_prefill, *(ev["pid"] + 1 for ev in doc["traceEvents"])])
    events = [
        {"name": "process_name", "ph": "M", "pid": link_pid, "args": {"name": f"KV link: {link.describe()}"}}
    ]
    for rid in moved[::step].tolist():
        start = float(transfers.start[rid])
        events.append(
            {
                "name": "kv transfer",
                "cat": "transfer",
                "ph": "X",
                "pid": link_pid,
                "tid": 0,
                "ts": round(start * 1e6, 3),
                "dur": round(link.occupancy_s(float(transfers.nbytes[rid])) * 1e6, 3),
                "args": {
                    "request": rid,
                    "bytes": float(transfers.nbytes[rid]),
                    "prefill_replica": int(transfers.prefill_replica[rid]),
                    "queued_s": float(transfers.start[rid] - transfers.queued[rid]),
                },
            }
        )
    doc["traceEvents"] += events
    doc["otherData"]["transfers_sampled_every"] = step
    with open(path, "w") as f:
        f.write(_dumps(doc))
