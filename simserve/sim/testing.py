"""Small batch timers with the predictor's interface, for tests and hand-checkable examples, and a SimPy
cluster run whose state a test can inspect (`run_cluster`).

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
        self, prefills: Sequence[tuple[int, int]], decode_kv: Sequence[int] | np.ndarray, stage: int = 0
    ) -> float:
        return self.seconds


class LinearTimer:
    """seconds = a + b·tokens + c·kv, where tokens = prefill chunk tokens + decodes and kv = KV tokens read.

    A prefill chunk of c tokens over a prefix of p reads p + c KV tokens; a decode reads its context.
    """

    def __init__(self, a: float, b: float, c: float, num_stages: int = 1):
        self.a, self.b, self.c = float(a), float(b), float(c)
        self.num_stages = num_stages

    def __call__(
        self, prefills: Sequence[tuple[int, int]], decode_kv: Sequence[int] | np.ndarray, stage: int = 0
    ) -> float:
        tokens = len(decode_kv)
        kv = int(np.sum(decode_kv)) if len(decode_kv) else 0
        for chunk, prefix in prefills:
            tokens += chunk
            kv += prefix + chunk
        return self.a + self.b * tokens + self.c * kv


def run_cluster(timer, prompt, output, arrived, cfg, num_blocks: int = 4000):
    """Run the SimPy reference's Cluster on these requests to the end; returns (cluster, requests), whose
    per-rank and per-request state a test can inspect (simulate returns only the summary)."""
    import simpy

    from simserve.sim.cluster import Cluster
    from simserve.sim.request import Requests

    env = simpy.Environment()
    reqs = Requests(np.asarray(prompt), np.asarray(output), np.asarray(arrived, dtype=float))
    cluster = Cluster(env, reqs, cfg.validate(), timer, num_blocks)
    env.run(until=cluster.finished)
    return cluster, reqs
