"""What NVIDIA's GEMM tables measured, L2-warm or cold, and what separates them from the torch timings on the
H200.

    python benchmarks/l2_in_tables.py [--markdown]

1. Per GPU and GEMM dtype of aiconfigurator-core's vLLM tables: the fastest rate at which skinny GEMMs (m <=
   16) stream their weights (n·k·bytes / latency), apart for rows whose collector loop (6 layers' weights:
   collector/vllm/ collect_gemm.py) fits in L2 and rows whose loop is over 2x L2 (cannot be resident), against
   the spec sheet's memory bandwidth; and how many rows the measured backend floors
   (simserve/profiling/l2_residency.py).
2. The shipped H200 torch profiles (profiles/torch/h200, L2 zero-filled before each call) against the shipped
   measured profiles at m <= 16, by the GEMM's weight size: the extra time the torch timing shows, beside
   min(weights, L2) / HBM bandwidth, the time to write back as many dirty lines as the GEMM's reads evict.
3. The roofline (cold: weights from HBM) against each table's bf16 GEMMs in the validation window, apart for
   rows whose loop fits in L2 (timed warm) and the rest, m <= 64 and m > 64.
Parts 1 and 3 need the package (they skip with a reason without it); part 2 reads shipped files only.
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd
from common import REPO, markdown_table, md, torch_profile_pairs

from simserve.catalog import GPU, MODELS
from simserve.deployment import Deployment
from simserve.ops import linear_ops
from simserve.profiling import l2_residency as l2
from simserve.profiling import measured

WEIGHT_BINS_MIB = (8, 24, 48, 96, 192, 512)


def table_rates() -> pd.DataFrame:
    from simserve.profiling.measured_backend import measured_gemm_rows

    out = []
    for name in measured.SYSTEMS:
        if measured.unavailable(name):
            continue
        gpu = GPU.get(name)
        db = measured.open_database(name)
        for dtype in ("bf16", "fp8"):
            try:
                rows, _ = measured_gemm_rows(db, dtype)
            except Exception:  # noqa: BLE001 - a table without this dtype (A100: no fp8)
                continue
            gd = measured.GEMM_DTYPES[dtype]
            skinny = rows[rows["m"] <= l2.COLD_M]
            rate = l2.weight_bytes(skinny["n"], skinny["k"], gd) / (skinny["latency"].to_numpy() * 1e-3) / 1e9
            loop = l2.loop_weight_bytes(skinny["n"], skinny["k"], gd)
            fits = loop <= gpu.l2_bytes
            cold = loop > l2.COLD_L2_MULTIPLE * gpu.l2_bytes
            _, floor = l2.floor_to_hbm(rows, gd, gpu)
            out.append(
                {
                    "gpu": name,
                    "engine": f"vllm {db.version}",
                    "dtype": dtype,
                    "l2_mib": gpu.l2_mib,
                    "bus_gbps": gpu.hbm_gbps,
                    "resident_max_gbps": rate[fits].max() if fits.any() else np.nan,
                    "cold_max_gbps": rate[cold].max(),
                    "rows": floor.rows,
                    "floored": floor.floored,
                    "median_lift": floor.median_lift,
                }
            )
    return pd.DataFrame(out)


def torch_gap(gpu_name: str = "h200") -> pd.DataFrame:
    gpu = GPU.get(gpu_name)
    rows = []
    for model, joined in torch_profile_pairs(gpu_name, REPO / "profiles", ("_torch", "_measured")):
        joined = joined[joined["num_tokens"] <= l2.COLD_M]
        for tp in sorted(joined["tp"].unique()):
            for op in linear_ops(Deployment(MODELS.get(model), gpu, tp=int(tp))):
                s = joined[(joined["op"] == op.name) & (joined["tp"] == tp)]
                w = 2.0 * op.in_features * op.out_features
                rows += [
                    {
                        "model": model,
                        "tp": int(tp),
                        "op": op.name,
                        "weights_mib": w / 2**20,
                        "extra_us": (r.time_ms_torch - r.time_ms_measured) * 1e3,
                        "gap": r.time_ms_torch / r.time_ms_measured - 1,
                        "writeback_us": min(w, gpu.l2_bytes) / (gpu.hbm_gbps * 1e9) * 1e6,
                    }
                    for r in s.itertuples()
                ]
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    df["weights"] = pd.cut(df["weights_mib"], (0, *WEIGHT_BINS_MIB), right=True)
    return (
        df.groupby("weights", observed=True)
        .agg(
            ops=(
                "op",
                lambda x: len(set(zip(df.loc[x.index, "model"], df.loc[x.index, "tp"], x, strict=True))),
            ),
            rows=("gap", "size"),
            torch_slower=("gap", "median"),
            extra_us=("extra_us", "median"),
            writeback_us=("writeback_us", "median"),
        )
        .reset_index()
    )


def roofline_by_condition() -> pd.DataFrame:
    from simserve.profiling import perfdb_validation as pv

    df = pv.load_gemm(pv.data_root())
    err = pv.predict(df) / df["measured_ms"].to_numpy() - 1
    fits = np.zeros(len(df), dtype=bool)
    for system, idx in df.groupby("system").groups.items():
        pos = df.index.get_indexer(idx)
        gpu = pv.gpu_for(system)
        fits[pos] = (
            l2.loop_weight_bytes(df["n"].to_numpy()[pos], df["k"].to_numpy()[pos], "bfloat16") <= gpu.l2_bytes
        )
    df = df.assign(
        err=err,
        condition=np.where(fits, "6 weights fit L2", "do not fit"),
        m_band=np.where(df["m"] <= 64, "m <= 64", "m > 64"),
    )
    both = pd.concat([df, df.assign(m_band="all m")], ignore_index=True)
    g = both.groupby(["gpu", "condition", "m_band"])["err"]
    return pd.DataFrame(
        {"rows": g.size(), "bias": g.median(), "median_abs": g.apply(lambda e: e.abs().median())}
    ).reset_index()


def _cell(v) -> str:
    if isinstance(v, float):
        return "" if np.isnan(v) else f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"
    return str(v)


def section() -> str:
    """What the database's GEMM rows measured, L2-warm or cold (benchmarks/l2_in_tables.py), and the roofline
    on each condition's rows: the section benchmarks/validate_kernels.py puts in docs/kernel-validation.md."""
    rates = table_rates()
    gbps = ["resident_max_gbps", "cold_max_gbps"]
    rates = (
        rates.assign(
            resident_x_bus=(rates["resident_max_gbps"] / rates["bus_gbps"]).round(2),
            cold_x_bus=(rates["cold_max_gbps"] / rates["bus_gbps"]).round(2),
            median_lift=rates["median_lift"].round(2),
            **{c: rates[c].round(0) for c in gbps},
        )
        .drop(columns=["engine"])
        .set_index("gpu")
    )
    by = roofline_by_condition()
    cond = by.assign(bias_pct=(by["bias"] * 100).round(1), median_abs_pct=(by["median_abs"] * 100).round(1))
    cond = cond.drop(columns=["bias", "median_abs"]).set_index("gpu")
    gap = torch_gap()
    out = [
        "### What the tables measured: L2-warm where the collector's loop fits, cold elsewhere",
        "",
        "NVIDIA's vLLM collector (github.com/ai-dynamo/aiconfigurator, vLLM 0.24.0 collection d5bad971c:",
        "`collector/vllm/collect_gemm.py` `run_gemm`, `collector/helper.py` `benchmark_with_power`) builds 6 "
        "linear",
        "layers with their own weights (1 for fp8_block), runs them on one shared input inside a CUDA graph, "
        "replays",
        "it 3 times, then times 6 replays back to back; a row is the total / 6 / 6. Nothing flushes L2 and "
        "nothing",
        "rotates beyond the 6 weights, so where 6 weights fit in L2 they are read from L2 from the second "
        "replay on",
        "(`collect_attn.py` times attention the same way over one KV cache). Below: the fastest rate skinny "
        "GEMMs",
        "(m <= 16) stream their weights at (n·k·bytes / latency, GB/s) where the 6 weights fit in L2 and "
        "where they",
        "exceed 2x L2 (cannot be resident), against the spec sheet's bus, and the rows the measured backend "
        "floors",
        "to their weights' cold streaming time (simserve/profiling/l2_residency.py; `python benchmarks/",
        "l2_in_tables.py`):",
        "",
        md(rates),
        "",
        "Only the GPUs with a large L2 on a slow bus show it: the L40S reads resident weights at up to 2.86x "
        "its",
        "864 GB/s GDDR6, the RTX PRO 6000 at 1.68x its GDDR7; their rates fall to the bus's where 6 weights "
        "outgrow",
        "L2. On HBM GPUs no row is faster than HBM (0 rows floored): the weights that fit in their L2 are "
        "small",
        "enough that the kernels are latency-bound, so warm and cold time the same, and the shipped "
        "H100/H200",
        "measured profiles do not move. The roofline models serving's condition (weights from HBM); against "
        "the",
        "table's rows of each condition (bias + means the roofline is slower):",
        "",
        md(cond),
        "",
        "On the L40S the roofline is 36.6% slower than the rows its table timed warm at m <= 64 and 6.8% "
        "(median)",
        "off the 10,200 rows timed cold: the L40S's 8.2% over all rows is the table's L2 condition, not a "
        "serving",
        "error (RTX PRO 6000: 5.1% cold). A roofline evaluated in the table's condition needs an L2 "
        "bandwidth per GPU from the literature;",
        "none was found for Ada or GB202, so none is modelled. The H200's torch profiles (L2 zero-filled "
        "before",
        "each call) against the measured profile at m <= 16, by weight size: the extra time grows with the "
        "weights",
        "up to L2 and stops there, as min(weights, L2) / HBM, the write-back of the dirty lines the GEMM's "
        "reads",
        "evict, does; a warm table cannot explain it (weights over 96 MiB cannot be resident in 50 MiB):",
        "",
    ]
    if not gap.empty:
        gap = gap.assign(
            weights_mib=gap["weights"].astype(str), torch_slower_pct=(gap["torch_slower"] * 100).round(1)
        )
        out += [md(gap.drop(columns=["weights", "torch_slower"]).set_index("weights_mib").round(2)), ""]
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", action="store_true", help="markdown tables (docs/kernel-validation.md)")
    ap.add_argument(
        "--section",
        action="store_true",
        help="print docs/kernel-validation.md's section on it (what validate_kernels.py writes there)",
    )
    args = ap.parse_args()
    if args.section:
        print(section())
        return
    show = (
        (lambda d: print(markdown_table(d, _cell)))
        if args.markdown
        else (lambda d: print(d.to_string(index=False)))
    )
    if measured.installed():
        print("GEMM tables: fastest weight streaming of skinny GEMMs (m <= 16), GB/s")
        show(table_rates())
        print("\nRoofline / table - 1, bf16 GEMMs of the validation window, by the table's L2 condition")
        show(roofline_by_condition())
    else:
        print(f"skipped the tables: {measured.PACKAGE} is not installed ({measured.INSTALL_HINT})")
    gap = torch_gap()
    print("\nH200: torch (L2 zero-filled) vs measured profile at m <= 16, by weight size (MiB)")
    if gap.empty:
        print("no shipped torch and measured H200 profiles side by side")
    else:
        show(gap)


if __name__ == "__main__":
    main()
