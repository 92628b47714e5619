"""What a GPU costs to rent: dollars per GPU-hour, each entry with its source and the date it was read.

Prices move every quarter and differ threefold between providers, so the built-in table is a dated,
illustrative default for `simserve plan`, not a quote: pass your own with a `prices:` section in a catalog
file (docs/examples/prices-aws.yaml). An entry names a GPU of the GPU table; entries from a file replace the
built-in one for the same GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from simserve.catalog.hardware import GPU, GPUSpec
from simserve.catalog.table import Table
from simserve.errors import SimserveError


@dataclass(frozen=True)
class PriceSpec:
    name: str  # the GPU (a name or alias in the GPU table); stored under the GPU's catalog name
    usd_per_gpu_hour: float
    source: str
    date: str  # when the price was read (YYYY-MM-DD): a price without a date cannot be judged
    aliases: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.usd_per_gpu_hour > 0:
            raise ValueError(f"usd_per_gpu_hour must be positive, got {self.usd_per_gpu_hour}")
        if not str(self.date).strip():
            raise ValueError("date must say when the price was read, e.g. 2026-05-01")


_MERCATUS = (
    "specialty-cloud on-demand range, midpoint (Mercatus, 'Cloud GPU pricing', "
    "https://www.mercatus-ai.com/blog/cloud-gpu-pricing)"
)

PRICES: Table[PriceSpec] = Table(
    "price",
    [
        PriceSpec(name="A100-80GB", usd_per_gpu_hour=1.30, date="2026-05", source=f"$1.10–1.50: {_MERCATUS}"),
        PriceSpec(name="H100-SXM", usd_per_gpu_hour=3.00, date="2026-05", source=f"$2.50–3.50: {_MERCATUS}"),
        PriceSpec(name="H200", usd_per_gpu_hour=4.00, date="2026-05", source=f"$3.50–4.50: {_MERCATUS}"),
    ],
)  # fmt: skip


def add_price(spec: PriceSpec) -> PriceSpec:
    """Store a user's price under the GPU's catalog name, so `h100` and `H100-SXM` are one entry."""
    gpu = GPU.get(spec.name)
    spec = PriceSpec(gpu.name, float(spec.usd_per_gpu_hour), spec.source, str(spec.date), spec.aliases)
    PRICES.add(spec)
    return spec


def price_of(gpu: GPUSpec) -> PriceSpec:
    """The price of one GPU-hour; fails naming the GPU and how to add its price."""
    if gpu.name in PRICES:
        return PRICES.get(gpu.name)
    known = ", ".join(PRICES.names()) or "none"
    raise SimserveError(
        f"the price table has no price for {gpu.name} (it has {known}); add one under 'prices:' in a "
        f"--catalog file (see docs/examples/prices-aws.yaml) or drop it from --gpus"
    )
