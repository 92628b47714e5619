"""The roofline's GEMM error against NVIDIA's measured tables, per GPU (docs/profiling.md, "Measured backend").

    python benchmarks/measured_vs_roofline.py [--engine vllm] [--max-m 4096]

For every catalog GPU with measured tables: the package's bf16 GEMMs (the engine's current release) with
m ≤ --max-m and n, k in 1024–32768, each predicted by `roofline.gemm_ms`; errors are roofline / measured − 1.
Prints one markdown table: rows, signed median (bias; + means the roofline is too slow), median and P90 of |error|,
and the same for m > 512. Needs `pip install -e '.[measured]'`.
"""

from __future__ import annotations

import argparse

import numpy as np

from simserve.catalog import GPU
from simserve.profiling import measured
from simserve.profiling import roofline as rl


def gemm_errors(gpu_name: str, engine: str, max_m: int) -> tuple[np.ndarray, np.ndarray]:
    db = measured.open_database(gpu_name, engine)
    df = db.gemm("bf16")
    df = df[(df["m"] <= max_m) & df["n"].between(1024, 32768) & df["k"].between(1024, 32768)]
    df = df.groupby(["m", "n", "k"], as_index=False)["latency"].median()
    gpu = GPU.get(gpu_name)
    pred = np.concatenate([rl.gemm_ms(gpu, g["m"].to_numpy(), int(k), int(n))
                           for (n, k), g in df.groupby(["n", "k"], sort=True)])  # fmt: skip
    meas = np.concatenate([g["latency"].to_numpy() for _, g in df.groupby(["n", "k"], sort=True)])
    ms = np.concatenate([g["m"].to_numpy() for _, g in df.groupby(["n", "k"], sort=True)])
    return pred / meas - 1.0, ms


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", default="vllm")
    ap.add_argument("--max-m", type=int, default=4096)
    args = ap.parse_args()
    print(f"{measured.PACKAGE} {measured.package_version()}, {args.engine} bf16 GEMMs, m ≤ {args.max_m}, "
          "n and k 1024–32768; error = roofline / measured − 1\n")  # fmt: skip
    print("| GPU | system | release | rows | bias (median) | median abs | P90 abs | m > 512: bias | median abs |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    for name, system in measured.SYSTEMS.items():
        if args.engine not in measured.engines(system):
            continue
        err, ms = gemm_errors(name, args.engine, args.max_m)
        big = err[ms > 512]
        version = measured.default_version(system, args.engine)
        print(f"| {name} | {system} | {version} | {len(err)} | {np.median(err):+.1%} | "
              f"{np.median(np.abs(err)):.1%} | {np.quantile(np.abs(err), 0.9):.1%} | {np.median(big):+.1%} | "
              f"{np.median(np.abs(big)):.1%} |")  # fmt: skip


if __name__ == "__main__":
    main()
