"""Speculative decoding (simserve/speculative.py, the vllm-v1 policy's verification steps): hand-checkable
schedules, the acceptance draws, the draft's memory, and vLLM's refusals and bad input in one line, exit 2."""

from __future__ import annotations

import json

import numpy as np
import pytest
from cli_runner import cli as run_cli

from simserve import speculative
from simserve.catalog.models import resolve_model
from simserve.errors import SimserveError
from simserve.sim import SimConfig, simulate
from simserve.sim.testing import ConstantTimer, LinearTimer


def _run(prompt, output, k, acceptance, lookahead=0, blocks=1000, max_len=4096):
    cfg = SimConfig(
        policy="vllm-v1",
        max_model_len=max_len,
        spec_k=k,
        spec_lookahead=lookahead,
        spec_acceptance=tuple(acceptance),
        spec_seed=0,
    ).validate()
    return simulate(
        np.array(prompt), np.array(output), np.zeros(len(prompt)), ConstantTimer(0.01), blocks, cfg
    )


def test_every_draft_accepted_gives_k_plus_one_tokens_a_step():
    """A 100-token prompt and 41 output tokens, K 4, every draft accepted: the prefill samples the first
    token, then 8 verification steps of 5 tokens (4 drafts + the target's own) give the other 40."""
    raw = _run([100], [41], 4, [1.0] * 4)
    assert len(raw.log) == 9 and raw.reqs.generated[0] == 41
    none = _run([100], [41], 4, [0.0] * 4)  # every draft rejected: one token a step, as without speculation
    assert len(none.log) == 41 and none.reqs.generated[0] == 41


def test_the_last_step_stops_at_the_output_length():
    """41 outputs with K 6 and all accepted: 40 after the prefill take 6 steps of 7, the last one cut at
    41."""
    raw = _run([50], [41], 6, [1.0] * 6)
    assert len(raw.log) == 1 + 6 and raw.reqs.generated[0] == 41


def test_a_verification_reads_its_context_once():
    """Costs (docs/speculative.md): under seconds = a + b·tokens + c·(KV read), the 8 verifications of 5
    tokens after a 100-token prefill cost a + 5b + (c_i + 5)·c each over c_i = 100, 105, ... computed tokens:
    all 5 tokens through the linear layers, the request's context read once for its 5 queries (vLLM's decode
    kernel with query length 5), not five decode reads of c_i + 1 ... c_i + 5."""
    a, b, c = 0.01, 1e-4, 1e-6
    cfg = SimConfig(
        policy="vllm-v1", max_model_len=4096, spec_k=4, spec_acceptance=(1.0,) * 4, spec_seed=0
    ).validate()
    raw = simulate(np.array([100]), np.array([41]), np.zeros(1), LinearTimer(a, b, c), 1000, cfg)
    expected = (a + 100 * b + 100 * c) + sum(a + 5 * b + (100 + 5 * i + 5) * c for i in range(8))
    assert raw.reqs.generated[0] == 41
    assert raw.log.columns(0, len(raw.log))["end_s"].max() == pytest.approx(expected, rel=1e-12)


def test_lookahead_slots_take_blocks_beyond_the_scheduled_tokens():
    """A 16-token prompt with EAGLE's lookahead of K: admission allocates the chunk plus K slots (2 blocks);
    n-gram (no lookahead) takes only the chunk's one block."""
    from simserve.sim.histogram import LogHistogram
    from simserve.sim.policies import vllm_v1
    from simserve.sim.request import Requests
    from simserve.sim.state import ReplicaState

    for lookahead, blocks in ((3, 2), (0, 1)):
        cfg = SimConfig(
            policy="vllm-v1", spec_k=3, spec_lookahead=lookahead, spec_acceptance=(0.5, 0.5, 0.5)
        ).validate()
        reqs = Requests(np.array([16]), np.array([8]), np.zeros(1))
        st = ReplicaState(0, reqs, cfg, 100, 1, LogHistogram(), lambda *_: None)
        st.enqueue(0)
        vllm_v1(st, 0.0)
        assert reqs.blocks[0] == blocks


def test_the_draws_follow_the_cumulative_acceptance():
    """P(at least k accepted) = acceptance[k-1] (vLLM's per-position metric): over many draws the fraction
    of steps accepting position k matches it, and the draws depend on the seed only."""
    acc = (0.8, 0.5, 0.2)
    a, off = speculative.draws(np.full(2000, 101), acc, seed=7)
    assert len(a) == 2000 * 100 and off[1] == 100
    for k, p in enumerate(acc, 1):
        assert abs(np.mean(a >= k) - p) < 0.01
    b, _ = speculative.draws(np.full(2000, 101), acc, seed=7)
    assert np.array_equal(a, b) and not np.array_equal(
        a, speculative.draws(np.full(2000, 101), acc, seed=8)[0]
    )


def test_the_draft_takes_memory_and_ngram_none():
    spec = resolve_model("llama-3-8b")
    per_block, layers = 2 * 2 * 8 * 128 * 32 * 16, 32  # bf16 K and V, 8 KV heads of 128, 32 layers, 16 tokens
    eagle = speculative.draft_blocks(10000, per_block, layers, "eagle3", spec, 1, 2)
    assert speculative.draft_blocks(10000, per_block, layers, "ngram", spec, 1, 2) == 10000
    # one more KV layer in every block (32/33 of the blocks) less the head's weights (~0.5 B parameters in
    # bf16)
    assert eagle < 10000 * 32 / 33
    weights = speculative.draft_params("eagle3", spec) * 2
    assert eagle == int((10000 * per_block - weights) // (per_block * 33 / 32))
    assert 0 < speculative.draft_fraction("eagle", spec) < speculative.draft_fraction("eagle3", spec) < 0.1


def test_the_catalogs_table_is_the_default(tmp_path):
    table = tmp_path / "acceptance.csv"
    table.write_text(
        "method,model_family,dataset,position,acceptance,source,note\n"
        "eagle3,llama-3.1-8b,sharegpt,2,0.5,https://example.org/x,\n"
        "eagle3,llama-3.1-8b,sharegpt,1,0.75,https://example.org/x,\n"
    )
    found = speculative.catalog_acceptance("eagle3", resolve_model("llama-3.1-8b"), "sharegpt", 2, table)
    assert found[0] == (0.75, 0.5) and "https://example.org/x" in found[1]
    # a key the table lacks: one line naming the known keys and --acceptance (catalog/acceptance.py)
    with pytest.raises(SimserveError, match="known for eagle3: eagle3/llama-3.1-8b/sharegpt.*--acceptance"):
        speculative.catalog_acceptance("eagle3", resolve_model("llama-3.1-8b"), "arxiv", 2, table)
    # the shipped table (simserve/catalog/acceptance.csv) is the default
    rates, source = speculative.catalog_acceptance("eagle3", resolve_model("llama-3.1-8b"), "mt-bench", 3)
    assert rates == (0.7296, 0.5208, 0.3545) and "http" in source


def cli(capsys, *args: str) -> tuple[int, str]:
    code, _, err = run_cli(capsys, *args)
    return code, err


def _file(tmp_path, name: str, text: str) -> str:
    (tmp_path / name).write_text(text)
    return str(tmp_path / name)


RUN = ["run", "--policy", "vllm-v1", "--requests", "8", "--no-prefix-caching", "--frontend", "off"]


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--model", "mistral-7b", "--speculative", "mtp"], "num_nextn_predict_layers"),
        (
            [
                "--model",
                "deepseek-v3",
                "--gpu",
                "h200",
                "--tp",
                "8",
                "--speculative",
                "eagle",
                "--num-speculative-tokens",
                "2",
            ],
            "without speculative model",
        ),
        (
            ["--speculative", "eagle", "--num-speculative-tokens", "0", "--acceptance", "ACC"],
            "greater than zero",
        ),
        (
            ["--speculative", "eagle", "--num-speculative-tokens", "129", "--acceptance", "ACC"],
            "MAX_SPEC_LEN",
        ),
        (["--speculative", "eagle", "--acceptance", "ACC"], "num_speculative_tokens must be provided"),
        (
            ["--speculative", "eagle3", "--num-speculative-tokens", "2", "--acceptance", "HIGH"],
            "not a probability",
        ),
        (["--speculative", "eagle3", "--num-speculative-tokens", "2", "--acceptance", "RISE"], "rises"),
        (["--speculative", "eagle3", "--num-speculative-tokens", "4", "--acceptance", "ACC"], "needs 4"),
        (["--speculative", "eagle3", "--num-speculative-tokens", "2"], "--acceptance FILE"),
        (
            ["--speculative", "eagle3", "--num-speculative-tokens", "2", "--acceptance", "BADJSON"],
            "not valid JSON",
        ),
        (["--num-speculative-tokens", "2"], "add --speculative"),
        (["--speculative", "medusa", "--num-speculative-tokens", "2"], "not modelled"),
        (
            ["--speculative", "eagle", "--num-speculative-tokens", "2", "--acceptance", "ACC", "--pp", "2"],
            "--pp 1",
        ),
    ],
)
def test_bad_speculative_input_is_one_line_and_exit_2(capsys, tmp_path, extra, words):
    files = {
        "ACC": _file(tmp_path, "a.csv", "position,acceptance\n1,0.7\n2,0.4\n3,0.2\n"),
        "HIGH": _file(tmp_path, "h.json", "[1.2, 0.5]"),
        "RISE": _file(tmp_path, "r.json", "[0.4, 0.6]"),
        "BADJSON": _file(tmp_path, "b.json", "[0.4,"),
    }
    extra = [files.get(a, a) for a in extra]
    code, err = cli(capsys, *RUN, "--out", str(tmp_path / "o"), *extra)
    assert code == 2 and err.count("\n") == 1 and words in err and "Traceback" not in err, err
    assert not (tmp_path / "o").exists()


def test_prefix_caching_with_speculation_is_refused(capsys, tmp_path):
    acc = _file(tmp_path, "a.json", "[0.7, 0.4]")
    code, err = cli(
        capsys,
        "run",
        "--engine",
        "vllm",
        "--requests",
        "4",
        "--out",
        str(tmp_path / "o"),
        "--speculative",
        "eagle",
        "--num-speculative-tokens",
        "2",
        "--acceptance",
        acc,
    )
    assert code == 2 and "--no-prefix-caching" in err and not (tmp_path / "o").exists()


def test_a_sweep_with_speculation_needs_the_vllm_engine(capsys, tmp_path):
    code, err = cli(capsys, "sweep", "--out", str(tmp_path / "o"), "--speculative", "ngram")
    assert code == 2 and "--engine vllm" in err


def test_a_speculative_run_writes_its_settings(capsys, tmp_path):
    acc = _file(tmp_path, "a.csv", "position,acceptance\n1,0.7\n2,0.4\n3,0.2\n")
    code, err = cli(
        capsys,
        *RUN,
        "--out",
        str(tmp_path / "o"),
        "--speculative",
        "eagle3",
        "--num-speculative-tokens",
        "3",
        "--acceptance",
        acc,
        "--qps",
        "2",
    )
    assert code == 0, err
    doc = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert doc["speculative"]["acceptance"] == [0.7, 0.4, 0.2] and doc["speculative"]["lookahead"] == 3
    assert doc["scenario"]["speculative"] == "eagle3"


def test_loading_checks_positions(tmp_path):
    with pytest.raises(SimserveError, match="expected 2"):
        speculative.load_acceptance(_file(tmp_path, "p.csv", "position,acceptance\n1,0.7\n3,0.4\n"), 2)
    assert speculative.load_acceptance(_file(tmp_path, "ok.json", "[0.9, 0.5, 0.1]"), 2) == (0.9, 0.5)


def test_the_sweeps_command_line_carries_the_speculative_config():
    """`sweep --engine vllm --speculative` prints the `vllm serve` line of what it simulated: the drafts as
    vLLM 0.33.0's --speculative-config, K resolved as the run resolved it, EAGLE's head a placeholder to fill
    in."""
    from simserve.sim.scenario import Scenario
    from simserve.tune.engine import vllm_command

    flags = {"max-num-batched-tokens": 2048, "max-num-seqs": 256}
    cmd = vllm_command(
        Scenario(model="llama-3.1-8b", policy="vllm-v1", speculative="ngram", num_speculative_tokens=3), flags
    )
    assert cmd.endswith("""--speculative-config '{"method":"ngram","num_speculative_tokens":3}'""")
    cmd = vllm_command(
        Scenario(model="llama-3.1-8b", policy="vllm-v1", speculative="eagle3", num_speculative_tokens=2),
        flags,
    )
    config = json.loads(cmd.split("--speculative-config ")[1].strip("'"))
    assert config == {"method": "eagle3", "num_speculative_tokens": 2, "model": speculative.DRAFT_PLACEHOLDER}
    assert "speculative" not in vllm_command(Scenario(model="llama-3.1-8b", policy="vllm-v1"), flags)


# -- SGLang 0.5.23's EAGLE on its scheduler (--engine sglang / --policy sglang) -----------------------------
def _sglang(prompt, output, k, acceptance, pages=1000, page=1, max_running=None):
    cfg = SimConfig(
        policy="sglang",
        max_model_len=4096,
        spec_k=k,
        spec_acceptance=tuple(acceptance),
        spec_seed=0,
        page_size=page,
        max_batch=max_running,
    ).validate()
    return simulate(
        np.array(prompt), np.array(output), np.zeros(len(prompt)), ConstantTimer(0.01), pages, cfg
    )


def test_sglang_verifies_k_drafts_a_step_as_vllm_does():
    """One request, K 4, every draft accepted: the prefill samples the first token, then 8 verification steps
    of 5 tokens give the other 40; every draft rejected: one token a step."""
    raw = _sglang([100], [41], 4, [1.0] * 4)
    assert len(raw.log) == 9 and raw.reqs.generated[0] == 41 and raw.reqs.spec_steps[0] == 8
    none = _sglang([100], [41], 4, [0.0] * 4)
    assert len(none.log) == 41 and none.reqs.spec_steps[0] == 40


def test_sglang_keeps_twice_the_draft_tokens_allocated_past_the_committed_ones():
    """eagle_prepare_for_decode: before each verification a request holds its committed tokens plus
    get_alloc_reserve_per_decode = 2 (K + 1) (page-ceiled), and keeps what it held (max with the last)."""
    from simserve.sim.histogram import LogHistogram
    from simserve.sim.policies import sglang_policy
    from simserve.sim.request import Requests
    from simserve.sim.state import ReplicaState

    for page, k in ((1, 3), (16, 3), (4, 5)):
        cfg = SimConfig(
            policy="sglang",
            max_model_len=4096,
            spec_k=k,
            spec_acceptance=(0.5,) * k,
            page_size=page,
            block_size=16,
        ).validate()
        reqs = Requests(np.array([100]), np.array([200]), np.zeros(1))
        st = ReplicaState(0, reqs, cfg, 100, 1, LogHistogram(), lambda *_: None)
        st.enqueue(0)
        batch = sglang_policy(st, 0.0)  # the prefill
        for rid, n in batch.prefills:
            st.complete_chunk(rid, n, 1.0)
        held = int(reqs.blocks[0])
        for step in range(20):
            free = st.kv.free
            batch = sglang_policy(st, float(step))
            assert batch.prefills == [(0, k + 1)] and int(reqs.spec_sched[0]) == k  # a verification
            want = max(held, -(-(int(reqs.computed[0]) + 2 * (k + 1)) // page))
            assert int(reqs.blocks[0]) == want and st.kv.free == free - (want - held)
            held = want
            st.complete_chunk(0, k + 1, float(step + 1))


def test_sglang_with_eagle_runs_48_requests_unless_told():
    """_handle_eagle_family: max_running_requests is reset to 48 for speculative decoding when not given."""
    from simserve.sim import sglang

    eagle = SimConfig(policy="sglang", spec_k=2, spec_acceptance=(0.5, 0.2)).validate()
    assert sglang.pool(eagle, 100_000, 1)[1] == 48
    assert sglang.pool(SimConfig(policy="sglang").validate(), 100_000, 1)[1] > 48
    told = SimConfig(policy="sglang", spec_k=2, spec_acceptance=(0.5, 0.2), max_batch=100).validate()
    assert sglang.pool(told, 100_000, 1)[1] == 100


SGLANG_RUN = ["run", "--engine", "sglang", "--requests", "8", "--frontend", "off"]


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--speculative", "ngram", "--num-speculative-tokens", "2", "--acceptance", "ACC"], "not modelled"),
        (["--speculative", "mtp", "--num-speculative-tokens", "1", "--acceptance", "ACC"], "not modelled"),
        (["--speculative", "eagle", "--acceptance", "ACC"], "--speculative-num-steps"),
        (["--speculative", "eagle", "--num-speculative-tokens", "0", "--acceptance", "ACC"], "at least one"),
        (
            [
                "--speculative",
                "eagle3",
                "--num-speculative-tokens",
                "2",
                "--acceptance",
                "ACC",
                "--prefix-caching",
            ],
            "--no-prefix-caching",
        ),
        (
            [
                "--speculative",
                "eagle3",
                "--num-speculative-tokens",
                "2",
                "--acceptance",
                "ACC",
                "--enable-mixed-chunk",
            ],
            "--enable-mixed-chunk",
        ),
    ],
)
def test_bad_speculative_input_on_sglang_is_one_line_and_exit_2(capsys, tmp_path, extra, words):
    acc = _file(tmp_path, "a.csv", "position,acceptance\n1,0.7\n2,0.4\n3,0.2\n")
    extra = [acc if a == "ACC" else a for a in extra]
    code, err = cli(capsys, *SGLANG_RUN, "--out", str(tmp_path / "o"), *extra)
    assert code == 2 and err.count("\n") == 1 and words in err and "Traceback" not in err, err
    assert not (tmp_path / "o").exists()


def test_a_speculative_sglang_run_says_sglangs_flags(capsys, tmp_path):
    acc = _file(tmp_path, "a.csv", "position,acceptance\n1,0.7\n2,0.4\n3,0.2\n")
    code, err = cli(
        capsys,
        *SGLANG_RUN,
        "--out",
        str(tmp_path / "o"),
        "--speculative",
        "eagle3",
        "--num-speculative-tokens",
        "3",
        "--acceptance",
        acc,
        "--qps",
        "2",
    )
    assert code == 0, err
    doc = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert doc["speculative"]["num_speculative_tokens"] == 3 and doc["scenario"]["speculative"] == "eagle3"
    assert doc["summary"]["completed"] == 8


def test_draws_count_the_positions_whose_acceptance_exceeds_each_uniform():
    """speculative.draws: a request's j-th verification step accepts #{k: acc[k] > u} drafts, u the j-th of
    its uniforms from the run's own stream (seed, 0x5EC), so about acc[k] of the steps reach position k + 1; a
    request has output - 1 steps at most."""
    output = np.array([1, 5, 300, 2000])
    acc = (0.75, 0.5, 0.3)
    a, off = speculative.draws(output, acc, 3)
    assert list(off) == [0, 0, 4, 303] and len(a) == 4 + 299 + 1999 and a.dtype == np.int16
    u = np.random.default_rng([3, 0x5EC]).random(len(a))
    assert np.array_equal(a, (u[:, None] < np.array(acc)[None, :]).sum(axis=1))
    for k, p in enumerate(acc):
        assert abs((a > k).mean() - p) < 0.04
