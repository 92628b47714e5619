"""Catalog files: a user's models, GPUs, nodes, networks and prices from YAML/TOML, added to the tables
(`--catalog FILE`, or the files named in $SIMSERVE_CATALOG)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from simserve.catalog.hardware import GPU, NETWORKS, NODES, GPUSpec, NetworkSpec, NodeSpec
from simserve.catalog.models import MODELS, ModelSpec
from simserve.catalog.prices import PRICES, PriceSpec, add_price
from simserve.catalog.table import build_spec
from simserve.errors import SimserveError


def _read_mapping(path: Path) -> dict[str, Any]:
    try:
        if path.suffix.lower() == ".toml":
            import tomllib

            return tomllib.loads(path.read_text())
        import yaml

        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise SimserveError(
            f"catalog file {path} does not exist; pass an existing .yaml or .toml file"
        ) from None
    except Exception as exc:  # yaml/toml syntax errors carry useful positions
        raise SimserveError(f"catalog file {path} could not be parsed: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise SimserveError(f"catalog file {path} must hold a mapping with keys like 'models:' or 'gpus:'")
    return data


def load_catalog_file(path: str | os.PathLike) -> list[str]:
    """Add the models, gpus, nodes, networks and prices of a YAML/TOML file to the tables; return the names
    added."""
    path = Path(path)
    data = _read_mapping(path)
    kinds = {
        "models": (MODELS, ModelSpec),
        "gpus": (GPU, GPUSpec),
        "nodes": (NODES, NodeSpec),
        "networks": (NETWORKS, NetworkSpec),
        "prices": (PRICES, PriceSpec),  # after gpus: a price may name a GPU the same file adds
    }
    unknown = sorted(set(data) - set(kinds))
    if unknown:
        raise SimserveError(
            f"catalog file {path}: unknown section(s) {', '.join(unknown)}; use {', '.join(kinds)}"
        )
    added = []
    for section in [k for k in kinds if k in data]:
        entries = data[section]
        table, cls = kinds[section]
        if not isinstance(entries, list):
            raise SimserveError(f"catalog file {path}: '{section}' must be a list of entries")
        for i, entry in enumerate(entries):
            where = f"catalog file {path}, {section}[{i}]"
            spec = build_spec(cls, entry, where)
            if section == "prices":
                try:
                    spec = add_price(spec)
                except SimserveError as exc:
                    raise SimserveError(f"{where}: {exc}") from None
            else:
                table.add(spec)
            added.append(spec.name)
    return added


def load_env_catalogs() -> None:
    """Load every file named in SIMSERVE_CATALOG (separated like PATH)."""
    for item in os.environ.get("SIMSERVE_CATALOG", "").split(os.pathsep):
        if item.strip():
            load_catalog_file(item.strip())
