"""`--engine sglang`: SGLang 0.5.23 pinned: its per-GPU server defaults, the flags it accepts, its command
line.

Read from the release's wheel (`pip download --no-deps sglang==0.5.23`):
  sglang/srt/arg_groups/memory_hook.py  `handle_gpu_memory_settings`: --chunked-prefill-size and the decode
        CUDA-graph max batch by GPU memory, then --mem-fraction-static = (GPU memory − reserved) / GPU memory
        with reserved = 512 MiB + 1.5 MiB × max(chunk, 2048) + TP·PP/8 GiB + the CUDA graphs' reserve
        (`reserve_for_graph_mb`: 2 MiB per decode graph batch size up to max_bs, 8 MiB per prefill graph
        size), at least 10 GiB on GPUs above 60 GiB;
  sglang/srt/arg_groups/fields/schedule.py  the flags' defaults (schedule_policy fcfs, max_prefill_tokens
                                            16384,
        schedule_conservativeness 1.0, enable_mixed_chunk off), overrides.py `_page_size_default` (1 on CUDA);
  sglang/srt/arg_groups/cuda_graph_hook.py  `generate_prefill_cuda_graph_batch_sizes` (the prefill graph
                                            sizes);
  sglang/srt/arg_groups/validation_hook.py  what it refuses ("chunked_prefill_size must be divisible by
        page_size").
max_running_requests' default depends on the KV pool (simserve/sim/sglang.default_max_running_requests).
"""

from __future__ import annotations

from dataclasses import dataclass

from simserve.errors import SimserveError

SGLANG_VERSION = "0.5.23"
SGLANG_RELEASE = f"SGLang {SGLANG_VERSION}"

# flag → (Scenario field, default values). `chunked-prefill-size` and `max-running-requests` are the sweep
# grid's budget and max batch axes; their defaults depend on the GPU and the KV pool (`default_grid`).
SGLANG_FLAGS: dict[str, tuple[str, tuple[int, ...]]] = {
    "chunked-prefill-size": ("budget", (2048, 4096, 8192, 16384, 32768)),
    "max-running-requests": ("max_batch", (256, 4096)),
    "enable-mixed-chunk": ("enable_mixed_chunk", (0, 1)),  # a switch: printed as a bare flag when 1
}
SGLANG_SWITCHES = ("enable-mixed-chunk",)
SGLANG_SWEPT = ("chunked-prefill-size", "max-running-requests")
MIB = 2**20


@dataclass(frozen=True)
class SGLangDefaults:
    chunked_prefill_size: int
    decode_graph_max_bs: int
    mem_fraction_static: float


def prefill_graph_sizes(max_bs: int) -> list[int]:
    """cuda_graph_hook.generate_prefill_cuda_graph_batch_sizes: the token counts prefill graphs capture."""
    sizes = (
        list(range(4, 33, 4))
        + list(range(48, 257, 16))
        + list(range(288, 513, 32))
        + list(range(576, 1025, 64))
        + list(range(1280, 4097, 256))
        + list(range(4608, max_bs + 1, 512))
    )
    return [s for s in sizes if s <= max_bs]


def sglang_defaults(
    memory_gib: float, tp: int = 1, pp: int = 1, hf_id: str = "", chunk: int | None = None, dp: int = 1
) -> SGLangDefaults:
    """The release's defaults on one GPU of `memory_gib` (torch's total; SGLang reads nvidia-smi's, about
    0.5 GiB more, which moves no tier and the fraction by about 0.001). `chunk`: a --chunked-prefill-size
    the command sets (the memory fraction's activation reserve follows it, before DP attention divides it).
    `dp`: attention-DP ranks of `tp` GPUs each, so SGLang's --tp-size is dp × tp."""
    tp *= dp  # SGLang's tp_size spans every attention-DP rank (--tp-size D·T --attn-dp-size D)
    mib = memory_gib * 1024
    if mib < 20 * 1024:  # T4, RTX 4080
        tier_chunk, max_bs = 2048, 8
    elif mib < 35 * 1024:  # A10, RTX 4090/5090
        tier_chunk, max_bs = 4096, 48 if tp < 4 else 160
    elif mib < 60 * 1024:  # A100-40GB, L40(S), A40
        tier_chunk, max_bs = 4096, 32 if tp < 4 else 160
    elif mib < 160 * 1024:  # A100-80GB, H100 (< 90 GiB); H20, H200 (< 160 GiB): the same values
        tier_chunk, max_bs = 8192, 256 if tp < 4 else 512
    else:  # B200, MI300
        tier_chunk, max_bs = 16384, 512
    chunk = chunk or tier_chunk
    prefill_max = chunk
    if "llama-2" in hf_id.lower():  # memory_hook: "For Llama2 series models, max_bs is limited to 4096"
        prefill_max = min(prefill_max, 4096)
    reserved = 512 + max(chunk, 2048) * 1.5 + tp * pp / 8 * 1024
    reserved += max_bs * 2 + len(prefill_graph_sizes(prefill_max)) * 8  # reserve_for_graph_mb
    if dp > 1:  # reserve_for_graph_mb: "DP attention needs more padding for some operations"
        reserved += max_bs * dp * (3 + (1.5 if max_bs > 300 else 0))
    if mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return SGLangDefaults(tier_chunk, max_bs, round((mib - reserved) / mib, 3))


def default_grid(memory_gib: float | None, max_running_default: int | None) -> dict[str, tuple[int, ...]]:
    """Around the GPU's defaults: --chunked-prefill-size at its default with two halvings and two doublings
    (H100: 2048 ... 32768), --max-running-requests at 256 and at its default for the KV pool, mixed chunk off
    and on. Without a GPU: the 80 GB tier."""
    grid = {flag: values for flag, (_, values) in SGLANG_FLAGS.items()}
    if memory_gib is not None:
        tokens = sglang_defaults(memory_gib).chunked_prefill_size
        grid["chunked-prefill-size"] = tuple(tokens * 2**k // 4 for k in range(5))
    if max_running_default is not None:
        grid["max-running-requests"] = tuple(sorted({min(256, max_running_default), max_running_default}))
    return grid


def check_sglang_flags(chunk: int, running: int, page_size: int = 1) -> None:
    """What SGLang 0.5.23 refuses to start with, in its words (arg_groups/validation_hook.py)."""
    if chunk < 1 or running < 1:
        raise SimserveError(
            "--chunked-prefill-size and --max-running-requests must be at least 1 here (SGLang's -1, no "
            "chunking, is not modelled)"
        )
    if chunk % page_size:
        raise SimserveError(
            f"chunked_prefill_size must be divisible by page_size ({chunk} % {page_size}; SGLang "
            f"{SGLANG_VERSION} refuses it): choose a multiple of the page size"
        )


def sglang_command(base, best: dict[str, int]) -> str:
    """`python -m sglang.launch_server` for the pinned release. --mem-fraction-static is left out: the
    simulation used the release's default for the GPU and chunk (`sglang_defaults`)."""
    from simserve.catalog import ModelSpec

    parts = ["python -m sglang.launch_server --model-path", ModelSpec.from_name(base.model).hf_id]
    for flag, value in best.items():
        if flag in SGLANG_SWITCHES:
            if value:
                parts.append(f"--{flag}")
        else:
            parts.append(f"--{flag} {value}")
    dp = getattr(base, "dp_attention", 1)
    if base.tp * dp > 1:  # under DP attention --tp-size spans all ranks, each with --tp-size / --attn-dp-size
        parts.append(f"--tp-size {base.tp * dp}")
    if dp > 1:
        parts.append(f"--attn-dp-size {dp}")
    parts.append(f"--context-length {base.max_len}")
    if getattr(base, "dtype", "bf16") == "fp8":
        parts.append("--quantization fp8")
    if getattr(base, "kv_dtype", "bf16") == "fp8":
        parts.append("--kv-cache-dtype fp8_e4m3")
    if getattr(base, "ep", 1) > 1:
        parts.append(f"--ep-size {base.ep}")
    return " ".join(parts)


def check_sglang_scenario(base) -> None:
    """What simserve's sglang model cannot be told: pipeline parallelism, EP other than 1 or TP (or DP × TP
    under DP attention), DeepEP."""
    if base.pp > 1:
        raise SimserveError("--engine sglang models SGLang without pipeline parallelism: use --pp 1")
    ep, dp = getattr(base, "ep", 1), getattr(base, "dp_attention", 1)
    if dp > 1:  # the experts over every rank's GPUs (Deployment checks EP = DP x TP)
        if getattr(base, "all2all_backend", "allgather_reducescatter") != "allgather_reducescatter":
            raise SimserveError(
                "--engine sglang models DP attention with its default MoE exchange (all-gather); "
                "SGLang's DeepEP (--moe-a2a-backend deepep) is not modelled: drop --all2all-backend"
            )
        return
    if ep not in (1, base.tp):
        raise SimserveError(
            f"--engine sglang runs experts over the TP group (--ep-size {base.tp}) or not (EP 1); use --ep 1 "
            f"or --ep {base.tp}"
        )
