"""The CPU KV tier (--kv-offload-gb, sim/kv_offload.py): what a hit saves and costs, LRU eviction, off is
today's simulation, and bad input."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from cli_runner import cli as run_cli

from simserve.sim import SimConfig, simulate
from simserve.sim.kv_offload import CpuTier, tier_blocks
from simserve.sim.scenario import Scenario
from simserve.sim.testing import LinearTimer

BS = 16


def _three_requests(block_s: float, tier: int):
    """Request 0 (500 tokens of stream 0) finishes; request 1 (600 tokens of another stream) takes most of a
    40-block pool, evicting 0's blocks from the GPU; request 2 (500 tokens of stream 0) comes back for
    them."""
    cfg = SimConfig(
        policy="vllm-v1",
        max_model_len=640,
        prefix_caching=True,
        watermark=0.0,
        kv_offload_blocks=tier,
        kv_offload_block_s=block_s,
    )
    prompt, output = np.array([500, 600, 500]), np.array([2, 2, 2])
    arrived = np.array([0.0, 1.0, 2.0])
    prefix = (np.array([0, 1, 0]), np.array([10_000, 10_000, 10_000]))
    return simulate(prompt, output, arrived, LinearTimer(0.003, 2e-5, 3e-8), 40, cfg, prefix=prefix)


@pytest.mark.parametrize("mode", ["reference", ""])
def test_a_tier_hit_is_loaded_not_recomputed_and_waits_for_its_pcie_copy(monkeypatch, mode):
    monkeypatch.setenv("SIMSERVE_CORE", mode)
    off = _three_requests(0.01, 0)
    slow = _three_requests(0.01, 100)
    fast = _three_requests(1e-6, 100)
    # without the tier the GPU kept 2 of request 0's 31 full blocks; with it the other 29 come back from the
    # CPU
    assert off.reqs.cached_tokens[2] == 2 * BS
    for run in (slow, fast):
        tier = run.replicas[0].state.prefix.tier
        assert run.reqs.cached_tokens[2] == 31 * BS and (tier.loads, tier.blocks_loaded) == (1, 29)
        assert tier.stores == 31 + 37  # the full prompt blocks of requests 0 and 1
    ttft = {
        k: float(r.reqs.first_token[2] - r.reqs.arrived[2])
        for k, r in (("off", off), ("slow", slow), ("fast", fast))
    }
    # the copy is 29 blocks x block_s; the replica is otherwise idle, so the step waits for it
    assert ttft["slow"] >= 29 * 0.01 > ttft["off"] > ttft["fast"]
    assert ttft["slow"] - ttft["fast"] == pytest.approx(29 * (0.01 - 1e-6), abs=1e-3)


def test_a_too_small_tier_evicts_the_least_recently_used_blocks_tail_first():
    # request 2 reads request 0's stream; the others their own (keys 100 * rid + k)
    tier = CpuTier(4, 1e-4, BS, lambda rid, k: k if rid == 2 else 100 * rid + k, np.full(5, 4 * BS))
    tier.scheduled(0, 4 * BS)  # request 0 stores its 4 blocks
    tier.finished(0)  # vLLM ranks a finished request's blocks afresh, tail first: its tail goes first
    tier.scheduled(1, 2 * BS)  # request 1's 2 blocks evict request 0's last two
    assert set(tier.rank) == {0, 1, 100, 101} and tier.evictions == 2
    assert tier.lookup(3, 0, 4 * BS) == 0  # request 3's own stream is not there
    assert tier.lookup(2, 0, 4 * BS) == 2  # blocks 0 and 1 left: a hit stops at the first missing block
    tier._start(2, 0.0, 0, 2, 4 * BS, 0)  # loading pins them: a store must evict request 1's instead
    tier.scheduled(3, 2 * BS)  # request 3 (own stream 300, 301)
    assert set(tier.rank) == {0, 1, 300, 301}
    tier.scheduled(4, 3 * BS)  # three more than the unpinned two: refused whole
    assert tier.store_failures == 1 and set(tier.rank) == {0, 1, 300, 301}


def test_the_tier_size_is_vllms_cpu_bytes_over_the_page_aligned_block():
    # llama-3-8b bf16: 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes = 128 KiB per token, 2 MiB per block
    assert tier_blocks(64, 2 << 20, 1) == 32768
    assert tier_blocks(64, (2 << 20) // 2, 2) == 32768  # TP 2: each GPU half, the size is the sum over ranks
    assert tier_blocks(1, 1000, 1) == (1 << 30) // 4096  # a block rounds up to a 4 KiB page
    assert tier_blocks(0, 2 << 20, 1) == 0


def test_no_tier_is_todays_configuration():
    base = Scenario(model="llama-3-8b", gpu="h100", policy="vllm-v1", prefix_caching=True)
    assert replace(base, kv_offload_gb=0.0).sim_config() == base.sim_config()
    cfg = replace(base, kv_offload_gb=64.0).sim_config()
    assert cfg.kv_offload_blocks == 32768
    # one 2 MiB block over the DGX H100's PCIe Gen5 x16, 64 GB/s per direction (catalog)
    assert cfg.kv_offload_block_s == pytest.approx((2 << 20) / 64e9)


def cli(capsys, *args: str) -> tuple[int, str]:
    code, _, err = run_cli(capsys, *args)
    return code, err


RUN = ["run", "--model", "llama-3-8b", "--gpu", "h100", "--requests", "8", "--qps", "1"]


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--policy", "vllm-v1", "--kv-offload-gb", "-1"], "--kv-offload-gb"),
        (["--policy", "vllm-v1", "--kv-offload-gb", "nan"], "--kv-offload-gb"),
        (["--policy", "vllm-v1", "--kv-offload-gb", "inf"], "--kv-offload-gb"),
        (["--policy", "vllm-v1", "--kv-offload-gb", "1e-9"], "holds no KV block"),
        (["--policy", "sarathi", "--kv-offload-gb", "64"], "--policy vllm-v1"),
        (["--policy", "vllm-v1", "--no-prefix-caching", "--kv-offload-gb", "64"], "prefix caching"),
        (["--policy", "vllm-v1", "--pp", "2", "--kv-offload-gb", "64"], "--pp"),
        (
            ["--policy", "vllm-v1", "--prefill", "1xTP1", "--decode", "1xTP1", "--kv-offload-gb", "64"],
            "aggregated",
        ),
    ],
)
def test_a_bad_kv_offload_is_refused_in_one_line_and_nothing_is_written(capsys, tmp_path, extra, words):
    code, err = cli(capsys, *RUN, *extra, "--out", str(tmp_path / "o"))
    assert code == 2 and err.count("\n") == 1 and words in err and "Traceback" not in err, err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--policies", "sarathi", "--kv-offload-gb", "64"], "--engine vllm"),
        (["--engine", "vllm", "--kv-offload-gb", "-1"], "--kv-offload-gb"),
        (["--engine", "sglang", "--kv-offload-gb", "64"], "--engine vllm"),
    ],
)
def test_sweep_takes_the_tier_only_for_vllm(capsys, tmp_path, extra, words):
    code, err = cli(
        capsys, "sweep", "--model", "llama-3-8b", "--gpu", "h100", *extra, "--out", str(tmp_path / "o")
    )
    assert code == 2 and err.count("\n") == 1 and words in err, err
    assert not (tmp_path / "o").exists()


def test_the_engine_command_names_vllms_flags():
    from simserve.tune.engine import vllm_command

    base = Scenario(model="llama-3-8b", gpu="h100", policy="vllm-v1", prefix_caching=True, kv_offload_gb=64.0)
    assert "--kv-offloading-size 64 --kv-offloading-backend native" in vllm_command(base, {})
    assert "kv-offloading" not in vllm_command(replace(base, kv_offload_gb=0.0), {})
    assert math.isfinite(base.sim_config().kv_offload_block_s)
