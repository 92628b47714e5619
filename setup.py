"""Build the compiled simulation core (simserve/sim/core/, Cython pure-Python mode: one extension per module)
and the table text formatter (simserve/sim/_textrows.pyx) when a C compiler is there; install without them
when not (simserve then runs the SimPy reference model and says so once, and formats its tables in Python).

Everything else about the package is in pyproject.toml.
"""

from __future__ import annotations

import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """build_ext that warns instead of failing: the core is an accelerator, never a requirement."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if (
            self.parallel is None
        ):  # the core is 15 extensions: compile them side by side (`-j N` still chooses)
            self.parallel = os.cpu_count() or 1

    def run(self) -> None:
        try:
            super().run()
        except Exception as e:  # noqa: BLE001 - no compiler, no Python headers, a broken toolchain
            self._skip(e)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as e:  # noqa: BLE001
            self._skip(e, ext.name)

    def _skip(self, e: Exception, name: str = "") -> None:
        what = {
            "simserve.sim._textrows": (
                "the compiled table formatter (tables are then written by Python, same bytes)"
            ),
        }.get(
            name,
            f"the compiled simulation core ({name or 'simserve.sim.core'}: simserve will run the slower "
            "SimPy reference model)",
        )
        print(f"simserve: not building {what}: {type(e).__name__}: {e}", file=sys.stderr)


# simserve/sim/core/'s compiled modules, base first (each cimports the ones above it; __init__.py and
# consts.py stay Python): docs/architecture.md, "The compiled core".
CORE_MODULES = (
    "timer",
    "rep",
    "events",
    "blocks",
    "routing",
    "transitions",
    "paper_policies",
    "vllm_v1",
    "sglang",
    "scheduler",
    "stretch",
    "lockstep",
    "driver",
    "disagg",
)
SHARED = "simserve.sim.core._cyutility"  # Cython's utility code shared by the core's modules


def extensions() -> list[Extension]:
    try:
        from Cython.Build import cythonize
    except ImportError:  # Cython is a build requirement; without it (e.g. a bare `setup.py`), skip the core
        return []
    directives = {
        "language_level": 3,
        "boundscheck": False,
        "wraparound": False,
        "initializedcheck": False,
        "cdivision": False,  # Python's // and % on negative numbers (the block counts use -(-a // b))
    }
    # NOTE: results must match the reference to the last bit: no fused multiply-add, no fast-math, in every
    # module.
    flags = ["-O2", "-ffp-contract=off", "-fno-fast-math"]
    core = [
        Extension(f"simserve.sim.core.{m}", [f"simserve/sim/core/{m}.py"], extra_compile_args=flags)
        for m in CORE_MODULES
    ]
    # Cython's own helpers (memoryviews, type imports) once for all the core's modules, not once in each: the
    # modules' C halves (21.9 -> 12.2 MB) and so does the CPU time to compile them (docs/simulator.md, "The
    # core split by concern")
    core.append(Extension(SHARED, sources=[], extra_compile_args=flags))
    # The text of the output tables and trace.json (writers.py and perfetto.py fall back to Python without
    # it).
    text = Extension("simserve.sim._textrows", ["simserve/sim/_textrows.pyx"], extra_compile_args=["-O2"])
    # The routers (plain Python typed by routers.pxd): the reference calls them, the core without a Python
    # call. NOTE: with their own copy of Cython's helpers: the shared one lives in simserve.sim.core, whose
    # __init__ imports the core's modules, which cimport the routers (a circular import at start-up).
    router = Extension("simserve.sim.routers", ["simserve/sim/routers.py"], extra_compile_args=flags)
    # The prefix cache and its CPU tier (plain Python typed by their .pxd), likewise: the reference calls
    # them, the core (and the cache the tier) without a Python call.
    tiers = [
        Extension(f"simserve.sim.{m}", [f"simserve/sim/{m}.py"], extra_compile_args=flags)
        for m in ("kv_offload", "prefix_cache")
    ]
    return [
        *cythonize(core, compiler_directives=directives, shared_utility_qualified_name=SHARED, quiet=True),
        *cythonize([text, router], compiler_directives=directives, quiet=True),
        # NOTE: their annotations (`rid: int`, for readers and the reference) are not C types: the .pxd types
        # them
        *cythonize(tiers, compiler_directives={**directives, "annotation_typing": False}, quiet=True),
    ]


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
