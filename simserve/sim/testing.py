"""Small batch timers with the predictor's interface, for tests and hand-checkable examples (the compiled core
reproduces their arithmetic too: core_run.timer_params).

A timer answers "how long does this batch take on this pipeline stage". The real one is
`simserve.predictor.load_timer`; these two are simple enough to check a simulation by hand.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class ConstantTimer:
    """Every iteration on every stage takes `seconds`, whatever the batch."""

    def __init__(self, seconds: float, num_stages: int = 1):
        if seconds <= 0:
            raise ValueError(f"seconds must be positive, got {seconds}")
        self.seconds = float(seconds)
        self.num_stages = num_stages

    def __call__(
        self,
        prefills: Sequence[tuple[int, int]],
        decode_kv: Sequence[int] | np.ndarray,
        stage: int = 0,
        drafts: int = 0,
    ) -> float:
        return self.seconds

    # attention DP's lockstep step (sim/lockstep.py): a rank's own part is the whole iteration, the experts
    # free
    def own_time(
        self, prefills: Sequence[tuple[int, int]], decode_kv: Sequence[int] | np.ndarray, pad_to: int = 0
    ) -> tuple[float, int]:
        return self.seconds, len(decode_kv) + sum(c for c, _ in prefills)

    def experts_time(self, tokens: int) -> float:
        return 0.0


class LinearTimer:
    """seconds = a + b·tokens + c·kv, where tokens = prefill chunk tokens + decodes (+ a speculative
    verification's drafts: BatchTimer.__call__) and kv = KV tokens read.

    A prefill chunk of c tokens over a prefix of p reads p + c KV tokens; a decode reads its context, a
    verification its context once for all its queries.
    Under attention DP's lockstep (sim/lockstep.py) that is a rank's own time, its tokens at the padded count,
    and the experts add e·X for the X tokens of all ranks.
    """

    def __init__(self, a: float, b: float, c: float, num_stages: int = 1, e: float = 0.0):
        self.a, self.b, self.c, self.e = float(a), float(b), float(c), float(e)
        self.num_stages = num_stages

    def _tokens_kv(
        self, prefills: Sequence[tuple[int, int]], decode_kv: Sequence[int] | np.ndarray
    ) -> tuple[int, int]:
        tokens = len(decode_kv)
        kv = int(np.sum(decode_kv)) if len(decode_kv) else 0
        for chunk, prefix in prefills:
            tokens += chunk
            kv += prefix + chunk
        return tokens, kv

    def __call__(
        self,
        prefills: Sequence[tuple[int, int]],
        decode_kv: Sequence[int] | np.ndarray,
        stage: int = 0,
        drafts: int = 0,
    ) -> float:
        tokens, kv = self._tokens_kv(prefills, decode_kv)
        return self.a + self.b * (tokens + drafts) + self.c * kv

    def own_time(
        self, prefills: Sequence[tuple[int, int]], decode_kv: Sequence[int] | np.ndarray, pad_to: int = 0
    ) -> tuple[float, int]:
        tokens, kv = self._tokens_kv(prefills, decode_kv)
        return self.a + self.b * max(tokens, pad_to) + self.c * kv, tokens

    def experts_time(self, tokens: int) -> float:
        return self.e * tokens
