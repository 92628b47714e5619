"""simserve's import graph from the source (``ast``, nothing imported): layers, upward imports and circles.

    python tools/imports.py            # the layers, every upward import and every circle, with counts

Every ``import``/``from … import`` counts, those inside functions included (a deferred import is still a
dependency); only those under ``if TYPE_CHECKING:`` do not (annotations: they run nothing). A module is named
by its path under ``simserve/`` without ``.py`` (``sim/scenario``, ``deployment``); ``benchmarks/X`` are the
scripts. tests/test_imports.py holds the rules this reports on.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "simserve"

# The layers, lowest first: a module may import its own layer and the ones below it, never one above.
# A package name stands for every module in it; a top-level module is named without ".py".
LAYERS: tuple[tuple[str, ...], ...] = (
    ("__init__", "errors", "io", "numerics", "shipped", "cachedir", "heap", "precision"),
    ("catalog",),
    ("deployment", "ops", "memory", "vllm_flags", "vllm_loader", "vllm_worker", "speculative"),
    ("profiling",),
    ("predictor",),
    ("workload",),
    ("sim",),
    ("resolve",),
    ("tune",),
    ("plan",),
    ("cli", "__main__"),
)


def modules(root: Path = SRC) -> dict[str, Path]:
    """Every module of the package: name (``sim/scenario``, ``cli/__init__``) → file."""
    return {str(p.relative_to(root).with_suffix("")): p for p in sorted(root.rglob("*.py"))}


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    """The module a dotted ``simserve.x.y`` names: itself, or its package's ``__init__``; None if outside."""
    parts = name.split(".")
    if parts[0] != "simserve":
        return None
    path = "/".join(parts[1:])
    if path in known:
        return path
    if f"{path}/__init__".strip("/") in known:
        return f"{path}/__init__".strip("/")
    return None


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node but those under `if TYPE_CHECKING:`: an annotation-only import runs nothing at import
    time."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for child in node.body for n in ast.walk(child))
    return [n for n in ast.walk(tree) if id(n) not in skip]


def imports_of(path: Path, name: str, known: dict[str, Path]) -> set[str]:
    """The simserve modules one file imports (anywhere in it, functions included; not annotation-only
    ones)."""
    package = name.split("/")[:-1]
    found: set[str] = set()
    for node in _runtime_nodes(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ["simserve", *package[: len(package) - node.level + 1]]
                mod = ".".join([*base, *([node.module] if node.module else [])])
            else:
                mod = node.module or ""
            # `from simserve.sim import scenario` imports the module sim/scenario when there is one
            targets = [f"{mod}.{a.name}" if _resolve(f"{mod}.{a.name}", known) else mod for a in node.names]
        else:
            continue
        for t in targets:
            r = _resolve(t, known)
            if r is not None and r != name:
                found.add(r)
    return found


def graph(root: Path = SRC) -> dict[str, set[str]]:
    """Module → the simserve modules it imports."""
    known = modules(root)
    return {name: imports_of(path, name, known) for name, path in known.items()}


def layer_of(module: str) -> int:
    head = module.split("/")[0]
    for i, layer in enumerate(LAYERS):
        if head in layer:
            return i
    raise KeyError(f"{module}: in no layer of tools/imports.py LAYERS (add it to the layer it belongs to)")


def upward(g: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Every import from a lower layer to a higher one, as (importer, imported)."""
    return sorted((a, b) for a, bs in g.items() for b in bs if layer_of(b) > layer_of(a))


def circles(g: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """The strongly connected components of more than one module (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[tuple[str, ...]] = []
    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(tuple(sorted(comp)))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return sorted(out)


def script_graph(folder: Path = ROOT / "benchmarks") -> dict[str, set[str]]:
    """Each script in a folder → the other scripts of that folder it imports (``import X``, ``from X import``,
    ``from benchmarks.X import``, ``from benchmarks import X``)."""
    names = {p.stem for p in folder.glob("*.py")}
    out: dict[str, set[str]] = {}
    for p in sorted(folder.glob("*.py")):
        found: set[str] = set()
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            mods: Iterable[str] = ()
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                m = node.module or ""
                mods = [m, *(f"{m}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.ImportFrom):
                mods = [node.module or "", *(a.name for a in node.names)]
            for m in mods:
                leaf = m.removeprefix("benchmarks.")
                if leaf in names and leaf != p.stem and (m == leaf or m.startswith("benchmarks.")):
                    found.add(leaf)
        out[p.stem] = found
    return out


def scripts(folder: Path = ROOT / "benchmarks") -> set[str]:
    """The files of a folder that run as scripts (they test `__name__ == "__main__"`); the others are
    libraries."""
    out = set()
    for p in folder.glob("*.py"):
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if (
                isinstance(node, ast.Compare)
                and "__main__" in ast.unparse(node)
                and "__name__" in ast.unparse(node)
            ):
                out.add(p.stem)
                break
    return out


def main() -> None:
    g = graph()
    up = upward(g)
    print(f"{len(g)} modules, {sum(map(len, g.values()))} imports")
    print(f"upward imports: {len(up)}")
    for a, b in up:
        print(f"  {a} -> {b}")
    cs = circles(g)
    print(f"circles: {len(cs)} ({sum(map(len, cs))} modules)")
    for c in cs:
        print("  " + " <-> ".join(c))
    sg, runnable = script_graph(), scripts()
    pairs = sorted((a, b) for a, bs in sg.items() for b in bs)
    print(
        f"benchmarks/: {len(runnable)} scripts, {len(sg) - len(runnable)} library modules, {len(pairs)} "
        "imports"
    )
    bad = [(a, b) for a, b in pairs if b in runnable]
    print(f"imports of a script: {len(bad)}")
    for a, b in bad:
        print(f"  benchmarks/{a} -> benchmarks/{b}")
    bc = circles(sg)
    print(f"benchmark circles: {len(bc)}")
    for c in bc:
        print("  " + " <-> ".join(c))


if __name__ == "__main__":
    main()
