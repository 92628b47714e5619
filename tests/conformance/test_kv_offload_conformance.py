"""simserve's CPU KV tier (sim/kv_offload.py) against vLLM 0.33.0's own CPUOffloadingManager (LRU policy).

A simserve run under memory pressure records every call its tier makes (stores with their keys and positions,
lookups, loads and their completion, finished requests); kv_offload_driver.py replays them on vLLM's manager
in vLLM's environment (SIMSERVE_VLLM_PYTHON, default /work/envs/vllm033 then .venv-vllm). Every store must
evict the same blocks (or be refused alike) and every lookup find the same run of resident blocks.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from simserve.sim import SimConfig, kv_offload, simulate
from simserve.sim.testing import LinearTimer

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
_CANDIDATES = [Path("/work/envs/vllm033/bin/python"), ROOT / ".venv-vllm" / "bin" / "python"]
VLLM_PYTHON = Path(
    os.environ.get("SIMSERVE_VLLM_PYTHON") or next((p for p in _CANDIDATES if p.exists()), _CANDIDATES[0])
)


class Recording(kv_offload.CpuTier):
    """The tier, writing down each call and its own decision."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.events: list = []
        self.mine: list = []

    def store(self, rid, keys):
        before, failures = set(self.rank), self.store_failures
        super().store(rid, keys)
        self.events.append(["store", rid, keys])
        self.mine.append(None if self.store_failures > failures else sorted(before - set(self.rank)))

    def lookup(self, rid, gpu_blocks, num_tokens):
        keys = [self._key(rid, k) for k in range(gpu_blocks, num_tokens // self.block_size)]
        n = next((i for i, key in enumerate(keys) if key not in self.rank), len(keys))
        self.events.append(["lookup", rid, keys])
        self.mine.append(n)
        return super().lookup(rid, gpu_blocks, num_tokens)

    def _start(self, rid, now, gpu_blocks, blocks, num_tokens, rest):
        self.events.append(
            ["load", rid, [(self._key(rid, k), k) for k in range(gpu_blocks, gpu_blocks + blocks)]]
        )
        self.mine.append(0)
        super()._start(rid, now, gpu_blocks, blocks, num_tokens, rest)

    def _complete(self, rid):
        self.events.append(["loaded", rid, list(self.loading[rid][2])])
        self.mine.append(0)
        super()._complete(rid)

    def finished(self, rid):
        self.events.append(["finished", rid])
        self.mine.append(0)
        super().finished(rid)


class MostRecentFirst(Recording):
    """A wrong tier: evicts the most recently used blocks."""

    def _evict(self, n, protected):
        order = sorted((r, k) for k, r in self.rank.items() if k not in self.pinned and k not in protected)
        if len(order) < n:
            return None
        chosen = [k for _, k in order[len(order) - n :]]
        for k in chosen:
            del self.rank[k]
        return chosen


def record(monkeypatch, tier_blocks: int, cls=Recording) -> Recording:
    """A multi-turn-like run (8 shared streams, prompts past a GPU pool of 120 blocks) with a small tier."""
    tiers: list[Recording] = []

    def make(*args, **kwargs):
        tiers.append(cls(*args, **kwargs))
        return tiers[-1]

    monkeypatch.setattr(kv_offload, "CpuTier", make)
    monkeypatch.setenv("SIMSERVE_CORE", "reference")
    rng = np.random.default_rng(0)
    n = 300
    cfg = SimConfig(
        policy="vllm-v1",
        max_model_len=1024,
        prefix_caching=True,
        watermark=0.0,
        kv_offload_blocks=tier_blocks,
        kv_offload_block_s=2e-4,
    )
    simulate(
        rng.integers(100, 900, n),
        rng.integers(5, 60, n),
        np.cumsum(rng.exponential(0.05, n)),
        LinearTimer(0.003, 2e-5, 3e-8),
        120,
        cfg,
        prefix=(rng.integers(0, 8, n), np.full(n, 2000)),
    )
    (tier,) = tiers
    return tier


def replay_on_vllm(tier: Recording) -> list:
    if not VLLM_PYTHON.exists():
        pytest.skip(f"no vLLM 0.33.0 environment at {VLLM_PYTHON}: build it with `bash tools/vllm_env.sh`")
    w = {"capacity": tier.capacity, "block_size": tier.block_size, "events": tier.events}
    proc = subprocess.run(
        [str(VLLM_PYTHON), str(HERE / "kv_offload_driver.py")],
        input=json.dumps(w),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


@pytest.mark.parametrize("tier_blocks", [60, 400])
def test_the_cpu_tier_stores_evicts_and_finds_as_vllms_offloading_manager(monkeypatch, tier_blocks):
    tier = record(monkeypatch, tier_blocks)
    theirs = replay_on_vllm(tier)
    diffs = [
        (i, tier.events[i][:2], m, t)
        for i, (m, t) in enumerate(zip(tier.mine, theirs, strict=True))
        if m != t
    ]
    assert diffs[:5] == []
    # the sequence exercises what it checks: evictions, loads, and lookups that hit and miss
    assert tier.evictions > 0 and tier.loads > 0
    hits = [m for e, m in zip(tier.events, tier.mine, strict=True) if e[0] == "lookup"]
    assert any(hits) and not all(hits)


def test_the_comparison_sees_a_different_eviction_order(monkeypatch):
    """A tier that evicted the most recent blocks instead of the least recent ones would be caught."""
    tier = record(monkeypatch, 60, MostRecentFirst)
    theirs = replay_on_vllm(tier)
    assert tier.mine != theirs
