"""GPUs, the nodes that hold them, and the networks between nodes: spec-sheet numbers with their sources."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from simserve.catalog.table import Table

# GPU architectures the kernel model knows: Ampere (sm80/sm86), Ada Lovelace (sm89), Hopper (sm90), Blackwell
# (sm100).
ARCHS = ("ampere", "ada", "hopper", "blackwell")
# The compute capability a GPU of each architecture has unless its entry says otherwise (`sm_version`): the
# kernel model's efficiencies are calibrated per compute capability (simserve/profiling/roofline.py).
DEFAULT_SM_VERSION = {"ampere": 80, "ada": 89, "hopper": 90, "blackwell": 100}
# Where each GPU's `l2_mib` comes from.
L2_SOURCES = {
    "A100-80GB": "NVIDIA A100 Tensor Core GPU Architecture whitepaper: 40 MB L2 (A100-PCIe: the same GA100)",
    "A40-48GB": "NVIDIA Ampere GA102 GPU Architecture whitepaper: 6144 KB L2",
    "H100-SXM": (
        "NVIDIA H100 Tensor Core GPU Architecture whitepaper: 50 MB L2 (SXM5 and PCIe; H100 NVL the same die)"
    ),
    "H200": "the GH100 of the H100 SXM5 (50 MB L2; the H200 changes the HBM only)",
    "B200": "126 MB L2 over the two dies, measured by Chips and Cheese "
    "(chipsandcheese.com/p/nvidias-b200-keeping-the-cuda-juggernaut); GB200 the same die",
    "B300": "not published: assumed as B200's 126 MB (the same two-die layout); GB300 the same",
    "L40S": "NVIDIA Ada GPU Architecture whitepaper: AD102 98,304 KB L2 (all 12 memory controllers of the "
    "384-bit bus enabled on L40S; the L40, same 142-SM AD102, measured with a 96 MiB L2 in "
    "arXiv:2606.22588); NVIDIA's own L40S GEMM table steps where 6 rotated weights outgrow 96 MB "
    "(docs/kernel-validation.md, 'What the tables measured')",
    "RTX-P6000": (
        "GB202's full 128 MB L2 on the RTX PRO 6000 (NVIDIA GTC 2025 launch coverage; the RTX 5090 has 96)"
    ),
    "A30": "24 MB L2 (half a GA100's memory partitions; TechPowerUp GPU database)",
    "L4": "NVIDIA Ada GPU Architecture whitepaper: AD104 48 MB L2",
}


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
    # compute capability × 10 (80 A100, 86 A40/GA102, 89 Ada, 90 Hopper, 100 Blackwell); 0: the arch's
    # default. GA102 (sm86) is Ampere with another SM, a 6 MB L2 and GDDR6: its kernels reach other fractions
    # of peak.
    sm_version: int = 0
    # L2 cache in MiB (NVIDIA's "MB" in whitepapers is 1024 KB); 0: not known. Sources per GPU in L2_SOURCES.
    # A kernel whose operands fit stays L2-resident across repeated launches:
    # simserve/profiling/l2_residency.py.
    l2_mib: float = 0.0
    # Power and clocks (predictor/step.py, the sustained-clock model). power_w: the board's power limit;
    # sustained_tflops: the best bf16 GEMM rate NVIDIA's tables measured on GEMMs timed >= 32 ms, i.e. at the
    # power limit (benchmarks/sustained_gemm.py; aiconfigurator-core 0.12.0, newest vLLM GEMM table); 0: not
    # known.
    power_w: float = 0.0
    sustained_tflops: float = 0.0

    def __post_init__(self):
        if self.arch not in ARCHS:
            raise ValueError(f"arch {self.arch!r} is not known; use one of {', '.join(ARCHS)}")

    @property
    def compute_capability(self) -> int:
        return self.sm_version or DEFAULT_SM_VERSION[self.arch]

    @classmethod
    def from_name(cls, name: str) -> GPUSpec:
        return GPU.get(name)

    @property
    def memory_bytes(self) -> float:
        return self.memory_gib * 2**30

    @property
    def l2_bytes(self) -> float:
        return self.l2_mib * 2**20


NODE_KINDS = ("nvswitch", "nvlink-pairs", "pcie", "pcie-host")


@dataclass(frozen=True)
class NodeSpec:
    """A box of GPUs and how they reach each other: its `kind` decides which link each collective crosses.

    nvswitch: every GPU reaches every other over NVLink. nvlink-pairs: NVLink bridges join GPU pairs (0-1,
    2-3, …); anything between pairs goes over PCIe through the host. pcie: no working NVLink at all.
    pcie-host: no peer-to-peer either (consumer cards, P2P disabled, GPUs under different CPUs): NCCL copies
    every hop through host memory, and the copies of a ring share it (`pcie_bus_gbps` is what 2 GPUs reach; n
    GPUs get 2/n of it). The `*_bus_gbps` fields are the bus bandwidth NCCL reaches on that link (nccl-tests
    `busbw`, per GPU and direction); the model in simserve/profiling/nccl.py derives every collective from
    them.
    """

    name: str
    gpu: str  # the GPU this box holds (a name in the GPU table)
    gpus_per_node: int
    kind: str  # nvswitch | nvlink-pairs | pcie
    nvlink_gbps: float  # spec sheet, per GPU, per direction (0 without NVLink)
    pcie_gbps: float  # spec sheet, per GPU, per direction
    nvlink_bus_gbps: float  # NCCL bus bandwidth over NVLink (0 without NVLink)
    pcie_bus_gbps: float  # NCCL bus bandwidth of a ring through PCIe and the host
    source: str
    aliases: tuple[str, ...] = ()
    # NCCL NVLS all-reduce bus bandwidth (NVSwitch with SHARP: Hopper on); 0 = none
    nvls_bus_gbps: float = 0.0
    MISSING_HINT: ClassVar[str] = (
        "; the collective model needs them (fields and sources: docs/collectives.md)"
    )

    def __post_init__(self):
        if self.kind not in NODE_KINDS:
            raise ValueError(f"kind must be one of {', '.join(NODE_KINDS)}, not {self.kind!r}")
        if self.kind not in ("pcie", "pcie-host") and not self.nvlink_bus_gbps > 0:
            raise ValueError(f"a {self.kind} node needs nvlink_bus_gbps > 0")
        if not self.pcie_bus_gbps > 0:
            raise ValueError("pcie_bus_gbps must be > 0")

    @property
    def nvlink_group(self) -> int:
        """GPUs that reach each other over NVLink."""
        return {"nvswitch": self.gpus_per_node, "nvlink-pairs": 2, "pcie": 1, "pcie-host": 1}[self.kind]

    @classmethod
    def from_name(cls, name: str) -> NodeSpec:
        return NODES.get(name)


@dataclass(frozen=True)
class NetworkSpec:
    """The network between nodes: pipeline stages on different nodes send activations over it."""

    name: str
    gbps: float  # line rate, per node, per direction
    # what NCCL reaches across it (nccl-tests busbw between two nodes), per node and direction
    bus_gbps: float
    latency_us: float  # one-way fabric latency, added to NCCL's per-step network latency
    source: str
    aliases: tuple[str, ...] = ()
    MISSING_HINT: ClassVar[str] = (
        "; the collective model needs them (fields and sources: docs/collectives.md)"
    )

    @classmethod
    def from_name(cls, name: str) -> NetworkSpec:
        return NETWORKS.get(name)


GPU: Table[GPUSpec] = Table(
    "GPU",
    [
        GPUSpec(
            name="A100-80GB",
            memory_gib=79.15,
            peak_tflops=312.0,
            hbm_gbps=2039.0,
            num_sms=108,
            arch="ampere",
            l2_mib=40,
            power_w=400.0,
            sustained_tflops=298.4,
            aliases=("a100", "a100-80g", "a100-sxm4-80gb", "a100-80gb-sxm"),
            source="NVIDIA A100 datasheet (SXM4 80GB: 312 TF/s dense BF16, 2,039 GB/s HBM2e); "
            "79.15 GiB is torch.cuda's total for the 80 GB part; 108 SMs (NVIDIA A100 Tensor Core GPU "
            "Architecture whitepaper)",
        ),
        GPUSpec(
            name="A40-48GB",
            memory_gib=44.35,
            peak_tflops=149.7,
            hbm_gbps=696.0,
            num_sms=84,
            arch="ampere",
            l2_mib=6,
            aliases=("a40", "a40-48g"),
            sm_version=86,
            source="NVIDIA A40 datasheet (149.7 TF/s dense FP16 tensor, 696 GB/s GDDR6); "
            "44.35 GiB is torch.cuda's total with ECC on; 84 SMs (GA102, sm86: the datasheet's "
            "10,752 CUDA cores / 128 per SM)",
        ),
        GPUSpec(
            name="H100-SXM",
            memory_gib=79.11,
            peak_tflops=989.4,
            hbm_gbps=3350.0,
            num_sms=132,
            arch="hopper",
            l2_mib=50,
            power_w=700.0,
            sustained_tflops=884.5,
            aliases=("h100", "h100-80gb", "h100-sxm5", "h100-sxm5-80gb"),
            source="NVIDIA H100 datasheet (SXM5: 989.4 TF/s dense BF16, 3.35 TB/s HBM3); 132 SMs "
            "(NVIDIA H100 Tensor Core GPU Architecture whitepaper, SXM5)",
        ),
        GPUSpec(
            name="H200",
            memory_gib=139.8,
            peak_tflops=989.4,
            hbm_gbps=4800.0,
            num_sms=132,
            arch="hopper",
            l2_mib=50,
            power_w=700.0,
            sustained_tflops=833.3,
            aliases=("h200", "h200-sxm", "h200-141gb"),
            source="NVIDIA H200 datasheet (SXM: 989.4 TF/s dense BF16, 4.8 TB/s HBM3e, 141 GB); the GH100 "
            "die of the H100 SXM5, 132 SMs",
        ),
        # For the h100-nvl-pairs box below (a PCIe card with NVLink bridges; not in NVIDIA's per-op database).
        GPUSpec(
            name="H100-NVL",
            memory_gib=87.5,
            peak_tflops=835.0,
            hbm_gbps=3900.0,
            num_sms=132,
            arch="hopper",
            l2_mib=50,
            aliases=("h100-nvl", "h100nvl", "h100-94gb"),
            source="NVIDIA H100 datasheet (H100 NVL: 1,671 TF/s BF16 with sparsity -> 835 dense, 3.9 TB/s "
            "HBM3, 94 GB = 87.5 GiB; NVLink bridge 600 GB/s bidirectional, PCIe Gen5 128 GB/s); GH100 with "
            "132 SMs enabled, as the SXM5 part",
        ),
    ],
)

# Where the NCCL bus bandwidths come from (cited in every entry below):
_NCCL_TESTS = (
    "published nccl-tests all_reduce busbw at large sizes: 8×A100 SXM4 NVLink 230–250 GB/s, 8×H100 SXM5 "
    "460–480 (with NVLS), 8×H100 PCIe Gen5 without NVSwitch 35–45 (docs.alayanew.com/en/docs/tech-blog/"
    "2026-05-06-nccl-tests)"
)
_NVLINK3 = (
    "an NVLink 3 link carries 25 GB/s per direction, ~20 of it as payload of the SMs' 128-byte stores, and "
    "A100 reaches ~230 GB/s of the 240 this gives 12 links (NCCL developer, github.com/NVIDIA/nccl-tests/"
    "issues/149); NCCL's tuner caps Ampere at 235 (src/graph/tuning.cc)"
)
_PAIRS = (
    "nccl-tests on an A100 box with NV12 pairs: 208 GB/s busbw inside a pair, 20 GB/s once the ring "
    "crosses PCIe to the next pair (github.com/NVIDIA/nccl-tests/issues/178)"
)
_PCIE4 = f"PCIe Gen4 x16 (32 GB/s per direction); a ring through the host reaches 20 GB/s busbw ({_PAIRS})"

NODES: Table[NodeSpec] = Table(
    "node",
    [
        NodeSpec(
            name="a100-pairwise-nvlink",
            gpu="A100-80GB",
            gpus_per_node=4,
            kind="nvlink-pairs",
            nvlink_gbps=300.0,
            pcie_gbps=32.0,
            nvlink_bus_gbps=208.0,
            pcie_bus_gbps=20.0,
            aliases=("a100_pairwise_nvlink", "nc96ads-a100-v4", "a100-nvlink-pairs"),
            source="Azure NC96ads A100 v4 (the Sarathi-Serve testbed): 4×A100 80GB, NVLink 3 bridges (NV12) "
            "between pairs (600 GB/s bidirectional), PCIe Gen4 x16 (32 GB/s per direction) otherwise; "
            f"{_PAIRS}",
        ),
        NodeSpec(
            name="a40-pairwise-nvlink",
            gpu="A40-48GB",
            gpus_per_node=8,
            kind="nvlink-pairs",
            nvlink_gbps=56.25,
            pcie_gbps=32.0,
            nvlink_bus_gbps=43.0,
            pcie_bus_gbps=20.0,
            aliases=("a40_pairwise_nvlink", "a40-nvlink-pairs"),
            source="8×A40 box with NVLink bridges between pairs (A40 datasheet: 112.5 GB/s bidirectional); "
            "NVLink busbw 43 = 56.25 × 230/300, the fraction of the line rate NCCL reaches on A100's NVLink "
            f"3 ({_NVLINK3}); {_PCIE4}",
        ),
        NodeSpec(
            name="a40-pcie",
            gpu="A40-48GB",
            gpus_per_node=8,
            kind="pcie",
            nvlink_gbps=0.0,
            pcie_gbps=32.0,
            nvlink_bus_gbps=0.0,
            pcie_bus_gbps=20.0,
            aliases=("a40_pcie", "a40-no-nvlink"),
            source=(
                f"8×A40 without (working) NVLink bridges: every collective goes through the host; {_PCIE4}"
            ),
        ),
        NodeSpec(
            name="h100-nvl-pairs",
            gpu="H100-NVL",
            gpus_per_node=4,
            kind="nvlink-pairs",
            nvlink_gbps=300.0,
            pcie_gbps=64.0,
            nvlink_bus_gbps=208.0,
            pcie_bus_gbps=40.0,
            aliases=("h100_pairwise_nvlink", "h100-nvl-box", "4xh100-nvl"),
            source="4×H100 NVL (PCIe cards) with NVLink bridges between pairs (600 GB/s bidirectional, as "
            f"the A100's NV12 bridge: busbw 208 as that pair, {_PAIRS}); PCIe Gen5 ring through the host: "
            f"busbw 40 ({_NCCL_TESTS}). Validated against Vidur's h100_pairwise_nvlink all-reduce "
            "(docs/collectives.md)",
        ),
        NodeSpec(
            name="l40s-pcie-host",
            gpu="L40S",
            gpus_per_node=8,
            kind="pcie-host",
            nvlink_gbps=0.0,
            pcie_gbps=32.0,
            nvlink_bus_gbps=0.0,
            pcie_bus_gbps=10.2,
            aliases=("l40s-no-p2p", "pcie-no-p2p"),
            source="8×L40S (PCIe Gen4 x16, 32 GB/s per direction) whose rings beyond a PCIe switch pair go "
            "through host memory (NCCL's SHM transport): 2 GPUs' host copy rate 10.2 GB/s, fitted on the "
            "4-GPU all-reduces of aiconfigurator-core's L40S NCCL table (5.1 GB/s busbw ≥ 16 MiB = 10.2 × "
            "2/4; 8 GPUs held out, docs/collectives.md). The L40S GPU itself is the GPU catalog's "
            "entry",
        ),
        NodeSpec(
            name="dgx-a100",
            gpu="A100-80GB",
            gpus_per_node=8,
            kind="nvswitch",
            nvlink_gbps=300.0,
            pcie_gbps=32.0,
            nvlink_bus_gbps=230.0,
            pcie_bus_gbps=20.0,
            aliases=("a100_dgx", "dgx", "a100-nvswitch", "nvswitch"),
            source="NVIDIA DGX A100: 8×A100 on NVSwitch, NVLink 3 at 600 GB/s bidirectional per GPU; "
            f"busbw 230 ({_NVLINK3}; {_NCCL_TESTS})",
        ),
        NodeSpec(
            name="dgx-h100",
            gpu="H100-SXM",
            gpus_per_node=8,
            kind="nvswitch",
            nvlink_gbps=450.0,
            pcie_gbps=64.0,
            nvlink_bus_gbps=350.0,
            pcie_bus_gbps=40.0,
            nvls_bus_gbps=470.0,
            aliases=("h100_dgx", "h100-nvswitch", "hgx-h100"),
            source="NVIDIA DGX H100: 8×H100 on NVSwitch, NVLink 4 at 900 GB/s bidirectional per GPU; busbw "
            "350 for ring/tree (450 × 230/300 as on NVLink 3), 470 with NVLS (nccl-tests reach 460–480); "
            f"PCIe Gen5 busbw 40 ({_NCCL_TESTS}). Validated against aiconfigurator-core's H100 NCCL tables "
            "(docs/collectives.md)",
        ),
        NodeSpec(
            name="hgx-h200",
            gpu="H200",
            gpus_per_node=8,
            kind="nvswitch",
            nvlink_gbps=450.0,
            pcie_gbps=64.0,
            nvlink_bus_gbps=350.0,
            pcie_bus_gbps=40.0,
            nvls_bus_gbps=470.0,
            aliases=("h200_dgx", "h200-nvswitch", "dgx-h200"),
            source="NVIDIA HGX H200: 8×H200 on NVSwitch, NVLink 4 at 900 GB/s bidirectional per GPU; busbw "
            "(ring and NVLS) as dgx-h100 (same NVLink 4 / NVSwitch fabric). Checked, not fitted, against "
            "aiconfigurator-core's H200 NCCL tables (docs/collectives.md)",
        ),
    ],
)

_IB = (
    "an InfiniBand 4x link's 64b/66b coding and packet headers leave ~92% of the line rate to NCCL's "
    "payload; one-way latency ~1 µs (HCA + one switch)"
)

NETWORKS: Table[NetworkSpec] = Table(
    "network",
    [
        NetworkSpec(
            name="ethernet-100g",
            gbps=12.5,
            bus_gbps=10.0,
            latency_us=30.0,
            aliases=("100g", "ethernet", "eth-100g", "100gbe"),
            source="100 Gb/s Ethernet between nodes (the Sarathi-Serve Falcon-180B testbed): 12.5 GB/s per "
            "direction; NCCL's socket transport over TCP reaches ~80% of it and adds the kernel TCP stack's "
            "tens of µs per message. Not validated against measurements",
        ),
        NetworkSpec(
            name="infiniband-100g",
            gbps=12.5,
            bus_gbps=11.5,
            latency_us=1.0,
            aliases=("ib-100g", "edr"),
            source=f"100 Gb/s EDR InfiniBand, one HCA per node: 12.5 GB/s per direction; {_IB}",
        ),
        NetworkSpec(
            name="infiniband-200g",
            gbps=25.0,
            bus_gbps=23.0,
            latency_us=1.0,
            aliases=("ib-200g", "hdr"),
            source=f"200 Gb/s HDR InfiniBand, one HCA per node: 25 GB/s per direction; {_IB}",
        ),
        NetworkSpec(
            name="infiniband-400g",
            gbps=50.0,
            bus_gbps=46.0,
            latency_us=1.0,
            aliases=("ib-400g", "ndr", "infiniband"),
            source=f"400 Gb/s NDR InfiniBand, one HCA per node: 50 GB/s per direction; {_IB}",
        ),
    ],
)

# The node a GPU lives in when the user names only the GPU: the paper's testbeds where they exist.
DEFAULT_NODE = {
    "A100-80GB": "a100-pairwise-nvlink",
    "A40-48GB": "a40-pairwise-nvlink",
    "H100-SXM": "dgx-h100",
    "H200": "hgx-h200",
    "H100-NVL": "h100-nvl-pairs",
}


# Power limits: the datasheets (A100 SXM 400 W, H100/H200 SXM 700 W, B200 1,000 W, L40S 350 W, RTX PRO 6000
# Server 600 W) as aiconfigurator-core 0.12.0 systems/<name>.yaml repeats them (`power`; B300 1,100, GB200
# 1,200, GB300 1,400). sustained_tflops: `python benchmarks/sustained_gemm.py` (docs/execution-model.md,
# "Sustained clock").

# --- GPUs of NVIDIA's measured per-op database --------------------------------------------------------------
# Every NVIDIA system the `aiconfigurator-core` package describes (systems/<name>.yaml;
# simserve/profiling/measured.py maps them), with its usual box. Peaks are dense (no sparsity) BF16
# tensor-core rates per GPU. Where the memory a program sees is not published, memory_gib is the package's own
# mem_capacity (its systems/<name>.yaml), which is what NVIDIA's configurator plans KV caches with. The NVLink
# bus bandwidths scale the line rate by the 230/300 NCCL reaches on NVLink 3 (as dgx-h100 does); not validated
# against measurements (the package's NCCL tables are: docs/profiling.md, "Measured backend").
_AIC = "aiconfigurator-core 0.12.0 systems/{}.yaml"
_DATABASE_GPUS = [
    GPUSpec(
        name="B200",
        memory_gib=180.0,
        peak_tflops=2250.0,
        hbm_gbps=7700.0,
        num_sms=148,
        arch="blackwell",
        l2_mib=126,
        power_w=1000.0,
        sustained_tflops=1728.5,
        aliases=("b200", "b200-sxm", "b200-180gb", "hgx-b200-gpu"),
        source="NVIDIA HGX B200 datasheet (8 GPUs: 36 PF FP16/BF16 with sparsity = 2.25 PF dense each, 1.4 "
        "TB HBM3e, 62 TB/s = 7.7 TB/s each); 148 SMs (NVIDIA Blackwell architecture technical brief); "
        f"memory {_AIC.format('b200_sxm')} mem_capacity (180 GiB)",
    ),
    GPUSpec(
        name="B300",
        memory_gib=268.6,
        peak_tflops=2250.0,
        hbm_gbps=7750.0,
        num_sms=148,
        arch="blackwell",
        l2_mib=126,
        power_w=1100.0,
        sustained_tflops=1860.4,
        aliases=("b300", "b300-sxm", "blackwell-ultra", "hgx-b300-gpu"),
        sm_version=103,
        source="NVIDIA HGX B300 datasheet (8 GPUs: 36 PF FP16/BF16 with sparsity = 2.25 PF dense each, 2.3 "
        f"TB HBM3e); bandwidth and memory from {_AIC.format('b300_sxm')} (7.75 TB/s, 288.4e9 B); SMs as B200 "
        "(the 160-SM die with the same 148 enabled: an assumption, NVIDIA publishes the die count)",
    ),
    GPUSpec(
        name="GB200",
        memory_gib=185.0,
        peak_tflops=2500.0,
        hbm_gbps=8000.0,
        num_sms=148,
        arch="blackwell",
        l2_mib=126,
        power_w=1200.0,
        sustained_tflops=1582.3,
        aliases=("gb200", "gb200-nvl72-gpu", "b200-grace"),
        source="NVIDIA GB200 NVL72 datasheet (72 GPUs: 360 PF FP16/BF16 with sparsity = 2.5 PF dense each, "
        f"13.4 TB HBM3e = 186 GB each, 576 TB/s = 8 TB/s each); memory {_AIC.format('gb200')} (185 GiB)",
    ),
    GPUSpec(
        name="GB300",
        memory_gib=277.5,
        peak_tflops=2500.0,
        hbm_gbps=8000.0,
        num_sms=148,
        arch="blackwell",
        l2_mib=126,
        power_w=1400.0,
        sustained_tflops=2197.5,
        aliases=("gb300", "gb300-nvl72-gpu", "b300-grace"),
        sm_version=103,
        source="NVIDIA GB300 NVL72 datasheet (72 GPUs: 20.7 TB HBM3e = 288 GB each, 576 TB/s = 8 TB/s each); "
        f"dense BF16 and memory from {_AIC.format('gb300')} (2.5 PF, 298.0e9 B); SMs as GB200 (assumption)",
    ),
    GPUSpec(
        name="L40S",
        memory_gib=44.99,
        peak_tflops=362.05,
        hbm_gbps=864.0,
        num_sms=142,
        arch="ada",
        l2_mib=96,
        power_w=350.0,
        sustained_tflops=285.3,
        aliases=("l40s", "l40s-48gb"),
        source="NVIDIA L40S datasheet (362.05 TF/s BF16 dense, 733 with sparsity; 48 GB GDDR6 at 864 GB/s); "
        f"142 SMs (AD102: the datasheet's 18,176 CUDA cores / 128 per SM); memory {_AIC.format('l40s')}",
    ),
    GPUSpec(
        name="RTX-P6000",
        memory_gib=95.59,
        peak_tflops=467.8,
        hbm_gbps=1792.0,
        num_sms=188,
        arch="blackwell",
        l2_mib=128,
        sm_version=120,  # GB202: compute capability 12.0 (CUDA C Programming Guide), not the B200's 10.0
        power_w=600.0,
        sustained_tflops=458.8,
        aliases=("rtx-pro-6000", "rtx-pro-6000-server", "rtx_pro_6000_server", "rtx-pro-6000-blackwell"),
        source="NVIDIA RTX PRO 6000 Blackwell Server Edition datasheet (96 GB GDDR7 at 1,792 GB/s; 24,064 "
        f"CUDA cores = 188 SMs); dense BF16 and memory from {_AIC.format('rtx_pro_6000_server')} (467.8 "
        "TF/s, 102.6e9 B)",
    ),
    GPUSpec(
        name="A100-PCIe",
        memory_gib=79.15,
        peak_tflops=312.0,
        hbm_gbps=1935.0,
        num_sms=108,
        arch="ampere",
        l2_mib=40,
        aliases=("a100-pcie-80gb", "a100_pcie"),
        source=(
            "NVIDIA A100 datasheet (PCIe 80GB: 312 TF/s dense BF16, 1,935 GB/s HBM2e); memory as A100-80GB"
        ),
    ),
    GPUSpec(
        name="A30",
        memory_gib=23.5,
        peak_tflops=165.0,
        hbm_gbps=933.0,
        num_sms=56,
        arch="ampere",
        l2_mib=24,
        aliases=("a30", "a30-24gb"),
        source="NVIDIA A30 datasheet (165 TF/s dense BF16, 24 GB HBM2 at 933 GB/s; 3,584 FP32 cores = 56 "
        "SMs); memory: 24 GiB less the ~0.5 GiB the driver keeps (as H100: 79.65 GiB in nvidia-smi, 79.11 "
        "in torch), an estimate",
    ),
    GPUSpec(
        name="H100-PCIe",
        memory_gib=79.11,
        peak_tflops=756.0,
        hbm_gbps=2000.0,
        num_sms=114,
        arch="hopper",
        l2_mib=50,
        aliases=("h100-pcie", "h100-pcie-80gb", "h100_pcie"),
        source="NVIDIA H100 datasheet (PCIe: 756 TF/s dense BF16, 2 TB/s HBM2e, 80 GB); 114 SMs (H100 "
        "architecture whitepaper, PCIe); memory as H100-SXM",
    ),
    GPUSpec(
        name="L4",
        memory_gib=22.0,
        peak_tflops=121.0,
        hbm_gbps=300.0,
        num_sms=58,
        arch="ada",
        l2_mib=48,
        aliases=("l4", "l4-24gb"),
        source="NVIDIA L4 datasheet (121 TF/s dense BF16, 242 with sparsity; 24 GB GDDR6 at 300 GB/s; 7,424 "
        "CUDA cores = 58 SMs); memory: 24 GB less ECC and the driver's reserve, an estimate",
    ),
]

_NVLINK5 = (
    "NVLink 5 at 1.8 TB/s bidirectional per GPU (900 GB/s per direction); busbw 690 = 900 × 230/300, the "
    "NVLink 3 fraction (no NVLS in this model); PCIe Gen5 to the host, busbw 40 as dgx-h100"
)
_PCIE_BOX = "no NVLink: every collective goes through PCIe and the host"
_DATABASE_NODES = [
    NodeSpec(
        name="dgx-b200",
        gpu="B200",
        gpus_per_node=8,
        kind="nvswitch",
        nvlink_gbps=900.0,
        pcie_gbps=64.0,
        nvlink_bus_gbps=690.0,
        pcie_bus_gbps=40.0,
        aliases=("hgx-b200", "b200-nvswitch"),
        source=f"NVIDIA DGX B200: 8×B200 on NVSwitch; {_NVLINK5}. Not validated against measurements",
    ),
    NodeSpec(
        name="hgx-b300",
        gpu="B300",
        gpus_per_node=8,
        kind="nvswitch",
        nvlink_gbps=900.0,
        pcie_gbps=64.0,
        nvlink_bus_gbps=690.0,
        pcie_bus_gbps=40.0,
        aliases=("dgx-b300", "b300-nvswitch"),
        source=f"NVIDIA HGX B300: 8×B300 on NVSwitch; {_NVLINK5}. Not validated against measurements",
    ),
    NodeSpec(
        name="gb200-nvl72",
        gpu="GB200",
        gpus_per_node=72,
        kind="nvswitch",
        nvlink_gbps=900.0,
        pcie_gbps=64.0,
        nvlink_bus_gbps=690.0,
        pcie_bus_gbps=40.0,
        aliases=("gb200-nvl", "nvl72"),
        source=(
            f"NVIDIA GB200 NVL72: 72 GPUs in one NVLink domain (NVLink switch trays); {_NVLINK5}. Not "
            "validated"
        ),
    ),
    NodeSpec(
        name="gb300-nvl72",
        gpu="GB300",
        gpus_per_node=72,
        kind="nvswitch",
        nvlink_gbps=900.0,
        pcie_gbps=64.0,
        nvlink_bus_gbps=690.0,
        pcie_bus_gbps=40.0,
        aliases=("gb300-nvl",),
        source=f"NVIDIA GB300 NVL72: 72 GPUs in one NVLink domain; {_NVLINK5}. Not validated",
    ),
    NodeSpec(
        name="l40s-pcie",
        gpu="L40S",
        gpus_per_node=8,
        kind="pcie",
        nvlink_gbps=0.0,
        pcie_gbps=32.0,
        nvlink_bus_gbps=0.0,
        pcie_bus_gbps=20.0,
        aliases=("l40s-box",),
        source=f"8×L40S server (L40S has no NVLink); {_PCIE_BOX}; {_PCIE4}",
    ),
    NodeSpec(
        name="rtx-pro-6000-pcie",
        gpu="RTX-P6000",
        gpus_per_node=8,
        kind="pcie",
        nvlink_gbps=0.0,
        pcie_gbps=64.0,
        nvlink_bus_gbps=0.0,
        pcie_bus_gbps=40.0,
        aliases=("rtx-pro-6000-server-box",),
        source=(
            f"8×RTX PRO 6000 Server Edition (no NVLink), PCIe Gen5 x16; {_PCIE_BOX}; busbw 40 ({_NCCL_TESTS})"
        ),
    ),
    NodeSpec(
        name="a100-pcie-8x",
        gpu="A100-PCIe",
        gpus_per_node=8,
        kind="pcie",
        nvlink_gbps=0.0,
        pcie_gbps=32.0,
        nvlink_bus_gbps=0.0,
        pcie_bus_gbps=20.0,
        source=f"8×A100 PCIe without NVLink bridges; {_PCIE_BOX}; {_PCIE4}",
    ),
    NodeSpec(
        name="a30-pcie-8x",
        gpu="A30",
        gpus_per_node=8,
        kind="pcie",
        nvlink_gbps=0.0,
        pcie_gbps=32.0,
        nvlink_bus_gbps=0.0,
        pcie_bus_gbps=20.0,
        source=f"8×A30 without NVLink bridges; {_PCIE_BOX}; {_PCIE4}",
    ),
    NodeSpec(
        name="h100-pcie-8x",
        gpu="H100-PCIe",
        gpus_per_node=8,
        kind="pcie",
        nvlink_gbps=0.0,
        pcie_gbps=64.0,
        nvlink_bus_gbps=0.0,
        pcie_bus_gbps=40.0,
        source=f"8×H100 PCIe without NVLink bridges, PCIe Gen5; {_PCIE_BOX}; busbw 40 ({_NCCL_TESTS})",
    ),
    NodeSpec(
        name="l4-pcie-8x",
        gpu="L4",
        gpus_per_node=8,
        kind="pcie",
        nvlink_gbps=0.0,
        pcie_gbps=32.0,
        nvlink_bus_gbps=0.0,
        pcie_bus_gbps=20.0,
        source=f"8×L4 server (no NVLink), PCIe Gen4 x16; {_PCIE_BOX}; {_PCIE4}",
    ),
]
for _spec in _DATABASE_GPUS:
    GPU.add(_spec)
for _node in _DATABASE_NODES:
    NODES.add(_node)
    DEFAULT_NODE[_node.gpu] = _node.name
