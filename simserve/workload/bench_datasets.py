"""`vllm bench serve`'s datasets as request lengths, drawn as vLLM 0.33.0 draws them: `--trace random:…`.

A dataset spec is given where a trace name goes (`simserve run --trace random:1024:128:0.1`) and yields the
requests in the order vLLM's client sends them (no further shuffle), so `--requests N --seed S` matches
`vllm bench serve --num-prompts N --seed S`:

* `random[:IN[:OUT[:RATIO]]]` (vLLM's `--dataset-name random --random-input-len IN --random-output-len OUT
  --random-range-ratio RATIO`; defaults 1024, 128, 0.0). `vllm/benchmarks/datasets/utils.py`
  (`get_sampling_params`): the prompt's sampled part is uniform on the integers [floor(r·(1−RATIO)),
  ceil(r·(1+RATIO))] with r = IN − the tokenizer's special tokens, the output uniform on
  [max(floor(OUT·(1−RATIO)), 1), ceil(OUT·(1+RATIO))], both from `np.random.default_rng(seed).integers`
  (inputs for all requests first, then outputs: the same draws, so the same lengths as vLLM's for a seed).
  The server adds the special tokens back when it tokenizes the prompt, so the engine sees sampled + special.
  RATIO must be in [0, 1), as vLLM checks.
* `fixed:IN:OUT`: every prompt IN tokens and every output OUT tokens (vLLM's random dataset at RATIO 0).
* `sharegpt-bench[:OUT]` (vLLM's `--dataset-name sharegpt [--sharegpt-output-len OUT]`,
  `ShareGPTDataset.sample`): the (prompt, completion) pairs of traces/sharegpt_bench.csv.gz (one per JSON
  entry, as vLLM reads the file: workload/sharegpt_bench.py), shuffled with Python's `random.seed(seed);
  random.shuffle`, then taken in order while `is_valid_sequence` holds (prompt ≥ 4, output ≥ 4 unless OUT is
  given, prompt ≤ 1024, prompt + output ≤ 2048), and oversampled with `random.seed(seed); random.choice` when
  too few are valid. The packaged JSON is truncated, so the shuffle runs over a subset of vLLM's list: the
  same procedure, not the same rows.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import numpy as np

from simserve.errors import SimserveError
from simserve.shipped import shipped_dir

NAMES = ("random", "fixed", "sharegpt-bench")
# Llama and Mistral tokenizers add one special token (BOS) to every encoded text:
# `num_special_tokens_to_add()`.
SPECIAL_TOKENS = 1
# vLLM's is_valid_sequence defaults (datasets.py)
MIN_LEN, MAX_PROMPT_LEN, MAX_TOTAL_LEN = 4, 1024, 2048
USAGE = "random[:IN[:OUT[:RATIO]]], fixed:IN:OUT or sharegpt-bench[:OUT]"
SHAREGPT_BENCH = shipped_dir("traces") / "sharegpt_bench.csv.gz"  # built by workload/sharegpt_bench.py


@dataclass(frozen=True)
class BenchDataset:
    kind: str  # one of NAMES
    input_len: int = 1024
    output_len: int | None = 128
    range_ratio: float = 0.0

    @property
    def label(self) -> str:
        if self.kind == "random":
            return f"random:{self.input_len}:{self.output_len}:{self.range_ratio:g}"
        if self.kind == "fixed":
            return f"fixed:{self.input_len}:{self.output_len}"
        return "sharegpt-bench" + ("" if self.output_len is None else f":{self.output_len}")


def is_spec(name: str) -> bool:
    """Whether a --trace value names a bench dataset (a file of that name would be a trace path instead)."""
    return str(name).split(":", 1)[0] in NAMES


def parse(spec: str) -> BenchDataset:
    """A dataset spec (see the module docstring); SimserveError names the bad part and the form."""
    kind, *fields = str(spec).split(":")
    if kind not in NAMES:
        raise SimserveError(f"unknown bench dataset {kind!r}; use {USAGE}")
    limits = {"random": 3, "fixed": 2, "sharegpt-bench": 1}[kind]
    if len(fields) > limits or (kind == "fixed" and len(fields) != 2):
        raise SimserveError(f"bad dataset spec {spec!r}; use {USAGE}")
    try:
        if kind == "sharegpt-bench":
            out = _positive(fields[0], "OUT") if fields else None
            return BenchDataset(kind, 0, out)
        ints = [_positive(f, name) for f, name in zip(fields[:2], ("IN", "OUT"), strict=False)]
        ratio = float(fields[2]) if len(fields) > 2 else 0.0
    except ValueError:
        raise SimserveError(f"bad dataset spec {spec!r}: numbers expected; use {USAGE}") from None
    if not 0.0 <= ratio < 1.0:  # vLLM: "input_range_ratio must be in [0, 1)."
        raise SimserveError(f"bad dataset spec {spec!r}: the range ratio must be in [0, 1), got {ratio:g}")
    base = BenchDataset(kind)
    return BenchDataset(kind, *(ints + [base.input_len, base.output_len][len(ints) :]), ratio)


def _positive(text: str, name: str) -> int:
    value = int(text)
    if value < 1:
        raise SimserveError(f"bad dataset spec: {name} must be a positive number of tokens, got {value}")
    return value


def lengths(ds: BenchDataset, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(prompt tokens the engine sees, output tokens) of n requests in the order vLLM's client sends them."""
    if n < 1:
        raise SimserveError(f"--requests must be at least 1, got {n}")
    if ds.kind == "fixed":
        return np.full(n, ds.input_len, np.int64), np.full(n, ds.output_len, np.int64)
    if ds.kind == "random":
        return random_lengths(n, seed, ds.input_len, ds.output_len, ds.range_ratio)
    return sharegpt_lengths(n, seed, ds.output_len)


def random_lengths(
    n: int, seed: int, input_len: int, output_len: int, ratio: float, special: int = SPECIAL_TOKENS
) -> tuple[np.ndarray, np.ndarray]:
    """vLLM's `get_sampling_params` (RandomDataset): uniform integer lengths around the configured means."""
    real = max(0, input_len - special)
    in_lo, in_hi = math.floor(real * (1 - ratio)), math.ceil(real * (1 + ratio))
    out_lo, out_hi = max(math.floor(output_len * (1 - ratio)), 1), max(math.ceil(output_len * (1 + ratio)), 1)
    if in_lo < 1:  # RandomDataset.sample's check (prefix 0): the smallest prompt must have a token
        raise SimserveError(
            f"--random-input-len {input_len} is too small: with {special} special token(s) and range ratio "
            f"{ratio:g} a prompt could be empty; raise IN or lower RATIO"
        )
    rng = np.random.default_rng(seed)
    inputs = rng.integers(in_lo, in_hi + 1, size=n)
    outputs = rng.integers(out_lo, out_hi + 1, size=n)
    return inputs.astype(np.int64) + special, outputs.astype(np.int64)


def sharegpt_lengths(n: int, seed: int, output_len: int | None) -> tuple[np.ndarray, np.ndarray]:
    """vLLM's ShareGPTDataset.sample over the shipped pairs (traces/sharegpt_bench.csv.gz: one per JSON entry,
    BOS counted in both lengths, as vLLM counts them; see workload/sharegpt_bench.py)."""
    from simserve.workload.trace import read_trace

    if not SHAREGPT_BENCH.is_file():
        raise SimserveError(
            f"{SHAREGPT_BENCH} is missing; build it: simserve trace build sharegpt-bench (needs "
            "simserve[traces])"
        )
    pairs = read_trace(SHAREGPT_BENCH, "sharegpt-bench")
    return sample_like_vllm(
        list(zip(pairs.prompt_tokens.tolist(), pairs.output_tokens.tolist(), strict=True)),
        n,
        seed,
        output_len,
    )


def sample_like_vllm(
    pairs: list[tuple[int, int]], n: int, seed: int, output_len: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """ShareGPTDataset: `random.seed(seed); random.shuffle(data)`, keep valid pairs in order until n, then
    `random.seed(seed)` and `random.choice` for the rest (maybe_oversample_requests)."""
    rng = random.Random(seed)  # NOTE: the algorithm of random.seed + random.shuffle, on a private generator
    data = list(pairs)
    rng.shuffle(data)
    samples: list[tuple[int, int]] = []
    for prompt, completion in data:
        if len(samples) >= n:
            break
        out = completion if output_len is None else output_len
        short = prompt < MIN_LEN or (output_len is None and out < MIN_LEN)
        if short or prompt > MAX_PROMPT_LEN or prompt + out > MAX_TOTAL_LEN:
            continue
        samples.append((prompt, out))
    if not samples:
        raise SimserveError("no ShareGPT exchange passes vLLM's length filter; check the shipped trace")
    if len(samples) < n:
        again, valid = random.Random(seed), list(samples)
        samples += [again.choice(valid) for _ in range(n - len(valid))]
    prompt, out = zip(*samples, strict=True)
    return np.array(prompt, np.int64), np.array(out, np.int64)
