"""One effect of the CPU KV tier (--kv-offload-gb, sim/kv_offload.py): multi-turn chats on a small GPU KV
pool, with no tier and with vLLM's CPU offloading of 64 GiB, at a few request rates.

    python benchmarks/kv_offload.py            # prints the table
    python benchmarks/kv_offload.py --write    # and writes it into docs/traffic.md (§ KV offloading)

llama-3-8b on one H100 (DGX H100 box: PCIe Gen5 x16, 64 GB/s per direction, from the catalog), vLLM V1's
scheduler with prefix caching, the shipped sharegpt-multiturn trace (2,000 requests, Poisson arrivals, seed
0), --memory-utilization 0.25 so that the GPU pool (about 3,400 blocks of 16 tokens) cannot keep every chat's
history: the pressure the tier is for.
"""

from __future__ import annotations

import argparse
import time

import pandas as pd
from common import REPO, markdown_table, write_block

from simserve.sim.scenario import Scenario, run_scenario

BASE = dict(
    model="llama-3-8b",
    gpu="h100",
    trace="sharegpt-multiturn",
    policy="vllm-v1",
    prefix_caching=True,
    memory_utilization=0.25,
    num_requests=2000,
    seed=0,
    stop_when_overloaded=False,
)
RATES = (2.0, 3.0, 4.0)
TIERS = (0.0, 64.0)


def measure() -> pd.DataFrame:
    rows = []
    for qps in RATES:
        for gb in TIERS:
            t0 = time.process_time()
            s = run_scenario(Scenario(**BASE, kv_offload_gb=gb), qps).summary.as_dict()
            tier = s.get("kv_offload") or {}
            rows.append(
                {
                    "QPS": qps,
                    "CPU tier (GiB)": gb,
                    "TTFT p50 (s)": s["ttft_p50_s"],
                    "TTFT p99 (s)": s["ttft_p99_s"],
                    "TBT p99 (s)": s["tbt_p99_s"],
                    "tokens/s": s["throughput_tps"],
                    "preemptions": s["preemptions"],
                    "GPU prefix hit rate": s["prefix_cache_hit_rate"],
                    "CPU-tier hits (tokens)": tier.get("cpu_hits", 0),
                    "CPU-tier hit rate": tier.get("cpu_hit_rate", 0.0),
                    "tokens loaded": tier.get("tokens_loaded", 0),
                    "PCIe load time (s)": tier.get("load_s", 0.0),
                    "blocks stored": tier.get("stores", 0),
                    "CPU-s": time.process_time() - t0,
                }
            )
    return pd.DataFrame(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="write the table into docs/traffic.md")
    table = markdown_table(
        measure().drop(columns=["CPU-s"]), lambda x: f"{x:.4g}" if isinstance(x, float) else str(x)
    )
    print(table)
    if args_write := ap.parse_args().write:
        write_block(
            REPO / "docs" / "traffic.md", "<!-- kv-offload:begin -->", "<!-- kv-offload:end -->", table
        )
    del args_write


if __name__ == "__main__":
    main()
