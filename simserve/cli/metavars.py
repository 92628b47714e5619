"""Plain metavars in `--help`: `--tp INTEGER`, `list KIND`, and nothing after a flag.

NOTE: typer 0.2x labels every value by its Python annotation (`<bool>` after a flag, `<list[str]>`,
`<str>`) and wraps a required argument in braces (`{kind}`); older releases printed click's words. Setting
each parameter's metavar once here gives click's words on either, without a metavar on every option. The
parameters are read by duck typing: recent typer has its own parameter classes, not click's.
"""

from __future__ import annotations

from typing import Any, get_args, get_origin

# Python annotation or click type name -> click's word for it
_WORDS = {"int": "INTEGER", "integer": "INTEGER", "float": "FLOAT", "str": "TEXT", "text": "TEXT"}


def plain_metavars(command: Any) -> Any:
    """Set a plain metavar on every parameter of `command` and its subcommands that has none."""
    for param in command.params:
        if param.metavar is not None:
            continue
        if param.param_type_name == "argument":
            param.metavar = param.name.upper()
            # typer's own hooks: its usage line shows `{name}` for a required argument, its table the
            # annotation (`<str>`) beside the name; click's words instead
            if hasattr(param, "_usage_display_name"):
                param._usage_display_name = _usage_name(param)
            if hasattr(param, "display_type_rich"):
                param.display_type_rich = _argument_type(param)
        elif getattr(param, "is_flag", False):
            param.metavar = ""  # a flag takes no value
        else:
            param.metavar = _word(param)
    command.get_help_option = _plain_help(command.get_help_option)
    for sub in (getattr(command, "commands", None) or {}).values():
        plain_metavars(sub)
    return command


def _usage_name(param: Any):
    def name() -> str:
        return param.metavar if param.required else f"[{param.metavar}]"

    return name


def _argument_type(param: Any):
    word = _word(param)

    def display_type_rich(ctx: Any) -> str:
        return word

    return display_type_rich


def _plain_help(get_help_option: Any):
    """`--help` is made per call; it is a flag like the others (typer showed `<bool>` after it)."""

    def get_plain_help_option(ctx: Any) -> Any:
        option = get_help_option(ctx)
        if option is not None and option.metavar is None:
            option.metavar = ""
        return option

    return get_plain_help_option


def _word(param: Any) -> str:
    kind = getattr(param, "type", None)  # click's ParamType (typer before it carried its own click)
    if kind is not None:
        name = str(getattr(kind, "name", "text"))
    else:
        annotation = param.type_descriptor.annotation
        if get_origin(annotation) is list:  # a repeatable option: one value per use
            annotation = get_args(annotation)[0]
        name = getattr(annotation, "__name__", str(annotation))
    return _WORDS.get(name.lower(), name.upper())
