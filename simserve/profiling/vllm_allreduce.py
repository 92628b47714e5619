"""Which all-reduce vLLM 0.33.0 runs for a TP group's activations, by message size, GPU generation and TP
degree.

`CudaCommunicator.all_reduce` (vllm/distributed/device_communicators/cuda_communicator.py) tries, in order:
  1. FlashInfer's all-reduce (VLLM_ALLREDUCE_USE_FLASHINFER, on by default; flashinfer-python 0.7.2.post1 is a
     dependency of the wheel; MNNVL backend on one NVSwitch node, TRT-LLM's as fallback) for inputs of at most
     FI_ALLREDUCE_FUSION_MAX_SIZE_MB (vllm/compilation/passes/fusion/allreduce_rms_fusion.py);
  2. NCCL symmetric memory: only with VLLM_USE_NCCL_SYMM_MEM (off by default): not modelled;
  3. vLLM's custom all-reduce (IPC buffers, one- or two-shot) below its max size: 8 MiB, or, where torch's
     symmetric memory is available (Hopper, Blackwell), CUSTOM_ALL_REDUCE_MAX_SIZES (all_reduce_utils.py);
  4. torch symmetric memory (VLLM_ALLREDUCE_USE_SYMM_MEM, on by default) up to SYMM_MEM_ALL_REDUCE_MAX_SIZES;
  5. NCCL (pynccl).
Its thresholds were set from vLLM's own H100/B200 benchmarks to hand each size to the fastest backend.

NVIDIA's tables (aiconfigurator-core 0.12) measured two of these: vLLM's custom all-reduce (in a CUDA graph)
and NCCL. So a profile's all-reduce row is, per size: the custom all-reduce's time where vLLM runs it or
FlashInfer's (the same class of IPC one/two-shot kernel; FlashInfer's own is not measured, an approximation),
the faster of the two measured kernels where vLLM runs torch's symmetric memory (vLLM chose it over its custom
all-reduce there, so the custom kernel's time is an upper bound; not measured either), and NCCL's above.
Ampere has neither FlashInfer's all-reduce nor torch's symmetric memory in these tables, so its rule is the
plain one: custom below 8 MiB.
"""

from __future__ import annotations

import numpy as np

MIB = 2**20
DEFAULT_CUSTOM_MAX = 8 * MIB  # CustomAllreduce(max_size=8192 * 1024)
# by compute capability × 10 and TP degree (vLLM 0.33.0's tables, quoted above)
FLASHINFER_MAX = {90: {2: 64 * MIB, 4: 2 * MIB, 8: MIB // 2}, 100: {2: 64 * MIB, 4: 32 * MIB, 8: 1 * MIB}}
CUSTOM_MAX = {
    90: {2: 64 * MIB, 4: 32 * MIB, 6: MIB // 2, 8: MIB // 4},
    100: {2: 2 * MIB, 4: 2 * MIB, 6: MIB, 8: MIB},
}
SYMM_MEM_MAX = {
    90: {2: 64 * MIB, 4: 32 * MIB, 6: 64 * MIB, 8: 64 * MIB},
    100: {2: 8 * MIB, 4: 32 * MIB, 6: 128 * MIB, 8: 128 * MIB},
}


def backends(compute_capability: int, tp: int, size_bytes: np.ndarray) -> np.ndarray:
    """vLLM 0.33.0's all-reduce per size: "flashinfer", "custom", "symm_mem" or "nccl"."""
    size = np.asarray(size_bytes, dtype=float)
    out = np.full(size.shape, "nccl", dtype=object)
    cc = compute_capability
    custom_max = (
        CUSTOM_MAX.get(cc, {}).get(tp, DEFAULT_CUSTOM_MAX) if cc in SYMM_MEM_MAX else DEFAULT_CUSTOM_MAX
    )
    symm = SYMM_MEM_MAX.get(cc, {}).get(tp, 0)
    flash = FLASHINFER_MAX.get(cc, {}).get(tp, 0)
    out[size <= symm] = "symm_mem"  # assigned from the last choice to the first: the earlier ones win
    out[size < custom_max] = "custom"
    out[size <= flash] = "flashinfer"
    return out


def allreduce_ms(
    compute_capability: int, tp: int, size_bytes: np.ndarray, custom: np.ndarray, nccl: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(ms, backend) per size from the measured custom all-reduce and NCCL times at those sizes."""
    which = backends(compute_capability, tp, size_bytes)
    t = np.where(np.isin(which, ("flashinfer", "custom")), custom, nccl)
    t = np.where(which == "symm_mem", np.minimum(custom, nccl), t)
    return t, which
