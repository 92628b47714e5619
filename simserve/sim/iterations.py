"""The per-iteration table, kept as typed arrays (72 bytes a row) and spilled to disk as it grows.

One row per micro-batch per pipeline stage. A compressed decode stretch (k identical decode-only
iterations advanced in one step) is one row with `num_iterations = k`: its start and end cover all k
iterations, and its token counts are the totals over them.

A 1M-request run logs millions of rows; held in memory they alone were hundreds of MB. So every
SPILL_ROWS rows (524,288, about 38 MB; $SIMSERVE_ITERATION_SPILL_ROWS overrides it, which lets tests spill
tiny logs) the rows are appended to two anonymous temporary files (deleted when the log is) and the arrays
start again: rows [0, spilled) are on disk, the rest in memory. Readers go through `block`, `chunks` and
`columns`, which read a bounded range at a time, so the whole table is never in memory.
"""

from __future__ import annotations

import os
import tempfile
from array import array
from collections.abc import Iterator
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
SPILL_ROWS = 524_288
CHUNK_ROWS = 65_536  # rows per block handed to readers


def spill_rows() -> int:
    env = os.environ.get("SIMSERVE_ITERATION_SPILL_ROWS")
    return max(1, int(env)) if env else SPILL_ROWS


class IterationLog:
    # NOTE: rows are interleaved in one int and one float array (row-major), so adding a row is two
    # `extend` calls instead of nine `append`s: this is on the simulator's hot path (once per stage per
    # micro-batch).
    def __init__(self, spill_at: int | None = None) -> None:
        self._ints = array("q")
        self._floats = array("d")
        self._spill_floats = 2 * (spill_at or spill_rows())  # spill when the float array holds this many
        self._spilled = 0  # rows on disk
        self._files: tuple | None = None  # (ints, floats) temporary files

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
        if len(self._floats) >= self._spill_floats:
            self._spill()

    def add_rows(self, ints: np.ndarray, floats: np.ndarray) -> None:
        """Rows in bulk (the compiled core hands them over at each overload check): an (n, 7) int64 matrix
        in INT_COLUMNS order and an (n, 2) float64 one, the same rows `add` would have appended."""
        # NOTE: through a byte view of the buffer, not .tobytes(): one copy instead of two
        self._ints.frombytes(memoryview(np.ascontiguousarray(ints, dtype=np.int64)).cast("B"))
        self._floats.frombytes(memoryview(np.ascontiguousarray(floats, dtype=np.float64)).cast("B"))
        if len(self._floats) >= self._spill_floats:
            self._spill()

    def _spill(self) -> None:
        if self._files is None:
            # anonymous files, closed (and so deleted) with the log
            self._files = (tempfile.TemporaryFile(), tempfile.TemporaryFile())  # noqa: SIM115
        for f, buf in zip(self._files, (self._ints, self._floats), strict=True):
            f.seek(0, os.SEEK_END)
            buf.tofile(f)
        self._spilled += len(self._floats) // 2
        self._ints, self._floats = array("q"), array("d")

    def __len__(self) -> int:
        return self._spilled + len(self._floats) // 2

    @property
    def spilled(self) -> int:
        """Rows on disk (0 unless the log outgrew SPILL_ROWS)."""
        return self._spilled

    def block(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """Rows lo..hi as (ints, floats) matrices, columns as in INT_COLUMNS and FLOAT_COLUMNS (read-only)."""
        hi = min(hi, len(self))
        lo = min(lo, hi)
        parts = []
        for width, dtype, buf, fi in ((7, np.int64, self._ints, 0), (2, np.float64, self._floats, 1)):
            pieces = []
            if lo < self._spilled:  # the part on disk
                a, b = lo, min(hi, self._spilled)
                f = self._files[fi]
                f.seek(a * width * 8)
                pieces.append(np.fromfile(f, dtype=dtype, count=(b - a) * width).reshape(-1, width))
            if hi > self._spilled:  # the part in memory
                a, b = max(lo, self._spilled) - self._spilled, hi - self._spilled
                pieces.append(np.frombuffer(buf, dtype=dtype).reshape(-1, width)[a:b])
            parts.append(pieces[0] if len(pieces) == 1 else np.concatenate(pieces))
        return parts[0], parts[1]

    def chunks(self, rows: int = CHUNK_ROWS) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """All rows in order, `rows` at a time, as `block` gives them."""
        for lo in range(0, len(self), rows):
            yield self.block(lo, lo + rows)

    def column(self, name: str) -> np.ndarray:
        """One column over all rows (a copy once rows have spilled; do not add rows meanwhile)."""
        return self.columns(0, len(self))[name]

    def columns(self, lo: int, hi: int, step: int = 1) -> dict[str, np.ndarray]:
        """Rows lo, lo+step, ... < hi, column by column; read a chunk at a time, so a sparse sample of a
        spilled log never holds the rows it skips."""
        hi = min(hi, len(self))
        piece = step * max(1, CHUNK_ROWS // step)  # a multiple of step: every piece starts on the grid
        ints, floats = [], []
        for a in range(lo, hi, piece):
            i, f = self.block(a, min(a + piece, hi))
            if step > 1:  # copies: a strided view would keep the whole piece alive until the concatenation
                i, f = i[::step].copy(), f[::step].copy()
            ints.append(i)
            floats.append(f)
        i = np.concatenate(ints) if ints else np.zeros((0, 7), np.int64)
        f = np.concatenate(floats) if floats else np.zeros((0, 2), np.float64)
        out = {}
        for c in COLUMNS:
            if c in FLOAT_COLUMNS:
                out[c] = f[:, FLOAT_COLUMNS.index(c)]
            else:
                out[c] = i[:, INT_COLUMNS.index(c)]
        return out

    def to_frame(self) -> pd.DataFrame:
        return self.frame(0, len(self))

    def frame(self, lo: int, hi: int, step: int = 1) -> pd.DataFrame:
        """Rows lo, lo+step, ... < hi as a DataFrame (--format parquet and the in-memory API use it)."""
        import pandas as pd

        return pd.DataFrame({c: v.copy() for c, v in self.columns(lo, hi, step).items()})
