"""The execution-time predictor: fit per-op models on a profile, compile them for a deployment, time batches.

    predictor = fit("profiles/a100-80gb/mistral-7b")      # scikit-learn, cached by the profile's content hash
    timer = predictor.compile(Deployment.create("mistral-7b", "a100"))
    seconds = timer([(512, 0)], decode_kv=[1200, 845, 3000])

or in one step: `load_timer(dep)`. See docs/predictor.md.
"""

import sys
from importlib import import_module
from types import ModuleType

# Names resolve on first use (PEP 562): `simserve run` with a warm cache needs only load_timer, and importing
# fit here would pull in scikit-learn, pandas and scipy (about 3 s) for a timer read from a cache file.
_HOME = {
    "COMPONENTS": "timer",
    "BatchTimer": "timer",
    "CpuOverhead": "overhead",
    "ModelKey": "fit",
    "Predictor": "fit",
    "default_profiles_root": "load",
    "fit": "fit",
    "load_timer": "load",
    "print_report": "fit",
}

__all__ = [
    "COMPONENTS",
    "BatchTimer",
    "CpuOverhead",
    "ModelKey",
    "Predictor",
    "default_profiles_root",
    "fit",
    "load_timer",
    "print_report",
]


class _Package(ModuleType):
    # Importing the submodule simserve.predictor.fit binds the package attribute `fit` to that module; the
    # package's `fit` has always been the function (as when __init__ imported it eagerly), so keep it so.
    def __setattr__(self, name: str, value) -> None:
        if name == "fit" and isinstance(value, ModuleType):
            value = value.fit
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str):
    if name not in _HOME:
        raise AttributeError(f"module 'simserve.predictor' has no attribute {name!r}")
    return getattr(import_module(f"simserve.predictor.{_HOME[name]}"), name)
