"""A name → spec table with case-insensitive aliases, and a spec built from a user's entry
(catalog/files.py)."""

from __future__ import annotations

import dataclasses
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
