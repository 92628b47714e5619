"""Roofline attention of today's FlashAttention kernels (roofline_attention.py): causal tiles, pack-GQA,
waves."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from simserve.catalog import GPU
from simserve.profiling import roofline_attention as ra

H100, H200, A100 = GPU.get("h100"), GPU.get("h200"), GPU.get("a100")
# compute only: no minimum duration, no per-tile cost, so the tile arithmetic can be checked by hand
BARE = dataclasses.replace(ra.ARCH_ATTENTION[90], prefill_min_us=0.0, prefill_tile_us=0.0)


def test_causal_prefill_skips_the_masked_key_tiles():
    # 8192 tokens in 128-row tiles: query tile i sees i + 1 key tiles, 64·65/2 = 2080 of the 64² = 4096
    # rectangle
    total, last = ra.visible_key_tiles(8192, 0, 128, 128)
    assert float(total) == 2080 and float(last) == 64
    # over a prefix of 1024 tokens every query tile also sees its 8 prefix key tiles
    total, last = ra.visible_key_tiles(8192, 1024, 128, 128)
    assert float(total) == 2080 + 64 * 8 and float(last) == 72


def test_a_long_prompt_costs_its_causal_half_at_the_fitted_rate():
    # one head, 16384 tokens: compute-bound, 4·d·(causal pairs in whole tiles) at the fitted fraction of peak
    # 132 heads: one wave of tiles per query row
    t = float(ra.prefill_ms(H100, 132, 132, 128, 16384, 0, c=BARE))
    tiles = 128 * 129 / 2  # key tiles of the 128 query tiles of one head
    flops = 132 * 4 * 128 * 128 * 128 * tiles
    assert t == pytest.approx(flops / (BARE.prefill_compute_eff * H100.peak_tflops * 1e12) * 1e3, rel=0.02)


def test_query_heads_of_a_kv_head_share_a_tile():
    # a 16-token chunk of 8 query heads over one KV head fills one 128-row tile, as one 128-token chunk of one
    # head
    grouped = ra.prefill_ms(H100, 8, 1, 128, 16, 0, c=BARE)
    single = ra.prefill_ms(H100, 1, 1, 128, 128, 0, c=BARE)
    assert float(grouped) == pytest.approx(float(single), rel=0.05)


def test_prefill_grows_with_prefix_and_chunk_and_batches_share_a_kernel():
    chunk = np.array([128, 512, 2048, 8192])
    t = ra.prefill_ms(H100, 32, 8, 128, chunk, 0)
    assert np.all(np.diff(t) > 0)
    assert np.all(np.diff(ra.prefill_ms(H100, 32, 8, 128, 512, np.array([0, 1024, 4096, 16384]))) > 0)
    one = float(ra.prefill_ms(H100, 32, 8, 128, 512, 0))
    assert one < float(ra.prefill_ms(H100, 32, 8, 128, 512, 0, batch=2)) < 2 * one  # one minimum duration


def test_each_compute_capability_has_its_own_constants_and_the_h200_is_the_h100s():
    assert ra.attention_for(H200) is ra.attention_for(H100) is ra.ARCH_ATTENTION[90]
    assert (
        ra.attention_for(A100) is ra.ARCH_ATTENTION[80]
        and ra.attention_for(GPU.get("a40")) is ra.ARCH_ATTENTION[80]
    )
    # nearest of its arch
    assert ra.attention_for(dataclasses.replace(H100, sm_version=95)) is ra.ARCH_ATTENTION[90]
    # same kernel, more bandwidth: the H200's decode is faster, its long prefill (compute-bound) about the
    # same
    assert float(ra.decode_ms(H200, 32, 8, 128, 64, 8192)) < 0.8 * float(
        ra.decode_ms(H100, 32, 8, 128, 64, 8192)
    )
    assert float(ra.prefill_ms(H200, 32, 8, 128, 8192, 0)) == pytest.approx(
        float(ra.prefill_ms(H100, 32, 8, 128, 8192, 0)), rel=0.02
    )


def test_a_roofline_profile_uses_them_and_records_them():
    from simserve.catalog import MODELS
    from simserve.profiling import roofline as rl

    tables, prov = rl.profile(MODELS.get("llama-3-8b"), H100, [1], None, None, 4096, 4096, quick=True)
    assert prov["attention"]["kernel"] == "vllm_flash_attn_fa3"
    pre = tables["attention"].query("phase == 'prefill' and kv_len == 0")
    row = pre.iloc[-1]
    assert row["time_ms"] == pytest.approx(float(ra.prefill_ms(H100, 32, 8, 128, row["chunk"], 0)))
