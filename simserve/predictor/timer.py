"""The compiled BatchTimer: iteration time of a batch on a pipeline stage from precomputed tables.

Stage time = Σ over the stage's layers [linear + elementwise ops on T + prefill attention per chunk + decode
attention + TP all-reduces of T·hidden·2 bytes] + the send of T·hidden·2 bytes to the next stage + the CPU
overhead charged to the stage, with T = Σ prefill chunks + number of decodes (+ a speculative verification's
drafts, which share their request's one decode-attention read: __call__'s `drafts`). Everything that depends
only on T is one table per stage; attention comes from two small grids. The hot path is plain Python
arithmetic on lists (indexing a list is several times faster than indexing a numpy array element by element).

Decode attention is looked up at the batch's mean context length: decode kernels split the work over requests,
heads and KV blocks, so their time follows the total bytes read (b · mean L) much more than the spread of L.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from simserve.deployment import Deployment
from simserve.predictor.overhead import CpuOverhead
from simserve.predictor.step import NO_LAUNCH, LaunchCosts

if TYPE_CHECKING:  # fit/tables import scikit-learn and pandas; a timer loaded from the cache needs neither
    from simserve.predictor.fit import Predictor

_add_reduce = np.add.reduce  # a bound ufunc method: less call overhead than ndarray.sum on small arrays

COMPONENTS = (
    "linear",
    "elementwise",
    "attention_prefill",
    "attention_decode",
    "all_reduce",
    "send_recv",
    "cpu_overhead",
)


class BatchTimer:
    """Seconds per iteration of a batch on one pipeline stage. Built by `Predictor.compile(dep)`."""

    num_stages: int

    def __init__(self, dep: Deployment, predictor: Predictor, overhead: CpuOverhead) -> None:
        self.deployment = dep
        self.num_stages = dep.pp
        self.overhead = overhead
        from simserve.predictor.tables import decode_table, prefill_table, token_tables

        tok = token_tables(predictor, dep)
        self._tokens = tok
        self._tend = tok.end
        self._tok_np = self._stage_tables()
        common = tok.slopes["linear"] + tok.slopes["elementwise"] + tok.slopes["all_reduce"]
        self._tslope = [common + tok.send_recv_slopes[s] for s in range(dep.pp)]

        dec, self._dl = decode_table(predictor, dep)
        self._dec_np = dec
        self._bmax = dec.shape[0] - 1
        self._bhalf = max(self._bmax // 2, 1)
        self._jlast = dec.shape[1] - 2  # last interpolation cell; beyond it the cell's slope extrapolates

        pre, self._dc, self._dp = prefill_table(predictor, dep)
        self._pre_np = pre
        self._ilast = pre.shape[0] - 2
        self._klast = pre.shape[1] - 2

        self._set_cpu(overhead)
        self.set_launch(NO_LAUNCH)

    def _set_cpu(self, overhead: CpuOverhead) -> None:
        coeffs = [overhead.stage_coefficients(s, self.num_stages) for s in range(self.num_stages)]
        # per stage: (a, b, c) seconds of a + b·num_reqs + c·num_tokens, by role (predictor/overhead.py)
        self._cpu_gpu = [c.gpu for c in coeffs]
        self._cpu_ovl = [c.overlap for c in coeffs]
        self._cpu_ser = [c.serial for c in coeffs]
        self._cpu_pre = [c.prefill for c in coeffs]  # per prefill chunk: (gpu, overlap, serial) seconds

    def set_launch(self, costs: LaunchCosts) -> None:
        """Charge vLLM's launch costs (predictor/step.py): per stage and mode, GPU gap and CPU launch
        seconds."""
        pp = self.num_stages
        self._launch_gpu = [list(costs.gpu[min(s, len(costs.gpu) - 1)]) for s in range(pp)]
        self._launch_cpu = [list(costs.cpu[min(s, len(costs.cpu) - 1)]) for s in range(pp)]
        self._launch_cap = costs.cap

    def _stage_tables(self) -> np.ndarray:
        tok = self._tokens
        return np.array(
            [tok.linear + tok.elementwise + tok.all_reduce + tok.send_recv[s] for s in range(self.num_stages)]
        )

    # NOTE: the tables as Python lists (_tok, _dec, _pre: indexing a list is several times faster than
    # indexing an array element by element) are built on first use, by this hook for attributes not yet set: a
    # run on the compiled core reads the arrays (_tok_np, _dec_np, _pre_np) and never needs them; building
    # them was ~20 ms of every timer a plan's workers loaded. The lists hold the arrays' floats: the same
    # times.
    def __getattr__(self, name: str):
        if name in ("_own", "_exp"):  # attention DP's lockstep tables (TokenTables.own / experts)
            tok = self._tokens
            if tok.own is None:
                raise ValueError("own_time/experts_time need an attention-DP deployment (dp > 1)")
            self._own, self._exp = tok.own.tolist(), tok.experts.tolist()
            return self.__dict__[name]
        if name in ("_tok", "_dec", "_pre"):
            self._tok = [row.tolist() for row in self._tok_np]
            self._dec = self._dec_np.tolist()
            self._pre = self._pre_np.tolist()
            return self.__dict__[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # -- lookups ------------------------------------------------------------------------------------------

    def _decode_row(self, b: int, mean_kv: float) -> float:
        row = self._dec[b]
        x = mean_kv / self._dl
        j = int(x)
        if j > self._jlast:
            j = self._jlast
        return row[j] + (x - j) * (row[j + 1] - row[j])

    def _decode(self, nd: int, kv_sum: float) -> float:
        mean_kv = kv_sum / nd
        if nd <= self._bmax:
            return self._decode_row(nd, mean_kv)
        hi, lo = self._decode_row(self._bmax, mean_kv), self._decode_row(self._bhalf, mean_kv)
        return hi + (nd - self._bmax) * (hi - lo) / (self._bmax - self._bhalf)

    def _prefill(self, chunk: int, prefix: int) -> float:
        x, y = chunk / self._dc, prefix / self._dp
        i, k = int(x), int(y)
        if i > self._ilast:
            i = self._ilast
        if k > self._klast:
            k = self._klast
        r0, r1 = self._pre[i], self._pre[i + 1]
        fy = y - k
        a = r0[k] + fy * (r0[k + 1] - r0[k])
        b = r1[k] + fy * (r1[k + 1] - r1[k])
        return a + (x - i) * (b - a)

    def _token_time(self, t: int, stage: int) -> float:
        if t <= self._tend:
            return self._tok[stage][t]
        return self._tok[stage][self._tend] + (t - self._tend) * self._tslope[stage]

    def _check_stage(self, stage: int) -> None:
        if not 0 <= stage < self.num_stages:
            raise ValueError(f"stage {stage} out of range for a {self.num_stages}-stage pipeline")

    # -- the simulator's API ------------------------------------------------------------------------------

    def _batch_attention(
        self, prefills: Sequence[tuple[int, int]], decode_kv: Sequence[int] | np.ndarray, drafts: int = 0
    ) -> tuple[int, int, float]:
        """(decode reads, tokens, attention seconds) of a batch: what __call__ and own_time both charge."""
        nd = len(decode_kv)
        t = nd + drafts
        attn = 0.0
        for chunk, prefix in prefills:
            t += chunk
            attn += self._prefill(chunk, prefix)
        if nd:
            kv_sum = float(_add_reduce(decode_kv)) if isinstance(decode_kv, np.ndarray) else sum(decode_kv)
            attn += self._decode(nd, kv_sum)
        return nd, t, attn

    def __call__(
        self,
        prefills: Sequence[tuple[int, int]],
        decode_kv: Sequence[int] | np.ndarray,
        stage: int = 0,
        drafts: int = 0,
    ) -> float:
        """Seconds for one iteration of this batch on pipeline stage `stage`.

        prefills: (chunk_tokens, prefix_tokens) per prefill request (prefix = tokens already in KV);
        decode_kv: per decode request, the context length its attention reads;
        drafts: decode tokens beyond one per decode_kv entry that read no KV of their own -- a speculative
        verification's drafts, whose queries the decode kernel runs with their request's own over one read of
        its KV (its decode_kv entry: all c + 1 + s keys; docs/speculative.md, Costs). They are tokens of the
        linear layers and rows of the per-request CPU terms, as they were when priced as decodes of their own.
        """
        if not 0 <= stage < self.num_stages:
            self._check_stage(stage)
        nd, t, attn = self._batch_attention(prefills, decode_kv, drafts)
        if t == 0:  # no decodes and no prefill tokens
            return 0.0
        tok = self._tok[stage][t] if t <= self._tend else self._token_time(t, stage)
        return self._compose(tok + attn, len(prefills), len(prefills) + nd + drafts, t, stage)

    def _compose(self, kernels: float, num_prefills: int, n: int, t: int, stage: int) -> float:
        """The step from its kernels (predictor/step.py): max(GPU side, overlapping CPU side) + serial CPU.
        NOTE: with every overlap, per-prefill and launch term 0 these are the float operations of the plain
        sum kernels + a + b·n (+ 0.0·t + 0.0·p), so runs without the overlap model keep their last bits."""
        mode = 2 if t > self._launch_cap else (1 if num_prefills else 0)
        pg, po, ps = self._cpu_pre[stage]
        ga, gb, gc = self._cpu_gpu[stage]
        gpu = kernels + ga + gb * n + gc * t + pg * num_prefills + self._launch_gpu[stage][mode]
        oa, ob, oc = self._cpu_ovl[stage]
        cpu = oa + ob * n + oc * t + po * num_prefills + self._launch_cpu[stage][mode]
        if cpu > gpu:
            gpu = cpu
        sa, sb, sc = self._cpu_ser[stage]
        return gpu + sa + sb * n + sc * t + ps * num_prefills

    # -- attention DP's lockstep step (simserve/sim/lockstep.py) --------------------------------------------

    def own_time(
        self, prefills: Sequence[tuple[int, int]], decode_kv: Sequence[int] | np.ndarray, pad_to: int = 0
    ) -> tuple[float, int]:
        """One DP rank's own part of a lockstep step and its token count: everything __call__ charges except
        the routed experts and the ranks' exchange (attention, dense and shared-expert layers, TP all-reduces,
        CPU overhead). Attention DP runs at PP 1 (Deployment refuses more), so this is stage 0. `pad_to`: the
        token count the rank's layers run at when vLLM pads every rank to the largest (CUDA graphs)."""
        nd, t, attn = self._batch_attention(prefills, decode_kv)
        if t == 0:  # no decodes and no prefill tokens
            return 0.0, 0
        end, x = self._tend, max(t, pad_to)
        tok = self._own[x] if x <= end else self._own[end] + (x - end) * self._tokens.own_slope
        return self._compose(tok + attn, len(prefills), len(prefills) + nd, x, 0), t

    def experts_time(self, tokens: int) -> float:
        """The routed experts and the DP ranks' exchange for `tokens` summed over every rank of the step."""
        exp = self._exp
        last = len(exp) - 1
        if tokens <= last:
            return exp[tokens]
        return exp[last] + (tokens - last) * self._tokens.experts_slope

    def breakdown(
        self,
        prefills: Sequence[tuple[int, int]],
        decode_kv: Sequence[int] | np.ndarray,
        stage: int = 0,
        drafts: int = 0,
    ) -> dict[str, float]:
        """Seconds per component of __call__'s total (they sum to it)."""
        self._check_stage(stage)
        nd = len(decode_kv)
        t = nd + drafts + sum(c for c, _ in prefills)
        out = dict.fromkeys(COMPONENTS, 0.0)
        if t == 0:
            return out
        tok = self._tokens
        for name, arr in (
            ("linear", tok.linear),
            ("elementwise", tok.elementwise),
            ("all_reduce", tok.all_reduce),
        ):
            out[name] = float(arr[min(t, tok.end)]) + max(t - tok.end, 0) * tok.slopes[name]
        out["send_recv"] = (
            float(tok.send_recv[stage][min(t, tok.end)]) + max(t - tok.end, 0) * tok.send_recv_slopes[stage]
        )
        out["attention_prefill"] = float(sum(self._prefill(c, p) for c, p in prefills))
        if nd:
            kv_sum = float(np.sum(decode_kv))
            out["attention_decode"] = self._decode(nd, kv_sum)
        n = len(prefills) + nd + drafts
        kernels = sum(out.values())
        out["cpu_overhead"] = self._compose(kernels, len(prefills), n, t, stage) - kernels
        return out

    def __repr__(self) -> str:
        return f"BatchTimer({self.deployment.describe()})"

    # Pickled into $SIMSERVE_CACHE/timer/: the list copies of the tables (kept for fast scalar indexing) are
    # rebuilt from the arrays on load, which halves the file (5.8 → 2.7 MB for Mistral-7B); the rebuilt lists
    # hold the same floats, so a cached timer gives bit-identical times.
    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        for name in ("_tok", "_dec", "_pre", "_tok_np", "_pre_np", "_own", "_exp"):
            state.pop(name, None)
        state["_pre"] = self._pre_np  # the pickled layout of timer_cache FORMAT 3: _pre as an array
        return state

    def __setstate__(self, state: dict) -> None:
        state = dict(state)
        pre = state.pop("_pre")
        # a timer cached before per-prefill-chunk CPU terms existed had none: zeros, the same times
        state.setdefault("_cpu_pre", [(0.0, 0.0, 0.0)] * state["num_stages"])
        self.__dict__.update(state)
        self._pre_np = np.asarray(pre, dtype=np.float64)
        self._tok_np = self._stage_tables()


def compile_timer(predictor: Predictor, dep: Deployment, overhead: CpuOverhead | None = None) -> BatchTimer:
    """Check the predictor covers `dep` (TP degree, links), then evaluate its models onto tables."""
    from simserve.predictor.coverage import require

    require(set(predictor.models), dep, predictor.profile_path)
    return BatchTimer(dep, predictor, overhead or CpuOverhead())
