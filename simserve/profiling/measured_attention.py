"""Attention times from the measured tables, for the deployment's heads per GPU, chunks, prefixes and
contexts.

The package measures attention at fixed (q heads, kv heads, head dim) per GPU. A deployment's heads map onto
them in one of three ways, best first:
  1. the same heads: measured (or interpolated between measured batch sizes and lengths);
  2. heads folded into the batch (DERIVED): (b, H, Hkv) does exactly the work of (b·f, H/f, Hkv/f) — each kv
     head and its H/Hkv query heads are independent units of work, and the kernels spread them over CTAs as
     they spread requests — so Llama-2-7B's 32 kv heads (MHA) read the measured 8-kv-head rows at 4× the
     batch;
  3. linear interpolation between the two nearest measured query-head counts at the same kv heads (compute
     grows linearly in query heads); beyond them, in proportion (EXTRAPOLATED).

Context (prefill) rows hold whole prompts only (no cached prefix). A chunk of c new tokens over p cached ones
costs its own causal triangle plus a c × p rectangle of scores. The rectangle comes from the same table: a 2c
prompt is two c triangles plus one c × c rectangle, and a batch of two c prompts is the two triangles with the
same number of query tiles, so rect(c) = T(1, 2c) − T(2, c), and c × p costs rect(c)·p/c (DERIVED). It cannot
be cheaper than reading the prefix's KV once, which a decode step of one request over p + c tokens measures:
that is the floor.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from simserve.errors import SimserveError
from simserve.profiling.measured_grid import (
    DERIVED,
    EXTRAPOLATED,
    INTERPOLATED,
    MEASURED,
    bracket,
    loglog,
    point_kind,
)


def _combine(xs: list[float], vals: list[np.ndarray], x: float, kinds: list[np.ndarray], grid) -> tuple:
    """Interpolate per-point series `vals` (one per xs) at x, log-log; kinds: the worst of the inputs and of
    x."""
    kind = np.maximum.reduce([np.asarray(k) for k in kinds])
    kind = np.maximum(kind, point_kind(grid, x))
    if len(xs) == 1:
        return vals[0], kind
    (x0, x1), (v0, v1) = xs, vals
    slope = np.log(v1 / v0) / np.log(x1 / x0)
    if not x0 < x < x1:
        slope = np.clip(slope, 0.0, 2.0)
    return v0 * np.exp(slope * np.log(x / x0)), kind


@dataclass
class HeadTable:
    """One kernel's rows for one head shape: time(batch, length) by interpolation on the measured grid."""

    rows: pd.DataFrame  # batch_size, length, latency
    length_first: bool  # interpolate along length per batch (prefill), else along batch per length (decode)

    def __post_init__(self) -> None:
        # NOTE: the rows of each outer grid value as arrays, in table order (what a boolean selection gives),
        # and each decode interpolation along batch once per (grid length, batch): a decode table asks for
        # every length of the profile grid, and selecting rows with pandas per length was most of a cold plan.
        outer, inner = ("batch_size", "length") if self.length_first else ("length", "batch_size")
        keys = self.rows[outer].to_numpy()
        inner_v, lat = self.rows[inner].to_numpy(), self.rows["latency"].to_numpy()
        self._grid = self.rows[outer].unique()
        self._groups = {x: (inner_v[keys == x], lat[keys == x]) for x in self._grid.tolist()}
        self._along_batch: dict[tuple[float, float], tuple[np.ndarray, np.ndarray]] = {}

    def prime(self, batches: np.ndarray) -> None:
        """Interpolate along batch at every grid length for all of `batches` in one call each, rather than one
        call per (length, batch) in `time`: loglog is elementwise in its query points, so the values are the
        same."""
        for x in self._grid.tolist():
            try:
                values, kinds = loglog(*self._group(x), batches)
            except ValueError:  # no usable rows at this length: left to `time`, which raises if it needs them
                continue
            for b, v, k in zip(batches.tolist(), values, kinds, strict=True):
                self._along_batch[(float(x), b)] = (np.array([v]), np.array([k]))

    def _group(self, x: float) -> tuple[np.ndarray, np.ndarray]:
        return self._groups[x]

    def time(self, batch: float, lengths) -> tuple[np.ndarray, np.ndarray]:
        lengths = np.atleast_1d(np.asarray(lengths, dtype=float))
        if self.length_first:
            xs = bracket(self._grid, batch)
            vals, kinds = [], []
            for x in xs:
                inner, lat = self._group(x)
                v, k = loglog(inner, lat, lengths)
                vals.append(v)
                kinds.append(k)
            return _combine(xs, vals, batch, kinds, self._grid)
        # decode: per measured length, along batch (each grid length once per batch); then across lengths,
        # every requested length at once: the same arithmetic as _combine's, elementwise
        grid = np.unique(np.asarray(self._grid, dtype=float))
        i = np.searchsorted(grid, lengths)
        exact = (i < len(grid)) & (grid[np.minimum(i, len(grid) - 1)] == lengths)
        i0 = np.where(exact, i, np.clip(i - 1, 0, len(grid) - 2))
        i1 = np.where(exact, i, i0 + 1)
        if len(grid) == 1:
            i0 = i1 = np.zeros(len(lengths), dtype=int)
        vg, kg = np.empty(len(grid)), np.zeros(len(grid), dtype=int)
        for j in np.unique(np.concatenate([i0, i1])).tolist():
            x = float(grid[j])
            v, k = self._along_batch.get((x, batch), (None, None))
            if v is None:
                v, k = self._along_batch[(x, batch)] = loglog(*self._group(x), [batch])
            vg[j], kg[j] = v[0], k[0]
        x0, x1, v0, v1 = grid[i0], grid[i1], vg[i0], vg[i1]
        pair = ~exact & (i0 != i1)
        with np.errstate(divide="ignore", invalid="ignore"):
            slope = np.log(v1 / v0) / np.log(x1 / x0)
            slope = np.where((x0 < lengths) & (lengths < x1), slope, np.clip(slope, 0.0, 2.0))
            out = np.where(pair, v0 * np.exp(slope * np.log(lengths / x0)), v0)
        where = np.where(
            exact, MEASURED, np.where((grid[0] < lengths) & (lengths < grid[-1]), INTERPOLATED, EXTRAPOLATED)
        )  # point_kind, elementwise
        return out, np.maximum(np.maximum(kg[i0], kg[i1]), where)


class HeadResolver:
    """time(batch, lengths) for the deployment's (q heads, kv heads) from the measured head shapes."""

    def __init__(self, df: pd.DataFrame, q_heads: int, kv_heads: int, length_first: bool, where: str):
        self.df, self.length_first, self.where = df, length_first, where
        shapes = set(
            map(tuple, df[["num_heads", "num_key_value_heads"]].drop_duplicates().to_numpy().tolist())
        )
        self.fold, self.kind = 1, 0
        folds = [f for f in range(1, kv_heads + 1) if q_heads % f == 0 and kv_heads % f == 0]
        exact = [f for f in folds if (q_heads // f, kv_heads // f) in shapes]
        if exact:
            self.fold = exact[0]
            self.heads = [q_heads // self.fold]
            self.kind = DERIVED if self.fold > 1 else 0
        else:

            def inside(f: int) -> bool:  # measured query-head counts on both sides at this fold's kv heads
                hs = [h for h, kv in shapes if kv == kv_heads // f]
                return bool(hs) and min(hs) < q_heads / f < max(hs)

            usable = [f for f in folds if any(kv == kv_heads // f for _, kv in shapes)]
            f = next((f for f in usable if inside(f)), usable[0] if usable else None)
            if f is None:
                have = ", ".join(f"{h}/{kv}" for h, kv in sorted(shapes))
                raise SimserveError(
                    f"{where}: no rows for {kv_heads} kv heads per GPU or a divisor of it; "
                    f"measured q/kv heads: {have}; use --backend roofline"
                )
            self.fold = f
            hs = sorted(h for h, kv in shapes if kv == kv_heads // f)
            self.heads = bracket(hs, q_heads / f)
            self.kind = INTERPOLATED if hs[0] < q_heads / f < hs[-1] else EXTRAPOLATED
            self.kind = max(self.kind, DERIVED) if f > 1 else self.kind
        self.q = q_heads / self.fold
        self.kv = kv_heads // self.fold
        self.tables = {h: self._table(h) for h in self.heads}

    def _table(self, heads: float) -> HeadTable:
        sel = self.df[(self.df["num_heads"] == heads) & (self.df["num_key_value_heads"] == self.kv)]
        return HeadTable(sel[["batch_size", "length", "latency"]], self.length_first)

    def prime(self, batches: np.ndarray) -> None:
        """Decode tables: interpolate along batch for all of `batches` at once (HeadTable.prime)."""
        for table in self.tables.values():
            table.prime(batches * self.fold)

    def time(self, batch: float, lengths) -> tuple[np.ndarray, np.ndarray]:
        b = batch * self.fold
        parts = [self.tables[h].time(b, lengths) for h in self.heads]
        if len(parts) == 1:
            v, k = parts[0]
        else:  # linear in query heads between (or beyond) the two measured head counts
            (h0, h1), ((v0, k0), (v1, k1)) = self.heads, parts
            w = (self.q - h0) / (h1 - h0)
            v, k = np.maximum(v0 + w * (v1 - v0), 1e-6), np.maximum(k0, k1)
        return v, np.maximum(k, self.kind)


def _rows(df: pd.DataFrame, head_dim: int, kv_dtype: str, phase: str, where: str) -> tuple[pd.DataFrame, str]:
    sel = df[(df["head_dim"] == head_dim) & (df["kv_cache_dtype"] == kv_dtype) & (df["window_size"] == 0)]
    if sel.empty:
        raise SimserveError(
            f"{where}: no {phase} rows for head dim {head_dim} with a {kv_dtype} KV cache; "
            f"measured head dims: {sorted(df['head_dim'].unique().tolist())}"
        )
    # The kernel the package measured most for this shape: the engine's default path on this GPU.
    counts = sel.groupby("kernel_source").size()
    kernel = str(sorted(counts.index, key=lambda k: (-counts[k], k))[0])
    sel = sel[sel["kernel_source"] == kernel].copy()
    sel["length"] = sel["isl"] + (sel["step"] if phase == "decode" else 0)
    sel = sel.groupby(["num_heads", "num_key_value_heads", "batch_size", "length"], as_index=False)["latency"]
    return sel.median(), kernel


class Attention:
    """Measured prefill and decode attention for one head shape per GPU."""

    def __init__(
        self,
        prefill: pd.DataFrame,
        decode: pd.DataFrame,
        q_heads: int,
        kv_heads: int,
        head_dim: int,
        kv_dtype: str,
        where: str,
        selected: dict | None = None,
    ):
        # `selected`: the rows _rows chose, kept by the caller across deployments of one profile (every TP
        # degree reads the same head dim and KV dtype; only the heads per GPU differ)
        selected = {} if selected is None else selected
        for phase, df in (("prefill", prefill), ("decode", decode)):
            if (phase, head_dim, kv_dtype) not in selected:
                selected[(phase, head_dim, kv_dtype)] = _rows(df, head_dim, kv_dtype, phase, where)
        pre, self.prefill_kernel = selected[("prefill", head_dim, kv_dtype)]
        dec, self.decode_kernel = selected[("decode", head_dim, kv_dtype)]
        self.pre = HeadResolver(pre, q_heads, kv_heads, True, where)
        self.dec = HeadResolver(dec, q_heads, kv_heads, False, where)

    def decode(self, batch, kv_len, window: int | None) -> tuple[np.ndarray, np.ndarray]:
        batch, kv_len = np.asarray(batch), np.asarray(kv_len, dtype=float)
        if window:
            kv_len = np.minimum(kv_len, window)  # a sliding window reads only its last `window` tokens
        out, kind = np.empty(len(batch)), np.empty(len(batch), dtype=int)
        self.dec.prime(np.unique(batch).astype(float))
        for b in np.unique(batch):
            sel = batch == b
            out[sel], kind[sel] = self.dec.time(float(b), kv_len[sel])
        return out, kind

    def prefill(self, chunk, prefix, window: int | None) -> tuple[np.ndarray, np.ndarray]:
        chunk, prefix = np.asarray(chunk, dtype=float), np.asarray(prefix, dtype=float)
        if window:
            prefix = np.minimum(prefix, window)  # the chunk's queries see at most `window` cached keys
        own, k_own = self.pre.time(1, chunk)
        whole, k_whole = self.pre.time(1, 2 * chunk)
        pair, k_pair = self.pre.time(2, chunk)
        rect = np.maximum(whole - pair, 0.0)
        floor, k_floor = self.dec.time(1, prefix + chunk)
        with_prefix = np.maximum(own + rect * prefix / chunk, floor)
        derived = np.maximum.reduce([k_own, k_whole, k_pair, k_floor, np.full(len(chunk), DERIVED)])
        has_prefix = prefix > 0
        return np.where(has_prefix, with_prefix, own), np.where(has_prefix, derived, k_own)
