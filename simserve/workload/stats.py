"""Summary statistics of a trace, as the Sarathi-Serve paper reports them (Table 2).

Median and P90 use numpy's default linear interpolation; std is the population std (ddof=0).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from simserve.io import atomic_path
from simserve.workload.trace import Trace


@dataclass(frozen=True)
class TokenStats:
    median: float
    p90: float
    std: float
    mean: float
    max: int

    @classmethod
    def of(cls, tokens: np.ndarray) -> TokenStats:
        return cls(
            median=float(np.median(tokens)),
            p90=float(np.percentile(tokens, 90)),
            std=float(np.std(tokens)),
            mean=float(np.mean(tokens)),
            max=int(np.max(tokens)),
        )


@dataclass(frozen=True)
class TraceStats:
    count: int
    prompt: TokenStats
    output: TokenStats

    @classmethod
    def of(cls, trace: Trace) -> TraceStats:
        return cls(len(trace), TokenStats.of(trace.prompt_tokens), TokenStats.of(trace.output_tokens))

    def as_dict(self) -> dict:
        """Rounded for provenance files (one decimal is below any meaningful difference)."""
        rounded = {
            k: {f: round(v, 1) for f, v in asdict(getattr(self, k)).items()} for k in ("prompt", "output")
        }
        return {"count": self.count} | rounded


def stats_table(trace: Trace, stats: TraceStats):
    """A rich Table: one row per quantity (prompt, output), one column per statistic."""
    from rich.table import Table

    title = f"{trace.name}: {stats.count:,} requests"
    table = Table(
        title=title, title_justify="left", min_width=len(title)
    )  # NOTE: a wrapped title reads badly
    for col in ("tokens", "median", "P90", "std", "mean", "max"):
        table.add_column(col, justify="left" if col == "tokens" else "right")
    for label, s in (("prompt", stats.prompt), ("output", stats.output)):
        table.add_row(label, f"{s.median:g}", f"{s.p90:.1f}", f"{s.std:.1f}", f"{s.mean:.1f}", f"{s.max}")
    return table


def save_histogram(trace: Trace, png: str | Path, bins: int = 60) -> Path:
    """Prompt and output token histograms side by side, with median and P90 marked; written atomically."""
    import matplotlib

    matplotlib.use("Agg")  # NOTE: headless: never needs a display, also under CI
    import matplotlib.pyplot as plt

    png = Path(png)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), constrained_layout=True)
    for ax, label, tokens in zip(
        axes, ("prompt", "output"), (trace.prompt_tokens, trace.output_tokens), strict=True
    ):
        ax.hist(tokens, bins=bins, color="#4C72B0")
        for q, style in ((50, "-"), (90, "--")):
            value = np.percentile(tokens, q)
            ax.axvline(value, color="#C44E52", linestyle=style, label=f"P{q} = {value:.0f}")
        ax.set(xlabel=f"{label} tokens", ylabel="requests")
        ax.legend()
    fig.suptitle(f"{trace.name}: {len(trace):,} requests")
    with atomic_path(png) as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)
    return png


@dataclass(frozen=True)
class RateOverTime:
    """Recorded arrivals counted in whole windows of `window` seconds from the first arrival; the tail after
    the last whole window is left out (a few seconds' count would read as a burst or a lull). A trace shorter
    than one window is one window, its span."""

    window: float
    starts: np.ndarray  # each window's start, seconds from the first arrival
    rates: np.ndarray  # requests per second in each window

    @classmethod
    def of(cls, arrived: np.ndarray, window: float) -> RateOverTime:
        t = np.asarray(arrived, dtype=np.float64) - arrived[0]
        span = float(t[-1])
        whole = int(span // window)
        if whole == 0:
            width = span if span > 0 else window
            return cls(width, np.zeros(1), np.array([len(t) / width]))
        edges = np.arange(whole + 1) * window
        counts = np.bincount(np.minimum((t // window).astype(np.int64), whole), minlength=whole + 1)[:whole]
        return cls(window, edges[:-1], counts / window)

    def summary(self, n: int, span: float) -> str:
        peak = int(np.argmax(self.rates))
        mean = (n - 1) / span if span > 0 else float("nan")
        return (
            f"rate per {self.window:g}-s window ({len(self.rates)} whole windows): mean {mean:.2f} req/s, "
            f"peak {self.rates[peak]:.2f} req/s (window at {self.starts[peak]:,.0f} s), lowest "
            f"{self.rates.min():.2f} req/s, peak/mean {self.rates[peak] / mean:.2f}"
        )


def save_rate_plot(trace: Trace, rate: RateOverTime, png: str | Path) -> Path:
    """Requests per second over time, one step per window; written atomically."""
    import matplotlib

    matplotlib.use("Agg")  # NOTE: headless: never needs a display, also under CI
    import matplotlib.pyplot as plt

    png = Path(png)
    fig, ax = plt.subplots(figsize=(10, 3.6), constrained_layout=True)
    hours = rate.starts[-1] > 3 * 3600
    scale, unit = (3600.0, "h") if hours else (60.0, "min") if rate.starts[-1] > 600 else (1.0, "s")
    ends = np.append(rate.starts, rate.starts[-1] + rate.window)  # the last window drawn to its end too
    ax.step(ends / scale, np.append(rate.rates, rate.rates[-1]), where="post", color="#4C72B0")
    ax.set(
        xlabel=f"time from the first request ({unit})",
        ylabel=f"requests/s ({rate.window:g}-s windows)",
        ylim=(0, None),
    )
    ax.set_title(f"{trace.name}: {len(trace):,} requests")
    with atomic_path(png) as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)
    return png
