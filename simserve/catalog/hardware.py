"""GPUs, the nodes that hold them, and the networks between nodes: spec-sheet numbers with their sources."""

from __future__ import annotations

from dataclasses import dataclass

from simserve.catalog.table import Table

# GPU architectures the kernel model knows: Ampere (sm80/sm86), Ada Lovelace (sm89), Hopper (sm90).
ARCHS = ("ampere", "ada", "hopper")


@dataclass(frozen=True)
class GPUSpec:
    name: str
    memory_gib: float  # total memory as torch.cuda reports it: what vLLM/Sarathi multiply by the utilization
    peak_tflops: float  # dense FP16/BF16 tensor-core peak
    hbm_gbps: float  # memory bandwidth, GB/s
    num_sms: int  # streaming multiprocessors: GEMM tiles run in waves of this many
    arch: str  # one of ARCHS: picks the GEMM tile shapes (simserve/profiling/gemm_tiles.py)
    source: str
    aliases: tuple[str, ...] = ()

    def __post_init__(self):
        if self.arch not in ARCHS:
            raise ValueError(f"arch {self.arch!r} is not known; use one of {', '.join(ARCHS)}")

    @classmethod
    def from_name(cls, name: str) -> GPUSpec:
        return GPU.get(name)

    @property
    def memory_bytes(self) -> float:
        return self.memory_gib * 2**30


@dataclass(frozen=True)
class NodeSpec:
    """A box of GPUs. Collectives inside an NVLink group run over NVLink; across groups over PCIe."""

    name: str
    gpu: str  # the GPU this box holds (a name in the GPU table)
    gpus_per_node: int
    nvlink_group: int  # GPUs that reach each other over NVLink: 2 for bridged pairs, 8 for NVSwitch
    nvlink_gbps: float  # per GPU, per direction
    pcie_gbps: float  # per GPU, per direction, for traffic that leaves an NVLink group
    latency_us: float  # fixed cost of one collective (launch, sync, protocol), the alpha in alpha-beta
    source: str
    aliases: tuple[str, ...] = ()

    @classmethod
    def from_name(cls, name: str) -> NodeSpec:
        return NODES.get(name)


@dataclass(frozen=True)
class NetworkSpec:
    """The network between nodes: pipeline stages on different nodes send activations over it."""

    name: str
    gbps: float  # per node, per direction
    latency_us: float
    source: str
    aliases: tuple[str, ...] = ()

    @classmethod
    def from_name(cls, name: str) -> NetworkSpec:
        return NETWORKS.get(name)


GPU: Table[GPUSpec] = Table(
    "GPU",
    [
        GPUSpec(
            name="A100-80GB", memory_gib=79.15, peak_tflops=312.0, hbm_gbps=2039.0, num_sms=108, arch="ampere",
            aliases=("a100", "a100-80g", "a100-sxm4-80gb", "a100-80gb-sxm"),
            source="NVIDIA A100 datasheet (SXM4 80GB: 312 TF/s dense BF16, 2,039 GB/s HBM2e); "
                   "79.15 GiB is torch.cuda's total for the 80 GB part; 108 SMs (NVIDIA A100 Tensor Core GPU "
                   "Architecture whitepaper)",
        ),
        GPUSpec(
            name="A40-48GB", memory_gib=44.35, peak_tflops=149.7, hbm_gbps=696.0, num_sms=84, arch="ampere",
            aliases=("a40", "a40-48g"),
            source="NVIDIA A40 datasheet (149.7 TF/s dense FP16 tensor, 696 GB/s GDDR6); "
                   "44.35 GiB is torch.cuda's total with ECC on; 84 SMs (GA102, sm86: the datasheet's "
                   "10,752 CUDA cores / 128 per SM)",
        ),
        GPUSpec(
            name="H100-SXM", memory_gib=79.11, peak_tflops=989.4, hbm_gbps=3350.0, num_sms=132, arch="hopper",
            aliases=("h100", "h100-80gb", "h100-sxm5", "h100-sxm5-80gb"),
            source="NVIDIA H100 datasheet (SXM5: 989.4 TF/s dense BF16, 3.35 TB/s HBM3); 132 SMs "
                   "(NVIDIA H100 Tensor Core GPU Architecture whitepaper, SXM5)",
        ),
        GPUSpec(
            name="H200", memory_gib=139.8, peak_tflops=989.4, hbm_gbps=4800.0, num_sms=132, arch="hopper",
            aliases=("h200", "h200-sxm", "h200-141gb"),
            source="NVIDIA H200 datasheet (SXM: 989.4 TF/s dense BF16, 4.8 TB/s HBM3e, 141 GB); the GH100 die "
                   "of the H100 SXM5, 132 SMs",
        ),
    ],
)  # fmt: skip

NODES: Table[NodeSpec] = Table(
    "node",
    [
        NodeSpec(
            name="a100-pairwise-nvlink", gpu="A100-80GB", gpus_per_node=4, nvlink_group=2,
            nvlink_gbps=300.0, pcie_gbps=32.0, latency_us=10.0,
            aliases=("a100_pairwise_nvlink", "nc96ads-a100-v4", "a100-nvlink-pairs"),
            source="Azure NC96ads A100 v4 (the Sarathi-Serve testbed): 4×A100 80GB, NVLink bridge between "
                   "pairs (600 GB/s bidirectional), PCIe Gen4 x16 (32 GB/s per direction) otherwise",
        ),
        NodeSpec(
            name="a40-pairwise-nvlink", gpu="A40-48GB", gpus_per_node=8, nvlink_group=2,
            nvlink_gbps=56.25, pcie_gbps=32.0, latency_us=10.0,
            aliases=("a40_pairwise_nvlink", "a40-nvlink-pairs"),
            source="8×A40 box with NVLink bridges between pairs (A40 datasheet: 112.5 GB/s bidirectional), "
                   "PCIe Gen4 x16 (32 GB/s per direction) otherwise",
        ),
        NodeSpec(
            name="dgx-a100", gpu="A100-80GB", gpus_per_node=8, nvlink_group=8,
            nvlink_gbps=300.0, pcie_gbps=32.0, latency_us=10.0,
            aliases=("a100_dgx", "dgx", "a100-nvswitch", "nvswitch"),
            source="NVIDIA DGX A100: 8×A100 on NVSwitch, NVLink 3 at 600 GB/s bidirectional per GPU",
        ),
        NodeSpec(
            name="dgx-h100", gpu="H100-SXM", gpus_per_node=8, nvlink_group=8,
            nvlink_gbps=450.0, pcie_gbps=64.0, latency_us=10.0,
            aliases=("h100_dgx", "h100-nvswitch", "hgx-h100"),
            source="NVIDIA DGX H100: 8×H100 on NVSwitch, NVLink 4 at 900 GB/s bidirectional per GPU",
        ),
        NodeSpec(
            name="hgx-h200", gpu="H200", gpus_per_node=8, nvlink_group=8,
            nvlink_gbps=450.0, pcie_gbps=64.0, latency_us=10.0,
            aliases=("h200_dgx", "h200-nvswitch", "dgx-h200"),
            source="NVIDIA HGX H200: 8×H200 on NVSwitch, NVLink 4 at 900 GB/s bidirectional per GPU",
        ),
    ],
)  # fmt: skip

NETWORKS: Table[NetworkSpec] = Table(
    "network",
    [
        NetworkSpec(
            name="ethernet-100g", gbps=12.5, latency_us=30.0,
            aliases=("100g", "ethernet", "eth-100g", "100gbe"),
            source="100 Gb/s Ethernet between nodes (the Sarathi-Serve Falcon-180B testbed): 12.5 GB/s per direction",
        ),
        NetworkSpec(
            name="infiniband-400g", gbps=50.0, latency_us=5.0,
            aliases=("ib-400g", "ndr", "infiniband"),
            source="400 Gb/s NDR InfiniBand per node: 50 GB/s per direction",
        ),
    ],
)  # fmt: skip

# The node a GPU lives in when the user names only the GPU: the paper's testbeds where they exist.
DEFAULT_NODE = {"A100-80GB": "a100-pairwise-nvlink", "A40-48GB": "a40-pairwise-nvlink",
                "H100-SXM": "dgx-h100", "H200": "hgx-h200"}  # fmt: skip
