"""What a GPU costs to rent: dollars per GPU-hour, each entry with its source and the date it was read.

Prices move every quarter and differ threefold between providers, so the built-in table is a dated,
illustrative default for `simserve plan`, not a quote: pass your own with a `prices:` section in a catalog
file (docs/examples/prices-aws.yaml). An entry names a GPU of the GPU table; entries from a file replace the
built-in one for the same GPU.

Where clouds rent a GPU only by the node (`gpus_per_rental` 8: H100 and H200 on 8-GPU HGX boards), a plan pays
for whole nodes: replicas are packed into nodes without splitting one across nodes (a replica larger than a
node takes whole nodes of its own), and cost = nodes × gpus_per_rental × usd_per_gpu_hour (`usd_per_hour`). A
2-GPU replica alone thus pays for 8 GPUs; four of them pay for the same 8. The low and high ends of the
price's range are kept so a plan can say when the range, not the simulation, decides between two rows.
"""

from __future__ import annotations

import math
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
    gpus_per_rental: int = 1  # the smallest unit the provider rents: 1 = by the GPU, 8 = by the 8-GPU node
    low_usd_per_gpu_hour: float | None = None  # the source's range (None: the price itself)
    high_usd_per_gpu_hour: float | None = None

    def __post_init__(self) -> None:
        if not self.usd_per_gpu_hour > 0:
            raise ValueError(f"usd_per_gpu_hour must be positive, got {self.usd_per_gpu_hour}")
        if not str(self.date).strip():
            raise ValueError("date must say when the price was read, e.g. 2026-05-01")
        if not (isinstance(self.gpus_per_rental, int) and self.gpus_per_rental >= 1):
            raise ValueError(f"gpus_per_rental must be a whole number ≥ 1, got {self.gpus_per_rental!r}")
        if not self.low <= self.usd_per_gpu_hour <= self.high:
            raise ValueError(
                f"the range {self.low:g}–{self.high:g} must hold usd_per_gpu_hour {self.usd_per_gpu_hour:g}"
            )

    @property
    def low(self) -> float:
        return (
            self.usd_per_gpu_hour if self.low_usd_per_gpu_hour is None else float(self.low_usd_per_gpu_hour)
        )

    @property
    def high(self) -> float:
        return (
            self.usd_per_gpu_hour if self.high_usd_per_gpu_hour is None else float(self.high_usd_per_gpu_hour)
        )

    def gpus_rented(self, gpus_per_replica: int, replicas: int) -> int:
        """GPUs paid for: replicas packed into whole rental units, none split across two (a replica larger
        than a unit takes whole units of its own)."""
        unit = self.gpus_per_rental
        if gpus_per_replica >= unit:
            return replicas * math.ceil(gpus_per_replica / unit) * unit
        return math.ceil(replicas / (unit // gpus_per_replica)) * unit

    def usd_per_hour(
        self, gpus_per_replica: int, replicas: int, usd_per_gpu_hour: float | None = None
    ) -> float:
        price = self.usd_per_gpu_hour if usd_per_gpu_hour is None else usd_per_gpu_hour
        return self.gpus_rented(gpus_per_replica, replicas) * price

    def describe(self) -> str:
        unit = "by the GPU" if self.gpus_per_rental == 1 else f"by the {self.gpus_per_rental}-GPU node"
        span = f"; range ${self.low:g}–{self.high:g}" if self.low < self.high else ""
        return f"${self.usd_per_gpu_hour:g}/GPU-h, rented {unit}{span} ({self.source}, {self.date})"


# Whether a cloud rents the GPU one at a time or only as a whole 8-GPU node.
_BY_GPU_A100 = (
    "rented by the GPU: Azure NC A100 v4 VMs hold 1, 2 or 4 A100 80GB (NC24ads/NC48ads/NC96ads), GCP "
    "a2-ultragpu-1g/2g/4g/8g 1 to 8, and the specialty clouds above list single GPUs"
)
_BY_NODE = (
    "rented by the 8-GPU node: the hyperscalers rent SXM H100/H200 as whole HGX boards only (AWS "
    "p5.48xlarge 8×H100 and p5e.48xlarge 8×H200, priced per instance-hour, "
    "https://aws.amazon.com/ec2/capacityblocks/pricing/, read 2024-12; Azure ND H100 v5 and ND H200 v5, 8 "
    "GPUs per VM)"
)
_MERCATUS = (
    "specialty-cloud on-demand range, midpoint (Mercatus, 'Cloud GPU pricing', "
    "https://www.mercatus-ai.com/blog/cloud-gpu-pricing)"
)

PRICES: Table[PriceSpec] = Table(
    "price",
    [
        PriceSpec(
            name="A100-80GB",
            usd_per_gpu_hour=1.30,
            date="2026-05",
            source=f"$1.10–1.50: {_MERCATUS}; {_BY_GPU_A100}",
            low_usd_per_gpu_hour=1.10,
            high_usd_per_gpu_hour=1.50,
        ),
        PriceSpec(
            name="H100-SXM",
            usd_per_gpu_hour=3.00,
            date="2026-05",
            source=f"$2.50–3.50: {_MERCATUS}; {_BY_NODE}",
            gpus_per_rental=8,
            low_usd_per_gpu_hour=2.50,
            high_usd_per_gpu_hour=3.50,
        ),
        PriceSpec(
            name="H200",
            usd_per_gpu_hour=4.00,
            date="2026-05",
            source=f"$3.50–4.50: {_MERCATUS}; {_BY_NODE}",
            gpus_per_rental=8,
            low_usd_per_gpu_hour=3.50,
            high_usd_per_gpu_hour=4.50,
        ),
    ],
)


def add_price(spec: PriceSpec) -> PriceSpec:
    """Store a user's price under the GPU's catalog name, so `h100` and `H100-SXM` are one entry."""
    gpu = GPU.get(spec.name)
    spec = PriceSpec(
        gpu.name,
        float(spec.usd_per_gpu_hour),
        spec.source,
        str(spec.date),
        spec.aliases,
        spec.gpus_per_rental,
        spec.low_usd_per_gpu_hour,
        spec.high_usd_per_gpu_hour,
    )
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
