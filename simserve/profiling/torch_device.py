"""Which device the torch backend times on: the GPU the profile is labelled with, or the CPU in quick mode
only."""

from __future__ import annotations

import platform
import re
from typing import Any

from simserve.catalog import GPUSpec
from simserve.errors import SimserveError

# torch.cuda.get_device_name() of each catalog GPU (NVIDIA driver names); user GPUs match their name or an
# alias.
DEVICE_NAMES = {
    "A100-80GB": r"nvidia a100[- ]sxm4?[- ]80gb",
    "A40-48GB": r"nvidia a40",
    "H100-SXM": r"nvidia h100 80gb hbm3",
    "H200": r"nvidia h200",
}


def import_torch() -> Any:
    try:
        import torch
    except ImportError:
        raise SimserveError(
            "the torch backend needs PyTorch: pip install 'simserve[torch]' (or torch==2.13.0 for a CPU "
            "build)"
        ) from None
    return torch


def device_matches(gpu: GPUSpec, device_name: str) -> bool:
    name = device_name.strip().lower()
    if gpu.name in DEVICE_NAMES:
        return re.fullmatch(DEVICE_NAMES[gpu.name], name) is not None
    bare = name.removeprefix("nvidia").strip().replace(" ", "-").replace("_", "-")
    return bare in {n.lower().replace(" ", "-").replace("_", "-") for n in (gpu.name, *gpu.aliases)}


def check_device(gpu: GPUSpec, device_name: str) -> None:
    if not device_matches(gpu, device_name):
        raise SimserveError(
            f"--gpu {gpu.name} was asked for, but the visible CUDA device is {device_name!r}; run on a "
            f"{gpu.name} (select it with CUDA_VISIBLE_DEVICES) or pass the --gpu that names this device"
        )


def free_cache(torch: Any, device: Any) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()


def select_device(torch: Any, gpu: GPUSpec, quick: bool) -> tuple[Any, Any, str]:
    """(device, dtype, label): the GPU asked for, or the CPU in quick mode, never one posing as the other."""
    if torch.cuda.is_available():
        device = torch.device("cuda", torch.cuda.current_device())
        name = torch.cuda.get_device_name(device)
        check_device(gpu, name)
        return device, torch.bfloat16, name
    if not quick:
        raise SimserveError(
            f"no CUDA GPU is visible, so the torch backend cannot measure {gpu.name}: run it on a "
            f"{gpu.name}, use --backend roofline, or add --quick to exercise the code path on this CPU "
            "(labelled as the CPU)"
        )
    cpu = platform.processor() or platform.machine() or "unknown"
    return (
        torch.device("cpu"),
        torch.float32,
        f"CPU ({cpu}), not a {gpu.name}: a code-path check, not GPU timings",
    )
