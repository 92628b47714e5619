"""Two `benchmarks/published_e2e.py --json` results side by side: median |error| per half x GPU x regime x
metric family, before -> after on the runs both simulated, and after over all its runs where that differs
(issue 30).

    python benchmarks/published_compare.py BEFORE.json AFTER.json [--engine vllm|sglang]
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path

FAMILIES = ("throughput", "TTFT", "TPOT", "ITL", "E2E")


def cells(path: Path, keys: set[str] | None = None, engine: str | None = None) -> dict:
    """(split, 'gpu / regime') -> family -> |error| %, flagged and skipped runs left out (as the harness
    does)."""
    out: dict = defaultdict(lambda: defaultdict(list))
    for r in json.loads(path.read_text())["runs"]:
        if "rows" not in r or r.get("flagged") or (keys is not None and r["key"] not in keys):
            continue
        if engine and r["engine"] != engine:
            continue
        for row in r["rows"]:
            out[(r["split"], f"{r['gpu']} / {r['regime']}")][row["family"]].append(abs(row["error_pct"]))
    return out


def table(before: Path, after: Path, engine: str | None = None) -> str:
    keys = {r["key"] for r in json.loads(before.read_text())["runs"] if "rows" in r}
    b, a, every = cells(before, None, engine), cells(after, keys, engine), cells(after, None, engine)

    def med(v: list[float]) -> str:
        return f"{statistics.median(v):.1f}" if v else ""

    lines = []
    for half in ("report", "fit"):
        lines += [
            f"\n**{half} half:** before → after on the runs both simulated [after, all its runs], "
            "median |error| %, runs in brackets\n",
            "| GPU / regime | " + " | ".join(FAMILIES) + " |",
            "|---|" + "---|" * len(FAMILIES),
        ]
        for cell in sorted({c for h, c in [*b, *every] if h == half}):
            row = []
            for f in FAMILIES:
                x, y, z = b[(half, cell)][f], a[(half, cell)][f], every[(half, cell)][f]
                text = "" if not (x or z) else (f"{med(x)} → {med(y)} ({len(y)})" if x else "—")
                if (x or z) and len(z) != len(y):
                    text += f" [{med(z)} ({len(z)})]"
                row.append(text)
            lines.append(f"| {cell} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--engine", choices=("vllm", "sglang"), default=None, help="Only that engine's runs.")
    args = ap.parse_args(argv)
    print(table(args.before, args.after, args.engine))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
