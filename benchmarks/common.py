"""What the benchmark scripts share: the repository's root, markdown tables, a generated block written into a
doc between its markers, the shipped torch profiles joined with another profile's rows, and running another
script.

Scripts import this module (and the library modules beside it that have no `__main__`: paper_*, published_*,
vidur_runner, side_by_side), never another script: a script whose output another needs is run as documented
(`run_script`). tests/test_imports.py checks it.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
# The models whose GEMMs were timed on a real H200 (profiles/torch/h200/<model>, the torch backend).
TORCH_MODELS = ("llama-2-7b", "llama-3-8b", "llama2-70b")


def _g(x) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def markdown_table(df: pd.DataFrame, cell: Callable[[object], str] = _g) -> str:
    """A GitHub markdown table of `df`'s columns (pandas' to_markdown needs tabulate, which simserve does not
    depend on); `cell` writes each value (default: floats as %g)."""
    cols = [str(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)


def md(df: pd.DataFrame) -> str:
    """`df` with its index as columns, as a markdown table (floats as %g)."""
    return markdown_table(df.reset_index())


def write_block(doc: Path, begin: str, end: str, body: str) -> None:
    """Replace what stands between the markers `begin` and `end` in `doc` with `body` (one line break after
    `begin` and before `end`); stops naming the markers when `doc` lacks them."""
    text = doc.read_text()
    pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
    if not pattern.search(text):
        raise SystemExit(f"{doc}: no '{begin}' ... '{end}' markers to replace")
    doc.write_text(pattern.sub(lambda _: f"{begin}\n{body}\n{end}", text, count=1))


def torch_profile_pairs(
    gpu_name: str, other_root: Path, suffixes: tuple[str, str]
) -> Iterator[tuple[str, pd.DataFrame]]:
    """(model, linear rows) for each TORCH_MODELS model with a shipped torch profile on `gpu_name` and a
    profile under `other_root` (the shipped measured ones: REPO/profiles): the torch rows joined with the
    other's on (op, tp, num_tokens), their times suffixed by `suffixes`."""
    from simserve.profiling.schema import read_profile

    for model in TORCH_MODELS:
        tdir, odir = REPO / "profiles" / "torch" / gpu_name / model, other_root / gpu_name / model
        if tdir.is_dir() and odir.is_dir():
            joined = read_profile(tdir).linear.merge(
                read_profile(odir).linear, on=["op", "tp", "num_tokens"], suffixes=suffixes
            )
            yield model, joined


def run_script(name: str, *args: str) -> str:
    """What `python benchmarks/<name>.py ARGS` prints (its last line break dropped): a script that needs
    another script's output runs it, as its docs say to, rather than importing it."""
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve().parent / f"{name}.py"), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    if proc.returncode:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"benchmarks/{name}.py {' '.join(args)} failed (exit {proc.returncode}): {last}")
    return proc.stdout[:-1] if proc.stdout.endswith("\n") else proc.stdout
