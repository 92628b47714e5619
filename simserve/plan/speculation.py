"""Speculative decoding in a plan (`plan --speculative`): the settings each deployment is searched at, whether
speculation pays for it and at which K, and the `--speculative-config` of the command line that starts it.

One scheduler model off and on. simserve models speculation only in vLLM 0.33.0's V1 scheduler without prefix
caching (docs/speculative.md), so with --speculative every search of the plan, speculation off included, runs
that policy (`vllm-v1`) at the deployment's token budget (`--max-num-batched-tokens`) and resident cap
(`--max-num-seqs`): off and K differ only in the drafts, and a gain is speculation's, not a scheduler's. (The
plain plan's Sarathi policy would put a second difference into every comparison.) K = 0 is off throughout.

Each deployment is searched at every (budget, K): speculation off at each budget first, then each K. A setting
is a second budget as far as pruning goes (plan/prune.py): its search starts with one probe at the
deployment's best capacity so far, and stops there unless it beats it; a deployment off the Pareto front is
dropped after one probe per setting. The best setting wins the deployment's row; a tie goes to speculation
off, then to the smaller K.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from simserve.errors import SimserveError
from simserve.speculative import DRAFT_PLACEHOLDER, serve_config

OFF = 0  # K = 0: speculation off
# With no --num-speculative-tokens, K runs from 1 to the positions the acceptance rates give, at most this
# many: each K is a search per budget, and the published curves are near zero past it (acceptance.csv's
# 7-position curves: 0.01-0.12 at position 6).
DEFAULT_MAX_TOKENS = 5
COLUMN = "speculative_tokens"  # searches.csv and plan.csv: the search's K (0: off)
GAIN = "speculation_gain"  # plan.csv: capacity at the row's K over the best with speculation off, minus 1


def tokens(spec) -> list:
    """The speculation (speculative.Speculation) at each K the plan searches, each checked as `run
    --speculative` checks it (Scenario.speculation: vLLM's refusals, the acceptance file or the catalog's
    table) at the smallest budget, before any search."""
    from simserve.sim.scenario import Scenario, acceptance_dataset
    from simserve.speculative import check, positions

    budget = min(spec.budgets)
    if spec.speculative_tokens is None:
        k = check(spec.speculative, None if spec.speculative == "mtp" else 1, spec.model, budget)
        if spec.speculative == "mtp":  # vLLM's default: the model's n_predict
            ks: tuple[int, ...] = (k,)
        else:
            n = positions(spec.speculative, spec.model, acceptance_dataset(spec.trace), spec.acceptance)
            ks = tuple(range(1, min(n, DEFAULT_MAX_TOKENS) + 1))
    else:
        ks = tuple(sorted(set(spec.speculative_tokens)))
    base = Scenario(
        model=spec.model,
        trace=spec.trace,
        policy="vllm-v1",
        budget=budget,
        speculative=spec.speculative,
        acceptance=spec.acceptance,
    )
    return [replace(base, num_speculative_tokens=k).speculation() for k in ks]


def describe(spec, k: int) -> str:
    """'eagle3 K=2', or 'off'."""
    return f"{spec.speculative} K={k}" if k else "off"


def of(spec, row) -> str:
    """', speculation eagle3 K=2' (or 'off') for the recommendation's line; '' for a plan without it."""
    return f", speculation {describe(spec, int(row[COLUMN]))}" if spec.speculative else ""


def eligible(scenario) -> str | None:
    """Why a deployment is not searched with speculation (PP > 1, attention DP, a draft that leaves no room
    for one max-length request: simserve's and vLLM's own refusals, in their words), or None."""
    from simserve.sim.scenario import check_scenario

    try:
        check_scenario(scenario)
    except SimserveError as exc:
        return str(exc)
    return None


def orders(spec, cands: list, profiles) -> tuple[list[list[tuple[int, int]]], dict]:
    """Each candidate's (budget, K) in search order: off at every budget (prune.budget_order), then each K at
    every budget speculation is modelled at for it; and what the plan's stats keep: the K, the acceptance and
    its source, and the deployments searched off only, with the refusal that kept speculation off them."""
    from simserve.plan.prune import budget_order
    from simserve.plan.ties import key_label

    plain = [[(b, OFF) for b in budget_order(c.budgets)] for c in cands]
    if not spec.speculative:
        return plain, {}
    specs = tokens(spec)  # one-line refusals (exit 2) before any search
    ks = tuple(s.k for s in specs)
    out, left = [], []
    for c, order in zip(cands, plain, strict=True):
        dep = c.deployment
        # the largest K: the most lookahead (the draft's weights and KV do not depend on K; the budget's
        # activations do, so each budget is checked)
        why = {b: eligible(spec.scenario(c, b, profiles[dep], k=ks[-1])) for b, _ in order}
        out.append(order + [(b, k) for k in ks for b, _ in order if why[b] is None])
        refused = [(b, w) for b, w in why.items() if w is not None]
        if refused:
            at = "" if len(refused) == len(why) else f" at budget {', '.join(str(b) for b, _ in refused)}"
            left.append(
                {"deployment": key_label((dep.gpu.name, dep.tp, dep.pp, dep.ep)) + at, "why": refused[0][1]}
            )
    info = {
        "tokens": list(ks),
        "acceptance": list(specs[-1].acceptance),
        "source": specs[-1].source,
        "not_searched": left,
    }
    return out, {"speculation": info}


def with_gain(best: pd.DataFrame, searches: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Each deployment's best row with GAIN: its capacity over the best capacity with speculation off, minus 1
    (0 when off wins; NaN where every search with it off stopped below the front, so that capacity is
    unknown)."""
    plain = searches[(searches[COLUMN] == OFF) & (searches["status"] == "searched")]
    off = plain.groupby(keys, as_index=False)["capacity_qps"].max().rename(columns={"capacity_qps": "off"})
    base = best[keys].merge(off, on=keys, how="left")["off"].fillna(0.0).to_numpy(float)
    cap = best["capacity_qps"].to_numpy(float)
    measured = np.divide(cap, base, out=np.full(len(cap), np.nan), where=base > 0) - 1
    gains = np.where(best[COLUMN].to_numpy() == OFF, 0.0, measured)
    return best.assign(**{GAIN: gains})


def serve_flags(spec, k: int) -> list[str]:
    """The `vllm serve` flags of a plan searched with --speculative: prefix caching off (as simulated; vLLM V1
    turns it on by default), and at K > 0 the `--speculative-config` vLLM 0.33.0 parses (SpeculativeConfig:
    method, num_speculative_tokens; EAGLE and EAGLE-3 also need their head's checkpoint as "model", n-gram and
    MTP find theirs)."""
    if not spec.speculative:
        return []
    flags = ["--no-enable-prefix-caching"]
    if k:
        flags += ["--speculative-config", serve_config(spec.speculative, k, spec.draft_model)]
    return flags


def story(result) -> list[str]:
    """What the plan found about speculation, for the lines under the table: per deployment whether it pays
    and at which K, the deployments not searched with it and why, and a draft checkpoint still to name."""
    spec, info = result.spec, result.stats.get("speculation", {})
    if not spec.speculative:
        return []
    rows = result.rows.drop_duplicates(["gpu", "tp", "pp", "ep"])
    pays = [
        f"{_name(r)} K={int(r[COLUMN])} ({_gain(r[GAIN], spec.tolerance)} capacity)"
        for _, r in rows.iterrows()
        if r[COLUMN]
    ]
    not_pay = [_name(r) for _, r in rows.iterrows() if not r[COLUMN]]
    ks = ",".join(map(str, info.get("tokens", ())))
    lines = [
        f"speculation ({spec.speculative}, K {ks}; acceptance: {info.get('source', '')}; every search on "
        f"vLLM's V1 scheduler without prefix caching, off included): pays on {len(pays)} of "
        f"{len(pays) + len(not_pay)} deployments"
        + (f": {', '.join(pays)}" if pays else "")
        + (f"; off is best on {', '.join(not_pay)}" if not_pay else "")
    ]
    grouped: dict[str, list[str]] = {}
    for n in info.get("not_searched", []):  # one line per refusal: a plan has many PP > 1 deployments
        grouped.setdefault(n["why"], []).append(n["deployment"])
    for why, names in grouped.items():
        lines.append(
            f"note: {len(names)} deployment(s) searched with speculation off only ({', '.join(names)}): {why}"
        )
    if spec.speculative in ("eagle", "eagle3") and not spec.draft_model and pays:
        lines.append(
            f'note: vLLM needs the {spec.speculative} head\'s checkpoint as "model": replace '
            f"{DRAFT_PLACEHOLDER} in the command, or give --draft-model HF_ID"
        )
    return lines


def _name(r) -> str:
    from simserve.plan.ties import key_label

    return key_label((r["gpu"], int(r["tp"]), int(r["pp"]), int(r["ep"])))


def _gain(v, tolerance: float) -> str:
    """The gain in words. Each capacity is the lower end of a bracket --tolerance wide, so only a gain above
    it is sure to be one (both searches simulate the same requests and arrivals: the seed's noise is
    common)."""
    v = float(v)
    if v != v:
        return "off's own capacity not measured: below the front or the floor"
    return f"{v:+.1%}" + (
        f", within the search tolerance {tolerance:.1%}: not told apart from off" if v <= tolerance else ""
    )


def cell(r) -> str:
    """The table's speculation column: 'off', or K and its gain over off."""
    k = int(r[COLUMN])
    if not k:
        return "off"
    g = float(r[GAIN])
    return f"K={k}" if g != g else f"K={k} {g:+.0%}"


def summary(result) -> dict:
    """plan.json's 'speculation': the method, the K searched, the acceptance and its source, the scheduler
    model, and each deployment's best K with its gain."""
    info = result.stats.get("speculation", {})
    rows = result.rows.drop_duplicates(["gpu", "tp", "pp", "ep"])
    return {
        "method": result.spec.speculative,
        "tokens_searched": list(info.get("tokens", ())),
        "acceptance": info.get("acceptance", []),
        "acceptance_source": info.get("source", ""),
        "scheduler": "vllm-v1 (vLLM 0.33.0's V1 scheduler) without prefix caching, speculation off included",
        "deployments": [
            {
                "deployment": _name(r),
                "speculative_tokens": int(r[COLUMN]),
                "gain": None if float(r[GAIN]) != float(r[GAIN]) else float(r[GAIN]),
            }
            for _, r in rows.iterrows()
        ],
        "not_searched": info.get("not_searched", []),
    }
