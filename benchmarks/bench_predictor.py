"""Speed of the execution-time predictor: BatchTimer calls per second and model-ready time.

    python benchmarks/bench_predictor.py [--profile profiles/a100-80gb/mistral-7b]
        [--model mistral-7b --gpu a100]
    python benchmarks/bench_predictor.py --accuracy
        # held-out MAPE: shipped profiles + Vidur's measured A100 data

Without --profile it uses the shipped profile of the model when one exists, else a synthetic one in a temp
dir. Prints tables; docs/predictor.md records their output with these commands.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from simserve.deployment import Deployment
from simserve.predictor import default_profiles_root, fit
from simserve.predictor import synthetic as syn
from simserve.profiling.schema import profile_dir


def rate(fn: Callable[[], object], min_seconds: float = 1.0) -> float:
    """Calls per second, best of 3 runs of at least `min_seconds` each."""
    best = 0.0
    for _ in range(3):
        n, t0 = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - t0) < min_seconds:
            for _ in range(1000):
                fn()
            n += 1000
        best = max(best, n / elapsed)
    return best


def seconds(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def reference_profile(tmp: Path) -> Path | None:
    """Vidur's measured A100 kernels (CodeLlama-34B, TP1-8 GEMMs; TP2 attention) as a tmp profile, or None."""
    from simserve.catalog import GPU, MODELS, NETWORKS, NODES
    from simserve.profiling.schema import write_profile
    from simserve.profiling.vidur import import_vidur

    vidur = Path(__file__).resolve().parents[1].parent / "shared" / "reference" / "vidur" / "profiling"
    files = {
        "mlp.csv": vidur / "compute" / "a100" / "codellama" / "CodeLlama-34b-Instruct-hf" / "mlp.csv",
        "attention.csv": vidur / "legacy" / "a100" / "attention.csv",
        "all_reduce.csv": vidur / "network" / "a100_pairwise_nvlink" / "all_reduce.csv",
        "send_recv.csv": vidur / "network" / "a100_pairwise_nvlink" / "send_recv.csv",
    }
    if not all(f.is_file() for f in files.values()):
        return None
    (tmp / "vidur").mkdir()
    for name, target in files.items():
        os.symlink(target, tmp / "vidur" / name)
    specs = (MODELS.get("codellama-34b"), GPU.get("a100"), NODES.get("a100-pairwise-nvlink"))
    tables, prov = import_vidur(tmp / "vidur", *specs, NETWORKS.get("ethernet-100g"))
    return write_profile(tmp / "a100-80gb" / "codellama-34b", tables, prov)


def accuracy() -> None:
    """Held-out MAPE / p90 APE per family for every shipped profile and for Vidur's measured data."""
    paths = sorted(p for p in default_profiles_root().glob("*/*") if (p / "linear.csv").exists())
    ref = reference_profile(Path(tempfile.mkdtemp()))
    table = Table(title="held-out error per family: MAPE % / p90 APE % (20% seeded split)")
    table.add_column("profile")
    columns = ("linear", "elementwise", "attention_prefill", "attention_decode", "collective")
    for col in columns:
        table.add_column(col, justify="right")
    for path in [*paths, *([ref] if ref else [])]:
        s = fit(path, use_cache=False).summary.set_index("family")
        label = f"{path.parent.name}/{path.name}" + (" (Vidur measured)" if path == ref else "")
        table.add_row(
            label, *(f"{s.loc[c, 'mape_pct']:.2f} / {s.loc[c, 'p90_ape_pct']:.2f}" for c in columns)
        )
    Console(width=140).print(table)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", type=Path, default=None)
    ap.add_argument("--model", default="mistral-7b")
    ap.add_argument("--gpu", default="a100")
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--accuracy", action="store_true", help="print held-out error instead of speed")
    args = ap.parse_args()
    if args.accuracy:
        accuracy()
        return
    dep = Deployment.create(args.model, args.gpu, tp=args.tp)
    path = args.profile or profile_dir(default_profiles_root(), dep.gpu.name, dep.model.name)
    if not (path / "linear.csv").exists():
        path = syn.write_synthetic_profile(tempfile.mkdtemp(), args.model, args.gpu, tps=(args.tp,))
    os.environ["SIMSERVE_CACHE"] = tempfile.mkdtemp()  # a cold cache for the cold/cached comparison

    rows: list[tuple[str, str]] = []
    cold_fit = seconds(lambda: fit(path))  # fits and writes the cache
    predictor = fit(path)
    cached_fit = seconds(lambda: fit(path))
    compile_s = seconds(lambda: predictor.compile(dep))
    timer = predictor.compile(dep)
    rows += [
        ("fit, cold (train + write cache)", f"{cold_fit:.2f} s"),
        ("fit, cached (read pickle)", f"{cached_fit:.2f} s"),
        ("compile (evaluate models onto tables)", f"{compile_s:.2f} s"),
        ("model ready, cached (fit + compile)", f"{cached_fit + compile_s:.2f} s"),
    ]

    rng = np.random.default_rng(0)
    kv = rng.integers(100, 8000, 100)
    kv_list, kv128 = kv.tolist(), rng.integers(100, 8000, 128).tolist()
    mixed = [(512, 1000)]
    rows += [
        (
            "__call__: 100 decodes (list) + one 512-token chunk",
            f"{rate(lambda: timer(mixed, kv_list)):,.0f} calls/s",
        ),
        (
            "__call__: 100 decodes (ndarray) + one 512-token chunk",
            f"{rate(lambda: timer(mixed, kv)):,.0f} calls/s",
        ),
        ("__call__: 128 decodes, decode only", f"{rate(lambda: timer([], kv128)):,.0f} calls/s"),
        ("__call__: one 512-token prefill chunk", f"{rate(lambda: timer([(512, 0)], [])):,.0f} calls/s"),
        (
            "breakdown: 100 decodes + one chunk",
            f"{rate(lambda: timer.breakdown(mixed, kv_list), 0.3):,.0f} calls/s",
        ),
    ]

    table = Table(title=f"BatchTimer speed: {dep.describe()} ({path})")
    table.add_column("measure")
    table.add_column("value", justify="right")
    for name, value in rows:
        table.add_row(name, value)
    console = Console(width=120)
    console.print(table)
    console.print(f"python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
