"""Regenerate the module map in docs/architecture.md from each module's first docstring paragraph.

python tools/module_map.py          # rewrite the table in place
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("catalog", "profiling", "predictor", "workload", "sim", "tune", "plan", "cli")
# the top-level modules in reading order; any other top-level module follows in name order (none left out)
TOP_FIRST = (
    "deployment.py",
    "memory.py",
    "ops.py",
    "errors.py",
    "io.py",
    "numerics.py",
    "shipped.py",
    "resolve.py",
)


def top_modules() -> list[str]:
    others = sorted(
        f.name for f in (ROOT / "simserve").glob("*.py") if f.name not in ("__init__.py", "__main__.py")
    )
    return [*TOP_FIRST, *(name for name in others if name not in TOP_FIRST)]


def packages() -> list[str]:
    """Every package folder: the known ones in reading order, then any new one (a map that omits one is
    stale)."""
    found = sorted(d.name for d in (ROOT / "simserve").iterdir() if (d / "__init__.py").is_file())
    return [*PACKAGES, *(name for name in found if name not in PACKAGES)]


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
        *(f"| `simserve/{name}` | {_first_paragraph(src / name)} |" for name in top_modules()),
    ]
    for pkg in packages():
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
