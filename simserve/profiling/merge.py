"""Adding TP degrees to an existing profile: `simserve profile --tp 8` keeps the TP 1, 2, 4 rows already
there.

Rows are only merged between runs that measure the same thing the same way (same backend, same grid, same
analytic constants); a profile made another way is replaced only with --force, never silently mixed.
"""

from __future__ import annotations

import pandas as pd

from simserve.errors import SimserveError
from simserve.profiling.schema import Profile

# The deployment fields that may differ between runs being merged: they say which rows a run adds.
PER_RUN = {"tp", "pp", "node", "network"}
# Rows a new run replaces: those with the same key (a re-profiled TP degree, a re-timed collective).
KEYS = {
    "linear": ["tp"],
    "elementwise": ["tp"],
    "attention": ["tp"],
    "collectives": ["op", "link", "num_workers"],
}


def _recipe(provenance: dict) -> dict:
    dep = {k: v for k, v in provenance.get("deployment", {}).items() if k not in PER_RUN}
    # a measured profile's rows mix only with rows from the same package release, GPU tables, engine release,
    # dtype
    source = {
        k: v for k, v in (provenance.get("measured") or {}).items() if k not in ("attribution", "license")
    }
    return {
        "backend": provenance.get("backend"),
        "deployment": dep,
        "constants": provenance.get("constants"),
        **({"measured": source} if source else {}),
    }


def merge_profile(old: Profile, tables: dict[str, pd.DataFrame], provenance: dict) -> tuple[dict, dict]:
    """The old profile's rows that the new run does not replace, plus the new rows; and merged provenance."""
    if _recipe(old.provenance) != _recipe(provenance):
        raise SimserveError(
            f"{old.path} was made differently ({old.provenance.get('backend')}, "
            f"`{old.provenance.get('command', '?')}`), so its rows cannot be mixed with this run's; "
            f"write elsewhere with --out, or pass --force to replace it"
        )
    merged = {}
    for name, keys in KEYS.items():
        new, prev = tables[name], getattr(old, name)
        replaced = prev.set_index(keys).index.isin(new.set_index(keys).index)
        both = pd.concat([prev[~replaced], new], ignore_index=True)
        merged[name] = both.sort_values(list(both.columns[: len(keys) + 2]), kind="stable", ignore_index=True)
    prov = dict(provenance)
    tps = sorted(set(old.provenance["deployment"]["tp"]) | set(provenance["deployment"]["tp"]))
    prov["deployment"] = {**provenance["deployment"], "tp": tps}
    earlier = old.provenance.get("earlier_commands", []) + [old.provenance.get("command")]
    prov["earlier_commands"] = [c for c in earlier if c]
    return merged, prov
