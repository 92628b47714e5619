"""simserve's `sglang` policy stepped over request streams, every prefill decision recorded with its state,
for SGLang 0.5.23's own admission code to take the same decisions from (sglang_driver.py, in SGLang's env).

What is compared: at every step, from simserve's state at that step, SGLang's `PrefillAdder` (with its
`PrefillBudget`) and the scheduler's loop around it decide which requests a prefill batch admits, how many
tokens each (chunking), which request is left half-prefilled, and whether the batch is marked full; simserve's
`sglang_admission.choose_prefill` must decide the same; and at each decode step that retracts, SGLang's own
`ScheduleBatch.retract_decode` must retract the same requests. Each step starts from simserve's state, so one
difference does not cascade: an open-loop diagnostic that names the decision at fault. How that state evolves
(new_token_ratio, batch_is_full, the running batch's order), the radix cache, `lof`/`lpm` and per-request
ignore_eos mixes are checked closed loop by sglang_loop.py, against SGLang's own scheduler.

    python tests/conformance/sglang_workloads.py .venv-sglang/bin/python    # the table in docs/engines.md
"""

from __future__ import annotations

import json
import sys

import numpy as np

# name -> (requests, prompt range, output range, arrivals per step, KV tokens, chunk, max running, mixed,
# ignore_eos,
#          page size)
WORKLOADS = {
    "light": (300, (20, 1500), (5, 300), 0.5, 400_000, 2048, 64, False, False, 1),
    "tight": (300, (50, 3000), (20, 600), 0.4, 12_000, 2048, 48, False, False, 1),
    "mixed": (300, (50, 3000), (20, 600), 0.4, 16_000, 1024, 64, True, False, 1),
    "paged": (250, (50, 4000), (20, 500), 0.3, 20_000, 4096, 32, False, False, 16),
    "ignore-eos": (300, (50, 3000), (20, 600), 0.4, 12_000, 2048, 48, False, True, 1),
    # add_one_req_ignore_eos with mixed chunks on 16-token pages: what is left of the chunk after the decodes'
    # tokens is not a whole number of pages, and a request cut short takes all of it
    "ignore-eos-paged": (250, (50, 4000), (20, 500), 0.3, 20_000, 1024, 32, True, True, 16),
    # admission trusts a low new_token_ratio (--schedule-conservativeness 0.3): running requests outgrow the
    # pool and decode steps retract
    "retract": (300, (50, 1500), (200, 1200), 0.3, 30_000, 2048, 128, False, False, 1),
}
CONSERVATIVENESS = {"retract": 0.3}


def make(name: str, seed: int = 0) -> dict:
    n, (p0, p1), (o0, o1), rate, tokens, chunk, running, mixed, eos, page = WORKLOADS[name]
    rng = np.random.default_rng(seed)
    arrive = np.floor(np.cumsum(rng.exponential(1 / rate, n))).astype(int)
    return {
        "prompt": rng.integers(p0, p1, n).tolist(),
        "output": rng.integers(o0, o1, n).tolist(),
        "arrive": arrive.tolist(),
        "kv_tokens": tokens,
        "chunk": chunk,
        "max_running": running,
        "mixed": mixed,
        "ignore_eos": eos,
        "page_size": page,
        "conservativeness": CONSERVATIVENESS.get(name, 1.0),
    }


def run_simserve(w: dict, max_steps: int = 200_000) -> tuple[list[dict], list[dict], dict]:
    """Step the SimPy reference's `sglang` policy; return (states, simserve's decisions, counts)."""
    from simserve.sim import sglang
    from simserve.sim.config import SimConfig
    from simserve.sim.histogram import LogHistogram
    from simserve.sim.policies import sglang_policy
    from simserve.sim.request import IGNORED, Requests
    from simserve.sim.state import ReplicaState

    n = len(w["prompt"])
    reqs = Requests(np.array(w["prompt"]), np.array(w["output"]), np.zeros(n))
    cfg = SimConfig(
        policy="sglang",
        budget=w["chunk"],
        max_batch=w["max_running"],
        max_model_len=8192,
        block_size=16,
        page_size=w["page_size"],
        enable_mixed_chunk=w["mixed"],
        ignore_eos=w["ignore_eos"],
        schedule_conservativeness=w["conservativeness"],
    ).validate()
    done: list[int] = []
    st = ReplicaState(0, reqs, cfg, w["kv_tokens"] // 16, 1, LogHistogram(), lambda _, rid: done.append(rid))
    states: list[dict] = []
    ours: list[dict] = []
    choose = sglang.choose_prefill

    def recorded(rep, now, pending):
        r, s, page = rep.reqs, rep.sglang, rep.block_size
        full = s.full and bool(s.running)  # the reset choose_prefill applies (an empty running batch)
        chunked = rep.prefilling[0] if rep.prefilling else None

        def row(rid):
            return [int(rid), int(r.prompt[rid]), int(r.generated[rid]), int(r.output[rid])]

        states.append(
            {
                "waiting": [row(i) for i in rep.waiting],
                "running": [row(i) for i in s.running],
                "chunked": None if chunked is None else [*row(chunked), int(r.computed[chunked])],
                "free_tokens": int(rep.kv.free * page),
                "ratio": float(s.ratio),
                "full": bool(full),
                "page_size": page,
                "chunk": int(rep.budget),
                "max_prefill_tokens": int(cfg.max_prefill_tokens),
                "max_running": int(rep.max_batch),
                "mixed": bool(cfg.enable_mixed_chunk),
                "ignore_eos": bool(cfg.ignore_eos),
            }
        )
        before = {int(i): int(r.computed[i]) for i in [*rep.waiting, *rep.prefilling]}
        out = choose(rep, now, pending)
        cut = [int(i) for i, c in out if before.get(int(i), 0) + c < rep.num_tokens(int(i))]
        ours.append(
            {
                "admitted": [[int(i), int(c)] for i, c in out],
                "chunked": cut[0] if cut else None,
                "full": bool(s.full),
            }
        )
        return out

    decode = sglang._decode

    def recorded_decode(rep):
        r, page = rep.reqs, rep.block_size
        if sglang._decode_pages(rep, rep.sglang.running) <= rep.kv.free:
            return decode(rep)
        running = [
            [int(i), int(r.prompt[i]), int(r.generated[i]), int(r.output[i]), int(r.computed[i])]
            for i in rep.sglang.running
        ]
        states.append(
            {
                "retract": True,
                "running": running,
                "free_tokens": int(rep.kv.free * page),
                "page_size": page,
                "ignore_eos": bool(cfg.ignore_eos),
            }
        )
        before_pre, before_ign = r.preemptions.copy(), set(np.flatnonzero(r.status == IGNORED).tolist())
        out = decode(rep)
        retracted = [int(i) for i in rep.retracted_order]
        aborted = sorted(set(np.flatnonzero(r.status == IGNORED).tolist()) - before_ign)
        assert sorted(retracted) == np.flatnonzero(r.preemptions != before_pre).tolist()
        ours.append(
            {"retracted": retracted, "aborted": [int(i) for i in aborted], "ratio": float(rep.sglang.ratio)}
        )
        return out

    def recorded_preempt(rid, to_back=False):
        st.retracted_order.append(rid)
        preempt(rid, to_back)

    preempt = st.preempt
    st.retracted_order = []
    st.preempt = recorded_preempt
    sglang.choose_prefill, sglang._decode = recorded, recorded_decode
    try:
        nxt, steps, retractions = 0, 0, 0
        while len(done) < n:
            while nxt < n and w["arrive"][nxt] <= steps:
                st.enqueue(nxt)
                nxt += 1
            before = int(reqs.preemptions.sum())
            st.retracted_order = []
            batch = sglang_policy(st, float(steps))
            retractions += int(reqs.preemptions.sum()) - before
            steps += 1
            for rid, chunk in batch.prefills:
                st.complete_chunk(rid, chunk, float(steps))
            if len(batch.decodes):
                st.complete_decodes(batch.decodes, float(steps))
            if steps > max_steps:
                raise AssertionError("simserve did not drain the workload")
    finally:
        sglang.choose_prefill, sglang._decode = choose, decode
    return states, ours, {"steps": steps, "retractions": retractions}


def compare(ours: list[dict], theirs: list[dict], states: list[dict]) -> list[str]:
    """Differences, decision by decision (empty: SGLang's admission decided every step as simserve did)."""
    diff = []
    for k, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        if a != b:
            diff.append(f"decision {k}: simserve {a} sglang {b} (free {states[k]['free_tokens']})")
    return diff


def sglang_decisions(python: str, states: list[dict]) -> list[dict]:
    import subprocess
    from pathlib import Path

    driver = Path(__file__).resolve().parent / "sglang_driver.py"
    proc = subprocess.run(
        [python, str(driver)],
        input=json.dumps(states),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if proc.returncode:
        raise RuntimeError(proc.stderr[-3000:])
    return json.loads(proc.stdout)


if __name__ == "__main__":  # the table in docs/engines.md
    print(
        "| workload | steps | prefill decisions with a queue | admissions | left half-prefilled | stopped "
        "full with a queue | most admitted in a step | decode steps that retract | retracted | differences |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in WORKLOADS:
        states, ours, counts = run_simserve(make(name))
        theirs = sglang_decisions(sys.argv[1], states)
        d = compare(ours, theirs, states)
        pre = [(s, o) for s, o in zip(states, ours, strict=True) if "retract" not in s]
        ret = [o for s, o in zip(states, ours, strict=True) if "retract" in s]
        queued = sum(bool(s["waiting"]) or s["chunked"] is not None for s, _ in pre)
        admitted = sum(len(o["admitted"]) for _, o in pre)
        chunked = sum(o["chunked"] is not None for _, o in pre)
        full = sum(o["full"] and bool(s["waiting"]) for s, o in pre)
        most = max(len(o["admitted"]) for _, o in pre)
        retracted = sum(len(o["retracted"]) for o in ret)
        print(
            f"| {name} | {counts['steps']} | {queued} | {admitted} | {chunked} | {full} | {most} | "
            f"{len(ret)} | {retracted} | {len(d)} |"
        )
        for line in d[:3]:
            print("  ", line)
