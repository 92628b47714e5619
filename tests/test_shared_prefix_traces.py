"""Traces that share prompt tokens (workload/shared_prefix.py) and what prefix caching does with them."""

import numpy as np
import pytest

from simserve.cli import main
from simserve.errors import SimserveError
from simserve.sim import SimConfig, simulate
from simserve.sim.testing import LinearTimer
from simserve.workload import load_trace
from simserve.workload.shared_prefix import build_multiturn, build_prefix_repetition
from simserve.workload.trace import read_trace

CHAT = """num_prefill_tokens,num_decode_tokens,conversation_id,round
30,40,a,0
100,20,a,1
10,5,b,0
130,10,a,2
20,8,b,2
"""


def test_prefix_repetition_is_vllms_dataset(tmp_path):
    built = build_prefix_repetition(tmp_path / "p.csv", 1005, 256, 64, 10, 128, seed=1)
    t = built.trace
    assert len(t) == 1000  # requests // num_prefixes per prefix, as vLLM samples them
    assert (
        (t.prompt_tokens == 320).all() and (t.output_tokens == 128).all() and (t.prefix_tokens == 256).all()
    )
    assert np.bincount(t.prefix_group).tolist() == [100] * 10
    assert t.prefix_group[:10].tolist() != sorted(t.prefix_group[:10].tolist())  # shuffled
    with pytest.raises(
        SimserveError, match=r"num_requests \(5\) must be greater than or equal to num_prefixes"
    ):
        build_prefix_repetition(tmp_path / "q.csv", 5, 256, 64, 10, 128)


def test_the_multiturn_trace_keeps_every_round_after_the_one_it_follows(tmp_path):
    src = tmp_path / "chat.csv"
    src.write_text(CHAT)
    t = build_multiturn(
        tmp_path / "m.csv", src, conversations=2, think_time_s=30.0, conversation_rate=1.0
    ).trace
    assert t.in_order and len(t) == 5
    arrived, group = t.arrived_at, t.prefix_group
    assert (np.diff(arrived) >= 0).all()
    # conversation a's rounds keep their order and arrive later than the round before them
    a = np.flatnonzero(group == group[t.prompt_tokens.tolist().index(30)])
    assert t.prompt_tokens[a].tolist() == [30, 100, 130] and (np.diff(arrived[a]) > 0).all()
    # every turn lies whole on its conversation's stream
    assert (t.prefix_tokens == t.prompt_tokens + t.output_tokens).all()


@pytest.mark.parametrize(
    "rows, message",
    [
        (
            "100,20,a,1\n30,40,a,0\n",
            "data row 2: conversation 'a' round 0 comes after its round 1 (data row 1)",
        ),
        (
            "30,40,a,0\n60,20,a,1\n",
            "data row 2: conversation 'a' round 1 has a 60-token prompt, shorter than",
        ),
    ],
)
def test_a_turn_before_its_parent_is_refused_with_file_and_row(capsys, tmp_path, rows, message):
    bad = tmp_path / "bad.csv"
    bad.write_text("num_prefill_tokens,num_decode_tokens,conversation_id,round\n" + rows)
    with pytest.raises(SimserveError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_trace(bad)
    with pytest.raises(SystemExit) as exc:
        main(
            ["run", "--trace", str(bad), "--policy", "vllm-v1", "--qps", "1", "--out", str(tmp_path / "out")]
        )
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1 and f"{bad}: {message}" in err
    assert not (tmp_path / "out").exists()


def test_prefix_caching_computes_less_of_the_multiturn_trace():
    """The shipped multi-turn trace, on a pool that holds a few conversations: later rounds find their
    conversation cached, so fewer prompt tokens are computed and first tokens come sooner."""
    t = load_trace("sharegpt-multiturn").head(400)
    assert t.in_order
    arrived = (t.arrived_at - t.arrived_at[0]) / 20  # 20 times the recorded rate: a busy replica
    timer = LinearTimer(0.005, 2e-5, 1e-8)
    runs = {}
    for on in (False, True):
        cfg = SimConfig(policy="vllm-v1", max_model_len=8192, prefix_caching=on).validate()
        runs[on] = simulate(
            t.prompt_tokens,
            t.output_tokens,
            arrived,
            timer,
            3000,
            cfg,
            prefix=(t.prefix_group, t.prefix_tokens),
        )
    on, off = runs[True], runs[False]
    cache = on.replicas[0].state.prefix
    assert cache.hits > 0.3 * cache.queries and cache.evictions > 0
    prefill = {k: r.log.columns(0, len(r.log))["num_prefill_tokens"].sum() for k, r in runs.items()}
    assert prefill[True] < 0.7 * prefill[False]
    ttft = {k: np.nanmedian(r.reqs.first_token - r.reqs.arrived) for k, r in runs.items()}
    assert ttft[True] < ttft[False]
    assert off.replicas[0].state.prefix is None


@pytest.mark.parametrize("name", ["sharegpt-multiturn", "prefix-repetition"])
def test_the_shipped_trace_is_what_its_builder_makes(capsys, tmp_path, name):
    from simserve.workload.trace import SHIPPED, TRACES_DIR

    out = tmp_path / SHIPPED[name]
    main(["trace", "build", name, "--out", str(out)])
    assert out.read_bytes() == (TRACES_DIR / SHIPPED[name]).read_bytes()


def test_run_reports_the_prefix_cache_and_refuses_it_off_vllm_v1(capsys, tmp_path):
    import json

    main(
        [
            "run",
            "--trace",
            "prefix-repetition",
            "--policy",
            "vllm-v1",
            "--qps",
            "4",
            "--requests",
            "200",
            "--out",
            str(tmp_path / "on"),
        ]
    )
    summary = json.loads((tmp_path / "on" / "summary.json").read_text())
    s = summary.get("summary", summary)
    # 10 prefixes of 256 tokens (16 blocks) among 200 requests, a pool that holds them all: every request but
    # the first of each prefix finds its 256 prefix tokens cached (a request admitted in the same step as the
    # first included: blocks are cached when scheduled)
    assert s["prefix_cache_hits"] == 256 * 190 and s["prefix_cache_queries"] == 200 * 512
    main(
        [
            "run",
            "--trace",
            "prefix-repetition",
            "--policy",
            "vllm-v1",
            "--qps",
            "4",
            "--requests",
            "200",
            "--no-prefix-caching",
            "--out",
            str(tmp_path / "off"),
        ]
    )
    off = json.loads((tmp_path / "off" / "summary.json").read_text())
    assert "prefix_cache_hits" not in off.get("summary", off)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(["run", "--policy", "sarathi", "--prefix-caching", "--out", str(tmp_path / "bad")])
    err = capsys.readouterr().err
    assert (
        exc.value.code == 2
        and err.count("\n") == 1
        and "use --policy vllm-v1 or sglang, or --no-prefix-caching" in err
    )
    with pytest.raises(SystemExit) as exc:
        main(["sweep", "--no-prefix-caching", "--out", str(tmp_path / "bad")])
    assert exc.value.code == 2 and "use it with --engine vllm" in capsys.readouterr().err
