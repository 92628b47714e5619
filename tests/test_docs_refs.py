"""The docs' references to simserve's own code resolve at HEAD (issue 34 item 7).

Checked in docs/*.md and README.md, in backticks (and, for commands, in fenced blocks):
  - a cited test, `tests/test_x.py::test_y` (or a parametrize id of that file): the test exists;
  - a path into simserve's own tree (`simserve/…`, `tests/…`, `tools/…`, `benchmarks/…`, `docs/…`, or one
    relative to the package: `sim/…`, `predictor/…`, …): the file or folder exists;
  - a dotted name whose head is one of simserve's modules or classes (`vllm_v1.vllm_v1_batch`,
    `Core._decode_stretch`, `simserve.predictor.load_timer`): the name is defined there;
  - a `simserve SUBCOMMAND --flag …` command: the subcommand takes every flag;
  - a `$SIMSERVE_…` variable: the code reads it.
A path or name of vLLM's, SGLang's or another project's own source is not simserve's: one whose head is not
simserve's is skipped; the few that collide with simserve's names are listed in EXTERNAL with the reason.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
SPAN = re.compile(r"`([^`\n]+)`")
OWN_ROOTS = ("simserve/", "tests/", "tools/", "benchmarks/", "docs/")
PACKAGES = ("sim/", "predictor/", "profiling/", "plan/", "tune/", "cli/", "catalog/", "workload/")

# (page, reference): named in the docs but not simserve's code at HEAD, on purpose
EXTERNAL = {
    ("engines.md", "benchmarks/multi_turn/benchmark_serving_multi_turn.py"): "vLLM's multi-turn client",
    ("workloads.md", "benchmarks/multi_turn/benchmark_serving_multi_turn.py"): "vLLM's multi-turn client",
    ("disaggregation.md", "benchmarks/disagg_benchmarks/disagg_prefill_proxy_server.py"): "vLLM's proxy",
    ("disaggregation.md", "tests/v1/kv_connector/nixl_integration/toy_proxy_server.py"): "vLLM's test proxy",
    ("simulator.md", "sim/core.py"): "history: the module that became the package sim/core/",
    **{
        ("engines.md", f): "vLLM's source"
        for f in ("block_pool.py", "kv_cache_utils.py", "single_type_kv_cache_manager.py")
    },
    **{
        ("engines.md", f): "SGLang's source"
        for f in (
            "schedule_policy.py",
            "schedule_batch.py",
            "cuda_graph_hook.py",
            "prefill_budget.py",
            "unified_tree_core.py",
        )
    },
    **{
        ("traffic.md", f): "Dynamo's planner source"
        for f in ("state_machine.py", "throughput_scaling.py", "load_scaling.py")
    },
    ("kernel-validation.md", "collect_attn.py"): "aiconfigurator's collector",
    ("kernel-validation.md", "mlp_wrapper.py"): "Vidur's profiler",
    ("kernel-validation.md", "mlp_impl.py"): "Vidur's profiler",
    ("vs-vidur.md", "mlp_impl.py"): "Vidur's profiler",
    **{
        ("simulator.md", f): "history: the SimPy fast paths deleted in issue 22, the core before its split"
        for f in ("fastpath.py", "quiet_stretch.py", "prefill_stretch.py", "pipeline_stretch.py", "core.py")
    },
    ("engines.md", "sglang.bench_serving"): "SGLang's benchmark client module",
    ("simulator.md", "core.c"): "Cython's generated C file",
    ("simulator.md", "iterations.parquet"): "an output file",
    ("step-anatomy.md", "step_parts.prefill.all"): "a summary.json key",
    ("profiling.md", "measured.package"): "a provenance.json key",
    ("profiling.md", "measured.gemm_l2_floor"): "a provenance.json key",
}


def _spans() -> list[tuple[str, int, str]]:
    out = []
    for page in PAGES:
        for n, line in enumerate(page.read_text().splitlines(), 1):
            out += [(page.name, n, s.strip()) for s in SPAN.findall(line)]
    return out


def _external(page: str, ref: str) -> bool:
    return (page, ref) in EXTERNAL


# ---- simserve's definitions, from the source (no import)


def _names(body: list[ast.stmt]) -> set[str]:
    names = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


@functools.cache
def _index() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Module path -> its top-level names; class name -> its attributes, inherited ones included."""
    modules: dict[str, set[str]] = {}
    own: dict[str, set[str]] = {}
    bases: dict[str, set[str]] = {}
    for f in (ROOT / "simserve").rglob("*.py"):
        tree = ast.parse(f.read_text())
        rel = str(f.relative_to(ROOT))
        modules[rel] = _names(tree.body)
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                attrs = own.setdefault(node.name, set()) | _names(node.body)
                attrs |= {
                    a.attr
                    for a in ast.walk(node)
                    if isinstance(a, ast.Attribute) and isinstance(a.ctx, ast.Store)
                    if isinstance(a.value, ast.Name) and a.value.id == "self"
                }
                own[node.name] = attrs
                bases.setdefault(node.name, set()).update(b.id for b in node.bases if isinstance(b, ast.Name))
    for f in (ROOT / "simserve").rglob("*.pxd"):  # the core's fields are declared in its .pxd files
        for cls, body in re.findall(r"cdef class (\w+)[^\n]*:\n((?:[ \t]+[^\n]*\n|\n)*)", f.read_text()):
            own.setdefault(cls, set()).update(re.findall(r"(\w+)\s*(?:\(|$|,)", body, re.M))

    def inherited(cls: str, seen: frozenset = frozenset()) -> set[str]:
        out = set(own.get(cls, ()))
        for base in bases.get(cls, set()) - seen:
            out |= inherited(base, seen | {cls})
        return out

    return modules, {cls: inherited(cls) for cls in own}


def _module_names(rel: str, modules: dict[str, set[str]]) -> set[str]:
    """A module's names; a package's also include its submodules and what they define (lazy re-exports)."""
    if not rel.endswith("__init__.py"):
        return modules[rel]
    folder = rel[: -len("__init__.py")]
    out = set(modules[rel])
    for other, names in modules.items():
        if other.startswith(folder) and other.count("/") == folder.count("/"):
            out |= names | {Path(other).stem}
    return out


def _resolve(parts: list[str]) -> bool | None:
    """True: defined; False: the head is simserve's and the rest is not there; None: not simserve's."""
    modules, classes = _index()
    candidates: list[tuple[str, str]] = []  # ("module", path) or ("class", name)
    rest = parts[1:]
    if parts[0] == "simserve":
        for i in range(len(parts), 0, -1):
            stem = "/".join(parts[:i])
            for rel in (stem + ".py", stem + "/__init__.py"):
                if rel in modules:
                    candidates, rest = [("module", rel)], parts[i:]
                    break
            if candidates:
                break
        if not candidates:
            return False
        if not rest:
            return True
    else:
        for rel in modules:
            p = Path(rel)
            if p.stem == parts[0] or (p.name == "__init__.py" and p.parent.name == parts[0]):
                candidates.append(("module", rel))
        if parts[0] in classes:
            candidates.append(("class", parts[0]))
        if not candidates:
            return None

    def ok(kind: str, where: str, names: list[str]) -> bool:
        if kind == "class":
            return names[0] in classes.get(where, ())
        if names[0] not in _module_names(where, modules):
            # `routing._api_step`: a method of the class the module defines (the core's modules hold one each)
            defined = modules[where] & classes.keys()
            return len(names) == 1 and any(names[0] in classes[c] for c in defined)
        if len(names) > 1 and names[0] in classes:
            return names[1] in classes[names[0]]
        return True

    return any(ok(kind, where, rest) for kind, where in candidates)


# ---- the checks


def test_cited_tests_exist():
    bad = []
    for page, n, span in _spans():
        for ref in re.findall(r"(?:tests/)?test_\w+\.py::[\w\[\]-]+(?:::\w+)?", span):
            path, *names = ref.split("::")
            f = ROOT / "tests" / path.removeprefix("tests/")
            text = f.read_text() if f.is_file() else ""
            name = names[0].split("[")[0]
            if not (
                re.search(rf"def {name}\b", text) or (not name.startswith("test_") and f'"{name}"' in text)
            ):
                bad.append(f"{page}:{n}: {ref}")
    # a test named alone (`test_beyond_the_tables_grows_linearly`): some test file defines it
    defined = set(
        re.findall(r"def (test_\w+)", "\n".join(f.read_text() for f in (ROOT / "tests").rglob("*.py")))
    )
    bad += [
        f"{page}:{n}: {span}"
        for page, n, span in _spans()
        if re.fullmatch(r"test_\w+", span) and span not in defined
    ]
    assert not bad, "cited tests that do not exist:\n" + "\n".join(bad)


def _own_path(span: str) -> str | None:
    """The simserve path a span names, or None when it is not one."""
    if not re.fullmatch(r"[\w./-]+", span) or "/" not in span:
        return None
    if span.startswith(OWN_ROOTS):
        return span
    if span.startswith(PACKAGES):
        return "simserve/" + span
    return None


@functools.cache
def _file_names() -> set[str]:
    return {f.name for d in ("simserve", "tests", "tools", "benchmarks") for f in (ROOT / d).rglob("*")} | {
        f.name for f in ROOT.iterdir()
    }


def test_paths_exist():
    bad = []
    for page, n, span in _spans():
        if re.fullmatch(r"\w+\.(py|pyx|pxd)", span):  # a bare file name: simserve has one of that name
            if span not in _file_names() and not _external(page, span):
                bad.append(f"{page}:{n}: {span}")
            continue
        path = _own_path(span)
        if path is None or _external(page, span):
            continue
        p = ROOT / path.rstrip("/")
        # `predictor/timer.BatchTimer`: a module and a name in it
        m = re.fullmatch(r"(.+)\.([A-Za-z_]\w*)", path)
        if m and not p.exists() and (ROOT / (m.group(1) + ".py")).is_file():
            ok = _resolve(["simserve", *m.group(1).removeprefix("simserve/").split("/"), m.group(2)]) is True
        else:
            ok = p.exists() or p.with_suffix(".py").is_file() if not p.suffix else p.exists()
        if not ok:
            bad.append(f"{page}:{n}: {span}")
    assert not bad, "paths that do not exist:\n" + "\n".join(bad)


def test_dotted_names_resolve():
    bad = []
    for page, n, span in _spans():
        ref = span.removesuffix("()")
        if not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+", ref) or _external(page, ref):
            continue
        if re.search(r"\.(py|pyx|pxd|md|csv|json|png|txt|sh|c|parquet|toml|yaml)$", ref):
            continue
        if _resolve(ref.split(".")) is False:
            bad.append(f"{page}:{n}: {span}")
    assert not bad, "names that simserve does not define:\n" + "\n".join(bad)


def _commands() -> list[tuple[str, int, str]]:
    """`simserve SUB …` command lines: backticked spans, and fenced blocks' lines (continuations joined)."""
    out = [(p, n, s) for p, n, s in _spans() if s.startswith("simserve ")]
    for page in PAGES:
        fenced = False
        lines = page.read_text().splitlines()
        joined, start = "", 0
        for n, line in enumerate(lines, 1):
            if line.lstrip().startswith("```"):
                fenced = not fenced
                continue
            if not fenced:
                continue
            if not joined:
                start = n
            joined += " " + line.strip().removesuffix("\\")
            if not line.rstrip().endswith("\\"):
                cmd = joined.strip().removeprefix("$ ")
                for part in re.split(r"&&|;|\|\s", cmd):
                    part = part.strip()
                    if part.startswith("simserve "):
                        out.append((page.name, start, part))
                joined = ""
    return out


@functools.cache
def _cli():
    import typer

    from simserve.cli import _register, app

    _register()
    return typer.main.get_command(app)


def _flags(cmd) -> set[str]:
    return {opt for param in cmd.params for opt in (*param.opts, *param.secondary_opts)} | {"--help"}


def _check_command(cmd: str) -> str | None:
    """None when the CLI takes the command's subcommand and flags, else what it lacks."""
    words = re.sub(r"\[([^]]*)\]", r"\1", cmd.split(" #")[0]).split()[1:]
    group = _cli()
    top = _flags(group)
    while words and words[0] in top:  # the group's own options (--catalog FILE)
        words = words[2:] if words[0] == "--catalog" else words[1:]
    node = group
    while words and hasattr(node, "commands") and re.fullmatch(r"[a-z-]+((\\?\|)[a-z-]+)*", words[0]):
        names = re.split(r"\\?\|", words[0])  # `trace build|stats`: each must be one
        if not all(name in node.commands for name in names):
            return f"no subcommand {words[0]!r}"
        if len(names) > 1:
            return None
        node, words = node.commands[words[0]], words[1:]
    if hasattr(node, "commands"):
        return None  # a group named alone (its --help, a placeholder)
    flags = _flags(node) | top
    missing = [w.split("=")[0] for w in words if re.fullmatch(r"--[a-z0-9-]+(=.*)?", w)]
    missing = [w for w in missing if w not in flags]
    return f"no {', '.join(missing)}" if missing else None


def test_cli_commands_take_their_flags():
    bad = [f"{page}:{n}: {why}: {cmd}" for page, n, cmd in _commands() if (why := _check_command(cmd))]
    assert not bad, "commands the CLI refuses:\n" + "\n".join(bad)


def test_script_commands_take_their_flags():
    """`python benchmarks/x.py --flag` / `python tools/x.py --flag`: the script exists and names the flag (its
    own argparse, or benchmarks/common.py's shared options); what follows ` -- ` goes to simserve,
    unchecked."""
    common = (ROOT / "benchmarks" / "common.py").read_text()
    bad = []
    for page in PAGES:
        text = page.read_text()
        for m in re.finditer(r"python3? ((?:benchmarks|tools)/\w+\.py)([^`\n|]*(?:\\\n[^`\n|]*)*)", text):
            n, script = text[: m.start()].count("\n") + 1, ROOT / m.group(1)
            if not script.is_file():
                bad.append(f"{page.name}:{n}: no {m.group(1)}")
                continue
            source = script.read_text() + common
            args = m.group(2).split(" #")[0].split(" -- ")[0]
            bad += [
                f"{page.name}:{n}: {m.group(1)} has no {flag}"
                for flag in re.findall(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)", args)
                if flag not in source
            ]
    assert not bad, "script commands that do not match the script:\n" + "\n".join(bad)


def test_environment_variables_are_read():
    source = "\n".join(
        f.read_text(errors="replace")
        for d in ("simserve", "tools", "benchmarks", "tests", ".ci")
        for f in (ROOT / d).rglob("*")
        if f.is_file() and f.suffix in (".py", ".sh", "")
    )
    bad = [
        f"{page}:{n}: {var}"
        for page, n, span in _spans()
        for var in re.findall(r"SIMSERVE_[A-Z_]+", span)
        if var not in source
    ]
    assert not bad, "environment variables nothing reads:\n" + "\n".join(bad)


@pytest.mark.parametrize(
    "parts, expected",
    [
        (["vllm_v1", "vllm_v1_batch"], True),
        (["budgets", "vllm_v1_batch"], None),  # no such module: not simserve's
        (["timer", "decode_stretch"], False),  # the removed BatchTimer.decode_stretch
        (["Core", "_decode_stretch"], True),  # inherited from core/stretch.py
        (["simserve", "predictor", "load_timer"], True),  # re-exported lazily by the package
        (["simserve", "predictor", "nothing_here"], False),
    ],
)
def test_the_resolver_tells_defined_from_stale(parts, expected):
    assert _resolve(parts) is expected
