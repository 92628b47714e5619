"""Specs as data: models, GPUs, nodes and networks resolve from plain tables with `from_name`.

The tables live in `models.py` and `hardware.py`; a user adds entries from a YAML or TOML file with
`load_catalog_file` (or the `SIMSERVE_CATALOG` environment variable) without editing code.
"""

from simserve.catalog.files import load_catalog_file
from simserve.catalog.hardware import GPU, NETWORKS, NODES, GPUSpec, NetworkSpec, NodeSpec
from simserve.catalog.models import MODELS, ModelSpec

__all__ = [
    "GPU",
    "GPUSpec",
    "MODELS",
    "ModelSpec",
    "NETWORKS",
    "NODES",
    "NetworkSpec",
    "NodeSpec",
    "load_catalog_file",
]
