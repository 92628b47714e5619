"""Number formats a deployment serves in: weights (`--dtype`) and the KV cache (`--kv-dtype`), bf16 or fp8.

What fp8 changes, and why:
- Memory: fp8 stores one byte per weight of the linear layers (embeddings, LM head and norms stay bf16, as in
  the published fp8 checkpoints: DeepSeek-V3's, Meta's Llama-3.1-405B-FP8, RedHat/neuralmagic's -FP8 models)
  and one byte per KV element.
- GEMM time: on GPUs with fp8 tensor cores (Ada, Hopper, Blackwell) an fp8 GEMM (W8A8, activations quantised
  on the fly) runs on twice the dense bf16 peak (H100 SXM: 1,979 vs 989 TF/s; L40S: 733 vs 362; B200: 4.5 vs
  2.25 PF/s; NVIDIA datasheets) and streams half the weight bytes; what fraction of that peak vLLM's kernels
  reach, and the activations' quantisation, are the roofline's (roofline.fp8_constants,
  roofline.quantisation_bytes).
- Ampere (A100, A40) has no fp8 tensor cores. vLLM serves fp8 checkpoints there weight-only (the Marlin
  W8A16 kernel dequantises in the GEMM): half the weight bytes, bf16 compute. simserve models that, rather
  than refusing: `gemm_gpu` keeps the bf16 peak on Ampere while the weight bytes halve.
- Attention with an fp8 KV cache reads half the bytes; the kernels dequantise to bf16 before the tensor-core
  math (vLLM's paged / FlashInfer paths), so the compute peak stays bf16.
Activations between kernels stay bf16 (2 bytes) in every case: the all-reduces and pipeline sends do not
shrink.
"""

from __future__ import annotations

import dataclasses

from simserve.errors import SimserveError

DTYPE_BYTES = {"bf16": 2, "fp8": 1}
FP8_ARCHS = ("ada", "hopper", "blackwell")  # architectures with fp8 tensor cores
FP8_SPEEDUP = 2.0  # dense fp8 / dense bf16 tensor-core peak on every fp8-capable datasheet cited above
ACTIVATION_BYTES = 2


def check_dtype(value: str, flag: str) -> str:
    key = value.strip().lower().replace("bfloat16", "bf16").replace("float8", "fp8")
    if key not in DTYPE_BYTES:
        raise SimserveError(f"{flag} {value!r} is not supported; use one of {', '.join(DTYPE_BYTES)}")
    return key


def dtype_bytes(dtype: str) -> int:
    return DTYPE_BYTES[check_dtype(dtype, "dtype")]


def has_fp8_tensor_cores(gpu) -> bool:
    return gpu.arch in FP8_ARCHS


def gemm_gpu(gpu, weight_dtype: str):
    """The GPU as a GEMM with these weights sees it: its fp8 peak for fp8 on fp8 hardware, else unchanged."""
    if weight_dtype == "fp8" and has_fp8_tensor_cores(gpu):
        return dataclasses.replace(gpu, peak_tflops=gpu.peak_tflops * FP8_SPEEDUP)
    return gpu


def suffix(weight_dtype: str, kv_dtype: str) -> str:
    """What a profile directory's model name gains for a non-bf16 deployment: '-fp8', '-kvfp8',
    '-fp8-kvfp8'."""
    out = "" if weight_dtype == "bf16" else f"-{weight_dtype}"
    return out + ("" if kv_dtype == "bf16" else f"-kv{kv_dtype}")
