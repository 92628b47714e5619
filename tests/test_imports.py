"""The module map's import rules (docs/architecture.md, "Layers and imports"): no import runs from a lower
layer to a higher one, circles only where docs/architecture.md lists and justifies them, and no benchmark
script imports another. The graph comes from tools/imports.py (ast, imports inside functions included)."""

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _tool():
    spec = importlib.util.spec_from_file_location("imports_tool", ROOT / "tools" / "imports.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _allowed_circles() -> set[tuple[str, ...]]:
    """The circles docs/architecture.md allows: lines `- circle: `a` ↔ `b`: why` in its imports section."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    found = set()
    for line in text.splitlines():
        if line.startswith("- circle: "):
            head, _, why = line.removeprefix("- circle: ").partition(": ")
            assert why.strip(), f"docs/architecture.md: circle {head} has no one-line justification"
            found.add(tuple(sorted(re.findall(r"`([^`]+)`", head))))
    return found


def test_every_module_is_in_a_layer():
    tool = _tool()
    for name in tool.graph():
        tool.layer_of(name)  # KeyError naming the module otherwise


def test_no_import_runs_back_up():
    tool = _tool()
    assert tool.upward(tool.graph()) == []


def test_circles_are_only_the_listed_ones():
    tool = _tool()
    assert set(tool.circles(tool.graph())) == _allowed_circles()


def test_no_benchmark_script_imports_another():
    """benchmarks/: a script (it runs `if __name__ == "__main__"`) imports common.py and library modules,
    never another script (one that needs another's output runs it: common.run_script)."""
    tool = _tool()
    runnable = tool.scripts()
    assert {"vs_vidur", "validate_kernels", "l2_in_tables"} <= runnable and "common" not in runnable
    bad = {name: sorted(found & runnable) for name, found in tool.script_graph().items() if found & runnable}
    assert bad == {}


def test_the_graph_sees_deferred_relative_and_from_imports(tmp_path):
    """The checks above can fail: a toy package with one import of each kind, an upward one and a circle; an
    annotation-only import (under `if TYPE_CHECKING:`) is not counted."""
    tool = _tool()
    pkg = tmp_path / "simserve"
    for d in ("", "sim", "tune"):
        (pkg / d).mkdir(exist_ok=True)
        (pkg / d / "__init__.py").write_text("")
    (pkg / "errors.py").write_text("")
    (pkg / "sim" / "a.py").write_text("def f():\n    from simserve.tune import b\n")  # deferred, upward
    (pkg / "sim" / "c.py").write_text("from . import a\nimport simserve.errors\n")  # relative
    (pkg / "tune" / "b.py").write_text("from simserve.sim.a import f\n")
    (pkg / "sim" / "d.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from simserve.tune import b\n"
    )
    g = tool.graph(pkg)
    assert g["sim/a"] == {"tune/b"} and g["sim/c"] == {"sim/a", "errors"} and g["tune/b"] == {"sim/a"}
    assert g["sim/d"] == set()  # annotation-only: runs nothing
    assert tool.upward(g) == [("sim/a", "tune/b")]
    assert tool.circles(g) == [("sim/a", "tune/b")]
