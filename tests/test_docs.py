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
