"""Option values of plain types (str, int, float, bool, Path, list of str) converted without pydantic.

typer 0.29 converts every option value through a pydantic TypeAdapter, and importing pydantic was ~0.05 s of a
warm `simserve run` (a run is to import neither pandas nor pydantic). For these types the conversion is
one Python call whose result pydantic's lax mode gives too: a str as it is, an int from `-?[0-9]+`, a float
from a plain decimal (both parsers round correctly), a path as Path(value) through typer's own
`coerce_cli_path` (its path adapter's checks). Any other value, type or option (a parser, a range, choices, a
file) goes to typer's own conversion, so error messages and everything else behave as before; so does a typer
without these internals (`install` then changes nothing). tests/test_cli_coercion.py compares the two on every
option of every command.
"""

from __future__ import annotations

import math
import re
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union, get_args, get_origin

_INT = re.compile(r"-?[0-9]{1,18}\Z")
_FLOAT = re.compile(r"-?[0-9]{1,30}(\.[0-9]{1,30})?([eE][-+]?[0-9]{1,3})?\Z")
_SLOW = object()  # "not one of the plain cases": typer's own conversion decides


def kind_of(descriptor) -> str | None:
    """Which plain conversion an option's type descriptor takes, or None for typer's own."""
    info = descriptor.parameter_info
    if descriptor.file_annotation is not None or info.parser is not None:
        return None
    if getattr(info, "click_type", None) is not None or descriptor.is_choice:
        return None
    a = descriptor.annotation
    if get_origin(a) in (Union, types.UnionType):  # X | None
        args = [x for x in get_args(a) if x is not type(None)]
        if len(args) != 1:
            return None
        a = args[0]
    if a is bool:
        return "bool"
    if a is str:
        return "str"
    if a in (int, float):
        ranged = info.min is not None or info.max is not None or info.clamp
        return None if ranged else a.__name__
    if isinstance(a, type) and issubclass(a, Path):
        return "path"
    if get_origin(a) is list and get_args(a) == (str,):
        return "strlist"
    return None


def convert(kind: str, value: Any, descriptor, param=None, ctx=None) -> Any:
    """The value pydantic's lax mode would give, or _SLOW when that is not plain."""
    if kind == "str":
        return value if isinstance(value, str) else _SLOW
    if kind == "bool":
        return value if isinstance(value, bool) else _SLOW
    if kind == "int":
        if type(value) is int:
            return value
        return int(value) if isinstance(value, str) and _INT.match(value) else _SLOW
    if kind == "float":
        if type(value) in (float, int):
            return float(value)
        return float(value) if isinstance(value, str) and _FLOAT.match(value) else _SLOW
    if kind == "strlist":
        ok = isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)
        return list(value) if ok else _SLOW
    if kind == "path":
        from typer._param_types import coerce_cli_path

        info = descriptor.parameter_info
        a = descriptor.annotation
        if get_origin(a) in (Union, types.UnionType):
            a = next(x for x in get_args(a) if x is not type(None))
        path_type = info.path_type if info.path_type is not None else a
        if path_type is Path and isinstance(value, str) and value and "\0" not in value:
            value = Path(value)  # what pydantic's Path(value) gives; coerce_cli_path then keeps it as it is
        elif not (isinstance(path_type, type) and isinstance(value, path_type)):
            return _SLOW
        return coerce_cli_path(value, info, path_type=path_type, param=param, ctx=ctx)
    return _SLOW


def _infinity(text: str) -> bool:
    return text.strip().lower().lstrip("+-") in ("inf", "infinity")


def check_finite(value: Any, out: Any, param: Any = None, ctx: Any = None) -> None:
    """Refuse a number that overflowed to infinity while parsing (`--qps 1e400`): only the word `inf` asks for
    an infinite value (where an option takes one, e.g. --qps inf: every request at t = 0)."""
    if isinstance(out, float) and math.isinf(out) and isinstance(value, str) and not _infinity(value):
        try:
            from typer._click.exceptions import BadParameter
        except ImportError:  # a typer that uses click itself
            from click.exceptions import BadParameter
        raise BadParameter(
            f"{value} is beyond the largest number ({sys.float_info.max:.3g}); give a finite value (or inf "
            "where the option takes one)",
            ctx=ctx,
            param=param,
        )


def install() -> bool:
    """Route the plain options of every typer command through `convert`; False when typer's internals
    differ."""
    try:
        from typer import core
        from typer._coercion import RuntimeParam, build_runtime_param
        from typer._param_types import coerce_cli_path  # noqa: F401 (convert's path case needs it)
    except ImportError:
        return False
    base = getattr(core, "_TyperParameter", None)
    original = getattr(base, "get_runtime_param", None)
    if original is None:
        return False
    if getattr(original, "simserve_plain", False):
        return True

    @dataclass(frozen=True)
    class PlainParam(RuntimeParam):
        kind: str = ""
        descriptor: Any = None

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            out = convert(self.kind, value, self.descriptor, param, ctx)
            if out is _SLOW:  # typer's own conversion (imports pydantic): its result and its error message
                out = build_runtime_param(self.descriptor)._coerce_value(value, param=param, ctx=ctx)
            if self.kind == "float":
                check_finite(value, out, param, ctx)
            return out

    def get_runtime_param(self):
        if getattr(self, "_runtime_param", None) is None:
            d = self.type_descriptor
            kind = kind_of(d)
            if kind is not None:
                self._runtime_param = PlainParam(
                    parameter_info=d.parameter_info, annotation=d.annotation, kind=kind, descriptor=d
                )
        return original(self)

    get_runtime_param.simserve_plain = True
    base.get_runtime_param = get_runtime_param
    return True
