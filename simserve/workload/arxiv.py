"""The arXiv-summarization trace (article -> prompt, abstract -> output, prompt + output <= 16384 tokens).

No copy of the dataset is reachable offline, so there are two builders:

* `build_arxiv(source)` tokenizes a local copy laid out like HF `ccdv/arxiv-summarization` (JSON Lines, a JSON
  array, or parquet rows with `article` and `abstract`; the raw `article_text`/`abstract_text` sentence lists
  are accepted too), with the Mistral-7B v0.1 tokenizer, streaming so that the full 200k-article set fits.
* `build_arxiv_synthetic()` writes the shipped trace: a **synthetic** sample from log-normal prompt and output
  lengths fitted to the paper's published statistics (`synthetic.py`).
"""

from __future__ import annotations

import gzip
import io
import itertools
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from simserve.errors import SimserveError
from simserve.workload.formats import write_trace_csv
from simserve.workload.provenance import mistral_tokenizer, sha256, write_provenance
from simserve.workload.sharegpt import BuildResult
from simserve.workload.stats import TraceStats
from simserve.workload.synthetic import MAX_TOTAL_TOKENS, PUBLISHED, fit_published, sample_lengths
from simserve.workload.trace import Trace

SUFFIXES = (".jsonl", ".json", ".txt", ".parquet", ".jsonl.gz", ".json.gz", ".txt.gz")
_FIELDS = {"article": ("article", "article_text"), "abstract": ("abstract", "abstract_text")}


def source_files(source: Path) -> list[Path]:
    """The file itself, or every data file under a directory (sorted, so the row order is reproducible)."""
    if source.is_file():
        return [source]
    if source.is_dir():
        files = sorted(p for p in source.rglob("*") if p.is_file() and p.name.endswith(SUFFIXES))
        if files:
            return files
        raise SimserveError(
            f"{source}: no {', '.join(SUFFIXES)} files inside; point --from at the dataset files"
        )
    raise SimserveError(f"{source}: no such file or directory; give a local copy of ccdv/arxiv-summarization")


def iter_rows(path: Path, batch: int = 256) -> Iterator[list[dict]]:
    """Rows of one file in batches, each row a dict; JSON files are read line by line when they are JSON
    Lines."""
    if path.name.endswith(".parquet"):
        try:
            import pyarrow.parquet as pq
        except ModuleNotFoundError:
            raise SimserveError("reading parquet needs pyarrow; pip install pyarrow") from None
        try:
            parquet = pq.ParquetFile(path)
        except Exception as exc:  # pyarrow raises its own error types for non-parquet files
            raise SimserveError(
                f"{path}: not a readable parquet file ({exc}); convert it to JSON Lines"
            ) from None
        for record_batch in parquet.iter_batches(batch_size=batch):
            yield record_batch.to_pylist()
        return
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        head = f.read(4096)
        if head.lstrip().startswith("["):  # one JSON array: small files only, the HF dumps are JSON Lines
            rows = json.loads(head + f.read())
            for start in range(0, len(rows), batch):
                yield rows[start : start + batch]
            return
        batch_rows: list = []
        # NOTE: head may end mid-line; completing it keeps line numbers exact for error messages.
        lines = itertools.chain(io.StringIO(head + f.readline()), f)
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                batch_rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise SimserveError(
                    f"{path}: row {number}: not valid JSON ({exc.msg}); one object per line"
                ) from None
            if len(batch_rows) == batch:
                yield batch_rows
                batch_rows = []
        if batch_rows:
            yield batch_rows


def _text(path: Path, row_number: int, row: object, field: str) -> str:
    if not isinstance(row, dict):
        raise SimserveError(f"{path}: row {row_number}: expected an object with article and abstract fields")
    for name in _FIELDS[field]:
        if name in row:
            value = row[name]
            if isinstance(value, list):  # the raw release: lists of sentences, abstracts tagged <S> ... </S>
                value = "\n".join(str(v).replace("<S>", "").replace("</S>", "").strip() for v in value)
            return value if isinstance(value, str) else ""
    raise SimserveError(
        f"{path}: row {row_number}: missing the {field!r} field (ccdv/arxiv-summarization layout)"
    )


def build_arxiv(
    source: Path, out: Path, max_total_tokens: int = MAX_TOTAL_TOKENS, command: str = ""
) -> BuildResult:
    """Tokenize article and abstract of every row; drop empty rows and rows over max_total_tokens."""
    tokenizer = mistral_tokenizer()
    files = source_files(source)
    counts: Counter = Counter()
    prompt: list[int] = []
    output: list[int] = []
    for path in files:
        number = 0
        for rows in iter_rows(path):
            articles, abstracts = [], []
            for row in rows:
                number += 1
                article, abstract = _text(path, number, row, "article"), _text(path, number, row, "abstract")
                if article.strip() and abstract.strip():
                    articles.append(article)
                    abstracts.append(abstract)
                else:
                    counts["rows_with_empty_text"] += 1
            prompt += tokenizer.count(articles)
            output += tokenizer.count(abstracts)
        counts["rows"] += number
    prompt_tokens, output_tokens = np.asarray(prompt, np.int64), np.asarray(output, np.int64)
    keep = prompt_tokens + output_tokens <= max_total_tokens
    counts["rows_over_max_total"] = int((~keep).sum())
    if not keep.any():
        raise SimserveError(
            f"{source}: no row has article + abstract <= {max_total_tokens} tokens; nothing to write"
        )
    trace = Trace(out.name, prompt_tokens[keep], output_tokens[keep])
    write_trace_csv(
        out, {"num_prefill_tokens": trace.prompt_tokens, "num_decode_tokens": trace.output_tokens}
    )
    stats = TraceStats.of(trace)
    record = {
        "synthetic": False,
        "source": {
            "dataset": "arxiv-summarization (ccdv/arxiv-summarization layout), local copy",
            "files": [{"path": str(p), "bytes": p.stat().st_size, "sha256": sha256(p)} for p in files],
        },
        "tokenizer": tokenizer.describe(),
        "method": (
            "article -> prompt tokens, abstract -> output tokens; each tokenized alone, no BOS, no template"
        ),
        "filters": {
            "max_total_tokens": max_total_tokens,
            "skipped": "rows with an empty article or abstract",
        },
        "counts": dict(sorted(counts.items())),
        "command": command or f"simserve trace build arxiv --from {source}",
        "statistics": stats.as_dict(),
    }
    return BuildResult(trace, out, write_provenance(out, record), stats, dict(counts))


def build_arxiv_synthetic(out: Path, n: int = 32768, seed: int = 0, command: str = "") -> BuildResult:
    """Write the shipped synthetic arXiv trace and a provenance file that says plainly that it is
    synthetic."""
    prompt_fit, output_fit = fit_published()
    prompt, output = sample_lengths(prompt_fit, output_fit, n, seed)
    trace = Trace(out.name, prompt, output)
    write_trace_csv(out, {"num_prefill_tokens": prompt, "num_decode_tokens": output})
    stats = TraceStats.of(trace)
    record = {
        "synthetic": True,
        "warning": "SYNTHETIC: not arXiv data. Lengths are drawn from log-normal distributions fitted to "
        "the Sarathi-Serve paper's published arxiv_summarization statistics; no copy of the dataset was "
        "available.",
        "published_targets": PUBLISHED,
        "distribution": {
            "family": "independent log-normal prompt and output lengths, rounded to integers (>= 1), "
            f"pairs with prompt + output > {MAX_TOTAL_TOKENS} rejected (the paper's filter)",
            "fit": (
                "median and P90 of each marginal matched after the filter (calibrated on common random "
                "numbers)"
            ),
            "prompt": prompt_fit.as_dict(),
            "output": output_fit.as_dict(),
        },
        "sample": {
            "requests": n,
            "seed": seed,
            "generator": "numpy.random.default_rng(seed).standard_normal",
        },
        "command": command or f"simserve trace build arxiv --synthetic --seed {seed}",
        "statistics": stats.as_dict(),
        "relative_error_vs_published": _relative_errors(stats),
    }
    return BuildResult(trace, out, write_provenance(out, record), stats, {"requests": n})


def _relative_errors(stats: TraceStats) -> dict[str, float]:
    """(sample - published) / published for every published statistic, e.g. prompt std about -1%."""
    errors = {}
    for side in ("prompt", "output"):
        for key, target in PUBLISHED[side].items():
            errors[f"{side}_{key}"] = round(getattr(getattr(stats, side), key) / target - 1, 4)
    return errors
