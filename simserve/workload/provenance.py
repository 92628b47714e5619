"""What every built trace records beside itself: sources, tokenizer, filters, date, command, statistics.

Also the tokenizer the builders share: the Mistral-7B v0.1 SentencePiece model (vocab 32000) that the
`mistral-common` package ships as data, loaded with `sentencepiece` (no network, no chat template).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import importlib.metadata
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simserve.errors import SimserveError
from simserve.io import write_text_atomic

TOKENIZER_FILE = "tokenizer.model.v1"  # Mistral-7B v0.1, in mistral_common/data/


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def package_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def provenance_path(out: Path) -> Path:
    """traces/sharegpt.csv.gz -> traces/sharegpt.provenance.json"""
    stem = out.name.removesuffix(".gz").removesuffix(".csv")
    return out.with_name(f"{stem}.provenance.json")


def write_provenance(out: Path, record: dict[str, Any]) -> Path:
    record = {
        "trace": out.name,
        "built_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    } | record
    path = provenance_path(out)
    write_text_atomic(path, json.dumps(record, indent=2) + "\n")
    return path


@dataclass(frozen=True)
class Tokenizer:
    """Counts tokens of many texts at once; `describe()` names the exact model file for provenance."""

    path: Path
    processor: Any  # sentencepiece.SentencePieceProcessor

    def count(self, texts: list[str], batch: int = 4096, threads: int = 2) -> list[int]:
        # NOTE: batches bound the memory of the id lists; sentencepiece releases the GIL across threads.
        counts: list[int] = []
        for start in range(0, len(texts), batch):
            ids = self.processor.encode(texts[start : start + batch], num_threads=threads)
            counts.extend(len(x) for x in ids)
        return counts

    def describe(self) -> dict[str, Any]:
        return {
            "name": "Mistral-7B v0.1 SentencePiece (vocab 32000), no BOS, no chat template",
            "file": f"mistral_common/data/{self.path.name}",
            "sha256": sha256(self.path),
            "mistral_common": package_version("mistral_common"),
            "sentencepiece": package_version("sentencepiece"),
        }


def mistral_tokenizer() -> Tokenizer:
    try:
        import mistral_common
        import sentencepiece
    except ModuleNotFoundError as exc:
        raise SimserveError(
            f"building traces needs {exc.name}; install it: pip install 'simserve[traces]'"
        ) from None
    path = Path(mistral_common.__file__).parent / "data" / TOKENIZER_FILE
    if not path.is_file():
        raise SimserveError(
            f"{path} not found; install a mistral-common that ships {TOKENIZER_FILE} (>= 1.3)"
        )
    return Tokenizer(path, sentencepiece.SentencePieceProcessor(model_file=str(path)))
