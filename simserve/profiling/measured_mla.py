"""Multi-head latent attention (DeepSeek-V3/R1) from NVIDIA's measured MLA module tables.

The package times vLLM's whole MLA attention module (`DeepseekV2MLAAttention.forward`: the q_a/kv_a
projections and their norms, q_b, kv_b — absorbed into per-head BMMs at decode —, rope, the attention kernel
over the latent cache, o_proj) on one GPU with `num_heads` local heads: context rows are `batch_size` whole
prompts of `isl` tokens (no cached prefix), generation rows one token per request over `step` cached tokens.
simserve's profile keeps the projections as linear ops (measured GEMMs, like every other linear op), so the
attention rows are the module minus the same projections timed from the package's GEMM table (DERIVED): at the
measured points, linear + attention gives back the measured module.

The derivation always uses the modules measured with bf16 projections and the bf16 GEMM rows, whatever the
profile's --dtype: what remains (attention kernel, norms, rope) does not depend on the projections' precision
(the package's bf16 and fp8_block modules differ by under 5% at every shape on H200), and its block-fp8 GEMM
table changes kernel at m = 32 (FlashInfer below, DeepGEMM above), so the rows of one kernel do not cover the
few-token GEMMs a decode step subtracts. The profile's own linear rows carry the --dtype's GEMMs as for any
model. The remainder also holds the latent norms and rope, which simserve has no separate op for (its `rotary`
elementwise row is the roofline's, so rope is counted twice at a few µs per layer).

The derived rows then go through measured_attention.Attention like GQA rows (one latent "KV head" of width
kv_lora_rank + rope): chunked prefill over a prefix from the same triangle/rectangle identity, decode along
batch and context. Where the module minus its GEMMs is not positive (GEMM noise larger than the attention at a
few tokens), the row keeps a floor of MIN_SHARE of the module and is counted in provenance (`clamped`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from simserve.deployment import Deployment
from simserve.ops import linear_ops
from simserve.profiling.measured_attention import Attention

MODULE_FILES = {"prefill": "mla_context_module_perf.parquet", "decode": "mla_generation_module_perf.parquet"}
COLUMNS = [
    "kernel_source",
    "kv_cache_dtype",
    "gemm_type",
    "num_heads",
    "batch_size",
    "isl",
    "step",
    "latency",
]
DERIVE_GEMM = ("bfloat16", "bf16")  # the modules' gemm_type and the GEMM table's dtype the derivation uses
MIN_SHARE = 0.05  # floor of a derived attention time, as a share of its module (see the module docstring)


def read_modules(db) -> tuple[dict[str, pd.DataFrame] | None, str]:
    from simserve.profiling import measured

    folder = db.folder / "mla" / db.engine / db.version
    where = f"{db.system}/mla/{db.engine}/{db.version}"
    if not all((folder / f).exists() for f in MODULE_FILES.values()):
        return None, where
    return {phase: measured.read_table(folder / f, COLUMNS) for phase, f in MODULE_FILES.items()}, where


def why_unmeasured(modules: dict | None, dep: Deployment, kv_dtype: str, where: str) -> str | None:
    if modules is None:
        return f"no MLA module tables at {where}"
    gemm_type = DERIVE_GEMM[0]
    for phase, df in modules.items():
        sel = df[(df["gemm_type"] == gemm_type) & (df["kv_cache_dtype"] == kv_dtype)]
        if sel.empty:
            return (
                f"no {phase} MLA module rows with {gemm_type} projections and a {kv_dtype} KV cache in "
                f"{where}"
            )
        if not (sel["num_heads"] == dep.heads_per_gpu).any():
            have = sorted(sel["num_heads"].unique().tolist())
            return (
                f"no {phase} MLA module rows for {dep.heads_per_gpu} heads per GPU in {where} (measured: "
                f"{have})"
            )
    return None


def attention(
    modules: dict, dep: Deployment, kv_dtype: str, gemm_ms, gemm_table: pd.DataFrame, where: str
) -> tuple[Attention, dict]:
    """measured_attention.Attention over the derived rows, and what the derivation did (for provenance).

    `gemm_ms(table, tokens, k, n) -> (times, kinds)` is measured_backend.gemm_ms; `gemm_table` the GEMM rows
    of DERIVE_GEMM's dtype."""
    gemm_type = DERIVE_GEMM[0]
    ops = [op for op in linear_ops(dep) if op.name in ("qkv_a_proj", "q_b_proj", "kv_b_proj", "o_proj")]
    width = dep.model.kv_lora_rank + dep.model.qk_rope_head_dim
    frames, info = {}, {"gemm_type": gemm_type, "clamped": {}}
    for phase, df in modules.items():
        sel = df[
            (df["gemm_type"] == gemm_type)
            & (df["kv_cache_dtype"] == kv_dtype)
            & (df["num_heads"] == dep.heads_per_gpu)
        ].copy()
        tokens = (sel["batch_size"] * (sel["isl"] if phase == "prefill" else 1)).to_numpy(dtype=float)
        uniq, inverse = np.unique(tokens, return_inverse=True)
        proj = sum(gemm_ms(gemm_table, uniq, op.in_features, op.out_features)[0] for op in ops)[inverse]
        module = sel["latency"].to_numpy(dtype=float)
        rest = module - proj
        low = rest < MIN_SHARE * module
        info["clamped"][phase] = int(low.sum())
        sel["latency"] = np.where(low, MIN_SHARE * module, rest)
        # vLLM itself picks the kernel by query length (its MLA decode path for short "prefills", the prefill
        # backend above), and the package labels each row with the one that ran: all rows are the engine's
        # path.
        kernel = "/".join(sorted(sel["kernel_source"].unique()))
        frames[phase] = sel.assign(num_key_value_heads=1, head_dim=width, window_size=0, kernel_source=kernel)
    att = Attention(frames["prefill"], frames["decode"], dep.heads_per_gpu, 1, width, kv_dtype, where)
    info["kernels"] = {"prefill": att.prefill_kernel, "decode": att.decode_kernel}
    return att, info
