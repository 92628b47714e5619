"""A deployment: a model on GPUs with tensor (TP) and pipeline (PP) parallelism, in a node, maybe over a
network."""

from __future__ import annotations

from dataclasses import dataclass

from simserve import precision
from simserve.catalog import GPU, NETWORKS, NODES, GPUSpec, ModelSpec, NetworkSpec, NodeSpec
from simserve.catalog.hardware import DEFAULT_NODE
from simserve.catalog.models import resolve_model
from simserve.errors import SimserveError

BLOCK_SIZE = 16  # tokens per KV-cache block (vLLM and Sarathi-Serve)

# vLLM's --all2all-backend values simserve models, its default first: allgather_reducescatter from the
# all-reduce rows (exchange_bytes), the DeepEP kernels from NVIDIA's measured dispatch + combine rows
# (ops.a2a_op).
ALL2ALL_BACKENDS = ("allgather_reducescatter", "deepep_low_latency", "deepep_high_throughput")


@dataclass(frozen=True)
class Deployment:
    """One replica. Stage s runs on GPUs [s·tp, (s+1)·tp); GPU g sits in node g // gpus_per_node."""

    model: ModelSpec
    gpu: GPUSpec
    tp: int = 1
    pp: int = 1
    node: NodeSpec | None = None  # None: the GPU's default box
    network: NetworkSpec | None = None  # between nodes; needed only when the replica spans nodes
    memory_utilization: float = 0.85
    max_model_len: int = 8192
    block_size: int = BLOCK_SIZE
    dtype: str = "bf16"  # weights of the linear layers: bf16 | fp8 (simserve/precision.py)
    kv_dtype: str = "bf16"  # KV cache: bf16 | fp8
    ep: int = 1  # expert parallelism: each GPU of a stage holds num_experts/ep experts, each split tp/ep ways
    # router token spread: 0 balanced; s > 0 Zipf(s) expert popularity (ops.expert_load)
    moe_skew: float = 0.0
    # Attention data parallelism (vLLM --data-parallel-size dp --enable-expert-parallel): this deployment is
    # ONE of dp ranks, each with its own requests, KV cache and TP group of `tp` GPUs for attention; the
    # routed experts are spread over all dp·tp GPUs (ep = dp·tp), whose MoE layers run the tokens of every
    # rank together.
    dp: int = 1
    # How attention-DP ranks exchange the experts' tokens: vLLM's --all2all-backend (ALL2ALL_BACKENDS).
    all2all: str = "allgather_reducescatter"

    @classmethod
    def create(
        cls,
        model: str | ModelSpec,
        gpu: str | GPUSpec,
        tp: int = 1,
        pp: int = 1,
        node: str | NodeSpec | None = None,
        network: str | NetworkSpec | None = None,
        memory_utilization: float = 0.85,
        max_model_len: int = 8192,
        dtype: str = "bf16",
        kv_dtype: str = "bf16",
        ep: int = 1,
        moe_skew: float = 0.0,
        dp: int = 1,
        all2all: str = "allgather_reducescatter",
    ) -> Deployment:
        """Resolve names and check the parallelism; raises SimserveError with the fix on bad input."""
        model = resolve_model(model)
        gpu = GPU.get(gpu) if isinstance(gpu, str) else gpu
        if node is None:
            node = DEFAULT_NODE.get(gpu.name)
        node = NODES.get(node) if isinstance(node, str) else node
        # the box's links and its GPUs go together
        if node is not None and GPU.get(node.gpu).name != gpu.name:
            boxes = [n.name for n in NODES if GPU.get(n.gpu).name == gpu.name]
            known = ", ".join(boxes) or "none in the catalog: add one with a catalog file, docs/catalog.md"
            raise SimserveError(
                f"--node {node.name} holds {GPU.get(node.gpu).name} GPUs, not {gpu.name}; pick a node that "
                f"holds {gpu.name} ({known}) or --gpu {node.gpu}"
            )
        if isinstance(network, str):
            network = NETWORKS.get(network)
        if tp < 1 or pp < 1:
            raise SimserveError(f"--tp and --pp must be at least 1 (got tp={tp}, pp={pp})")
        if model.num_heads % tp:
            raise SimserveError(
                f"TP {tp} does not divide {model.name}'s {model.num_heads} attention heads; "
                f"use a TP degree that divides {model.num_heads}"
            )
        if model.num_layers % pp:
            raise SimserveError(
                f"PP {pp} does not divide {model.name}'s {model.num_layers} layers; "
                f"use a PP degree that divides {model.num_layers}"
            )
        if not 0 < memory_utilization <= 1:
            raise SimserveError(f"--memory-utilization must be in (0, 1], got {memory_utilization}")
        if max_model_len < 1:
            raise SimserveError(f"max model length must be at least 1, got {max_model_len}")
        dtype = precision.check_dtype(dtype, "--dtype")
        kv_dtype = precision.check_dtype(kv_dtype, "--kv-dtype")
        _check_experts(
            model, tp, ep, moe_skew, dp, node.gpus_per_node if node is not None and pp == 1 else None
        )
        _check_all2all(all2all, dp)
        extra = (BLOCK_SIZE, dtype, kv_dtype, ep, float(moe_skew), dp, all2all)
        dep = cls(model, gpu, tp, pp, node, network, memory_utilization, max_model_len, *extra)
        if node is not None and tp > node.gpus_per_node:
            # a bigger box of the same GPU in the catalog is the first fix (A100's default is the paper's
            # 4-GPU box)
            boxes = [n.name for n in NODES if n.gpu == gpu.name and n.gpus_per_node >= tp]
            bigger = f"pick a node that holds {tp} (--node {' or '.join(boxes)}), or " if boxes else ""
            raise SimserveError(
                f"TP {tp} spans more GPUs than one {node.name} node holds ({node.gpus_per_node}); "
                f"tensor parallelism across nodes is not modeled: {bigger}lower --tp and raise --pp"
            )
        if dp > 1 and (pp > 1 or (node is not None and dp * tp > node.gpus_per_node)):
            raise SimserveError(
                f"--dp-attention {dp} x TP {tp} x PP {pp}: attention DP is modelled inside one "
                f"{node.name if node else 'node'} ({node.gpus_per_node if node else '?'} GPUs) with PP 1, "
                "where the experts' all-to-all stays on the node's links; "
                + " and ".join(
                    fix
                    for fix, bad in (
                        ("use --pp 1", pp > 1),
                        ("lower --dp-attention or --tp", node is not None and dp * tp > node.gpus_per_node),
                    )
                    if bad
                )
            )
        if dep.num_nodes > 1 and network is None:
            dep = cls(
                model,
                gpu,
                tp,
                pp,
                node,
                NETWORKS.get("ethernet-100g"),
                memory_utilization,
                max_model_len,
                *extra,
            )
        return dep

    @property
    def weight_bytes(self) -> int:
        """Bytes per weight of the linear layers (embeddings and norms stay bf16)."""
        return precision.DTYPE_BYTES[self.dtype]

    @property
    def kv_bytes(self) -> int:
        """Bytes per KV-cache element."""
        return precision.DTYPE_BYTES[self.kv_dtype]

    @property
    def local_experts(self) -> int:
        """Routed experts whose weights one GPU holds (a slice 1/expert_tp of each)."""
        return self.model.num_experts // self.ep

    @property
    def expert_tp(self) -> int:
        """How many GPUs split one expert's intermediate dimension (1 under attention DP: whole experts)."""
        return max(1, self.tp // self.ep)

    @property
    def profile_model(self) -> str:
        """The model's name as its profile directory knows it: '-fp8' / '-kvfp8' mark non-bf16 profiles."""
        return self.model.name + precision.suffix(self.dtype, self.kv_dtype)

    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp

    @property
    def gpus_per_node(self) -> int:
        return self.node.gpus_per_node if self.node else self.num_gpus

    @property
    def num_nodes(self) -> int:
        return -(-self.num_gpus // self.gpus_per_node)

    @property
    def layers_per_stage(self) -> int:
        return self.model.num_layers // self.pp

    @property
    def kv_heads_per_gpu(self) -> int:
        # With more TP ranks than KV heads each rank keeps a replica of one head (vLLM's rule).
        return max(1, self.model.num_kv_heads // self.tp)

    @property
    def heads_per_gpu(self) -> int:
        return self.model.num_heads // self.tp

    def crosses_nodes(self, stage: int) -> bool:
        """Whether the activations that stage `stage` sends to stage `stage + 1` leave the node."""
        return (stage * self.tp) // self.gpus_per_node != ((stage + 1) * self.tp) // self.gpus_per_node

    @property
    def tp_link(self) -> str:
        """Where TP all-reduces travel: 'nvlink' inside an NVLink group, 'pcie' when the group is too
        small."""
        if self.node is None or self.tp <= self.node.nvlink_group:
            return "nvlink"
        return "pcie"

    def describe(self) -> str:
        where = f" on {self.node.name}" if self.node else ""
        net = f" over {self.network.name}" if self.num_nodes > 1 and self.network else ""
        ep = f", EP{self.ep}" if self.ep > 1 else ""
        ep += f", one of {self.dp} attention-DP ranks" if self.dp > 1 else ""
        dt = (
            ""
            if (self.dtype, self.kv_dtype) == ("bf16", "bf16")
            else f", {self.dtype} weights, {self.kv_dtype} KV"
        )
        par = f"TP{self.tp}, PP{self.pp}{ep}{dt}"
        return f"{self.model.name} on {self.num_gpus}×{self.gpu.name} ({par}){where}{net}"


def _dp_advice(model: ModelSpec, dp: int, tp: int, gpus: int | None) -> str:
    """The attention-DP layout nearest the one asked for that the model takes: the same DP with the TP nearest
    below, else the same TP with another DP, else the nearest GPU count; or how to do without DP."""
    layouts = [
        (d, t)
        for d in range(2, model.num_experts + 1)
        for t in range(1, model.num_experts // d + 1)
        if model.num_experts % (d * t) == 0 and model.num_heads % t == 0 and (gpus is None or d * t <= gpus)
    ]
    if not layouts:
        return "drop --dp-attention and --ep (for copies of the model use --replicas)"
    d, t = min(
        layouts, key=lambda x: (x[0] != dp, x[1] != tp, abs(x[0] * x[1] - dp * tp), x[1] > tp, -x[0] * x[1])
    )
    flags = [f"--dp-attention {d}"] * (d != dp) + [f"--tp {t}"] * (t != tp) + [f"--ep {d * t}"]
    return f"use {' '.join(flags)} (DP {d} x TP {t} = {d * t} GPUs)"


def _check_all2all(backend: str, dp: int) -> None:
    if backend not in ALL2ALL_BACKENDS:
        raise SimserveError(
            f"--all2all-backend {backend!r} is not modelled; use one of {', '.join(ALL2ALL_BACKENDS)}"
        )
    if backend != ALL2ALL_BACKENDS[0] and dp < 2:
        raise SimserveError(
            f"--all2all-backend {backend} exchanges tokens between attention-DP ranks; add "
            f"--dp-attention (and --ep = DP x TP), or drop it"
        )


def _check_experts(
    model: ModelSpec, tp: int, ep: int, skew: float, dp: int = 1, gpus: int | None = None
) -> None:
    """EP groups whole experts inside one stage's TP group: it must divide both the experts and TP. Under
    attention DP the experts span every rank's GPUs instead, as vLLM's --enable-expert-parallel does: EP =
    DP·TP, which must divide the experts and fit in one node of `gpus` GPUs (None: not known here)."""
    if ep < 1:
        raise SimserveError(f"--ep must be at least 1 (got {ep})")
    if dp < 1:
        raise SimserveError(f"--dp-attention must be at least 1 (got {dp})")
    if dp > 1:
        if not model.is_moe:
            raise SimserveError(
                f"--dp-attention {dp} needs a mixture-of-experts model; {model.name} is dense: "
                f"use --replicas {dp} for independent copies"
            )
        wrong = []
        if model.num_experts % (dp * tp):
            wrong.append(f"which does not divide {model.name}'s {model.num_experts} experts")
        if gpus is not None and dp * tp > gpus:
            wrong.append(f"more than the {gpus} GPUs of one node")
        if wrong:
            # NOTE: the advice is a command that runs: it said "use --ep 16", which then failed on the experts
            raise SimserveError(
                f"--dp-attention {dp} with TP {tp} spreads the experts over {dp * tp} GPUs (vLLM's "
                f"--enable-expert-parallel: EP = DP x TP), {' and '.join(wrong)}; "
                f"{_dp_advice(model, dp, tp, gpus)}"
            )
        if ep != dp * tp:
            raise SimserveError(
                f"--dp-attention {dp} with TP {tp} spreads the experts over all {dp * tp} GPUs "
                f"(vLLM's --enable-expert-parallel: EP = DP x TP); use --ep {dp * tp}"
            )
        if skew < 0:
            raise SimserveError(f"--moe-skew must be >= 0 (0: balanced routing), got {skew}")
        return
    if skew < 0:
        raise SimserveError(f"--moe-skew must be >= 0 (0: balanced routing), got {skew}")
    if not model.is_moe:
        if ep > 1:
            raise SimserveError(
                f"--ep {ep} needs a mixture-of-experts model; {model.name} is dense: drop --ep"
            )
        if skew > 0:  # no router to skew: it would change nothing
            raise SimserveError(
                f"--moe-skew {skew:g} needs a mixture-of-experts model; {model.name} is dense: drop it"
            )
        return
    if model.num_experts % ep:
        raise SimserveError(
            f"EP {ep} does not divide {model.name}'s {model.num_experts} experts; use an EP degree that "
            f"divides {model.num_experts}"
        )
    if tp % ep:
        raise SimserveError(
            f"EP {ep} does not divide TP {tp}: simserve places the experts inside one stage's TP group (EP x "
            f"expert-TP = TP); use an EP degree that divides {tp}"
        )
