import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _tool():
    spec = importlib.util.spec_from_file_location("module_map", ROOT / "tools" / "module_map.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_module_map_in_architecture_doc_is_current():
    tool = _tool()
    text = tool.DOC.read_text()
    assert tool.render(text) == text, "docs/architecture.md is stale: run `python tools/module_map.py`"


def test_every_module_has_a_docstring():
    missing = [
        str(f.relative_to(ROOT))
        for f in (ROOT / "simserve").rglob("*.py")
        if f.stat().st_size and not _tool()._first_paragraph(f)
    ]
    assert not missing, f"modules without a docstring: {missing}"


def test_readme_opens_with_the_two_commands():
    text = (ROOT / "README.md").read_text()
    assert "simserve sweep --slo 0.1" in text.split("<!-- test-command -->")[0]
    assert "python -m pytest" in text.split("<!-- test-command -->")[1].split("```")[1]


def test_readme_profile_command_runs_as_written_from_the_repository(tmp_path, monkeypatch):
    """The README's `simserve profile` line must not target the shipped profiles (which it refuses to change
    without --force) when typed in the repository root, and must run as written."""
    import re
    import shlex

    from simserve.cli import main
    from simserve.profiling.schema import SHIPPED_PROFILES

    line = re.search(r"`(simserve profile [^`]*)`", (ROOT / "README.md").read_text()).group(1)
    args = [a for a in shlex.split(re.sub(r"\[[^]]*\]", "", line))[2:]]  # the optional [--backend …] aside
    assert "--force" not in args
    out = Path(args[args.index("--out") + 1]) if "--out" in args else Path("profiles")
    assert not (ROOT / out).resolve().is_relative_to(SHIPPED_PROFILES)
    monkeypatch.chdir(tmp_path)  # its relative --out lands here, not in the repository
    monkeypatch.setenv("SIMSERVE_CACHE", str(tmp_path / "cache"))
    main(["profile", *args, "--max-tokens", "256"])
    assert any((tmp_path / out).rglob("provenance.json"))
