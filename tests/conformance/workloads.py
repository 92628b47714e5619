"""The request streams the conformance test feeds both schedulers, and simserve's side of it.

A workload is plain data (JSON-able), so the same stream goes to vLLM's own Scheduler in its own virtual
environment (vllm_driver.py) and to simserve's `vllm-v1` policy here. Arrivals are counted in scheduler
steps, not seconds: request i joins the waiting queue before the first step at which `arrive[i]` steps that
scheduled something have run. Every step's outcome is a record {"tokens": {id: tokens}, "preempted": [ids]}.
"""

from __future__ import annotations

import numpy as np

BLOCK_SIZE = 16

# name → (requests, prompt range, output range, mean steps between arrivals, num KV blocks,
#         max_num_batched_tokens, max_num_seqs, long_prefill_token_threshold, max_model_len, seed)
WORKLOADS = {
    # plenty of KV, short prompts: decodes and chunked prefills share the budget, no preemption
    "light": (300, (20, 1500), (10, 300), 2.0, 10000, 2048, 256, 0, 4096, 1),
    # a burst into a small KV pool: preemption of the last running request, readmission at the end
    "heavy": (400, (50, 1200), (50, 400), 0.3, 400, 512, 128, 0, 4096, 2),
    # long prompts with the long-prefill threshold on: several capped chunks per step
    "long": (120, (1500, 7000), (20, 200), 4.0, 3000, 2048, 64, 512, 8192, 3),
    # a tiny budget and few sequences: decodes stall behind chunks, max_num_seqs binds, some preemption
    "tight": (250, (10, 600), (5, 120), 1.0, 160, 128, 32, 64, 2048, 4),
    # mixed prompts, a 128-token threshold floored at the budget's fair share
    # (long_prefill_token_threshold_adaptive)
    "adaptive": (200, (20, 4000), (10, 200), 1.5, 1500, 2048, 64, 128, 8192, 5),
}
ADAPTIVE = ("adaptive",)  # workloads run with long_prefill_token_threshold_adaptive

# Prefix caching on (vLLM's default): requests that share token streams. name → (kind, requests, num KV
# blocks, max_num_batched_tokens, max_num_seqs, long_prefill_token_threshold, max_model_len, seed).
#   shared   `vllm bench serve --dataset-name prefix_repetition`'s shape: a few shared prefixes, each
#            request one of them plus its own suffix; a pool that holds a few prefixes, so cached blocks
#            are evicted and requests preempted
#   chat     conversations whose every turn carries the conversation so far (its prompt is the previous
#            turn's prompt and answer plus a new user message), follow-up turns arriving some steps later,
#            a pool that cannot keep every conversation: hits, misses after eviction, preemption
#   crowded  the shared shape in a pool of 120 blocks with a 64-token threshold: hits on blocks a request
#            admitted earlier in the same step is still computing, duplicate blocks, heavy preemption
PREFIX_WORKLOADS = {
    "shared": ("shared", 400, 700, 1024, 64, 0, 4096, 11),
    "chat": ("chat", 360, 900, 2048, 128, 256, 8192, 12),
    "crowded": ("shared", 300, 120, 256, 32, 64, 2048, 13),
}

# Speculative decoding (prefix caching off): name → (method, K, cumulative acceptance per position, base
# workload of WORKLOADS whose stream it takes, prompt range override or None, num KV blocks, max_model_len).
#   spec-light   EAGLE-3, K 3: verification chunks beside prefill chunks, lookahead slots, no preemption
#   spec-heavy   EAGLE-3, K 4 in a pool of 300 blocks: memory binds, the last running request is preempted
#   spec-ngram   n-gram (no lookahead), K 5, a 64-token threshold and prompts from 1 token: chunks cut the
#                verification short, and one-token prompts (1-12 tokens here) are padded to 1 + K placeholder
#                drafts
#   spec-maxlen  EAGLE-3, K 4, max_model_len 640: verifications capped below it, lookahead capped at it
SPEC_WORKLOADS = {
    "spec-light": ("eagle3", 3, (0.8, 0.6, 0.45), "light", None, 10000, 4096),
    "spec-heavy": ("eagle3", 4, (0.7, 0.5, 0.35, 0.2), "heavy", None, 300, 4096),
    "spec-ngram": ("ngram", 5, (0.5, 0.3, 0.2, 0.1, 0.05), "tight", (1, 12), 160, 2048),
    "spec-maxlen": ("eagle3", 4, (0.9, 0.8, 0.7, 0.6), "tight", (400, 620), 400, 640),
}


def make(name: str) -> dict:
    if name in PREFIX_WORKLOADS:
        return make_prefix(name)
    if name in SPEC_WORKLOADS:
        return make_spec(name)
    n, (p0, p1), (o0, o1), gap, blocks, budget, seqs, thr, max_len, seed = WORKLOADS[name]
    rng = np.random.default_rng(seed)
    prompt = rng.integers(p0, p1 + 1, n)
    output = rng.integers(o0, o1 + 1, n)
    output = np.minimum(output, max_len - prompt)  # vLLM caps max_tokens at max_model_len as well
    arrive = np.floor(np.cumsum(rng.exponential(gap, n))).astype(int)
    return {
        "name": name,
        "prompt": prompt.tolist(),
        "output": output.tolist(),
        "arrive": arrive.tolist(),
        "num_blocks": blocks,
        "block_size": BLOCK_SIZE,
        "max_num_batched_tokens": budget,
        "max_num_seqs": seqs,
        "long_prefill_token_threshold": thr,
        "max_model_len": max_len,
        "long_prefill_token_threshold_adaptive": name in ADAPTIVE,
        "prefix_caching": False,
    }


def make_spec(name: str) -> dict:
    """A speculative workload: its base's stream with its own prompts, pool and max length, and the accepted
    counts simserve draws for every verification step (speculative.draws), which vLLM's side feeds back."""
    from simserve.speculative import draws, lookahead

    method, k, acceptance, base, prompts, blocks, max_len = SPEC_WORKLOADS[name]
    n, (p0, p1), (o0, o1), gap, _, budget, seqs, thr, _, seed = WORKLOADS[base]
    p0, p1 = prompts or (p0, p1)
    rng = np.random.default_rng(seed + 100)
    prompt = rng.integers(p0, p1 + 1, n)
    output = np.minimum(rng.integers(o0, o1 + 1, n), max_len - prompt)
    arrive = np.floor(np.cumsum(rng.exponential(gap, n))).astype(int)
    accepted, offsets = draws(output, acceptance, seed)
    return {
        "name": name,
        "prompt": prompt.tolist(),
        "output": output.tolist(),
        "arrive": arrive.tolist(),
        "num_blocks": blocks,
        "block_size": BLOCK_SIZE,
        "max_num_batched_tokens": budget,
        "max_num_seqs": seqs,
        "long_prefill_token_threshold": thr,
        "max_model_len": max_len,
        "long_prefill_token_threshold_adaptive": False,
        "prefix_caching": False,
        "spec": {
            "method": method,
            "k": k,
            "lookahead": lookahead(method, k),
            "acceptance": list(acceptance),
            "seed": seed,
            "draws": accepted.tolist(),
            "offsets": offsets.tolist(),
        },
    }


def make_prefix(name: str) -> dict:
    """A workload with shared token streams: `group[i]` is request i's stream (-1: none) and `shared[i]` how
    many of its tokens (prompt, then outputs) lie on it; the rest are its own. vllm_driver.py turns streams
    into token ids; simserve gets the two columns (Requests.prefix_group / prefix_tokens)."""
    kind, n, blocks, budget, seqs, thr, max_len, seed = PREFIX_WORKLOADS[name]
    rng = np.random.default_rng(seed)
    if kind == "shared":
        prefixes = rng.integers(max_len // 16, max_len // 3, 6)
        group = rng.integers(0, len(prefixes), n)
        shared = prefixes[group]
        prompt = shared + rng.integers(1, max_len // 8, n)
        output = np.minimum(rng.integers(5, 150, n), max_len - prompt)
        arrive = np.floor(np.cumsum(rng.exponential(1.0, n))).astype(int)
    else:  # chat: conversations of 1-6 turns
        rows = []  # (arrival step, conversation, prompt, output)
        conv, start = 0, 0.0
        while len(rows) < n:
            start += rng.exponential(12.0)
            t, context = start, 0
            for _turn in range(int(rng.integers(1, 7))):
                user, answer = int(rng.integers(10, 400)), int(rng.integers(5, 300))
                if context + user + answer > max_len:
                    break
                rows.append((int(t), conv, context + user, answer))
                context += user + answer
                t += rng.exponential(60.0)  # the next turn comes later (the answer streams, the user types)
            conv += 1
        rows = sorted(rows[:n], key=lambda x: (x[0], x[1], x[2]))
        arrive, group, prompt, output = (np.array(c) for c in zip(*rows, strict=True))
        shared = prompt + output  # every token of a turn is on its conversation's stream
    return {
        "name": name,
        "prompt": prompt.tolist(),
        "output": output.tolist(),
        "arrive": arrive.tolist(),
        "group": group.tolist(),
        "shared": shared.tolist(),
        "num_blocks": blocks,
        "block_size": BLOCK_SIZE,
        "max_num_batched_tokens": budget,
        "max_num_seqs": seqs,
        "long_prefill_token_threshold": thr,
        "max_model_len": max_len,
        "long_prefill_token_threshold_adaptive": False,
        "prefix_caching": True,
    }


def run_simserve(w: dict, max_steps: int = 100_000) -> list[dict]:
    """Step simserve's reference `vllm-v1` policy (vllm_v1.vllm_v1_batch) over the workload; each batch
    completes before the next is formed (one GPU, no pipeline), as the driver does for vLLM."""
    from simserve.sim.config import SimConfig
    from simserve.sim.histogram import LogHistogram
    from simserve.sim.policies import vllm_v1
    from simserve.sim.request import Requests
    from simserve.sim.state import ReplicaState

    n = len(w["prompt"])
    reqs = Requests(np.array(w["prompt"]), np.array(w["output"]), np.zeros(n))
    if w["prefix_caching"]:
        reqs.prefix_group[:] = w["group"]
        reqs.prefix_tokens[:] = w["shared"]
    spec = w.get("spec")
    extra = {}
    if spec is not None:  # the scheduler's side of speculation (the costs do not matter here)
        extra = dict(
            spec_k=spec["k"],
            spec_lookahead=spec["lookahead"],
            spec_acceptance=tuple(spec["acceptance"]),
            spec_seed=spec["seed"],
        )
    cfg = SimConfig(
        policy="vllm-v1",
        budget=w["max_num_batched_tokens"],
        max_batch=w["max_num_seqs"],
        max_model_len=w["max_model_len"],
        block_size=w["block_size"],
        long_prefill_token_threshold=w["long_prefill_token_threshold"],
        long_prefill_token_threshold_adaptive=w["long_prefill_token_threshold_adaptive"],
        prefix_caching=w["prefix_caching"],
        **extra,
    ).validate()
    done: list[int] = []
    st = ReplicaState(0, reqs, cfg, w["num_blocks"], 1, LogHistogram(), lambda _, rid: done.append(rid))
    arrive, nxt, steps = w["arrive"], 0, []
    while len(done) < n:
        while nxt < n and arrive[nxt] <= len(steps):
            st.enqueue(nxt)
            nxt += 1
        before = reqs.preemptions.copy()
        waiting = set(st.waiting)
        batch = vllm_v1(st, float(len(steps)))
        if not batch:
            if nxt < n and not st.num_running and not st.waiting:
                steps.append({"tokens": {}, "preempted": []})  # idle until the next arrival
                continue
            raise AssertionError(f"simserve scheduled nothing at step {len(steps)} with work left")
        tokens = {int(rid): int(c) for rid, c in batch.prefills}
        tokens.update({int(rid): 1 for rid in batch.decodes.tolist()})
        preempted = np.flatnonzero(reqs.preemptions != before).tolist()
        step = {"tokens": tokens, "preempted": preempted}
        if w["prefix_caching"]:  # tokens found cached by each request admitted in this step
            step["cached"] = {
                int(rid): int(reqs.cached_tokens[rid]) for rid, _ in batch.prefills if rid in waiting
            }
        if spec is not None:  # drafts scheduled (padding included), KV blocks held, the pool's free blocks
            step["spec"] = {
                int(rid): abs(int(reqs.spec_sched[rid])) for rid, _ in batch.prefills if reqs.spec_sched[rid]
            }
            step["blocks"] = {rid: int(reqs.blocks[rid]) for rid in tokens}
            step["free"] = int(st.kv.free)
        steps.append(step)
        now = float(len(steps))
        for rid, chunk in batch.prefills:
            st.complete_chunk(rid, chunk, now)
        if len(batch.decodes):
            st.complete_decodes(batch.decodes, now)
        if len(steps) > max_steps:
            raise AssertionError("simserve did not drain the workload")
    return steps


def compare(ours: list[dict], theirs: list[dict]) -> list[str]:
    """Differences, step by step (empty: the schedules are identical)."""
    out = []
    if len(ours) != len(theirs):
        out.append(f"steps: simserve {len(ours)}, vLLM {len(theirs)}")
    for k, (a, b) in enumerate(zip(ours, theirs, strict=False)):
        a, b = _normal(a), _normal(b)
        if a != b:
            out.append(f"step {k}: simserve {a}, vLLM {b}")
        if len(out) > 10:
            break
    return out


def _normal(step: dict) -> dict:
    """JSON turns integer keys into strings; order within a step does not matter."""
    out = {
        "tokens": {int(k): int(v) for k, v in step["tokens"].items()},
        "preempted": sorted(int(r) for r in step["preempted"]),
    }
    if "cached" in step:
        out["cached"] = {int(k): int(v) for k, v in step["cached"].items()}
    for key in ("spec", "blocks"):
        if key in step:
            out[key] = {int(k): int(v) for k, v in step[key].items()}
    if "free" in step:
        out["free"] = int(step["free"])
    return out


if __name__ == "__main__":  # the table in docs/engines.md: python tests/conformance/workloads.py VLLM_PYTHON
    import json
    import subprocess
    import sys
    from pathlib import Path

    driver = Path(__file__).with_name("vllm_driver.py")
    print(
        "| workload | steps | requests | scheduled tokens | preemptions | max requests in a step | "
        "admissions with a hit | cached tokens | differences |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name in [*WORKLOADS, *PREFIX_WORKLOADS, *SPEC_WORKLOADS]:
        w = make(name)
        proc = subprocess.run(
            [sys.argv[1], str(driver)], input=json.dumps(w), capture_output=True, text=True, check=True
        )
        theirs, ours = json.loads(proc.stdout), run_simserve(w)
        tokens = sum(sum(s["tokens"].values()) for s in ours)
        pre = sum(len(s["preempted"]) for s in ours)
        widest = max(len(s["tokens"]) for s in ours)
        cached = [c for s in ours for c in s.get("cached", {}).values()]
        hits = f"{sum(c > 0 for c in cached)} of {len(cached)}" if w["prefix_caching"] else "(off)"
        print(
            f"| {name} | {len(ours)} | {len(w['prompt'])} | {tokens} | {pre} | {widest} | {hits} | "
            f"{sum(cached)} | {len(compare(ours, theirs))} |"
        )
