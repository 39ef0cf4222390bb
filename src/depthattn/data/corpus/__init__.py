"""The embedded default corpus: Shakespeare's works, split into parts of about 25 KB (see README.md here)."""

import json
import lzma
from collections.abc import Iterator
from pathlib import Path

CORPUS_FILE = "shakespeare.jsonl.xz"


def embedded_corpus_path() -> Path:
    """The xz-compressed JSONL file: one object {"title", "part", "num_parts", "text"} per document."""
    return Path(__file__).with_name(CORPUS_FILE)


def embedded_corpus_records() -> Iterator[dict]:
    with lzma.open(embedded_corpus_path(), "rt", encoding="utf-8") as file:
        for line in file:
            yield json.loads(line)


def embedded_corpus_documents() -> Iterator[str]:
    """The text of every document (every part of every work), in a fixed order."""
    for record in embedded_corpus_records():
        yield record["text"]
