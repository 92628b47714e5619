"""Answer-driven conversations (sim/conversation.py): a round is sent a think time after its parent's
answer."""

import numpy as np
import pytest

from simserve.cli import main
from simserve.errors import SimserveError
from simserve.sim import SimConfig, simulate
from simserve.sim.conversation import parents
from simserve.sim.request import DONE
from simserve.sim.testing import LinearTimer
from simserve.workload import load_trace

TIMER = LinearTimer(0.005, 2e-5, 1e-8)


def _chat(n=300, speedup=20.0):
    t = load_trace("sharegpt-multiturn").head(n)
    arrived = (t.arrived_at - t.arrived_at[0]) / speedup  # a busy replica: answers take a while
    return t, arrived


def _run(t, arrived, conversation, cfg=None, frontend_s=0.0):
    cfg = cfg or SimConfig(policy="vllm-v1", max_model_len=8192, prefix_caching=True, frontend_s=frontend_s)
    follows = parents(t.prefix_group, t.prompt_tokens, t.output_tokens) if conversation else None
    return simulate(
        t.prompt_tokens,
        t.output_tokens,
        arrived,
        TIMER,
        3000,
        cfg.validate(),
        prefix=(t.prefix_group, t.prefix_tokens),
        conversation=follows,
    )


def test_parents_are_the_round_before_in_the_same_conversation():
    group = np.array([0, 0, 1, 0, 1])
    prompt, output = np.array([30, 100, 10, 130, 20]), np.array([40, 20, 5, 10, 8])
    assert parents(group, prompt, output).tolist() == [-1, 0, -1, 1, 2]
    with pytest.raises(SimserveError, match="request 2 of the trace shares prefix group 0 with request 1"):
        # not a conversation: no carried answer
        parents(np.array([0, 0]), np.array([30, 50]), np.array([40, 1]))


@pytest.mark.parametrize("frontend_s", [0.0, 0.01])
def test_a_round_arrives_its_think_time_after_its_parent_completes(frontend_s):
    t, recorded = _chat()
    raw = _run(t, recorded, True, frontend_s=frontend_s)
    r, order = raw.reqs, raw.request_ids  # ids are in recorded-time order; order maps them to trace rows
    assert (r.status == DONE).all()
    row = np.empty(len(order), dtype=np.int64)
    row[order] = np.arange(len(order))  # trace row -> id
    parent = parents(t.prefix_group, t.prompt_tokens, t.output_tokens)
    follow = np.flatnonzero(parent >= 0)
    assert len(follow) > 100
    kid, dad = row[follow], row[parent[follow]]
    think = recorded[follow] - recorded[parent[follow]]
    assert np.array_equal(r.arrived[kid], r.completed[dad] + frontend_s + think)
    assert (r.arrived[kid] > r.completed[dad]).all() and (r.scheduled[kid] >= r.arrived[kid]).all()
    first = np.flatnonzero(parent < 0)  # first rounds keep their recorded times
    assert np.array_equal(r.arrived[row[first]], recorded[first])


def test_answer_driven_rounds_arrive_later_than_open_loop_and_are_deterministic():
    t, recorded = _chat()
    open_loop = _run(t, recorded, False)
    closed = _run(t, recorded, True)
    again = _run(t, recorded, True)
    for name in ("arrived", "scheduled", "first_token", "completed", "cached_tokens"):
        assert np.array_equal(getattr(closed.reqs, name), getattr(again.reqs, name), equal_nan=True)
    # the same gaps, now counted from the answer: every follow-up comes later than in the open-loop replay
    follow = parents(t.prefix_group, t.prompt_tokens, t.output_tokens)[open_loop.request_ids] >= 0
    assert (closed.reqs.arrived[follow] > open_loop.reqs.arrived[follow]).all()
    # a parent's KV is always complete when its follow-up arrives, so the follow-up hits at least as much
    assert closed.replicas[0].state.prefix.hits >= open_loop.replicas[0].state.prefix.hits


def test_conversation_arrivals_refuse_what_they_cannot_model(capsys, tmp_path):
    t, recorded = _chat(20)
    with pytest.raises(SimserveError, match="drop --max-concurrency"):
        _run(t, recorded, True, SimConfig(policy="vllm-v1", max_concurrency=2))
    with pytest.raises(SystemExit) as exc:  # a trace with no conversations
        main(
            [
                "run",
                "--trace",
                "sharegpt",
                "--policy",
                "vllm-v1",
                "--arrival",
                "conversation",
                "--qps",
                "1",
                "--requests",
                "10",
                "--out",
                str(tmp_path / "out"),
            ]
        )
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "--arrival conversation needs a multi-turn trace" in err
    assert err.count("\n") == 1 and not (tmp_path / "out").exists()


def test_with_no_follow_ups_it_is_the_open_loop_replay_watchdog_included():
    """Every request a first round: the heap routing and the watchdog's routing-order scan must give exactly
    the open-loop run, overload verdict included (the load here is far past what the replica serves)."""
    t, recorded = _chat(300, speedup=400.0)
    cfg = SimConfig(policy="vllm-v1", max_model_len=8192, overload_wait_s=2.0).validate()
    none = np.full(len(t), -1, dtype=np.int64)
    runs = [
        simulate(t.prompt_tokens, t.output_tokens, recorded, TIMER, 3000, cfg, conversation=c)
        for c in (None, none)
    ]
    assert runs[0].overloaded and runs[1].overloaded
    for name in ("arrived", "scheduled", "first_token", "completed", "preemptions"):
        assert np.array_equal(getattr(runs[0].reqs, name), getattr(runs[1].reqs, name), equal_nan=True)


def test_a_turn_before_its_parent_is_file_and_row_with_conversation_arrivals(capsys, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text(
        "num_prefill_tokens,num_decode_tokens,conversation_id,round,arrived_at\n100,20,a,1,0\n30,40,a,0,1\n"
    )
    with pytest.raises(SystemExit) as exc:
        main(
            [
                "run",
                "--trace",
                str(bad),
                "--policy",
                "vllm-v1",
                "--arrival",
                "conversation",
                "--qps",
                "1",
                "--out",
                str(tmp_path / "out"),
            ]
        )
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1
    assert f"{bad}: data row 2: conversation 'a' round 0 comes after its round 1 (data row 1)" in err
