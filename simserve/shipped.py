"""Where simserve's own files are: the package directory, and the shipped profiles and traces.

NOTE: found through `importlib.resources` on a subpackage, never `simserve.__file__`: Python started in a
folder that holds a `simserve` checkout (e.g. the parent of a clone, `python -c 'import simserve'`) resolves
`simserve` as a namespace package with no `__file__`, while its subpackages still load from the install.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path


def package_dir() -> Path:
    """The `simserve` package's directory (simserve/catalog/'s parent)."""
    return Path(str(files("simserve.catalog"))).resolve().parent


def shipped_dir(name: str) -> Path:
    """`profiles` or `traces`: the repository's folder in a clone or an editable install, which
    `simserve/_shipped/NAME` links to; in an installed wheel, the copy that link put there."""
    inside = package_dir() / "_shipped" / name
    # resolved, so a clone's paths (in messages, in comparisons) are the repository's own folders
    return inside.resolve() if inside.is_dir() else package_dir().parent / name


def version() -> str:
    """simserve's version; `simserve.__version__` is absent when `simserve` resolved as a namespace
    package."""
    import simserve

    if getattr(simserve, "__version__", None):
        return simserve.__version__
    from importlib import metadata  # NOTE: here, not at the top: its import costs a run ~10 ms of CPU

    return metadata.version("simserve")
