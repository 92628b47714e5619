"""Regenerate the module map in docs/architecture.md from each module's first docstring paragraph.

    python tools/module_map.py          # rewrite the table in place
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("catalog", "profiling", "predictor", "workload", "sim", "tune", "plan", "cli")
TOP = ("deployment.py", "memory.py", "ops.py", "errors.py", "io.py", "numerics.py", "shipped.py")
DOC = ROOT / "docs" / "architecture.md"


def _first_paragraph(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return " ".join(doc.split("\n\n")[0].split())


def module_map() -> str:
    src = ROOT / "simserve"
    lines = [
        "## Module map",
        "",
        "One folder per concern. Each entry is the module's own first docstring paragraph "
        "(`python tools/module_map.py` regenerates this section; a test checks it is current).",
        "",
        "| file | what it holds |",
        "|---|---|",
        *(f"| `simserve/{name}` | {_first_paragraph(src / name)} |" for name in TOP),
    ]
    for pkg in PACKAGES:
        lines += ["", f"### `simserve/{pkg}/`", "", "| file | what it holds |", "|---|---|"]
        for f in sorted((src / pkg).glob("*.py")):
            if f.name != "__init__.py" or pkg == "cli":
                lines.append(f"| `{f.name}` | {_first_paragraph(f)} |")
    return "\n".join(lines) + "\n\n"


def render(text: str) -> str:
    start, end = text.index("## Module map"), text.index("## The path of a request")
    return text[:start] + module_map() + text[end:]


if __name__ == "__main__":
    DOC.write_text(render(DOC.read_text()))
