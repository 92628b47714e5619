"""Which deployments a plan considers: every GPU × TP × PP within the GPU budget whose weights, activations
and one max-length request fit in memory (simserve/memory.py), each with the token budgets that fit beside it.

TP runs over powers of two that divide the model's heads and fit one node (TP across nodes is not modeled); PP
over the divisors of the layer count. Each deployment runs in the catalog box for its GPU that puts the most
of its TP×PP GPUs on one NVLink domain (`best_box`): e.g. A100 TP8 in the NVSwitch `dgx-a100`, not two 4-GPU
pairs boxes; a replica larger than every box spans nodes over the default network.
"""

from __future__ import annotations

from dataclasses import dataclass

from simserve.catalog import GPUSpec, ModelSpec
from simserve.catalog.hardware import DEFAULT_NODE, NODES, NodeSpec
from simserve.deployment import Deployment
from simserve.errors import SimserveError
from simserve.memory import GIB, plan_memory, profile_tokens
from simserve.vllm_loader import refusal


@dataclass(frozen=True)
class Candidate:
    deployment: Deployment
    budgets: tuple[int, ...]  # the token budgets whose activation peak still leaves room for one request
    kv_blocks: int  # KV blocks per GPU at the smallest budget

    @property
    def num_gpus(self) -> int:
        """GPUs of one copy of the deployment: all its attention-DP ranks (Deployment is one rank)."""
        return self.deployment.num_gpus * self.deployment.dp


def parallelisms(model: ModelSpec, max_gpus: int) -> list[tuple[int, int]]:
    """(TP, PP) pairs with TP·PP ≤ max_gpus: TP a power of two dividing the heads, PP dividing the layers."""
    tps = [t for t in (1, 2, 4, 8, 16, 32, 64) if t <= max_gpus and model.num_heads % t == 0]
    pps = [p for p in range(1, max_gpus + 1) if model.num_layers % p == 0]
    return [(t, p) for t in tps for p in pps if t * p <= max_gpus]


def best_box(gpu: GPUSpec, tp: int, pp: int) -> NodeSpec | None:
    """The catalog box a TP×PP replica of `gpu` runs in: the one whose NVLink domain holds the most of the
    replica's GPUs (inside one box when some box holds them all; TP must fit one box, as TP across nodes is
    not modeled); among equals the GPU's default box (the paper's testbeds, where the measured and shipped
    profiles are), then the faster NVLink bus, then the name. So A100 TP1 and TP2 stay on the NVLink pairs box
    and A100 TP4 and TP8 go to the NVSwitch `dgx-a100`. None when the catalog has no box for the GPU."""
    boxes = [n for n in NODES if n.gpu == gpu.name]
    if not boxes:
        return None
    g, default = tp * pp, DEFAULT_NODE.get(gpu.name)

    def rank(n: NodeSpec) -> tuple:
        holds = n.gpus_per_node >= g
        on_nvlink = min(n.nvlink_group, g if holds else tp)
        return (
            n.gpus_per_node >= tp,
            holds,
            on_nvlink,
            n.name == default,
            n.nvlink_bus_gbps,
            n.pcie_bus_gbps,
        )

    return min(boxes, key=lambda n: (tuple(-float(x) for x in rank(n)), n.name))


def expert_parallelisms(model: ModelSpec, tp: int) -> list[int]:
    """EP degrees a plan tries: experts TP-sharded (1) or whole experts over the TP group (TP), vLLM's two
    layouts (--enable-expert-parallel); only 1 for a dense model."""
    if not model.is_moe or tp == 1 or model.num_experts % tp:
        return [1]
    return [1, tp]


def data_parallelisms(
    model: ModelSpec, gpu: GPUSpec, tp: int, pp: int, max_gpus: int
) -> tuple[list[int], str]:
    """Attention-DP degrees D a plan tries beside TP/EP for a MoE model (vLLM's `--data-parallel-size D
    --enable-expert-parallel`: D ranks of TP `tp`, the experts whole over EP = D·TP GPUs of one box, PP 1),
    and why the others are not tried ('' when nothing was left out on physical grounds).

    Physical rule: attention DP pays for a copy of the attention weights on every rank; what it buys is KV
    capacity where TP cannot shard the KV cache: multi-head latent attention (one latent per token kept whole
    on every TP rank) or fewer KV heads than the D·TP GPUs (TP replicates each KV head on TP/kv_heads GPUs). A
    model whose KV heads already shard over D·TP GPUs (Mixtral's 8 on 8 GPUs) gains no KV cache from DP, only
    the copies, so its DP layouts are not searched."""
    if not model.is_moe or pp != 1:
        return [], ""
    box = max((n.gpus_per_node for n in NODES if n.gpu == gpu.name), default=0)
    degrees = [
        d for d in (2, 4, 8, 16, 32) if d * tp <= min(max_gpus, box) and model.num_experts % (d * tp) == 0
    ]
    kept = [d for d in degrees if model.is_mla or model.num_kv_heads < d * tp]
    if kept == degrees:
        return kept, ""
    why = (
        f"attention DP {'/'.join(map(str, sorted(set(degrees) - set(kept))))} x TP{tp} not searched: "
        f"{model.name}'s {model.num_kv_heads} KV heads already shard over those GPUs under TP, so DP would "
        f"only copy the attention weights, not add KV cache"
    )
    return kept, why


def enumerate_candidates(
    model: ModelSpec,
    gpus: list[GPUSpec],
    max_gpus: int,
    budgets: tuple[int, ...],
    max_batch: int,
    max_model_len: int,
    memory_utilization: float = 0.85,
    dtype: str = "bf16",
    kv_dtype: str = "bf16",
    moe_skew: float = 0.0,
) -> tuple[list[Candidate], list[str]]:
    """The deployments that fit, and one line per (GPU, TP, PP) that does not (why)."""
    fits, rejected = [], []
    for gpu in gpus:
        if not any(n.gpu == gpu.name for n in NODES):  # its collectives and PP hops need a box's links
            raise SimserveError(
                f"the catalog has no box (node) that holds {gpu.name}; add one under 'nodes:' in a --catalog "
                f"file (fields and sources: docs/collectives.md) or drop it from --gpus"
            )
        layouts = []  # (tp, pp, ep, dp): TP/EP layouts, then attention-DP ones (ep = dp·tp)
        for tp, pp in parallelisms(model, max_gpus):
            layouts += [(tp, pp, ep, 1) for ep in expert_parallelisms(model, tp)]
            dps, why = data_parallelisms(model, gpu, tp, pp, max_gpus)
            layouts += [(tp, pp, d * tp, d) for d in dps]
            if why:
                rejected.append(f"{gpu.name} TP{tp} PP{pp}: {why}")
        for tp, pp, ep, dp in layouts:
            name = f"{gpu.name} {f'DP{dp} x ' if dp > 1 else ''}TP{tp} PP{pp}"
            try:
                box = best_box(gpu, dp * tp, pp)
                dep = Deployment.create(
                    model,
                    gpu,
                    tp,
                    pp,
                    box,
                    None,
                    memory_utilization,
                    max_model_len,
                    dtype,
                    kv_dtype,
                    ep,
                    moe_skew,
                    dp,
                )
            except SimserveError as exc:  # e.g. TP larger than the GPU's box
                rejected.append(f"{name}: {exc}")
                continue
            refused = refusal(dep)  # the pinned engine would not load it: not a deployment to buy
            if refused:
                rejected.append(f"{name}: {refused}")
                continue
            ok, blocks = [], None
            for b in sorted(budgets):
                try:
                    plan = plan_memory(dep, profile_tokens("sarathi", max_model_len, b, max_batch))
                except SimserveError as exc:
                    why = str(exc)
                    continue
                ok.append(b)
                blocks = plan.num_blocks if blocks is None else blocks
            if ok:
                fits.append(Candidate(dep, tuple(ok), blocks or 0))
            else:
                rejected.append(f"{name}: {why}")
    return fits, rejected


def nothing_fits_message(model: ModelSpec, gpus: list[GPUSpec], max_gpus: int, dtype: str = "bf16") -> str:
    from simserve.precision import dtype_bytes

    biggest = max(gpus, key=lambda g: g.memory_gib)
    weights = model.num_params * dtype_bytes(dtype) / GIB
    return (
        f"no deployment of {model.name} ({weights:.0f} GiB of "
        f"{'' if dtype == 'bf16' else dtype + ' '}weights) fits in memory on at most {max_gpus} of "
        f"{', '.join(g.name for g in gpus)} (largest: {biggest.memory_gib:.0f} GiB each); raise --max-gpus "
        "or add a GPU with more memory to --gpus"
    )
