"""The BatchTimer's arithmetic (predictor/timer.py, sim/testing.py), operation for operation, for the core."""

from __future__ import annotations

import cython

from .consts import T_CONSTANT, T_LINEAR, T_TABLES

# NOTE: returned for "no prefills / no chunks" on the hot path instead of a fresh list; never mutated
_NONE: list = []


@cython.cclass
class Timer:
    """The BatchTimer's arithmetic (predictor/timer.py, sim/testing.py), operation for operation."""

    def __init__(self, kind: cython.int, num_stages: cython.int, p: dict):
        self.kind = kind
        self.num_stages = num_stages
        self.e = p.get("e", 0.0)
        if p.get("own") is not None:
            self.own, self.own_slope = p["own"], p["own_slope"]
            self.experts, self.experts_slope = p["experts"], p["experts_slope"]
            self.experts_last = len(p["experts"]) - 1
        if kind == T_TABLES:
            self.tok, self.tend, self.tslope = p["tok"], p["tend"], p["tslope"]
            self.dec, self.dl, self.bmax, self.bhalf, self.jlast = (
                p["dec"],
                p["dl"],
                p["bmax"],
                p["bhalf"],
                p["jlast"],
            )
            self.pre, self.dc, self.dp, self.ilast, self.klast = (
                p["pre"],
                p["dc"],
                p["dp"],
                p["ilast"],
                p["klast"],
            )
            self.cpu_gpu, self.cpu_ovl, self.cpu_ser = p["cpu_gpu"], p["cpu_ovl"], p["cpu_ser"]
            self.cpu_pre = p["cpu_pre"]
            self.launch_gpu, self.launch_cpu, self.launch_cap = (
                p["launch_gpu"],
                p["launch_cpu"],
                p["launch_cap"],
            )
            self.plain = p["plain"]
        else:
            self.a, self.b, self.c = p["a"], p["b"], p["c"]
        self.dummy_base = self.own_base(_NONE, _NONE, 1, 1)

    @cython.cfunc
    @cython.exceptval(check=False)  # NOTE: arithmetic only; no Python error to check for
    @cython.locals(x=cython.double, j=cython.longlong)
    def _decode_row(self, b: cython.longlong, mean_kv: cython.double) -> cython.double:
        x = mean_kv / self.dl
        j = cython.cast(cython.longlong, x) if cython.compiled else int(x)
        if j > self.jlast:
            j = self.jlast
        return self.dec[b, j] + (x - j) * (self.dec[b, j + 1] - self.dec[b, j])

    @cython.cfunc
    @cython.exceptval(check=False)  # NOTE: arithmetic only; no Python error to check for
    @cython.locals(mean_kv=cython.double, hi=cython.double, lo=cython.double)
    def _decode(self, nd: cython.longlong, kv_sum: cython.double) -> cython.double:
        mean_kv = kv_sum / nd
        if nd <= self.bmax:
            return self._decode_row(nd, mean_kv)
        hi = self._decode_row(self.bmax, mean_kv)
        lo = self._decode_row(self.bhalf, mean_kv)
        return hi + (nd - self.bmax) * (hi - lo) / (self.bmax - self.bhalf)

    @cython.cfunc
    @cython.exceptval(check=False)  # NOTE: arithmetic only; no Python error to check for
    @cython.locals(
        x=cython.double,
        y=cython.double,
        i=cython.longlong,
        k=cython.longlong,
        fy=cython.double,
        a=cython.double,
        b=cython.double,
    )
    def _prefill(self, chunk: cython.longlong, prefix: cython.longlong) -> cython.double:
        x = chunk / self.dc
        y = prefix / self.dp
        i = cython.cast(cython.longlong, x) if cython.compiled else int(x)
        k = cython.cast(cython.longlong, y) if cython.compiled else int(y)
        if i > self.ilast:
            i = self.ilast
        if k > self.klast:
            k = self.klast
        fy = y - k
        a = self.pre[i, k] + fy * (self.pre[i, k + 1] - self.pre[i, k])
        b = self.pre[i + 1, k] + fy * (self.pre[i + 1, k + 1] - self.pre[i + 1, k])
        return a + (x - i) * (b - a)

    @cython.cfunc
    @cython.locals(
        t=cython.longlong,
        attn=cython.double,
        tok=cython.double,
        chunk=cython.longlong,
        prefix=cython.longlong,
        kv=cython.longlong,
        n=cython.Py_ssize_t,
        q=cython.Py_ssize_t,
    )
    def time(
        self,
        chunks: list,
        prefixes: list,
        nd: cython.longlong,
        kv_sum: cython.longlong,
        drafts: cython.longlong,
        stage: cython.int,
    ) -> cython.double:
        """Seconds of one iteration on `stage`: prefill chunks over their prefixes, nd decodes reading
        kv_sum KV entries in all and `drafts` more decode tokens that share those reads (a speculative
        verification's; the BatchTimer's __call__)."""
        n = len(chunks)
        if self.kind == T_CONSTANT:
            return self.a
        if self.kind == T_LINEAR:
            t = nd + drafts
            kv = kv_sum
            for q in range(n):
                chunk = chunks[q]
                t += chunk
                kv += prefixes[q] + chunk
            return self.a + self.b * t + self.c * kv
        t = nd + drafts
        attn = 0.0
        for q in range(n):
            chunk = chunks[q]
            prefix = prefixes[q]
            t += chunk
            attn += self._prefill(chunk, prefix)
        return self._tables_time(t, attn, n, nd, kv_sum, drafts, stage)

    @cython.cfunc
    @cython.exceptval(check=False)  # NOTE: arithmetic only; no Python error to check for
    @cython.locals(tok=cython.double)
    def _tables_time(
        self,
        t: cython.longlong,
        attn: cython.double,
        n: cython.longlong,
        nd: cython.longlong,
        kv_sum: cython.longlong,
        drafts: cython.longlong,
        stage: cython.int,
    ) -> cython.double:
        """time()'s T_TABLES part after the prefill chunks: t tokens (drafts included), attn their attention
        so far, nd decode reads of kv_sum keys. The step's composition is BatchTimer._compose's, operation for
        operation (the drafts are rows of its per-request terms, as in BatchTimer.__call__)."""
        if nd:
            attn += self._decode(nd, cython.cast(cython.double, kv_sum) if cython.compiled else float(kv_sum))
        elif t == 0:
            return 0.0
        return self._tokens_time(t, attn, n, nd, drafts, stage)

    @cython.cfunc
    @cython.exceptval(check=False)  # NOTE: arithmetic only; no Python error to check for
    @cython.locals(tok=cython.double)
    def _tokens_time(
        self,
        t: cython.longlong,
        attn: cython.double,
        n: cython.longlong,
        nd: cython.longlong,
        drafts: cython.longlong,
        stage: cython.int,
    ) -> cython.double:
        """_tables_time's last part: the linear layers' t tokens and the step's composition, given attn."""
        if t <= self.tend:
            tok = self.tok[stage, t]
        else:
            tok = self.tok[stage, self.tend] + (t - self.tend) * self.tslope[stage]
        return self._compose(tok + attn, n, n + nd + drafts, t, stage)

    @cython.cfunc
    @cython.exceptval(check=False)  # NOTE: arithmetic only; no Python error to check for
    @cython.locals(
        mode=cython.int,
        gpu=cython.double,
        cpu=cython.double,
        r=cython.double,
        tt=cython.double,
        pp=cython.double,
    )
    def _compose(
        self,
        kernels: cython.double,
        num_prefills: cython.longlong,
        n: cython.longlong,
        t: cython.longlong,
        stage: cython.int,
    ) -> cython.double:
        """BatchTimer._compose, operation for operation: max(GPU side, overlapping CPU side) + serial CPU for
        a step of `kernels` seconds, n requests (num_prefills of them prefill chunks) and t tokens."""
        r = cython.cast(cython.double, n) if cython.compiled else float(n)
        # NOTE: the general expression below with its zero terms dropped: the same bits, fewer loads
        if self.plain:
            return kernels + self.cpu_ser[stage, 0] + self.cpu_ser[stage, 1] * r
        if t > self.launch_cap:
            mode = 2
        elif num_prefills:
            mode = 1
        else:
            mode = 0
        tt = cython.cast(cython.double, t) if cython.compiled else float(t)
        pp = cython.cast(cython.double, num_prefills) if cython.compiled else float(num_prefills)
        gpu = (
            kernels
            + self.cpu_gpu[stage, 0]
            + self.cpu_gpu[stage, 1] * r
            + self.cpu_gpu[stage, 2] * tt
            + self.cpu_pre[stage, 0] * pp
            + self.launch_gpu[stage, mode]
        )
        cpu = (
            self.cpu_ovl[stage, 0]
            + self.cpu_ovl[stage, 1] * r
            + self.cpu_ovl[stage, 2] * tt
            + self.cpu_pre[stage, 1] * pp
            + self.launch_cpu[stage, mode]
        )
        if cpu > gpu:
            gpu = cpu
        return (
            gpu
            + self.cpu_ser[stage, 0]
            + self.cpu_ser[stage, 1] * r
            + self.cpu_ser[stage, 2] * tt
            + self.cpu_pre[stage, 2] * pp
        )

    @cython.cfunc
    @cython.exceptval(check=False)  # NOTE: arithmetic only; no Python error to check for
    @cython.locals(t=cython.longlong, kv=cython.longlong)
    def decode_time(
        self, nd: cython.longlong, kv_sum: cython.longlong, drafts: cython.longlong, stage: cython.int
    ) -> cython.double:
        """time() of a batch without prefill chunks (the same operations, without its Python lists)."""
        if self.kind == T_CONSTANT:
            return self.a
        if self.kind == T_LINEAR:
            t = nd + drafts
            kv = kv_sum
            return self.a + self.b * t + self.c * kv
        return self._tables_time(nd + drafts, 0.0, 0, nd, kv_sum, drafts, stage)

    @cython.cfunc
    @cython.exceptval(check=False)  # NOTE: arithmetic only; no Python error to check for
    @cython.locals(attn=cython.double)
    def verify_times(
        self, nd: cython.longlong, kv_sum: cython.longlong, drafts: cython.longlong, stage: cython.int
    ) -> cython.double:
        """decode_time(nd, kv_sum, drafts, stage), and decode_time(nd, kv_sum, 0, stage) kept in
        self.undrafted: a verification step and its drafter's pass over the same reads (_with_draft), priced
        with one attention lookup for both (the same operations as the two calls, nd > 0)."""
        if self.kind != T_TABLES:
            self.undrafted = self.decode_time(nd, kv_sum, 0, stage)
            return self.decode_time(nd, kv_sum, drafts, stage)
        attn = 0.0
        attn += self._decode(nd, cython.cast(cython.double, kv_sum) if cython.compiled else float(kv_sum))
        self.undrafted = self._tokens_time(nd, attn, 0, nd, 0, stage)
        return self._tokens_time(nd + drafts, attn, 0, nd, drafts, stage)

    @cython.cfunc
    @cython.locals(total=cython.double, s=cython.int)
    def through(
        self, chunks: list, prefixes: list, nd: cython.longlong, kv_sum: cython.longlong
    ) -> cython.double:
        """Summed over every stage (adaptive_budgets.predicted_time: Python's sum, from 0, in stage order)."""
        total = 0.0
        for s in range(self.num_stages):
            total += self.time(chunks, prefixes, nd, kv_sum, 0, s)
        return total

    # -- attention-DP lockstep (sim/lockstep.py): BatchTimer.own_time split at the padding, and experts_time
    # ---
    @cython.cfunc
    @cython.locals(q=cython.Py_ssize_t, kv=cython.longlong, attn=cython.double)
    def own_base(
        self, chunks: list, prefixes: list, nd: cython.longlong, kv_sum: cython.longlong
    ) -> cython.double:
        """The part of a rank's own time that the padding leaves alone: the batch's attention seconds
        (T_TABLES: BatchTimer._batch_attention, the same sum in the same order), or the KV tokens it reads
        (T_LINEAR: LinearTimer.own_time's kv)."""
        if self.kind == T_CONSTANT:
            return 0.0
        if self.kind == T_LINEAR:
            kv = kv_sum
            for q in range(len(chunks)):
                kv += prefixes[q] + chunks[q]
            return cython.cast(cython.double, kv) if cython.compiled else float(kv)
        attn = 0.0
        for q in range(len(chunks)):
            attn += self._prefill(chunks[q], prefixes[q])
        if nd:
            attn += self._decode(nd, cython.cast(cython.double, kv_sum) if cython.compiled else float(kv_sum))
        return attn

    @cython.cfunc
    @cython.exceptval(check=False)  # NOTE: arithmetic only; no Python error to check for
    @cython.locals(x=cython.longlong, tok=cython.double)
    def own_time(
        self,
        t: cython.longlong,
        base: cython.double,
        num_prefills: cython.longlong,
        n: cython.longlong,
        pad: cython.longlong,
    ) -> cython.double:
        """BatchTimer.own_time: a rank's own seconds for t tokens of n requests (num_prefills prefill chunks,
        the rest decodes) whose own_base is `base`, its layers run at `pad` tokens when that is more (vLLM's
        CUDA graphs across ranks)."""
        if self.kind == T_CONSTANT:
            return self.a
        x = t if t > pad else pad
        if self.kind == T_LINEAR:
            return self.a + self.b * x + self.c * base
        if t == 0:
            return 0.0
        tok = self.own[x] if x <= self.tend else self.own[self.tend] + (x - self.tend) * self.own_slope
        return self._compose(tok + base, num_prefills, n, x, 0)

    @cython.cfunc
    @cython.exceptval(check=False)  # NOTE: arithmetic only; no Python error to check for
    def dummy_time(self, pad: cython.longlong) -> cython.double:
        """own_time of an idle rank's dummy batch: one decode token over one KV slot (lockstep.DUMMY_KV)."""
        return self.own_time(1, self.dummy_base, 0, 1, pad)

    @cython.cfunc
    @cython.exceptval(check=False)  # NOTE: arithmetic only; no Python error to check for
    def experts_time(self, tokens: cython.longlong) -> cython.double:
        """BatchTimer.experts_time: the routed experts and the ranks' exchange for `tokens` of all ranks."""
        if self.kind == T_CONSTANT:
            return 0.0
        if self.kind == T_LINEAR:
            return self.e * tokens
        if tokens <= self.experts_last:
            return self.experts[tokens]
        return self.experts[self.experts_last] + (tokens - self.experts_last) * self.experts_slope
