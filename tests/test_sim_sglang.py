"""The sglang policy (SGLang 0.5.23's scheduler, simserve/sim/sglang.py) on hand-checkable workloads, and its
pinned defaults, flags and command (simserve/tune/sglang.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simserve.cli import main
from simserve.errors import SimserveError
from simserve.sim import SimConfig, build_result, simulate
from simserve.sim.histogram import LogHistogram
from simserve.sim.request import IGNORED, Requests
from simserve.sim.sglang import _decode, default_max_running_requests
from simserve.sim.sglang_admission import choose_prefill
from simserve.sim.state import ReplicaState
from simserve.sim.testing import ConstantTimer
from simserve.tune.sglang import check_sglang_flags, prefill_graph_sizes, sglang_command, sglang_defaults


def run(prompt, output, arrived, blocks=10_000, **cfg):
    cfg.setdefault("max_model_len", 32768)
    raw = simulate(
        np.array(prompt),
        np.array(output),
        np.array(arrived, dtype=float),
        ConstantTimer(0.01),
        blocks,
        SimConfig(policy="sglang", **cfg),
    )
    return raw, build_result(raw)


def steps(res):
    it = res.iterations
    return list(zip(it.num_prefill_tokens.tolist(), it.num_decode_tokens.tolist(), strict=True))


def test_a_prefill_batch_blocks_decodes_unless_mixed_chunk():
    # Request 0 decodes; request 1 (100 tokens) arrives during the second step.
    workload = ([10, 100], [5, 2], [0.0, 0.015])
    _, res = run(*workload)
    # prefill 0, decode 0, then request 1's prefill batch alone: request 0's decode stalls that step
    assert steps(res)[:4] == [(10, 0), (0, 1), (100, 0), (0, 2)]
    _, res = run(*workload, enable_mixed_chunk=True)
    assert steps(res)[:3] == [(10, 0), (0, 1), (100, 1)]  # the decode rides along with the prefill


def test_a_long_prompt_is_chunked_and_decodes_stall_until_its_last_chunk():
    _, res = run([10, 20000], [40, 2], [0.0, 0.015], budget=8192)
    s = steps(res)
    assert s[:6] == [(10, 0), (0, 1), (8192, 0), (8192, 0), (3616, 0), (0, 2)]
    # mixed chunk: each decode takes one token of the chunk budget, and decodes on
    _, res = run([10, 20000], [40, 2], [0.0, 0.015], budget=8192, enable_mixed_chunk=True)
    assert steps(res)[:5] == [(10, 0), (0, 1), (8191, 1), (8191, 1), (3618, 1)]


def test_admission_reserves_running_requests_future_output():
    # A 320-token pool (20 blocks of 16). Request 0 (20-token prompt, 181 outputs) runs; request 1 (2 + 160)
    # asks to join when 300 tokens are free and request 0 still has 180 outputs to go. With ignore_eos
    # (add_one_req_ignore_eos) 2 + 1 fits now, but request 1 finishes first (160 to come) and until then both
    # grow by 160 each out of 300 − 3: refused, the batch is marked full, and request 1 waits for request 0
    # to leave it; nothing is ever retracted.
    workload = ([20, 2], [181, 160], [0.0, 0.005])
    raw, res = run(*workload, blocks=20, max_model_len=512)
    assert res.summary.completed == 2 and res.summary.preemptions == 0
    assert raw.reqs.scheduled[1] >= raw.reqs.completed[0]
    # Without ignore_eos SGLang holds back new_token_ratio (0.7 at first) × 180 = 126: 163 < 174, so request
    # 1 joins at once. Together they need 200 + 161 tokens of 320: after about 149 decode steps the pool is
    # out and the step retracts one. Both have as many outputs (request 1's prefill step stalled request 0),
    # so the longer prompt goes: request 0's KV is freed, it goes back to the queue and is prefilled again,
    # prompt and outputs so far, once request 1 has finished.
    raw, res = run(*workload, blocks=20, max_model_len=512, ignore_eos=False)
    r = raw.reqs
    assert res.summary.completed == 2 and r.preemptions.tolist() == [1, 0]
    assert r.scheduled[1] < r.completed[0]
    it = res.iterations
    prefills = it.num_prefill_tokens[it.num_prefill_tokens > 0].tolist()
    assert prefills[:2] == [20, 2] and len(prefills) == 3 and 20 + 140 < prefills[2] < 20 + 181
    assert it.start_s[it.num_prefill_tokens == prefills[2]].iloc[0] >= r.completed[1]
    assert raw.replicas[0].state.kv.free == raw.replicas[0].state.kv.num_blocks  # every token returned


def test_a_prefill_from_an_empty_running_batch_loses_its_full_flag():
    # Three requests (100 + 500, no ignore_eos) at once into 1600 tokens. Step 0 admits two: each is checked
    # with its whole output and reserves 100 + 1 + 500 = 601, so the third finds 1600 − 1202 = 398 left, not
    # 601: out of room, batch_is_full. But the running batch was empty: at step 1 SGLang's event loop makes
    # the prefill batch the running batch (get_next_batch_to_run), whose flag is False, and the third is
    # checked again, now against the two counted at new_token_ratio 0.7 × 499 outputs to come each: 601 <
    # 1600 − 200 − 698.6. It joins at step 1; before this was modelled it waited ~500 steps for one to finish.
    raw, _ = run(
        [100, 100, 100], [500, 500, 500], [0.0] * 3, blocks=100, max_model_len=4096, ignore_eos=False
    )
    assert raw.reqs.scheduled.tolist() == [0.0, 0.0, 0.01]


def test_a_mixed_step_loses_the_full_flag_of_its_running_batch():
    # Request 0 (10 + 1000) decodes; 1, 2, 3 (100 + 500 each) arrive during step 0, into 2400 tokens with
    # --enable-mixed-chunk. Step 1 is a mixed step: request 0's decode rides along, 1 and 2 are admitted (601
    # < 2390 − 700.3, then 601 < 2390 − 1301.3) and 3 is not (601 ≥ 2390 − 1902.3): batch_is_full. A mixed
    # step replaces the running batch by an empty one that keeps the flag, and at step 2 the prefill batch (1,
    # 2 and 0's decode) becomes the running batch with its own flag, False: request 3 is checked against the
    # three at new_token_ratio 0.7 (601 < 2189 − 1400.2) and joins at step 2.
    raw, res = run(
        [10, 100, 100, 100],
        [1000, 500, 500, 500],
        [0.0, 0.005, 0.005, 0.005],
        blocks=150,
        max_model_len=4096,
        ignore_eos=False,
        enable_mixed_chunk=True,
    )
    assert raw.reqs.scheduled.tolist() == [0.0, 0.01, 0.01, 0.02]
    assert steps(res)[:3] == [(10, 0), (200, 1), (100, 3)]


@pytest.mark.parametrize("free, admitted", [(903, False), (904, True)])
def test_ignore_eos_admission_looks_ahead_to_requests_finishing(free, admitted):
    # SGLang's add_one_req_ignore_eos (ignore_eos, no radix cache). Request 0 runs (1000-token prompt, 1 of
    # 201 outputs: 200 to come, 1001 tokens held); request 1 (500 + 1000) asks to join with `free` tokens
    # free. The general check would want 500 + 1000 + 1 < free − 200. This one: 500 + 1 must fit now (free ≥
    # 701), and then, in finishing order, request 0 first: the 2 requests grow by 200 each out of free − 501,
    # which must leave more than 1 token each (free − 501 − 400 > 2: free ≥ 904); after it frees its 1001,
    # request 1 grows by its 1000 (free − 501 + 1001 − 1000 > 1). So request 1 joins at 904 free, not at 903.
    reqs = Requests(np.array([1000, 500]), np.array([201, 1000]), np.zeros(2))
    rep = ReplicaState(
        0, reqs, SimConfig(policy="sglang", max_model_len=4096), 200, 1, LogHistogram(), lambda *_: None
    )
    rep.enqueue(0)
    rep.admit_head(0.0, 1000)
    rep.complete_chunk(0, 1000, 0.0)
    rep.sglang.running = [0]  # the running batch (sglang.merge_last_batch puts it there between steps)
    rep.kv.allocate(rep.kv.free - free)
    rep.enqueue(1)
    assert (choose_prefill(rep, 0.0, None) == [(1, 500)]) == admitted
    assert list(rep.waiting) == ([] if admitted else [1])


def decoding_replica(prompts, generated, output=100, waiting=0):
    """A replica whose requests have all finished their prompts and sampled `generated` tokens each, with a
    KV pool exactly full; `waiting` more requests queue behind them."""
    n = len(prompts)
    reqs = Requests(
        np.array([*prompts, *[10] * waiting]), np.full(n + waiting, output), np.zeros(n + waiting)
    )
    held = sum(p + g - 1 for p, g in zip(prompts, generated, strict=True))
    cfg = SimConfig(policy="sglang", max_model_len=512)
    rep = ReplicaState(0, reqs, cfg, -(-held // 16), 1, LogHistogram(), lambda *_: None)
    for rid in range(n):
        rep.enqueue(rid)
        rep.admit_head(0.0, prompts[rid])
        rep.complete_chunk(rid, prompts[rid], 0.0)
        extra = generated[rid] - 1  # decode steps already taken
        reqs.generated[rid] += extra
        reqs.computed[rid] += extra
        rep.kv.allocate(extra)
        reqs.blocks[rid] += extra
    rep.kv.allocate(rep.kv.free)  # the rest of the pool (page-rounding slack) taken: no request can grow
    rep.sglang.running = list(range(n))  # the running batch, in admission order
    for rid in range(n, n + waiting):
        rep.enqueue(rid)
    return rep


def test_retraction_takes_fewest_outputs_then_longest_prompt_and_requeues_at_the_back():
    # Outputs so far 5, 3, 3, 9: requests 1 and 2 have the fewest; of those, request 1 has the longer prompt.
    rep = decoding_replica([30, 50, 10, 40], [5, 3, 3, 9], waiting=1)
    free_before, held = rep.kv.free, int(rep.reqs.blocks[1])
    dec = _decode(rep)
    assert sorted(dec.tolist()) == [0, 2, 3] and list(rep.waiting) == [4, 1]  # to the back of the queue
    # the batch keeps the retraction order (ScheduleBatch.filter_batch(keep_indices=sorted_indices)): most
    # outputs first; the decodes run in it, and it breaks the next retraction's ties
    assert rep.sglang.running == dec.tolist() == [3, 0, 2]
    assert rep.reqs.blocks[1] == 0 and rep.reqs.computed[1] == 0 and rep.reqs.preemptions[1] == 1
    assert rep.kv.free == free_before + held - 3  # its KV freed, then one token for each of the three
    # new_token_ratio from those that stayed: (5 + 3 + 9 + 20·3) / (3·100 + 1)
    assert rep.sglang.ratio == (5 + 3 + 9 + 20 * 3) / 301
    # Fewer outputs go first even with a shorter prompt.
    rep = decoding_replica([30, 5, 60, 40], [5, 2, 3, 9])
    _decode(rep)
    assert list(rep.waiting) == [1]
    # Never the last request: alone and out of room, SGLang aborts it rather than retract it.
    rep = decoding_replica([30], [5])
    free_before, held = rep.kv.free, int(rep.reqs.blocks[0])
    assert len(_decode(rep)) == 0 and rep.reqs.status[0] == IGNORED and rep.kv.free == free_before + held
    # No shortage: nothing retracted, and the ratio decays by (0.7 − 0.098) / 600 per decode step.
    rep = decoding_replica([30, 50], [5, 3])
    rep.kv.release(2)
    assert _decode(rep).tolist() == [0, 1] and rep.sglang.ratio == pytest.approx(0.7 - 0.602 / 600)


def test_max_running_requests_caps_the_batch_and_defaults_from_the_pool():
    _, res = run([10] * 4, [5] * 4, [0.0] * 4, max_batch=1)
    assert res.iterations.num_requests.max() == 1 and res.summary.completed == 4
    _, res = run([10] * 4, [5] * 4, [0.0] * 4, max_batch=3)
    assert res.iterations.num_requests.max() == 3
    # resolve_max_num_reqs: pool / context × 512 clamped to [2048, 4096], at most half the pool
    assert default_max_running_requests(160_000, 8192) == 4096
    assert default_max_running_requests(20_000, 8192) == 2048
    assert default_max_running_requests(320, 64) == 160


def test_the_waiting_queue_order_follows_the_schedule_policy():
    # Two waiting requests and room for one at a time: fcfs takes them in arrival order, lof (longest
    # output first) the one with the longer output first.
    workload = ([10, 10, 10], [5, 3, 9], [0.0, 0.001, 0.002])
    raw, _ = run(*workload, max_batch=1)
    assert np.argsort(raw.reqs.scheduled).tolist() == [0, 1, 2]
    raw, _ = run(*workload, max_batch=1, schedule_policy="lof")
    assert np.argsort(raw.reqs.scheduled).tolist() == [0, 2, 1]


def test_lpm_without_the_radix_cache_runs_as_fcfs_and_says_so_once(capsys, monkeypatch):
    # SGLang turns a cache-aware policy into fcfs when the tree cache is off (_validate_and_adjust_policy),
    # silently; simserve runs the same batches and says so once per process on stderr
    monkeypatch.delenv("SIMSERVE_SAID_LPM_FCFS", raising=False)
    workload = ([300, 10, 200, 50], [3, 2, 2, 2], [0.0, 0.001, 0.002, 0.003])
    _, fcfs = run(*workload, budget=64)
    assert capsys.readouterr().err == ""
    _, lpm = run(*workload, budget=64, schedule_policy="lpm")
    _, again = run(*workload, budget=64, schedule_policy="lpm")
    assert steps(lpm) == steps(again) == steps(fcfs)
    err = capsys.readouterr().err
    assert (
        err.count("--schedule-policy lpm runs as fcfs without the radix cache") == 1 and err.count("\n") == 1
    )
    monkeypatch.delenv("SIMSERVE_SAID_LPM_FCFS")
    run(*workload, budget=64, schedule_policy="lpm", prefix_caching=True)  # lpm's own order: nothing to say
    assert capsys.readouterr().err == ""


def test_sglang_defaults_per_gpu_by_hand():
    # 58 prefill graph sizes up to 8192 (8 + 14 + 8 + 8 + 12 + 8), 50 up to 4096, 74 up to 16384
    assert (
        len(prefill_graph_sizes(8192)),
        len(prefill_graph_sizes(4096)),
        len(prefill_graph_sizes(16384)),
    ) == (
        58,
        50,
        74,
    )
    h100 = sglang_defaults(79.11)  # reserved 512 + 1.5·8192 + 128 + 2·256 + 8·58 = 13904 MiB
    assert (h100.chunked_prefill_size, h100.decode_graph_max_bs) == (8192, 256)
    assert h100.mem_fraction_static == round((79.11 * 1024 - 13904) / (79.11 * 1024), 3) == 0.828
    assert sglang_defaults(79.15).chunked_prefill_size == 8192  # A100-80GB: the same tier
    assert sglang_defaults(139.8).mem_fraction_static == 0.903  # H200: 8192, more memory
    b200 = sglang_defaults(180.0)  # 512 + 24576 + 128 + 1024 + 8·74 = 26832 MiB
    assert (b200.chunked_prefill_size, b200.decode_graph_max_bs, b200.mem_fraction_static) == (
        16384,
        512,
        0.854,
    )
    a40 = sglang_defaults(44.35)  # below 60 GiB: no 10 GiB floor; 512 + 6144 + 128 + 64 + 400 = 7248 MiB
    assert (a40.chunked_prefill_size, a40.decode_graph_max_bs, a40.mem_fraction_static) == (4096, 32, 0.84)
    assert sglang_defaults(79.11, tp=4).decode_graph_max_bs == 512
    # Llama-2 caps the prefill graphs at 4096 tokens (50 sizes): 64 MiB less reserved
    assert sglang_defaults(79.11, hf_id="meta-llama/Llama-2-7b-hf").mem_fraction_static == 0.829
    # a bigger chunk sets more activation memory aside, and the KV pool shrinks with it
    assert sglang_defaults(79.11, chunk=32768).mem_fraction_static < 0.45


def test_flags_the_release_refuses_and_the_command_it_starts_with():
    with pytest.raises(SimserveError, match="chunked_prefill_size must be divisible by page_size"):
        check_sglang_flags(1000, 64, page_size=16)
    with pytest.raises(SimserveError, match="chunked_prefill_size must be divisible by page_size"):
        SimConfig(policy="sglang", budget=1000, page_size=16).validate()
    with pytest.raises(SimserveError, match="--schedule-policy 'dfs-weight' is not modelled"):
        SimConfig(policy="sglang", schedule_policy="dfs-weight").validate()

    class Base:
        model, tp, pp, max_len, dtype, kv_dtype, ep = "llama-3-8b", 2, 1, 8192, "bf16", "fp8", 1

    cmd = sglang_command(
        Base, {"chunked-prefill-size": 4096, "max-running-requests": 256, "enable-mixed-chunk": 1}
    )
    assert cmd.startswith("python -m sglang.launch_server --model-path meta-llama/")
    assert "--chunked-prefill-size 4096 --max-running-requests 256 --enable-mixed-chunk --tp-size 2" in cmd
    assert "--context-length 8192" in cmd and "--kv-cache-dtype fp8_e4m3" in cmd
    assert "--mem-fraction-static" not in cmd  # the release's default, which the simulation used
    off = sglang_command(
        Base, {"chunked-prefill-size": 4096, "max-running-requests": 256, "enable-mixed-chunk": 0}
    )
    assert "mixed" not in off


def test_pipeline_parallelism_is_refused_not_simulated_wrong():
    with pytest.raises(SimserveError, match="without pipeline parallelism"):
        simulate(
            np.array([10]),
            np.array([2]),
            np.array([0.0]),
            ConstantTimer(0.01, num_stages=2),
            1000,
            SimConfig(policy="sglang"),
        )


def _cli(args, capsys):
    with pytest.raises(SystemExit) as exc:
        main(args)
        raise SystemExit(0)
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--engine-grid", "max-num-seqs=4"], "unknown sglang flag 'max-num-seqs'"),
        (["--engine-grid", "enable-mixed-chunk=2"], "enable-mixed-chunk is a switch"),
        (["--engine-grid", "chunked-prefill-size=0"], "must be at least 1 here"),
        (["--pp", "2"], "models SGLang without pipeline parallelism"),
        (["--no-prefix-caching"], "--no-prefix-caching switches vLLM's prefix cache off"),
    ],
)
def test_cli_bad_sglang_engine_input_is_one_line_and_exit_2(args, match, capsys, tmp_path: Path):
    code, _, err = _cli(
        ["sweep", "--engine", "sglang", "--out", str(tmp_path / "o"), "--no-cache", *args], capsys
    )
    assert code == 2 and err.startswith("error: ") and match in err and err.count("\n") == 1
    assert not (tmp_path / "o").exists()


def test_cli_sglang_engine_sweep_names_the_release_and_prints_its_command(capsys, tmp_path: Path):
    out = tmp_path / "o"
    grid = "chunked-prefill-size=2048,8192;max-running-requests=128;enable-mixed-chunk=0"
    args = [
        "sweep",
        "--engine",
        "sglang",
        "--engine-grid",
        grid,
        "--requests",
        "48",
        "--executor",
        "serial",
        "--no-cache",
        "--no-plots",
        "--out",
        str(out),
    ]
    code, stdout, _ = _cli(args, capsys)
    assert code == 0
    rec = json.loads((out / "recommendation.json").read_text())
    assert rec["engine"] == "sglang" and rec["release"] == "SGLang 0.5.23" and "SGLang 0.5.23 flags" in stdout
    assert "# for SGLang 0.5.23: `pip install sglang==0.5.23`" in stdout
    assert rec["command"].startswith("python -m sglang.launch_server --model-path mistralai/Mistral-7B-v0.1 ")
    chunk = rec["flags"]["chunked-prefill-size"]
    # the echo is the recommended point as simulated: SGLang's default memory fraction for that chunk size
    assert rec["scenario"]["policy"] == "sglang" and rec["scenario"]["budget"] == chunk
    assert rec["scenario"]["memory_utilization"] == sglang_defaults(79.15, chunk=chunk).mem_fraction_static
    table = pd.read_csv(out / "engine.csv")
    assert sorted(table["chunked-prefill-size"]) == [2048, 8192] and set(table["max-running-requests"]) == {
        128
    }
    assert rec["capacity_qps"] == table.capacity_qps.max() > 0


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--policy", "sglang", "--pp", "2"], "models SGLang without pipeline parallelism"),
        (["--policy", "sglang", "--schedule-policy", "random"], "--schedule-policy 'random' is not modelled"),
        (["--policy", "sglang", "--budget", "1000", "--page-size", "16"], "must be divisible by page_size"),
        (["--enable-mixed-chunk"], "--enable-mixed-chunk is an SGLang flag: use it with --policy sglang"),
        (
            ["--engine", "sglang", "--policy", "orca"],
            "--engine sglang runs the sglang policy: drop --policy orca",
        ),
    ],
)
def test_cli_bad_sglang_run_input_is_one_line_and_exit_2(args, match, capsys, tmp_path: Path):
    code, _, err = _cli(["run", "--requests", "8", "--out", str(tmp_path / "o"), *args], capsys)
    assert code == 2 and err.startswith("error: ") and match in err and err.count("\n") == 1
    assert not (tmp_path / "o").exists()


def test_cli_run_names_the_release_and_uses_its_memory_default(capsys, tmp_path: Path):
    out = tmp_path / "o"
    code, stdout, _ = _cli(
        ["run", "--engine", "sglang", "--requests", "16", "--qps", "2", "--out", str(out)], capsys
    )
    assert code == 0 and "sglang (SGLang 0.5.23)" in stdout
    doc = json.loads((out / "summary.json").read_text())
    assert doc["release"] == "SGLang 0.5.23"
    # mistral-7b on the A100-80GB at the 8192 chunk: SGLang's default --mem-fraction-static
    assert doc["scenario"]["memory_utilization"] == sglang_defaults(79.15).mem_fraction_static == 0.828


def test_the_overlap_scheduler_hides_the_cpu_work_as_sglang_runs_by_default(capsys, tmp_path):
    """`--engine sglang` runs with SGLang 0.5.23's overlap scheduler (on by default): schedule, input
    preparation and output processing leave the step's critical path, so decode gaps are shorter (the steps
    themselves differ: arrivals fall at other points of shorter steps). --disable-overlap-schedule charges
    them again."""
    import json

    from simserve.cli import main
    from simserve.errors import SimserveError
    from simserve.sim.scenario import Scenario

    assert Scenario(policy="sglang", overlap_schedule=True).scheduling_is_async()
    assert not Scenario(policy="sglang").scheduling_is_async()
    with pytest.raises(SimserveError, match="overlap scheduler is SGLang's"):
        Scenario(policy="vllm-v1", overlap_schedule=True).scheduling_is_async()
    docs = {}
    for name, extra in (("overlap", []), ("off", ["--disable-overlap-schedule"])):
        try:
            main(
                [
                    "run",
                    "--engine",
                    "sglang",
                    "--requests",
                    "60",
                    "--qps",
                    "2",
                    "--seed",
                    "1",
                    *extra,
                    "--out",
                    str(tmp_path / name),
                ]
            )
        except SystemExit as exc:
            assert exc.code == 0
        assert ("overlap scheduler: on" in " ".join(capsys.readouterr().out.split())) == (name == "overlap")
        docs[name] = json.loads((tmp_path / name / "summary.json").read_text())["summary"]
    assert docs["overlap"]["completed"] == docs["off"]["completed"] == 60
    assert docs["overlap"]["tbt_p50_s"] < docs["off"]["tbt_p50_s"]
    assert docs["overlap"]["e2e_p50_s"] < docs["off"]["e2e_p50_s"]


def test_policy_sglang_alone_says_the_overlap_scheduler_is_off(capsys, tmp_path):
    # the title names SGLang 0.5.23, whose default runs the overlap scheduler: a run without it says so
    code, stdout, _ = _cli(
        ["run", "--policy", "sglang", "--requests", "16", "--qps", "2", "--out", str(tmp_path / "o")], capsys
    )
    text = " ".join(stdout.split())
    assert code == 0 and "overlap scheduler: off (--policy sglang is its scheduler alone" in text
    code, stdout, _ = _cli(
        ["run", "--engine", "sglang", "--requests", "16", "--qps", "2", "--out", str(tmp_path / "e")], capsys
    )
    assert code == 0 and "overlap scheduler: on" in " ".join(stdout.split())


def test_disable_overlap_schedule_needs_the_sglang_engine(capsys, tmp_path):
    from simserve.cli import main

    try:
        main(["run", "--policy", "sglang", "--disable-overlap-schedule", "--out", str(tmp_path / "o")])
    except SystemExit as exc:
        assert exc.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--engine sglang" in err and not (tmp_path / "o").exists()
