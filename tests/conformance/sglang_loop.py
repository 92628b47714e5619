"""simserve's `sglang` policy beside SGLang 0.5.23's own scheduler, closed loop: both fed the same requests at
the same steps, each evolving its own state, compared at every step (sglang_loop_driver.py runs SGLang's
side).

A workload is plain data (JSON-able): per request its prompt and output lengths, the step it arrives at,
whether it is sent with ignore_eos, and for prefix sharing its token stream (`group`, -1: none) and how many
of its tokens lie on it (`shared`); and the server's flags. Request i joins the waiting queue before step
`arrive[i]` (steps count every turn of the loop, idle ones too). Every step is recorded as {"prefills": [[id,
tokens], ...] in batch order, "decodes": [ids], "retracted": [ids in order], "aborted": [ids],
 "chunked": id or None, "full": the running batch's batch_is_full, "ratio": new_token_ratio} after the step,
plus {"cached": {id: tokens}} with the radix cache: what each admitted request found cached.

    python tests/conformance/sglang_loop.py .venv-sglang/bin/python [--full | names...]   # docs/engines.md
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "sglang_loop_driver.py"

# name -> (requests, prompt range, output range, mean steps between arrivals (or a burst: (size, gap)),
#          KV tokens, chunk, max running, mixed, ignore_eos (True, False or a share sent with it), page size,
#          conservativeness, seed)
WORKLOADS = {
    # the open-loop check's seven (sglang_workloads.py), closed loop
    "light": (300, (20, 1500), (5, 300), 2.0, 400_000, 2048, 64, False, False, 1, 1.0, 0),
    "tight": (300, (50, 3000), (20, 600), 2.5, 12_000, 2048, 48, False, False, 1, 1.0, 0),
    "mixed": (300, (50, 3000), (20, 600), 2.5, 16_000, 1024, 64, True, False, 1, 1.0, 0),
    "paged": (250, (50, 4000), (20, 500), 3.3, 20_000, 4096, 32, False, False, 16, 1.0, 0),
    "ignore-eos": (300, (50, 3000), (20, 600), 2.5, 12_000, 2048, 48, False, True, 1, 1.0, 0),
    "ignore-eos-paged": (250, (50, 4000), (20, 500), 3.3, 20_000, 1024, 32, True, True, 16, 1.0, 0),
    "retract": (300, (50, 1500), (200, 1200), 3.3, 30_000, 2048, 128, False, False, 1, 0.3, 0),
    # small chunks, long prompts: every prompt is cut several times, the chunked request continues first
    "chunk256": (120, (1500, 6000), (10, 300), 12.0, 60_000, 256, 64, False, False, 1, 1.0, 1),
    "chunk256-eos-paged": (120, (1500, 6000), (10, 300), 12.0, 60_000, 256, 64, True, True, 16, 1.0, 2),
    # a pool of 3-4k tokens: decode steps retract (several at once), new_token_ratio jumps up and decays back
    "tiny-pool": (200, (20, 600), (50, 800), 4.0, 3_584, 512, 48, False, False, 1, 0.3, 3),
    "tiny-pool-paged": (200, (20, 600), (50, 800), 4.0, 4_096, 512, 48, True, False, 16, 0.3, 4),
    # one-page prompts arriving 40 at once, a 1k-token pool of 16-token pages, admission trusting a tiny
    # ratio: requests admitted together cross a page boundary in the same step, one retraction frees too
    # little, and several go at once
    "retract-many": (200, (16, 17), (20, 60), (40, 300), 1_024, 1024, 48, False, False, 16, 0.05, 17),
    # max_running_requests 8, requests in bursts of 40: the running-request cap decides admission
    "burst": (200, (20, 800), (20, 300), (40, 300), 200_000, 2048, 8, False, False, 1, 1.0, 5),
    "burst-eos": (200, (20, 800), (20, 300), (40, 300), 200_000, 2048, 8, True, True, 16, 1.0, 6),
    # --enable-mixed-chunk under decode-heavy load in a 15k-token pool (the lost batch_is_full)
    "mixed-heavy": (300, (50, 1500), (200, 1000), 3.0, 15_008, 1024, 64, True, False, 1, 1.0, 7),
    "mixed-heavy-eos": (300, (50, 1500), (200, 1000), 3.0, 15_008, 1024, 64, True, True, 1, 1.0, 8),
    # half the requests with ignore_eos, half without: both admission paths and ratios in one batch
    "eos-mix": (300, (50, 3000), (20, 600), 2.5, 12_000, 2048, 48, False, 0.5, 1, 1.0, 9),
    "eos-mix-mixed-paged": (300, (50, 3000), (20, 600), 2.5, 16_000, 1024, 48, True, 0.5, 16, 1.0, 10),
}
# The radix cache on (--prefix-caching), requests sharing token streams: name -> (kind, requests, KV tokens,
# chunk, max running, schedule policy, page size, mixed, share sent with ignore_eos, conservativeness, seed).
#   shared   a few system prompts of 300-2000 tokens, each request one of them plus its own question, in a
#            pool that holds only a few of them: hits, misses after eviction
#   chat     conversations of 1-6 turns, each turn's prompt the conversation so far plus a new message, the
#            next turn some steps after the answer; a pool that cannot keep every conversation
PREFIX_WORKLOADS = {
    "shared-fcfs": ("shared", 300, 12_000, 2048, 48, "fcfs", 1, False, 0.5, 1.0, 11),
    "shared-lpm": ("shared", 300, 12_000, 2048, 48, "lpm", 1, False, 0.5, 1.0, 11),
    "shared-lpm-paged": ("shared", 300, 16_000, 1024, 32, "lpm", 16, False, 0.5, 1.0, 12),
    "chat-lpm": ("chat", 300, 20_000, 2048, 48, "lpm", 1, False, 0.5, 1.0, 13),
    "chat-fcfs-paged": ("chat", 300, 20_000, 2048, 48, "fcfs", 16, False, 0.5, 1.0, 14),
    # admission trusts a low new_token_ratio: decode steps retract, and each retraction evicts for the others
    "chat-retract-mixed": ("chat", 300, 8_000, 1024, 48, "lpm", 1, True, 0.0, 0.3, 15),
    "shared-retract-lof-paged": ("shared", 300, 10_000, 1024, 48, "lof", 16, True, 0.0, 0.3, 16),
}
# EAGLE speculative decoding (--speculative-algorithm EAGLE, topk 1): name -> (the workload it speculates on,
# K = --speculative-num-steps, cumulative acceptance per draft position (docs/speculative.md), draw seed).
# Each request's accepted drafts per verification are drawn as simserve draws them (speculative.draws) and
# given to both sides.
SPEC_WORKLOADS = {
    "spec-light": ("light", 3, (0.8, 0.6, 0.4), 20),
    "spec-tight": ("tight", 4, (0.75, 0.5, 0.3, 0.15), 21),
    "spec-paged": ("paged", 3, (0.7, 0.45, 0.25), 22),
    "spec-retract": ("tiny-pool", 5, (0.9, 0.8, 0.6, 0.5, 0.3), 23),
    "spec-retract-paged": ("tiny-pool-paged", 2, (0.6, 0.3), 24),
    "spec-eos-mix": ("eos-mix", 3, (0.8, 0.6, 0.4), 25),
}
# The workloads CI runs (SGLang's side about two minutes here); `--full` / SIMSERVE_SGLANG_FULL=1 runs them
# all.
CI = (
    "tight",
    "mixed",
    "chunk256",
    "tiny-pool",
    "burst-eos",
    "mixed-heavy",
    "eos-mix-mixed-paged",
    "retract-many",
    "shared-lpm-paged",
    "chat-retract-mixed",
    "spec-tight",
    "spec-retract",
    "spec-retract-paged",
)


def make(name: str) -> dict:
    if name in PREFIX_WORKLOADS:
        return make_prefix(name)
    if name in SPEC_WORKLOADS:
        return make_spec(name)
    n, (p0, p1), (o0, o1), gap, tokens, chunk, running, mixed, eos, page, cons, seed = WORKLOADS[name]
    rng = np.random.default_rng(seed)
    prompt, output = rng.integers(p0, p1, n), rng.integers(o0, o1, n)
    if isinstance(gap, tuple):  # bursts of `size` requests every `gap` steps
        size, every = gap
        arrive = (np.arange(n) // size) * every
    else:
        arrive = np.floor(np.cumsum(rng.exponential(gap, n))).astype(int)
    ignore = rng.random(n) < eos if isinstance(eos, float) else np.full(n, eos)
    return {
        "name": name,
        "prompt": prompt.tolist(),
        "output": output.tolist(),
        "arrive": arrive.tolist(),
        "ignore_eos": ignore.tolist(),
        "group": [-1] * n,
        "shared": [0] * n,
        "kv_tokens": tokens,
        "page_size": page,
        "chunk": chunk,
        "max_running": running,
        "max_prefill_tokens": 16384,
        "mixed": mixed,
        "conservativeness": cons,
        "prefix_caching": False,
        "schedule_policy": "fcfs",
        "max_model_len": 8192,
        "overlap": False,
        "spec": 0,
        "acceptance": [],
        "accepted": [[] for _ in range(n)],
    }


def make_prefix(name: str) -> dict:
    kind, n, tokens, chunk, running, policy, page, mixed, eos, cons, seed = PREFIX_WORKLOADS[name]
    rng = np.random.default_rng(seed)
    if kind == "shared":
        prefixes = rng.integers(300, 2000, 8)
        group = rng.integers(0, len(prefixes), n)
        shared = prefixes[group]
        prompt, output = shared + rng.integers(20, 400, n), rng.integers(10, 300, n)
        arrive = np.floor(np.cumsum(rng.exponential(3.0, n))).astype(int)
    else:  # chat
        rows = []  # (arrival step, conversation, prompt, output)
        conv, start = 0, 0.0
        while len(rows) < n:
            start += rng.exponential(25.0)
            t, context = start, 0
            for _turn in range(int(rng.integers(1, 7))):
                user, answer = int(rng.integers(20, 600)), int(rng.integers(10, 400))
                if context + user + answer > 8192:
                    break
                rows.append((int(t), conv, context + user, answer))
                context += user + answer
                t += answer + rng.exponential(200.0)  # after the answer streamed, the user types
            conv += 1
        rows = sorted(rows[:n], key=lambda x: (x[0], x[1], x[2]))
        arrive, group, prompt, output = (np.array(c) for c in zip(*rows, strict=True))
        shared = prompt + output  # every token of a turn lies on its conversation's stream
    ignore = rng.random(n) < eos
    return {
        "name": name,
        "prompt": prompt.tolist(),
        "output": output.tolist(),
        "arrive": arrive.tolist(),
        "ignore_eos": ignore.tolist(),
        "group": group.tolist(),
        "shared": shared.tolist(),
        "kv_tokens": tokens,
        "page_size": page,
        "chunk": chunk,
        "max_running": running,
        "max_prefill_tokens": 16384,
        "mixed": mixed,
        "conservativeness": cons,
        "prefix_caching": True,
        "schedule_policy": policy,
        "max_model_len": 8192,
        "overlap": False,
        "spec": 0,
        "acceptance": [],
        "accepted": [[] for _ in range(n)],
    }


def make_spec(name: str) -> dict:
    from simserve.speculative import draws

    base, k, acceptance, seed = SPEC_WORKLOADS[name]
    w = make(base)
    accepted, offsets = draws(np.array(w["output"]), acceptance, seed)
    steps = [max(o - 1, 0) for o in w["output"]]
    return w | {
        "name": name,
        "spec": k,
        "acceptance": list(acceptance),
        "mixed": False,
        "accepted": [accepted[a : a + m].tolist() for a, m in zip(offsets.tolist(), steps, strict=True)],
    }


def config(w: dict):
    """simserve's SimConfig for a workload, or SimserveError naming a field it cannot express."""
    from simserve.errors import SimserveError
    from simserve.sim.config import SimConfig

    if w["overlap"]:
        raise SimserveError(
            "workload field 'overlap': simserve does not model the overlap scheduler's one-step lag (its "
            "CPU time only); compare SGLang with itself instead (sglang_overlap.py)"
        )
    if w["kv_tokens"] % 16:
        raise SimserveError(
            f"workload field 'kv_tokens': {w['kv_tokens']} is not a whole number of 16-token blocks"
        )
    return SimConfig(
        policy="sglang",
        budget=w["chunk"],
        max_batch=w["max_running"],
        max_model_len=w["max_model_len"],
        block_size=16,
        page_size=w["page_size"],
        enable_mixed_chunk=w["mixed"],
        ignore_eos=all(w["ignore_eos"]),
        schedule_conservativeness=w["conservativeness"],
        prefix_caching=w["prefix_caching"],
        schedule_policy=w["schedule_policy"],
        max_prefill_tokens=w["max_prefill_tokens"],
        spec_k=w["spec"],
        spec_acceptance=tuple(w["acceptance"]),
    ).validate()


def run_simserve(w: dict, stats: dict | None = None, max_steps: int = 1_000_000) -> list[dict]:
    """Step the SimPy reference's `sglang` policy over the workload, one batch at a time (the driver's loop);
    `stats` gets what the records do not show (pages the radix cache evicted)."""
    from simserve.sim.histogram import LogHistogram
    from simserve.sim.policies import sglang_policy
    from simserve.sim.request import IGNORED, Requests
    from simserve.sim.state import ReplicaState

    cfg = config(w)
    n = len(w["prompt"])
    reqs = Requests(np.array(w["prompt"]), np.array(w["output"]), np.zeros(n))
    reqs.ignore_eos = np.array(w["ignore_eos"], dtype=bool)
    reqs.prefix_group[:] = w["group"]
    reqs.prefix_tokens[:] = w["shared"]
    if w["spec"]:  # the workload's draws (speculative.draws), which the driver feeds SGLang's side too
        steps = [max(o - 1, 0) for o in w["output"]]
        reqs.spec_off = np.concatenate([[0], np.cumsum(steps)[:-1]]).astype(np.int64)
        reqs.spec_draws = np.array(
            [a for acc, m in zip(w["accepted"], steps, strict=True) for a in acc[:m]], dtype=np.int16
        )
    done: list[int] = []
    st = ReplicaState(0, reqs, cfg, w["kv_tokens"] // 16, 1, LogHistogram(), lambda _, rid: done.append(rid))
    retracted: list[int] = []
    preempt = st.preempt

    def recorded_preempt(rid, to_back=False):
        retracted.append(int(rid))
        preempt(rid, to_back)

    st.preempt = recorded_preempt
    arrive, nxt, steps = w["arrive"], 0, []
    while len(done) < n:
        while nxt < n and arrive[nxt] <= len(steps):
            st.enqueue(nxt)
            nxt += 1
        retracted.clear()
        ignored = set(np.flatnonzero(reqs.status == IGNORED).tolist())
        waiting = set(st.waiting)
        batch = sglang_policy(st, float(len(steps)))
        step: dict = {}
        # EAGLE's verifications come as (request, 1 + K) pairs: SGLang's decode batch
        verify = sorted(int(rid) for rid, _ in batch.prefills if reqs.spec_sched[rid])
        prefills = [[int(rid), int(c)] for rid, c in batch.prefills if not reqs.spec_sched[rid]]
        if prefills:
            step["prefills"] = prefills
        if prefills or len(batch.decodes) or verify:
            step["decodes"] = sorted(int(rid) for rid in batch.decodes) + verify
        if st.radix is not None and batch.prefills:  # what each newly admitted request found cached
            step["cached"] = {
                int(rid): int(reqs.computed[rid]) for rid, _ in batch.prefills if rid in waiting
            }
        now = float(len(steps) + 1)
        for rid, chunk in batch.prefills:
            st.complete_chunk(rid, chunk, now)
        if len(batch.decodes):
            st.complete_decodes(batch.decodes, now)
        s = st.sglang
        step["retracted"] = list(retracted)
        step["aborted"] = sorted(set(np.flatnonzero(reqs.status == IGNORED).tolist()) - ignored)
        step["chunked"] = int(st.prefilling[0]) if st.prefilling else None
        step["full"], step["ratio"] = bool(s.full), float(s.ratio)
        radix, page = st.radix, st.block_size
        step["pool"] = (
            [int(st.kv.free * page), 0] if radix is None else [radix.available * page, radix.evictable * page]
        )
        steps.append(step)
        if len(steps) > max_steps:
            raise AssertionError(f"simserve did not drain {w['name']} in {max_steps} steps")
    if stats is not None:
        stats["evicted pages"] = st.radix.evictions if st.radix is not None else 0
        stats["verifications"] = int(reqs.spec_steps.sum())  # EAGLE: verification steps, drafts accepted
        stats["accepted"] = (
            int(
                sum(
                    reqs.spec_draws[o : o + s].astype(np.int64).sum()
                    for o, s in zip(reqs.spec_off.tolist(), reqs.spec_steps.tolist(), strict=True)
                )
            )
            if w["spec"]
            else 0
        )
    return steps


def sglang_steps(python: str, workloads: list[dict]) -> list[list[dict]]:
    """SGLang's steps over each workload (sglang_loop_driver.py in its environment, all in one process). A
    workload the driver cannot express fails here with its one line (exit 2), never a silent skip."""
    proc = subprocess.run(
        [python, "-W", "ignore", str(DRIVER)],
        input=json.dumps(workloads),
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    if proc.returncode:
        raise RuntimeError(f"sglang_loop_driver exited {proc.returncode}: {proc.stderr.strip()[-3000:]}")
    return json.loads(proc.stdout)


def normal(step: dict) -> dict:
    """A step as both sides write it (JSON turns integer keys into strings; empty fields left out)."""
    out = {k: v for k, v in step.items() if v not in ([], None, {}) or k in ("full", "chunked")}
    if "cached" in out:
        out["cached"] = {int(k): int(v) for k, v in out["cached"].items()}
    return out


def compare(ours: list[dict], theirs: list[dict], most: int = 10) -> list[str]:
    """Differences, step by step (empty: the two schedulers took every step alike)."""
    out = []
    if len(ours) != len(theirs):
        out.append(f"steps: simserve {len(ours)}, SGLang {len(theirs)}")
    for k, (a, b) in enumerate(zip(ours, theirs, strict=False)):
        a, b = normal(a), normal(b)
        if a != b:
            keys = sorted(key for key in {*a, *b} if a.get(key) != b.get(key))
            out.append(
                f"step {k}: {', '.join(f'{key}: simserve {a.get(key)} SGLang {b.get(key)}' for key in keys)}"
            )
            if len(out) >= most:
                break
    return out


def counts(steps: list[dict]) -> dict:
    """What a run exercised (the docs' table)."""
    prefill = [s for s in steps if s.get("prefills")]
    ratios = [s["ratio"] for s in steps]
    cached = [c for s in steps for c in s.get("cached", {}).values()]
    return {
        "steps": len(steps),
        "prefill steps": len(prefill),
        "mixed steps": sum(bool(s.get("decodes")) for s in prefill),
        "admissions": sum(len(s["prefills"]) for s in prefill),
        "most in a step": max((len(s["prefills"]) for s in prefill), default=0),
        "chunked": sum(s["chunked"] is not None for s in steps),
        "full": sum(s["full"] for s in steps),
        "retracting steps": sum(bool(s["retracted"]) for s in steps),
        "retracted": sum(len(s["retracted"]) for s in steps),
        "aborted": sum(len(s["aborted"]) for s in steps),
        "ratio": (min(ratios), max(ratios)),
        "hits": sum(c > 0 for c in cached),
        "cached tokens": sum(cached),
    }


def table(python: str, names: list[str]) -> None:
    """The table in docs/engines.md: each workload on both sides, what it exercised, and the differences."""
    import time

    t0 = time.perf_counter()
    theirs = sglang_steps(python, [make(name) for name in names])
    took = time.perf_counter() - t0
    print(
        "| workload | steps | prefill steps (mixed) | admissions (most in a step) | steps with a chunked "
        "request | steps ending full | retracting steps (retracted) | new_token_ratio | admissions with a "
        "hit (cached tokens) | evicted pages | differences |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, steps in zip(names, theirs, strict=True):
        stats: dict = {}
        ours = run_simserve(make(name), stats)
        c, d = counts(ours), compare(ours, steps)
        hits = f"{c['hits']} ({c['cached tokens']})" if name in PREFIX_WORKLOADS else "(off)"
        print(
            f"| {name} | {c['steps']} | {c['prefill steps']} ({c['mixed steps']}) | {c['admissions']} "
            f"({c['most in a step']}) | {c['chunked']} | {c['full']} | {c['retracting steps']} "
            f"({c['retracted']}) | {c['ratio'][0]:.3f}–{c['ratio'][1]:.3f} | {hits} | "
            f"{stats['evicted pages']} | {len(d)} |"
        )
        if name in SPEC_WORKLOADS:
            print(
                f"    EAGLE K={SPEC_WORKLOADS[name][1]}: {stats['verifications']} verifications, "
                f"{stats['accepted']} drafts accepted"
            )
        for line in d[:3]:
            print("   ", line)
    print(f"SGLang's side: {took:.0f} s wall for {len(names)} workloads")


if __name__ == "__main__":
    args = [a for a in sys.argv[2:] if a != "--full"]
    table(
        sys.argv[1],
        args or ([*WORKLOADS, *PREFIX_WORKLOADS, *SPEC_WORKLOADS] if "--full" in sys.argv else list(CI)),
    )
