"""Timing one torch call: CUDA-event medians of calls queued behind a GPU spin, or wall clock on the CPU."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

WARMUP, REPEATS = 3, 10
QUICK_WARMUP, QUICK_REPEATS = 1, 3
SPIN_UP_S = 0.5
SLEEP_CYCLES = 2_000_000  # ~1.3 ms of GPU spin at 1.5 GHz: longer than the CPU needs to queue 10 timed calls
STAT_NAMES = ("time_ms", "time_min_ms", "time_max_ms", "time_mean_ms", "time_std_ms")


def summarize(times: list[float]) -> dict[str, float]:
    stats = (
        statistics.median(times),
        min(times),
        max(times),
        statistics.fmean(times),
        statistics.pstdev(times),
    )
    return dict(zip(STAT_NAMES, stats, strict=True))


def wall_ms(fn: Callable[[], Any]) -> float:
    """One call's wall-clock time in ms: the CPU path's timer (and gloo collectives')."""
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


class Timer:
    """Median (and min/max/mean/std) in ms of `repeats` calls of a function, after `warmup` calls."""

    def __init__(self, torch: Any, device: Any, warmup: int, repeats: int):
        self.torch, self.device, self.warmup, self.repeats = torch, device, warmup, repeats
        self.cuda = device.type == "cuda"
        if self.cuda:
            l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 64 * 2**20
            self.flush = torch.empty(2 * l2, dtype=torch.uint8, device=device)
        self.spin_up()

    def spin_up(self) -> None:
        """Keep the device busy before the first timing: a GPU ramps its clocks up from idle; per-shape
        warm-up calls are too short to do it. On the CPU a short spin absorbs first-call page faults and
        allocator growth."""
        seconds = SPIN_UP_S if self.cuda else SPIN_UP_S / 5
        torch = self.torch
        x = torch.randn(512, 512, device=self.device)
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            x = torch.nn.functional.normalize(x @ x, dim=1)
            if self.cuda:
                torch.cuda.synchronize()

    def __call__(self, fn: Callable[[], Any]) -> dict[str, float]:
        for _ in range(self.warmup):
            fn()
        times = self._cuda_times(fn) if self.cuda else [wall_ms(fn) for _ in range(self.repeats)]
        return summarize(times)

    def _cuda_times(self, fn: Callable[[], Any]) -> list[float]:
        torch = self.torch
        events = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            for _ in range(self.repeats)
        ]
        torch.cuda.synchronize()
        # private API: without it, launch gaps of tiny kernels are timed too
        if hasattr(torch.cuda, "_sleep"):
            # NOTE: the GPU spins while the CPU queues every timed call behind it
            torch.cuda._sleep(SLEEP_CYCLES)
        for start, end in events:
            self.flush.zero_()
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        return [start.elapsed_time(end) for start, end in events]
