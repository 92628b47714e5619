"""The parsed-trace cache (simserve/workload/trace_cache.py): a hit skips parsing, and never returns stale
data."""

from __future__ import annotations

import numpy as np
import pytest

from simserve.errors import SimserveError
from simserve.workload import load_trace, trace_cache
from simserve.workload import trace as trace_module


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SIMSERVE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "trace"


@pytest.fixture
def parses(monkeypatch):
    """Counts the times a trace file is actually parsed."""
    calls = []
    real = trace_module.read_trace

    def counting(path, name=None):
        calls.append(path)
        return real(path, name)

    monkeypatch.setattr(trace_module, "read_trace", counting)
    return calls


def test_a_miss_parses_and_stores_then_a_hit_parses_nothing(tmp_path, cache, parses):
    src = tmp_path / "t.csv"
    src.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,10,2\n0.25,20,4\n0.5,7,9\n")
    first = load_trace(str(src), max_total_tokens=20)
    assert len(parses) == 1 and len(list(cache.glob("*.npz"))) == 1
    second = load_trace(str(src), max_total_tokens=20)
    assert len(parses) == 1  # served from the cache
    assert second.name == first.name == "t" and second.too_long == first.too_long == 1
    for a, b in (
        (first.prompt_tokens, second.prompt_tokens),
        (first.output_tokens, second.output_tokens),
        (first.arrived_at, second.arrived_at),
    ):
        assert a.dtype == b.dtype and a.tolist() == b.tolist()
    assert second.arrived_at.tolist() == [0.0, 0.5]  # the 24-token row is too long


def test_a_trace_without_arrivals_stays_without(tmp_path, cache, parses):
    src = tmp_path / "v.csv"
    src.write_text("prompt_len,output_len\n100,30\n5,1\n")
    load_trace(str(src))
    hit = load_trace(str(src))
    assert len(parses) == 1 and hit.arrived_at is None and hit.prompt_tokens.tolist() == [100, 5]


def test_an_edited_source_is_parsed_again_even_with_the_same_size_and_time(tmp_path, cache, parses):
    import os

    src = tmp_path / "t.csv"
    src.write_text("num_prefill_tokens,num_decode_tokens\n10,2\n")
    stat = src.stat()
    assert load_trace(str(src)).prompt_tokens.tolist() == [10]
    src.write_text("num_prefill_tokens,num_decode_tokens\n11,2\n")  # same size
    os.utime(src, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # and the same modification time
    assert load_trace(str(src)).prompt_tokens.tolist() == [11]
    assert len(parses) == 2


@pytest.mark.parametrize("damage", [b"", b"not an npz file", b"PK\x03\x04truncated zip"])
def test_a_corrupt_entry_is_a_miss_and_is_rewritten(tmp_path, cache, parses, damage):
    src = tmp_path / "t.csv"
    src.write_text("num_prefill_tokens,num_decode_tokens\n10,2\n3,4\n")
    load_trace(str(src))
    (entry,) = cache.glob("*.npz")
    entry.write_bytes(damage)
    assert load_trace(str(src)).output_tokens.tolist() == [2, 4]
    assert len(parses) == 2
    assert trace_cache.load(trace_cache.key(src)) is not None  # rewritten whole


def test_an_entry_with_wrong_shapes_or_types_is_a_miss(tmp_path, cache):
    src = tmp_path / "t.csv"
    src.write_text("num_prefill_tokens,num_decode_tokens\n10,2\n")
    key = trace_cache.key(src)
    cache.mkdir(parents=True)
    np.savez(cache / f"{key}.npz", prompt=np.array([1.5]), output=np.array([2]))
    assert trace_cache.load(key) is None
    np.savez(cache / f"{key}.npz", prompt=np.array([1, 2]), output=np.array([2]))
    assert trace_cache.load(key) is None


def test_a_bad_file_is_not_cached(tmp_path, cache):
    src = tmp_path / "bad.csv"
    src.write_text("num_prefill_tokens,num_decode_tokens\n10,-2\n")
    with pytest.raises(SimserveError, match="data row 1"):
        load_trace(str(src))
    assert not cache.exists() or not list(cache.glob("*.npz"))


def test_an_unwritable_cache_is_skipped(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder would be")
    monkeypatch.setenv("SIMSERVE_CACHE", str(blocker))
    src = tmp_path / "t.csv"
    src.write_text("num_prefill_tokens,num_decode_tokens\n10,2\n")
    assert load_trace(str(src)).prompt_tokens.tolist() == [10]
