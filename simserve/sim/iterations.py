"""The per-iteration table, kept as typed arrays (a few dozen bytes a row) until the run ends.

One row per micro-batch per pipeline stage. A compressed decode stretch (k identical decode-only
iterations advanced in one step) is one row with `num_iterations = k`: its start and end cover all k
iterations, and its token counts are the totals over them.
"""

from __future__ import annotations

from array import array

import numpy as np
import pandas as pd

COLUMNS = (
    "replica",
    "stage",
    "start_s",
    "end_s",
    "num_prefill_tokens",
    "num_decode_tokens",
    "num_requests",
    "kv_blocks_used",
    "num_iterations",
)


class IterationLog:
    def __init__(self) -> None:
        self._ints = {c: array("q") for c in COLUMNS if not c.endswith("_s")}
        self._floats = {c: array("d") for c in ("start_s", "end_s")}

    def add(
        self,
        replica: int,
        stage: int,
        start: float,
        end: float,
        prefill_tokens: int,
        decode_tokens: int,
        num_requests: int,
        kv_blocks_used: int,
        num_iterations: int = 1,
    ) -> None:
        i, f = self._ints, self._floats
        i["replica"].append(replica)
        i["stage"].append(stage)
        f["start_s"].append(start)
        f["end_s"].append(end)
        i["num_prefill_tokens"].append(prefill_tokens)
        i["num_decode_tokens"].append(decode_tokens)
        i["num_requests"].append(num_requests)
        i["kv_blocks_used"].append(kv_blocks_used)
        i["num_iterations"].append(num_iterations)

    def __len__(self) -> int:
        return len(self._floats["start_s"])

    def to_frame(self) -> pd.DataFrame:
        cols = {}
        for c in COLUMNS:
            src = self._floats[c] if c.endswith("_s") else self._ints[c]
            cols[c] = np.frombuffer(src, dtype=np.float64 if c.endswith("_s") else np.int64).copy()
        return pd.DataFrame(cols)
