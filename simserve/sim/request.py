"""Per-request state, vLLM-v1 style: tokens computed versus tokens wanted.

There is no prefill or decode phase flag. A request holds `num_tokens` (prompt plus the outputs sampled so
far) and `computed` (tokens whose KV is in the cache). While `computed < target` it still needs prompt work
(`target` is the request's length when it was last admitted: the prompt, or prompt plus outputs after a
recompute preemption); once `computed == target` each step computes one token and samples the next one.
The step that computes the last prompt token samples the first output token, so an output of D tokens takes
the prefill step(s) plus D - 1 decode steps (Sarathi-Serve's accounting).

State lives in numpy arrays indexed by request id (ids are in arrival order), so the hot decode path is a
few vector operations per iteration and a million requests cost a few dozen bytes each.
"""

from __future__ import annotations

import numpy as np

from simserve.workload.trace import take_rows

WAITING, RUNNING, DONE, IGNORED = 0, 1, 2, 3


class Requests:
    """Parallel arrays, one entry per request; the simulator's whole per-request memory."""

    def __init__(self, prompt: np.ndarray, output: np.ndarray, arrived: np.ndarray):
        n = len(prompt)
        self.n = n
        self.prompt = np.asarray(prompt, dtype=np.int64)
        self.output = np.asarray(output, dtype=np.int64)
        self.arrived = np.asarray(arrived, dtype=np.float64)
        nan = np.full(n, np.nan)
        self.scheduled = nan.copy()  # first time in a batch (a restart does not change it)
        self.first_token = nan.copy()  # first output token (the user saw it; a re-prefill does not move it)
        self.completed = nan.copy()
        self.last_token = nan.copy()  # the gaps sum to last_token − first_token: no running sum kept
        self.tbt_max = np.zeros(n)
        self.computed = np.zeros(n, dtype=np.int64)
        self.target = np.zeros(n, dtype=np.int64)
        self.generated = np.zeros(n, dtype=np.int64)
        self.blocks = np.zeros(n, dtype=np.int64)  # KV blocks held
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.inflight = np.zeros(n, dtype=bool)  # in a micro-batch that has not left the last stage
        self.status = np.full(n, WAITING, dtype=np.int8)
        self.replica = np.full(n, -1, dtype=np.int64)
        # Prefix caching (sim/prefix_cache.py): the token stream a request shares with others (-1: none) and
        # how many of its tokens lie on it; the tokens its last admission found cached.
        self.prefix_group = np.full(n, -1, dtype=np.int64)
        self.prefix_tokens = np.zeros(n, dtype=np.int64)
        self.cached_tokens = np.zeros(n, dtype=np.int64)
        # ... or, instead of a stream, a trace's chained prefix-block ids (Mooncake's hash_ids), request i's
        # being hash_ids[hash_offsets[i]:hash_offsets[i + 1]] (None: no request has any)
        self.hash_offsets: np.ndarray | None = None
        self.hash_ids: np.ndarray | None = None
        # sglang: per request, whether the client sent ignore_eos (None: the run's --ignore-eos for all)
        self.ignore_eos: np.ndarray | None = None
        # Speculative decoding (vllm-v1, SimConfig.spec_k): drafts proposed for the next step (vLLM's
        # spec_token_ids), drafts scheduled in the step in flight (negative: vLLM's padding of a one-token
        # admission, all rejected), verification steps so far, and the accepted counts drawn before the run
        # (speculative.draws: step j of request i reads spec_draws[spec_off[i] + j]).
        self.spec = np.zeros(n, dtype=np.int64)
        self.spec_sched = np.zeros(n, dtype=np.int64)
        self.spec_steps = np.zeros(n, dtype=np.int64)
        self.spec_draws: np.ndarray | None = None
        self.spec_off: np.ndarray | None = None

    def draw_speculation(self, acceptance: tuple[float, ...], seed: int) -> None:
        """Draw every verification step's accepted drafts once, before the run (both models read them)."""
        if self.spec_draws is None:
            from simserve.speculative import draws

            self.spec_draws, self.spec_off = draws(self.output, acceptance, seed)

    def set_prefix(self, prefix: tuple | None, order: np.ndarray) -> None:
        """The prefix identity of a workload given in trace order: (group, tokens on it) per request,
        optionally followed by (offsets, ids) of the chained block ids; `order` maps ids to trace rows."""
        if prefix is None:
            return
        self.prefix_group[:] = np.asarray(prefix[0], dtype=np.int64)[order]
        self.prefix_tokens[:] = np.asarray(prefix[1], dtype=np.int64)[order]
        if len(prefix) > 2 and prefix[2] is not None:
            self.hash_offsets, self.hash_ids = take_rows(prefix[2], prefix[3], order)

    def num_tokens(self, rid: int) -> int:
        return int(self.prompt[rid] + self.generated[rid])
