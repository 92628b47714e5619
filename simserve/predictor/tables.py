"""Evaluate fitted models once onto lookup tables for one deployment (what `Predictor.compile` builds).

Tables hold seconds for a whole pipeline stage (per-layer times × layers per stage) so the BatchTimer only
indexes and adds. Ranges reach at least the sizes a serving policy forms (16k tokens per batch, batch 256,
16k context) even when the profile stops earlier: inside that range the fitted model extrapolates along its
physics baseline (regressor.py); beyond the tables, times grow linearly with the last slope.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from simserve import numerics
from simserve.deployment import Deployment
from simserve.ops import (
    ELEMENTWISE_OPS,
    a2a_bytes,
    a2a_op,
    all_reduce_bytes,
    all_reduces_per_layer,
    elementwise_ops,
    exchange_bytes,
    expert_tokens,
    fused_expert_name,
    send_recv_bytes,
    timed_linear_ops,
)

# fit imports scikit-learn; a compiled timer unpickled from the cache refers to TokenTables only
if TYPE_CHECKING:
    from simserve.predictor.fit import Predictor
    from simserve.predictor.fitted import Fitted, ModelKey

TOKENS_TABLE = (16384, 32768)  # dense per-token table: at least, at most
DECODE_BATCH_TABLE = 256
CONTEXT_TABLE = 16384
KV_STEP = 16  # decode context grid step (the KV block size)
CHUNK_STEP = 16
PREFIX_STEP = 256  # prefill attention is linear in the prefix: a coarse grid loses nothing
COLLECTIVE_POINTS_PER_OCTAVE = 8
MS = 1e-3


@dataclass(frozen=True)
class CollectiveCurve:
    """Time (s) by message size, log-log interpolated between model evaluations; linear in size beyond
    them."""

    log_sizes: np.ndarray
    log_times: np.ndarray
    max_size: float
    max_time: float
    slope: float  # s per byte beyond max_size (secant over the last octave: the bandwidth regime)

    @classmethod
    def build(cls, fitted: Fitted) -> CollectiveCurve:
        sizes = fitted.points["size_bytes"]
        lo, hi = max(float(sizes.min()), 1.0), max(float(sizes.max()), 2.0)
        n = max(int(math.log2(hi / lo) * COLLECTIVE_POINTS_PER_OCTAVE) + 1, 2)
        grid = numerics.geomspace(lo, hi, n)
        t = np.maximum(fitted.model.predict(grid), 1e-9) * MS
        half = np.maximum(fitted.model.predict(np.array([hi / 2])), 1e-9)[0] * MS
        slope = max((t[-1] - half) / (hi / 2), 0.0)
        return cls(numerics.log(grid), numerics.log(t), hi, float(t[-1]), float(slope))

    def __call__(self, size_bytes: np.ndarray) -> np.ndarray:
        s = np.maximum(np.asarray(size_bytes, dtype=float), 1.0)
        # Clamped below the smallest size: latency-bound messages cost the same. (simserve.numerics, not
        # np.log/np.interp/np.exp, whose last bits differ between numpy releases and CPUs.)
        inside = numerics.exp(numerics.interp(numerics.log(s), self.log_sizes, self.log_times))
        return np.where(s > self.max_size, self.max_time + (s - self.max_size) * self.slope, inside)


def _model(predictor: Predictor, key: ModelKey) -> Fitted:
    return predictor.models[key]


# Raw model predictions on a table's grid, by (model, grid): deployments that share a model (fit.py keeps one
# fitted model per profile, seed and key in a process) and a grid — every PP degree of one TP degree — get the
# very array the first one computed, instead of running the trees again. Values are the model's own output
# (before the per-deployment scaling), never written to by the callers. Keyed by the model object, which the
# entry holds, so its id cannot be reused while the entry exists.
_PREDICTED: OrderedDict[tuple, tuple[Fitted, np.ndarray]] = OrderedDict()
MAX_PREDICTED = 64


def _predict(fitted: Fitted, grid: tuple, *columns: np.ndarray) -> np.ndarray:
    key = (id(fitted), grid)
    hit = _PREDICTED.get(key)
    if hit is not None and hit[0] is fitted:
        _PREDICTED.move_to_end(key)
        return hit[1]
    out = fitted.model.predict(*columns)
    _PREDICTED[key] = (fitted, out)
    if len(_PREDICTED) > MAX_PREDICTED:
        _PREDICTED.popitem(last=False)
    return out


@dataclass(frozen=True)
class TokenTables:
    """Per-stage time of everything that depends only on the batch's token count T, for T = 0..end."""

    end: int
    linear: np.ndarray
    elementwise: np.ndarray
    all_reduce: np.ndarray
    send_recv: list[np.ndarray]  # per stage; zeros on the last stage
    slopes: dict[str, float]  # seconds per token beyond `end`, per component
    send_recv_slopes: list[float]
    # Attention DP's lockstep (sim/lockstep.py): one rank's own time on T tokens (everything but the routed
    # experts and the ranks' exchange), and the experts + exchange of X tokens summed over all ranks, for
    # X = 0..dp·end; None when dp is 1.
    own: np.ndarray | None = None
    experts: np.ndarray | None = None
    own_slope: float = 0.0
    experts_slope: float = 0.0


def token_tables(predictor: Predictor, dep: Deployment) -> TokenTables:
    from simserve.predictor.coverage import find_collective, node_link, stage_link
    from simserve.predictor.fitted import ModelKey

    tp, layers = dep.tp, dep.layers_per_stage
    linear = timed_linear_ops(dep)  # a MoE layer's ops run on a share of the layers (ops.LinearOp.share)
    fits = [_model(predictor, ModelKey("linear", op, tp)) for op, _ in linear]
    counts = {op.name: op.count for op in elementwise_ops(dep)}
    ew_fits = [(_model(predictor, ModelKey("elementwise", op, tp)), counts[op]) for op in ELEMENTWISE_OPS]
    profiled = max(int(f.points["num_tokens"].max()) for f in [*fits, *(f for f, _ in ew_fits)])
    end = int(np.clip(profiled, *TOKENS_TABLE))
    far = max(profiled, 2 * end)
    t = np.arange(end + 1, dtype=float)
    t[0] = 1.0  # evaluated at 1 token, then zeroed: an empty batch takes no time
    probe = np.array([end, far], dtype=float)

    def total(parts: list[tuple[Fitted, int]], x: np.ndarray) -> np.ndarray:
        grid = ("tokens", x.tobytes())
        return layers * MS * sum(c * np.maximum(_predict(f, grid, x), 0.0) for f, c in parts)

    # Under attention DP the routed experts run every rank's tokens (ops.expert_tokens): their op is read
    # there.
    experts = fused_expert_name(dep) if dep.dp > 1 else None
    lin_parts = [(f, share) for f, (op, share) in zip(fits, linear, strict=True) if op != experts]
    moe_parts = [(f, share) for f, (op, share) in zip(fits, linear, strict=True) if op == experts]
    lin, ew = total(lin_parts, t), total(ew_fits, t)
    lin_probe, ew_probe = total(lin_parts, probe), total(ew_fits, probe)
    lin_own, lin_own_probe = lin, lin_probe
    if moe_parts:
        lin = lin + total(moe_parts, expert_tokens(dep, t))
        lin_probe = lin_probe + total(moe_parts, expert_tokens(dep, probe))
    tokens = np.array([0.0, float(end), float(far)])
    ar = np.zeros(end + 1)
    ar_slope = 0.0
    if (n_ar := all_reduces_per_layer(dep)) > 0:
        curve = CollectiveCurve.build(
            _model(predictor, find_collective(predictor.models, "all_reduce", node_link(dep), tp))
        )
        per_token = all_reduce_bytes(dep, 1)  # bytes are linear in T
        ar = layers * n_ar * curve(t * per_token)
        ends = layers * n_ar * curve(tokens[1:] * per_token)
        ar_slope = (ends[1] - ends[0]) / (far - end)
    ar_own, ar_own_slope = ar.copy(), ar_slope
    lockstep = {}
    # each MoE layer's dispatch + combine over the DP ranks (ops.exchange_bytes), with the all-reduces
    if dep.dp > 1:
        if (op := a2a_op(dep)) is not None:  # DeepEP: the measured dispatch + combine of one rank's tokens
            curve = CollectiveCurve.build(
                _model(predictor, find_collective(predictor.models, op, node_link(dep), dep.ep))
            )
            moe_layers, per_token = layers * dep.model.moe_layers / dep.model.num_layers, a2a_bytes(dep, 1)
        else:  # allgather_reducescatter: two collectives per MoE layer
            curve = CollectiveCurve.build(
                _model(predictor, find_collective(predictor.models, "all_reduce", node_link(dep), dep.dp))
            )
            moe_layers = 2 * layers * dep.model.moe_layers / dep.model.num_layers
            per_token = exchange_bytes(dep, 1)
        ar = ar + moe_layers * curve(t * per_token)
        ends = moe_layers * curve(tokens[1:] * per_token)
        ar_slope += (ends[1] - ends[0]) / (far - end)
        lockstep = _lockstep_tables(
            dep,
            total,
            moe_parts,
            curve,
            moe_layers,
            per_token,
            end,
            far,
            t,
            lin_own,
            lin_own_probe,
            ew,
            ew_probe,
            ar_own,
            ar_own_slope,
        )
    sr, sr_slopes = [], []
    hidden_bytes = send_recv_bytes(dep, 1)
    for stage in range(dep.pp):
        if stage == dep.pp - 1:
            sr.append(np.zeros(end + 1))
            sr_slopes.append(0.0)
            continue
        key = find_collective(predictor.models, "send_recv", stage_link(dep, stage), None)
        curve = CollectiveCurve.build(_model(predictor, key))
        sr.append(curve(t * hidden_bytes))
        ends = curve(tokens[1:] * hidden_bytes)
        sr_slopes.append(float((ends[1] - ends[0]) / (far - end)))
    for arr in (lin, ew, ar, *sr):
        arr[0] = 0.0
    slopes = {
        "linear": float((lin_probe[1] - lin_probe[0]) / (far - end)),
        "elementwise": float((ew_probe[1] - ew_probe[0]) / (far - end)),
        "all_reduce": float(ar_slope),
    }
    return TokenTables(end, lin, ew, ar, sr, slopes, sr_slopes, **lockstep)


def _lockstep_tables(
    dep,
    total,
    moe_parts,
    curve,
    moe_layers,
    per_token,
    end,
    far,
    t,
    lin_own,
    lin_own_probe,
    ew,
    ew_probe,
    ar_own,
    ar_own_slope,
) -> dict:
    """TokenTables' `own` and `experts` for attention DP's lockstep step (sim/lockstep.py).

    The per-rank tables above read the experts at dp × the rank's tokens (the balanced case); here they are
    read at the tokens all ranks hold together, X = 0..dp·end, so a step's experts see each rank's real load.
    exchange_bytes(dep, 1) is per rank token × dp, so its curve is read at X·per_token/dp: the same bytes at X
    = dp·T as the per-rank table at T."""
    own = lin_own + ew + ar_own
    own[0] = 0.0
    own_slope = (
        float((lin_own_probe[1] - lin_own_probe[0]) / (far - end))
        + float((ew_probe[1] - ew_probe[0]) / (far - end))
        + float(ar_own_slope)
    )
    x_end = dep.dp * end
    x = np.arange(x_end + 1, dtype=float)
    x[0] = 1.0
    per_x = per_token / dep.dp  # exchange bytes per token summed over the ranks
    experts = moe_layers * curve(x * per_x)
    xp = np.array([float(x_end), float(dep.dp * far)])
    ends = moe_layers * curve(xp * per_x)
    if moe_parts:
        experts = experts + total(moe_parts, x)
        ends = ends + total(moe_parts, xp)
    experts[0] = 0.0
    return {
        "own": own,
        "experts": experts,
        "own_slope": own_slope,
        "experts_slope": float((ends[1] - ends[0]) / (xp[1] - xp[0])),
    }


def decode_table(predictor: Predictor, dep: Deployment) -> tuple[np.ndarray, float]:
    """Stage seconds of decode attention for b = 0..B requests (rows) at mean context j·step (columns)."""
    from simserve.predictor.fitted import ModelKey

    fitted = _model(predictor, ModelKey("attention_decode", "decode", dep.tp))
    bmax = max(int(fitted.points["batch_size"].max()), DECODE_BATCH_TABLE)
    lmax = max(float(fitted.points["kv_len"].max()), CONTEXT_TABLE)
    step = KV_STEP * max(1, int(np.ceil(lmax / 1024 / KV_STEP)))  # at most ~1k columns
    cols = int(np.ceil(lmax / step)) + 1
    b, kv = np.meshgrid(
        np.arange(1, bmax + 1, dtype=float), np.arange(cols, dtype=float) * step, indexing="ij"
    )
    ms = np.maximum(_predict(fitted, ("decode", bmax, cols, step), b.ravel(), kv.ravel()), 0.0).reshape(
        b.shape
    )
    table = np.vstack([np.zeros((1, cols)), ms * MS * dep.layers_per_stage])
    return table, float(step)


def prefill_table(predictor: Predictor, dep: Deployment) -> tuple[np.ndarray, float, float]:
    """Stage seconds of one prefill chunk's attention: rows chunk i·CHUNK_STEP, columns prefix
    k·PREFIX_STEP."""
    from simserve.predictor.fitted import ModelKey

    fitted = _model(predictor, ModelKey("attention_prefill", "prefill", dep.tp))
    cmax = max(float(fitted.points["chunk"].max()), CONTEXT_TABLE)
    pmax = max(float(fitted.points["kv_len"].max()), CONTEXT_TABLE)
    rows = int(np.ceil(cmax / CHUNK_STEP)) + 1
    cols = int(np.ceil(pmax / PREFIX_STEP)) + 1
    c, p = np.meshgrid(
        np.arange(rows, dtype=float) * CHUNK_STEP, np.arange(cols, dtype=float) * PREFIX_STEP, indexing="ij"
    )
    c[0, :] = 1.0  # the chunk-0 row holds the 1-token chunk, so chunks 1..15 interpolate from it
    # evaluated column by column (one prefix, growing chunks): the trees' answers then come in longer runs
    # (regressor.TreeEnsemble.predict); each point's value does not depend on the order
    by_prefix = _predict(fitted, ("prefill", rows, cols), c.T.ravel(), p.T.ravel())
    ms = np.maximum(by_prefix.reshape(cols, rows).T, 0.0)
    return ms * MS * dep.layers_per_stage, float(CHUNK_STEP), float(PREFIX_STEP)
