"""A deployment: a model on GPUs with tensor (TP) and pipeline (PP) parallelism, in a node, maybe over a network."""

from __future__ import annotations

from dataclasses import dataclass

from simserve.catalog import GPU, MODELS, NETWORKS, NODES, GPUSpec, ModelSpec, NetworkSpec, NodeSpec
from simserve.catalog.hardware import DEFAULT_NODE
from simserve.errors import SimserveError

BLOCK_SIZE = 16  # tokens per KV-cache block (vLLM and Sarathi-Serve)


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
    ) -> Deployment:
        """Resolve names and check the parallelism; raises SimserveError with the fix on bad input."""
        model = MODELS.get(model) if isinstance(model, str) else model
        gpu = GPU.get(gpu) if isinstance(gpu, str) else gpu
        if node is None:
            node = DEFAULT_NODE.get(gpu.name)
        node = NODES.get(node) if isinstance(node, str) else node
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
            raise SimserveError(f"memory utilization must be in (0, 1], got {memory_utilization}")
        if max_model_len < 1:
            raise SimserveError(f"max model length must be at least 1, got {max_model_len}")
        dep = cls(model, gpu, tp, pp, node, network, memory_utilization, max_model_len)
        if node is not None and tp > node.gpus_per_node:
            raise SimserveError(
                f"TP {tp} spans more GPUs than one {node.name} node holds ({node.gpus_per_node}); "
                f"tensor parallelism across nodes is not modeled: lower --tp and raise --pp"
            )
        if dep.num_nodes > 1 and network is None:
            dep = cls(
                model, gpu, tp, pp, node, NETWORKS.get("ethernet-100g"), memory_utilization, max_model_len
            )
        return dep

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
        """Where TP all-reduces travel: 'nvlink' inside an NVLink group, 'pcie' when the group is too small."""
        if self.node is None or self.tp <= self.node.nvlink_group:
            return "nvlink"
        return "pcie"

    def describe(self) -> str:
        where = f" on {self.node.name}" if self.node else ""
        net = f" over {self.network.name}" if self.num_nodes > 1 and self.network else ""
        return f"{self.model.name} on {self.num_gpus}×{self.gpu.name} (TP{self.tp}, PP{self.pp}){where}{net}"
