"""A name → spec table with case-insensitive aliases, and loading user entries from YAML/TOML."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Generic, TypeVar

from simserve.errors import SimserveError

T = TypeVar("T")


def _key(name: str) -> str:
    # "Mistral-7B", "mistral_7b" and "mistral 7b" are one name.
    return name.strip().lower().replace("_", "-").replace(" ", "-")


class Table(Generic[T]):
    """Specs of one kind, found by name or alias; an unknown name fails listing the known ones."""

    def __init__(self, kind: str, entries: list[T]):
        self.kind = kind
        self._specs: dict[str, T] = {}
        self._index: dict[str, str] = {}
        for spec in entries:
            self.add(spec)

    def add(self, spec: T) -> None:
        name = spec.name  # type: ignore[attr-defined]
        self._specs[name] = spec
        for alias in (name, *getattr(spec, "aliases", ())):
            self._index[_key(alias)] = name

    def names(self) -> list[str]:
        return list(self._specs)

    def __iter__(self):
        return iter(self._specs.values())

    def __contains__(self, name: str) -> bool:
        return _key(name) in self._index

    def get(self, name: str) -> T:
        if isinstance(name, str) and _key(name) in self._index:
            return self._specs[self._index[_key(name)]]
        known = ", ".join(self._specs)
        raise SimserveError(
            f"unknown {self.kind} {name!r}; known {self.kind}s: {known} "
            f"(add your own with a catalog file: see docs/catalog.md)"
        )


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


def build_spec(cls: type[T], entry: dict[str, Any], where: str) -> T:
    """Make a frozen spec from a dict, naming missing or unknown fields in the error."""
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(entry) - set(fields))
    if unknown:
        raise SimserveError(f"{where}: unknown field(s) {', '.join(unknown)}; allowed: {', '.join(fields)}")
    required = [
        n
        for n, f in fields.items()
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING  # type: ignore[misc]
    ]
    missing = [n for n in required if n not in entry]
    if missing:
        hint = getattr(cls, "MISSING_HINT", "")  # what needs the fields, and where they are explained
        raise SimserveError(f"{where}: missing field(s) {', '.join(missing)}{hint}")
    values = dict(entry)
    if "aliases" in values:
        values["aliases"] = tuple(values["aliases"])
    try:
        return cls(**values)
    except (TypeError, ValueError) as exc:
        raise SimserveError(f"{where}: {exc}") from None


def load_catalog_file(path: str | os.PathLike) -> list[str]:
    """Add the models, gpus, nodes, networks and prices of a YAML/TOML file to the tables; return the names added."""
    from simserve.catalog.hardware import GPU, NETWORKS, NODES, GPUSpec, NetworkSpec, NodeSpec
    from simserve.catalog.models import MODELS, ModelSpec
    from simserve.catalog.prices import PRICES, PriceSpec, add_price

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
