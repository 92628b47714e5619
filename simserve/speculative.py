"""Speculative decoding as vLLM 0.33.0 runs it (`--speculative-config`): its methods, its refusals in its own
words, the draft's weights and KV, and per-position acceptance rates with the per-request draws a run uses.

vLLM's metric convention throughout: `acceptance[k-1]` is the fraction of drafts whose position k (1-based)
was accepted, so it is cumulative and non-increasing in k (vllm/config/speculative.py,
`synthetic_acceptance_rates`: "the marginal probability that the first i+1 draft tokens are all accepted").
One uniform u per verification step then accepts positions 1..a with a = #{k : u < acceptance[k-1]}, so P(a >=
k) = acceptance[k-1].
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simserve.catalog.models import ModelSpec, resolve_model
from simserve.errors import SimserveError

METHODS = ("eagle", "eagle3", "mtp", "ngram")
# vLLM's rejection sampler asserts max_spec_len <= MAX_SPEC_LEN (vllm/v1/sample/rejection_sampler.py:47,
# :157).
MAX_SPEC_LEN = 128
# Multi-token-prediction layers per model (config.json `num_nextn_predict_layers`; vLLM's n_predict), by
# catalog name. DeepSeek-V3/R1: https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json (1).
MTP_LAYERS = {"DeepSeek-V3": 1}
# EAGLE-3 heads predict over a reduced vocabulary with their own LM head: draft_vocab_size 32000 in
# https://huggingface.co/yuhuili/EAGLE3-LLaMA3.1-Instruct-8B/blob/main/config.json. EAGLE-1 heads share the
# target's embedding and LM head (vLLM loads them from the target when the checkpoint has none).
EAGLE3_DRAFT_VOCAB = 32000
# The n-gram drafter's CPU per request and step (vLLM's NgramProposer runs on the host after sampling, in
# the step). NOTE: not measured yet: 0 (docs/speculative.md says so).
NGRAM_CPU_S = 0.0
# The published tables another helper collects (columns
# method,model_family,dataset,position,acceptance,source,note)


@dataclass(frozen=True)
class Speculation:
    """One run's speculative decoding: vLLM's method and num_speculative_tokens, and the acceptance it
    draws."""

    method: str
    k: int
    acceptance: tuple[float, ...]  # cumulative per position 1..k (vLLM's convention, above)
    source: str  # where the acceptance came from (summary.json and the printed summary say it)

    @property
    def lookahead(self) -> int:
        """vLLM's VllmConfig.num_lookahead_tokens: KV slots past the scheduled tokens for the drafter's own
        KV (EAGLE, EAGLE-3, MTP: k; n-gram: none) — vllm/config/vllm.py, num_lookahead_tokens."""
        return lookahead(self.method, self.k)


DRAFT_PLACEHOLDER = "DRAFT-MODEL"  # EAGLE's "model" when no draft checkpoint is named: to be filled in


def serve_config(method: str, k: int, draft_model: str | None = None) -> str:
    """The `--speculative-config` JSON vLLM 0.33.0 parses (SpeculativeConfig: method, num_speculative_tokens;
    EAGLE and EAGLE-3 also need their head's checkpoint as "model", n-gram and MTP find theirs): the one place
    the printed command lines (`sweep --engine vllm`, `plan`) spell it."""
    config: dict = {"method": method, "num_speculative_tokens": k}
    if method in ("eagle", "eagle3"):
        config["model"] = draft_model or DRAFT_PLACEHOLDER
    return json.dumps(config, separators=(",", ":"))


# SGLang 0.5.23's methods simserve models on its scheduler (--speculative-algorithm EAGLE | EAGLE3 with
# --speculative-eagle-topk 1: a chain of K drafts, verified as K + 1 tokens)
SGLANG_METHODS = ("eagle", "eagle3")


def check_sglang(method: str, k: int | None, model: str | ModelSpec) -> int:
    """What simserve models of SGLang 0.5.23's speculative decoding (docs/speculative.md): EAGLE or EAGLE-3 as
    a chain (topk 1) of K = --speculative-num-steps drafts, with --speculative-num-draft-tokens K + 1 (what
    SGLang sets for topk 1: arg_groups/speculative_hook.py _handle_eagle_family); returns k."""
    if method not in SGLANG_METHODS:
        raise SimserveError(
            f"--speculative {method} on sglang is not modelled: simserve models SGLang's EAGLE and EAGLE-3 "
            "(--speculative-algorithm EAGLE|EAGLE3, --speculative-eagle-topk 1); use --speculative eagle or "
            "eagle3, or --engine vllm for mtp and ngram"
        )
    spec = resolve_model(model)
    if spec.is_moe or spec.is_mla or not spec.ffn:
        raise SimserveError(
            f"--speculative {method} needs an EAGLE head, and simserve knows its shape only for dense models "
            f"(one decoder layer of the target's shapes); {spec.name} is a mixture-of-experts or "
            "latent-attention model"
        )
    if k is None:
        raise SimserveError(
            "--speculative on sglang needs --num-speculative-tokens K (SGLang's --speculative-num-steps; "
            "without it SGLang picks steps, topk and draft tokens per model, "
            "_auto_choose_speculative_params, which simserve does not model)"
        )
    if k <= 0:
        raise SimserveError(
            f"--num-speculative-tokens {k}: SGLang's --speculative-num-steps needs at least one "
            "draft step; give K >= 1"
        )
    return k


def lookahead(method: str, k: int) -> int:
    return 0 if method == "ngram" else k


def check(method: str, k: int | None, model: str | ModelSpec, max_num_batched_tokens: int) -> int:
    """vLLM 0.33.0's refusals of `--speculative-config {"method": method, "num_speculative_tokens": k}` for
    this model and budget, in its words with the fix; returns k (MTP's default: the model's n_predict)."""
    if method not in METHODS:
        raise SimserveError(f"--speculative {method!r} is not modelled; choose one of {', '.join(METHODS)}")
    spec = resolve_model(model)
    n_predict = MTP_LAYERS.get(spec.name)
    if method == "mtp" and n_predict is None:
        raise SimserveError(
            "--speculative mtp needs the model's multi-token-prediction layers (config.json "
            f"num_nextn_predict_layers); {spec.name} has none: use --speculative eagle, eagle3 or ngram "
            f"(models with MTP: {', '.join(MTP_LAYERS)})"
        )
    if method in ("eagle", "eagle3") and (spec.is_moe or spec.is_mla or not spec.ffn):
        raise SimserveError(
            "num_speculative_tokens was provided but without speculative model. (vLLM): --speculative "
            f"{method} needs an EAGLE head, and simserve knows its shape only for dense models (one decoder "
            f"layer of the target's shapes); {spec.name} is a mixture-of-experts or latent-attention model: "
            f"use {'--speculative mtp' if n_predict else '--speculative ngram'}"
        )
    if k is None:
        if n_predict is None or method != "mtp":
            raise SimserveError(
                "num_speculative_tokens must be provided with speculative model unless the draft model "
                "config contains an n_predict parameter. (vLLM): add --num-speculative-tokens K"
            )
        k = n_predict
    if k <= 0:
        raise SimserveError(
            f"Expected num_speculative_tokens to be greater than zero ({k}). (vLLM): give "
            f"--num-speculative-tokens between 1 and {MAX_SPEC_LEN}"
        )
    if k > MAX_SPEC_LEN:
        raise SimserveError(
            f"--num-speculative-tokens {k} exceeds vLLM's rejection sampler limit MAX_SPEC_LEN = "
            f"{MAX_SPEC_LEN} (vllm/v1/sample/rejection_sampler.py): give at most {MAX_SPEC_LEN}"
        )
    if method == "mtp" and n_predict and k > n_predict and k % n_predict:
        raise SimserveError(
            f"num_speculative_tokens:{k} must be divisible by n_predict={n_predict} (vLLM): give a "
            f"multiple of {n_predict}"
        )
    if max_num_batched_tokens <= lookahead(method, k):
        raise SimserveError(
            "VllmConfig does not have enough slots to schedule a token and support the speculative decoding "
            f"settings. Got max_num_batched_tokens={max_num_batched_tokens} and "
            f"num_lookahead_tokens={lookahead(method, k)}. (vLLM): raise --budget or lower "
            "--num-speculative-tokens"
        )
    return k


# -- the draft's weights and KV -----------------------------------------------------------------------------
def draft_params(method: str, spec: ModelSpec) -> int:
    """Parameters the draft adds to the target's (shared embedding and LM head not counted twice).

    EAGLE: one decoder layer of the target's shapes plus fc (2·hidden → hidden); EAGLE-3: the layer, fc over
    three fused hidden states (3·hidden → hidden), its qkv reading 2·hidden, and its own LM head over
    EAGLE3_DRAFT_VOCAB; MTP: its n_predict layers of the target's (last, MoE) shapes, each with eh_proj
    (2·hidden → hidden) and two norms; n-gram: nothing."""
    h = spec.hidden
    if method == "ngram":
        return 0
    if method == "mtp":
        moe = spec.moe_shared_params + spec.expert_params if spec.is_moe else spec.dense_mlp_params
        layer = spec.attention_params + spec.norm_params + moe + 2 * h * h + 2 * h
        return MTP_LAYERS[spec.name] * layer
    layer = spec.attention_params + spec.norm_params + spec.dense_mlp_params
    if method == "eagle":
        return layer + 2 * h * h
    qkv_in = h * (spec.num_heads + 2 * spec.num_kv_heads) * spec.head_dim  # the qkv projection's second input
    return layer + qkv_in + 3 * h * h + EAGLE3_DRAFT_VOCAB * h


def draft_kv_layers(method: str, spec: ModelSpec) -> int:
    """Layers whose KV the draft caches beside the target's (vLLM gives them their own KV-cache group with the
    same block table, so every block holds them too)."""
    if method == "ngram":
        return 0
    return MTP_LAYERS[spec.name] if method == "mtp" else 1


def draft_fraction(method: str, spec: ModelSpec) -> float:
    """A draft pass's cost as a fraction of the target's step over the same batch: the draft's parameters over
    the target's (an approximation: decode is bound by reading weights; docs/speculative.md)."""
    return draft_params(method, spec) / spec.num_params


def draft_blocks(
    num_blocks: int,
    block_bytes: float,
    layers: int,
    method: str,
    spec: ModelSpec,
    tp: int,
    weight_bytes: float,
) -> int:
    """KV blocks left once the draft's weights (per GPU: / TP) are loaded and each block also holds the
    draft's KV layers: vLLM sizes one pool whose page holds every layer's KV, the draft's included."""
    if method == "ngram":
        return num_blocks
    free = num_blocks * block_bytes - draft_params(method, spec) * weight_bytes / tp
    per_block = block_bytes * (layers + draft_kv_layers(method, spec)) / layers
    return max(0, math.floor(free / per_block))


# -- acceptance ---------------------------------------------------------------------------------------------
def validate(values: list[float], k: int | None, where: str) -> tuple[float, ...]:
    """The first k cumulative acceptance rates, checked: in [0, 1], non-increasing, at least k of them (k
    None: all of them)."""
    for i, v in enumerate(values):
        if not (isinstance(v, (int, float)) and not isinstance(v, bool) and 0.0 <= v <= 1.0):
            raise SimserveError(
                f"{where}: acceptance at position {i + 1} is {v!r}, not a probability in [0, 1]; "
                "give the fraction of drafts accepted at each position"
            )
        if i and v > values[i - 1]:
            raise SimserveError(
                f"{where}: acceptance rises from {values[i - 1]} at position {i} to {v} at position {i + 1}; "
                "give the cumulative rate (vLLM's per-position metric: a position is accepted only if every "
                "earlier one was), which never rises"
            )
    if k is not None and len(values) < k:
        raise SimserveError(
            f"{where} gives {len(values)} positions; --num-speculative-tokens {k} needs {k}: add "
            f"positions or lower K"
        )
    return tuple(float(v) for v in values[:k])


def load_acceptance(path: str | Path, k: int | None) -> tuple[float, ...]:
    """`--acceptance FILE`: a CSV with columns position,acceptance (positions 1, 2, … in order) or a JSON
    list."""
    p = Path(path)
    where = f"--acceptance {path}"
    try:
        text = p.read_text()
    except OSError as exc:
        raise SimserveError(
            f"{where}: cannot read it ({exc.strerror}); give a CSV position,acceptance or a JSON list"
        ) from None
    if p.suffix.lower() == ".json":
        try:
            values = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SimserveError(
                f"{where}: not valid JSON ({exc.msg}, line {exc.lineno}); give a list like [0.8, 0.6]"
            ) from None
        if not isinstance(values, list) or not values:
            raise SimserveError(
                f"{where}: expected a non-empty JSON list of acceptance rates, like [0.8, 0.6]"
            )
        return validate(values, k, where)
    rows = list(csv.DictReader(text.splitlines()))
    if not rows or {"position", "acceptance"} - set(rows[0]):
        raise SimserveError(
            f"{where}: expected a CSV with columns position,acceptance and one row per position"
        )
    values = []
    for i, row in enumerate(rows):
        try:
            pos, value = int(row["position"]), float(row["acceptance"])
        except (TypeError, ValueError):
            raise SimserveError(
                f"{where}: row {i + 2} is not a position and a number: {row}; fix that row"
            ) from None
        if pos != i + 1:
            raise SimserveError(
                f"{where}: row {i + 2} has position {pos}, expected {i + 1}; list positions 1, 2, … in order"
            )
        values.append(value)
    return validate(values, k, where)


def catalog_acceptance(
    method: str, spec: ModelSpec, dataset: str, k: int | None, path: Path | None = None
) -> tuple[tuple[float, ...], str]:
    """The published table's rates for (method, the model's family, dataset), with its source
    (catalog/acceptance.py, which reads and checks the table); an absent key fails naming the known ones and
    --acceptance FILE."""
    from simserve.catalog import acceptance as published

    found = published.curve(method, spec.name, dataset, published.load_acceptance(path))
    where = f"acceptance.csv ({found.method}, {found.model_family}, {found.dataset})"
    return validate(list(found.acceptance), k, where), f"{where}: {found.source}"


def resolve(
    method: str,
    k: int | None,
    model: str,
    dataset: str,
    budget: int,
    acceptance: str | None,
    engine: str = "vllm",
) -> Speculation:
    """A run's Speculation from its flags: vLLM's checks (SGLang's, engine "sglang"), then the acceptance from
    --acceptance FILE, else the catalog's published table for (method, model family, dataset)."""
    k = check_sglang(method, k, model) if engine == "sglang" else check(method, k, model, budget)
    if acceptance is not None:
        return Speculation(method, k, load_acceptance(acceptance, k), f"--acceptance {acceptance}")
    return Speculation(method, k, *catalog_acceptance(method, resolve_model(model), dataset, k))


def positions(method: str, model: str, dataset: str, acceptance: str | None) -> int:
    """How many draft positions the acceptance rates give (--acceptance FILE, else the catalog's table): the
    largest K they support."""
    if acceptance is not None:
        return len(load_acceptance(acceptance, None))
    return len(catalog_acceptance(method, resolve_model(model), dataset, None)[0])


def draws(output: np.ndarray, acceptance: tuple[float, ...], seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Accepted draft positions for every verification step a run can have, drawn once before it starts so the
    reference and the compiled core read the same numbers: request i's j-th verification step accepts
    draws[offsets[i] + j] of its drafts (at most as many as it verifies). A request has at most output − 1 of
    them (each gives at least one token after the prefill's first)."""
    output = np.asarray(output, dtype=np.int64)
    steps = np.maximum(output - 1, 0)
    offsets = np.zeros(len(output), dtype=np.int64)
    np.cumsum(steps[:-1], out=offsets[1:])
    rng = np.random.default_rng([int(seed), 0x5EC])  # its own stream: the workload's draws are unchanged
    u = rng.random(int(steps.sum()))
    # a = #{k: acc[k] > u}, counted one position at a time (a binary search per draw, np.searchsorted, cost
    # ~6x as much: at 2 QPS a third of a speculative run's CPU time, docs/speculative.md § Speed)
    accepted = np.zeros(len(u), dtype=np.int16)
    for p in np.asarray(acceptance, dtype=np.float64):
        accepted += u < p
    return accepted, offsets
