"""What vLLM 0.33.0 refuses to start with: the checks its `SchedulerConfig` makes on the scheduler flags
(`--max-num-batched-tokens`, `--max-num-seqs`, `--long-prefill-token-threshold`), in its own words.

`simserve run --engine vllm` checks a scenario with them before simulating (sim/scenario.py), and
`simserve sweep --engine vllm` checks every point of its grid (tune/engine.py).
"""

from __future__ import annotations

from simserve.errors import SimserveError


def check_vllm_flags(
    tokens: int,
    seqs: int,
    threshold: int,
    max_model_len: int,
    chunked_prefill: bool = True,
    fix: str = "narrow --engine-grid",
) -> None:
    """What vLLM 0.33.0 refuses to start with, in its own words: `SchedulerConfig.verify_max_model_len`
    (vllm/config/scheduler.py) and the pydantic bounds of its fields (`ge=1`, `ge=0`). V1 always runs
    with chunked prefill for generative models, and the printed command never turns it off. `fix` ends the
    refusal of a combination: the sweep's grid, or `run`'s --budget/--max-batch."""
    if tokens < 1 or seqs < 1:
        raise SimserveError(
            "--max-num-batched-tokens and --max-num-seqs values must be at least 1 (vLLM: ge=1)"
        )
    if tokens < max_model_len and not chunked_prefill:
        raise SimserveError(
            f"max_num_batched_tokens ({tokens}) is smaller than max_model_len ({max_model_len}). This "
            "effectively limits the maximum sequence length to max_num_batched_tokens and makes vLLM reject "
            "longer sequences. Please increase max_num_batched_tokens or decrease max_model_len."
        )
    if tokens < seqs:
        raise SimserveError(
            f"max_num_batched_tokens ({tokens}) must be greater than or equal to max_num_seqs ({seqs}). "
            f"(vLLM 0.33.0 refuses this combination: {fix})"
        )
    if threshold > max_model_len:
        raise SimserveError(
            f"long_prefill_token_threshold ({threshold}) cannot be greater than the max_model_len "
            f"({max_model_len})."
        )
