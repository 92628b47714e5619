"""The execution-time predictor: fit per-op models on a profile, compile them for a deployment, time batches.

    predictor = fit("profiles/a100-80gb/mistral-7b")      # scikit-learn, cached by the profile's content hash
    timer = predictor.compile(Deployment.create("mistral-7b", "a100"))
    seconds = timer([(512, 0)], decode_kv=[1200, 845, 3000])

or in one step: `load_timer(dep)`. See docs/predictor.md.
"""

from simserve.predictor.fit import ModelKey, Predictor, fit, print_report
from simserve.predictor.load import default_profiles_root, load_timer
from simserve.predictor.overhead import CpuOverhead
from simserve.predictor.timer import COMPONENTS, BatchTimer

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
