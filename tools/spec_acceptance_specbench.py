"""Per-position cumulative acceptance from SpecDecode-Bench's published per-token accepted lengths.

SpecDecode-Bench ("Speculative Decoding: Performance or Illusion?", arXiv 2601.11580) publishes, for
Llama-3.1-8B-Instruct greedy outputs on ShareGPT, CNN/DailyMail, GSM8K and InstructCoder, the oracle accepted
length at every output position (github.com/SpecDecode-Bench/simulator,
data/llama3.1-8B/combined_<dataset>.jsonl, fields acc_eagle.acc_len and acc_ngram.acc_len; main.py feeds
acc_eagle to its `--proposer eagle3`). acc_len[t] is the number of tokens one verify step emits when it starts
with t+1 tokens generated, bonus token included, with no cap on the draft length. This script replays a chain
of K drafts over each request as the repository's own simulator does (simulator.py: a step emits
min(acc_len[t], K+1) tokens and the next step starts after them) and counts, per step, whether draft position
k was accepted (acc_len[t] - 1 >= k): accepted-at-k / steps is vLLM's per-position metric
(vllm:spec_decode_num_accepted_tokens_per_pos / vllm:spec_decode_num_drafts).

For n-gram the data cannot tell a step with no match (vLLM proposes nothing and counts no draft) from a step
whose first draft was rejected: both read acc_len 1. Every step is counted as a draft here, so the n-gram rows
are a lower bound of what vLLM would report on the same outputs.

The data is read from a local copy of that repository (not part of simserve; nothing of it is written):

    python tools/spec_acceptance_specbench.py PATH/TO/simulator/data/llama3.1-8B --k 5
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

DATASETS = {
    "sharegpt": "sharegpt",
    "cnn": "cnn-dailymail",
    "gsm8k": "gsm8k",
    "instructcoder": "instructcoder",
}
FIELDS = {"eagle3": "acc_eagle", "ngram": "acc_ngram"}


def per_position(acc_lens: list[list[int]], k: int) -> tuple[list[float], int]:
    """Replay chains of k drafts over each request; return (accepted-at-position / steps, steps)."""
    steps = 0
    accepted = [0] * k
    for lens in acc_lens:
        t = 0
        while t < len(lens):
            emitted = min(lens[t], k + 1)
            steps += 1
            for pos in range(1, k + 1):
                if lens[t] - 1 >= pos:
                    accepted[pos - 1] += 1
            t += emitted
    return [a / steps for a in accepted], steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_dir", type=Path, help="the repository's data/llama3.1-8B folder")
    parser.add_argument("--k", type=int, default=5, help="drafts per step (num_speculative_tokens)")
    args = parser.parse_args()
    for stem, dataset in DATASETS.items():
        rows = [
            json.loads(line) for line in (args.data_dir / f"combined_{stem}.jsonl").read_text().splitlines()
        ]
        for method, field in FIELDS.items():
            curve, steps = per_position([r[field]["acc_len"] for r in rows], args.k)
            values = " ".join(f"{v:.4f}" for v in curve)
            print(f"{method:6s} {dataset:13s} requests={len(rows)} steps={steps} k={args.k}: {values}")


if __name__ == "__main__":
    main()
