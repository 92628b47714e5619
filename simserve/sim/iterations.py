"""The per-iteration table, kept as typed arrays (a few dozen bytes a row) until the run ends.

One row per micro-batch per pipeline stage. A compressed decode stretch (k identical decode-only
iterations advanced in one step) is one row with `num_iterations = k`: its start and end cover all k
iterations, and its token counts are the totals over them.
"""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pandas only when the table is turned into a frame
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


INT_COLUMNS = tuple(c for c in COLUMNS if not c.endswith("_s"))
FLOAT_COLUMNS = ("start_s", "end_s")


class IterationLog:
    # NOTE: rows are interleaved in one int and one float array (row-major), so adding a row is two
    # `extend` calls instead of nine `append`s: this is on the simulator's hot path (once per stage per
    # micro-batch).
    def __init__(self) -> None:
        self._ints = array("q")
        self._floats = array("d")

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
        self._ints.extend(
            (replica, stage, prefill_tokens, decode_tokens, num_requests, kv_blocks_used, num_iterations)
        )
        self._floats.extend((start, end))

    def __len__(self) -> int:
        return len(self._floats) // 2

    def to_frame(self) -> pd.DataFrame:
        return self.frame(0, len(self))

    def column(self, name: str) -> np.ndarray:
        """One column over all rows: a strided view of the log's buffer (no copy; do not add rows meanwhile)."""
        if name in FLOAT_COLUMNS:
            return self._matrix(self._floats, FLOAT_COLUMNS)[:, FLOAT_COLUMNS.index(name)]
        return self._matrix(self._ints, INT_COLUMNS)[:, INT_COLUMNS.index(name)]

    def frame(self, lo: int, hi: int, step: int = 1) -> pd.DataFrame:
        """Rows lo, lo+step, ... < hi as a DataFrame: the writers stream the table a chunk at a time."""
        import pandas as pd

        return pd.DataFrame({c: self.column(c)[lo:hi:step].copy() for c in COLUMNS})

    @staticmethod
    def _matrix(buf: array, names: tuple[str, ...]) -> np.ndarray:
        dtype = np.float64 if buf.typecode == "d" else np.int64
        return np.frombuffer(buf, dtype=dtype).reshape(-1, len(names))
