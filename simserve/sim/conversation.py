"""Answer-driven conversations: each round of a chat is sent a think time after the previous round's answer.

A chat user (and a multi-turn benchmark client) waits for the answer before typing the next message. vLLM's
own multi-turn client (`benchmarks/multi_turn/benchmark_serving_multi_turn.py`, `client_main`) awaits
`send_turn` — the whole streamed answer — then `poisson_sleep`s before it sends the conversation's next turn.
`--arrival conversation` models exactly that on a multi-turn trace (workload/shared_prefix.py): the first
round of each conversation arrives at its recorded time; every later round is released when the round before
it completes (the client receives the last token after the front end's delay, `frontend_s`) and arrives one
think-time later. The think time of round r + 1 is the trace's own recorded gap between rounds r and r + 1
(scaled by `--time-scale`), so the open-loop replay and the answer-driven run draw the same gaps and differ
only in where a gap starts: at the earlier round's arrival (open loop) or at its answer (here).

Request ids stay in the order of the recorded (open-loop) times; routing goes by the actual arrival times
(`cluster.Cluster`), and the watchdog scans requests in the order they were routed.
"""

from __future__ import annotations

import numpy as np

from simserve.errors import SimserveError


def parents(group: np.ndarray, prompt: np.ndarray, output: np.ndarray) -> np.ndarray:
    """Per request (in trace order): the position of the conversation round it follows, or -1 for a first
    round. Each prefix group is one conversation and its rows, in trace order, are its rounds; a round must
    carry the round before it (prompt at least that round's prompt plus answer), else the trace is no
    conversation."""
    out = np.full(len(group), -1, dtype=np.int64)
    last: dict[int, int] = {}
    for i, g in enumerate(np.asarray(group).tolist()):
        if g < 0:
            continue
        j = last.get(g)
        last[g] = i
        if j is None:
            continue
        if prompt[i] < prompt[j] + output[j]:
            raise SimserveError(
                f"--arrival conversation: request {i + 1} of the trace shares prefix group {g} with request "
                f"{j + 1} but does not carry its prompt and answer ({prompt[i]} < {prompt[j]} + "
                f"{output[j]}); use a multi-turn trace (conversation_id and round columns), or another "
                "--arrival"
            )
        out[i] = j
    return out


def think_times(arrived: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """The recorded gap from each follow-up's previous round to it (0 for first rounds): its think time."""
    gap = np.zeros(len(arrived))
    follow = parent >= 0
    gap[follow] = arrived[follow] - arrived[parent[follow]]
    if (gap < 0).any():
        i = int(np.flatnonzero(gap < 0)[0])
        raise SimserveError(
            f"--arrival conversation: request {i + 1} arrives before the round it follows (request "
            f"{parent[i] + 1}); a turn cannot come before its parent: sort the trace by arrival time"
        )
    return gap
