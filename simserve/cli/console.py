"""Printing for the commands: a printed string is text, never markup.

NOTE: rich reads `[word]` in a printed string as a style tag and drops it, and `:name:` as an emoji: "measured
tables need pip install -e '.[measured]'" printed as "... pip install -e '.'", a trace `fixed:100:10` as
"fixed💯10", a path or a model folder with brackets lost them. Every console the commands print
through reads neither, tables' titles and cells included; the few styled words (a yellow "note:", a red
"OVERLOADED") are rich Text with a style, built by `styled` and `note`.
"""

from __future__ import annotations

from typing import Any


def console(**options: Any):
    """A rich Console that prints text as it is (no markup, no emoji codes); `options` as rich's Console."""
    from rich.console import Console

    return Console(markup=False, emoji=False, **options)


def styled(*parts: str | tuple[str, str]):
    """One line of text from plain strings and (string, style) pairs, e.g. ("OVERLOADED", "red")."""
    from rich.text import Text

    return Text.assemble(*parts)


def note(text: str):
    """`note: <text>`, the word in yellow."""
    return styled(("note:", "yellow"), " ", text)


def table_console(*tables: Any):
    """A console for commands that print wide tables (`sweep`, `plan`): on a terminal, its width; piped into a
    file, a CI log or another program (no terminal to size to, where rich would squeeze every cell to 80
    columns with "…"), as wide as the widest table, so every cell prints whole. Long lines never wrap."""
    import sys

    if sys.stdout.isatty():
        return console(soft_wrap=True)
    widest = max((console(width=10_000).measure(t).maximum for t in tables), default=80)
    return console(soft_wrap=True, width=max(80, widest))
