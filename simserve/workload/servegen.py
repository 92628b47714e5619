"""A day of traffic from Alibaba's ServeGen (alibaba/ServeGen, Apache-2.0; Xiang et al., arXiv 2505.09999):
per-client request rates, arrival patterns and length distributions, in 10-minute windows over two weeks, of
Alibaba Cloud Model Studio's production models.

The data (`data/<category>/<pool>/chunk-<client>-{trace.csv,dataset.json}`, 31-117 MB per language pool) is
read from a clone; it is not shipped, and neither is a built day (m-large's recorded rate is about 24 M
requests a day: `--rate-scale` thins it). The generator follows ServeGen's own (`servegen/construct.py`,
`generate_workload`, with each client at its recorded rate):

* per client and window, n = ⌈rate·600⌉ inter-arrival gaps from its fitted pattern (`Gamma(shape, scale)` or
  `Weibull(c, scale)`), rescaled to sum to the window, kept while inside it;
* each request's input and output tokens drawn from the client's distributions of the latest dataset window
  at or before it (`ClientPoolView._get_dataset_window`), by inverse CDF over the token bins.

simserve draws with numpy's Generator (seeded) where ServeGen uses scipy's `rvs` on a RandomState: the same
distributions, not the same samples. A drawn length of 0 tokens becomes 1 (a request has at least one).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import numpy as np

from simserve.errors import SimserveError
from simserve.workload.formats import write_trace_csv
from simserve.workload.provenance import write_provenance
from simserve.workload.sharegpt import BuildResult
from simserve.workload.stats import TraceStats
from simserve.workload.trace import Trace

WINDOW_S = 600  # ServeGen's windows: 10 minutes
POOLS = {"language": "m-large", "reason": "deepseek-r1"}  # the default pool per category
REPO = "https://github.com/alibaba/ServeGen"


def _pool_dir(source: Path | None, category: str, pool: str) -> Path:
    if category not in POOLS:
        raise SimserveError(
            f"--category {category}: choose {' or '.join(POOLS)} (multimodal requests carry "
            "image/audio/video tokens simserve does not model)"
        )
    if source is None:
        raise SimserveError(
            f"build servegen needs --from PATH: a clone of {REPO} (its data/{category}/{pool}/)"
        )
    folder = source / "data" / category / pool
    if not folder.is_dir():
        raise SimserveError(
            f"{folder}: no such folder; give --from a clone of {REPO} (--pool names data/{category}/*)"
        )
    return folder


def _windows(path: Path) -> list[tuple[int, float, str, float, float]]:
    """A client's trace: (window start s, rate req/s, pattern, shape, scale), windows with a pattern only."""
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        cells = line.strip().split(",")
        if not line.strip():
            continue
        try:
            ts, rate, _cv, pattern, shape, scale = cells
            row = (int(ts), float(rate), pattern, float(shape), float(scale))
        except ValueError:
            raise SimserveError(
                f"{path}: line {number}: expected timestamp,rate,cv,pattern,shape,scale; is this ServeGen's "
                "data?"
            ) from None
        if row[2] and row[1] > 0:
            if (
                row[2] not in ("Gamma", "Weibull")
                or not all(map(math.isfinite, row[3:]))
                or min(row[3:]) <= 0
            ):
                raise SimserveError(
                    f"{path}: line {number}: pattern {row[2]} ({row[3]}, {row[4]}) is not a "
                    f"Gamma or Weibull with positive parameters"
                )
            rows.append(row)
    return rows


def _pdf(path: Path, text: str) -> tuple[np.ndarray, np.ndarray]:
    """ServeGen's `{tokens: probability, ...}` string as (token bins, cumulative probability)."""
    try:
        values = np.array(text.strip()[1:-1].replace(":", ",").split(","), dtype=np.float64)
    except ValueError:
        raise SimserveError(
            f"{path}: a length distribution is not {{tokens: probability, ...}}; is this ServeGen's data?"
        ) from None
    bins, probs = values[0::2].astype(np.int64), values[1::2]
    order = np.argsort(bins, kind="stable")
    return bins[order], np.cumsum(probs[order])


class _Lengths:
    """A client's length distributions per dataset window, parsed when first needed (the file spans 14
    days)."""

    def __init__(self, path: Path):
        self.path = path
        raw = json.loads(path.read_text())
        self.raw = {
            int(ts): f
            for ts, f in raw.items()
            if isinstance(f, dict)
            and f.get("input_tokens")
            and f.get("output_tokens")
            and len(f["input_tokens"]) > 2
            and len(f["output_tokens"]) > 2
        }
        self.starts = sorted(self.raw)
        self.parsed: dict[int, tuple] = {}

    def at(self, ts: int):
        """The distributions of the latest dataset window at or before ts, or None."""
        k = int(np.searchsorted(self.starts, ts, side="right")) - 1
        if k < 0:
            return None
        key = self.starts[k]
        if key not in self.parsed:
            self.parsed[key] = tuple(
                _pdf(self.path, self.raw[key][f]) for f in ("input_tokens", "output_tokens")
            )
        return self.parsed[key]


def _draw(pdf: tuple[np.ndarray, np.ndarray], u: np.ndarray) -> np.ndarray:
    bins, cdf = pdf
    return bins[np.minimum(np.searchsorted(cdf, u * cdf[-1]), len(bins) - 1)]


def build_servegen(
    source: Path | None,
    out: Path,
    category: str = "language",
    pool: str | None = None,
    hours: float = 24.0,
    start_hour: float = 0.0,
    rate_scale: float = 1.0,
    seed: int = 0,
    command: str = "",
) -> BuildResult:
    pool = pool or POOLS.get(category, "")
    folder = _pool_dir(source, category, pool)
    if not (math.isfinite(hours) and hours > 0) or not (math.isfinite(start_hour) and start_hour >= 0):
        raise SimserveError(f"--hours must be > 0 and --start-hour >= 0, got {hours:g} and {start_hour:g}")
    if not (math.isfinite(rate_scale) and rate_scale > 0):
        raise SimserveError(
            f"--rate-scale must be a positive factor on the recorded rates, got {rate_scale:g}"
        )
    start, end = start_hour * 3600, (start_hour + hours) * 3600
    rng = np.random.default_rng(seed)
    counts: Counter = Counter()
    times, prompts, outputs = [], [], []
    for trace_file in sorted(folder.glob("chunk-*-trace.csv"), key=lambda p: int(p.name.split("-")[1])):
        windows = [w for w in _windows(trace_file) if start <= w[0] < end]
        if not windows:
            continue
        data_file = trace_file.with_name(trace_file.name.replace("-trace.csv", "-dataset.json"))
        if not data_file.is_file():
            counts["clients_without_dataset_skipped"] += 1
            continue
        lengths = _Lengths(data_file)
        counts["clients"] += 1
        for ts, rate, pattern, shape, scale in windows:
            pdfs = lengths.at(ts)
            if pdfs is None:
                counts["windows_without_lengths_skipped"] += 1
                continue
            n = math.ceil(rate * rate_scale * WINDOW_S)
            gaps = rng.gamma(shape, scale, n) if pattern == "Gamma" else scale * rng.weibull(shape, n)
            total = gaps.sum()
            if not total > 0:
                counts["windows_degenerate_gaps"] += 1
                continue
            t = ts + np.cumsum(gaps * (WINDOW_S / total))
            t = t[t < ts + WINDOW_S]
            u = rng.random((2, len(t)))
            times.append(t)
            prompts.append(_draw(pdfs[0], u[0]))
            outputs.append(_draw(pdfs[1], u[1]))
    if not times:
        raise SimserveError(
            f"{folder}: no client has requests in hours {start_hour:g}-{start_hour + hours:g}; "
            f"pick another --start-hour (the data covers 14 days)"
        )
    t = np.concatenate(times)
    order = np.argsort(t, kind="stable")
    prompt, output = np.concatenate(prompts)[order], np.concatenate(outputs)[order]
    counts["zero_token_lengths_raised_to_1"] = int((prompt <= 0).sum() + (output <= 0).sum())
    prompt, output = np.maximum(prompt, 1), np.maximum(output, 1)
    arrived = t[order] - start
    trace = Trace(out.name, prompt, output, arrived)
    write_trace_csv(
        out, {"arrived_at": np.round(arrived, 6), "num_prefill_tokens": prompt, "num_decode_tokens": output}
    )
    stats = TraceStats.of(trace)
    counts["requests"] = len(trace)
    record = {
        "source": {
            "repository": REPO,
            "folder": f"data/{category}/{pool}",
            "licence": "Apache-2.0 (alibaba/ServeGen, LICENSE)",
            "attribution": 'ServeGen (Xiang et al., "ServeGen: Workload Characterization of Large Language '
            'Model Serving in Production", arXiv 2505.09999)',
        },
        "method": "ServeGen's generate_workload at each client's recorded rate x rate_scale: per 600-s "
        "window ceil(rate*600) gaps from the client's Gamma/Weibull fit rescaled to the window; lengths by "
        "inverse CDF of the latest dataset window; numpy Generator draws (ServeGen: scipy on RandomState)",
        "window": {"start_hour": start_hour, "hours": hours, "rate_scale": rate_scale, "seed": seed},
        "counts": dict(sorted(counts.items())),
        "command": command,
        "statistics": stats.as_dict(),
    }
    return BuildResult(trace, out, write_provenance(out, record), stats, dict(counts))
