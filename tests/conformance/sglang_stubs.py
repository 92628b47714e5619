"""Import-time stand-ins for what SGLang's scheduling modules import but a CPU-only check never runs.

`sglang.srt.managers.schedule_policy`, `schedule_batch` and `scheduler` import, on the way, GPU kernels
(sgl_kernel, flashinfer, deep_gemm, tvm_ffi), the HTTP server (fastapi, uvloop, aiohttp), grammar backends,
multimodal helpers (torchvision's compiled ops do not load beside the CPU torch) and tools a GPU server uses.
None of them is called by the prefill admission the conformance test drives (sglang_driver.py), so each is
replaced by a module whose every attribute is an inert object: callable (a decorator returns what it
decorates), subscriptable, false, and acceptable to pydantic as "any". Installed as the first meta-path
finder, before any sglang import.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

STUBBED = {
    "tvm_ffi",
    "torchvision",
    "IPython",
    "sgl_kernel",
    "flashinfer",
    "aiohttp",
    "uvloop",
    "fastapi",
    "setproctitle",
    "outlines",
    "xgrammar",
    "llguidance",
    "partial_json_parser",
    "compressed_tensors",
    "decord",
    "soundfile",
    "interegular",
    "jsonschema",
    "prometheus_client",
    "einops",
    "cuda",
    "blobfile",
    "modelscope",
    "pynvml",
    "nvidia",
    "deep_gemm",
    "pandas",
    "scipy",
    "hf_transfer",
    "datasets",
    "torchao",
    "sentencepiece",
    "tiktoken",
    "timm",
    "av",
    "ray",
    "cv2",
    "uvicorn",
}


class _Inert:
    def __call__(self, *args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]  # used as a decorator: leave the function as it is
        return INERT

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return INERT

    def __getitem__(self, key):
        return INERT

    def __iter__(self):
        return iter(())

    def __mro_entries__(self, bases):
        return (object,)  # a class deriving from a stubbed one derives from object

    def __bool__(self):
        return False

    def __or__(self, other):
        return INERT

    __ror__ = __or__

    @classmethod
    def __get_pydantic_core_schema__(cls, source, handler):
        from pydantic_core import core_schema

        return core_schema.any_schema()


INERT = _Inert()


class _InertModule(types.ModuleType):
    __path__: list = []

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return INERT


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in STUBBED:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _InertModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


sys.meta_path.insert(0, _Finder())
